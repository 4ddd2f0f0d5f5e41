//! Test support: build symbolized stacks streams with known rows, run the `stacks-pack`
//! binary, and read its Parquet output back (a samples file joined with its stacks file, so
//! the rows read compare with the rows written).

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{Schema, SchemaRef};
use stacks_stream::{meta, stage};
use stacks_testkit::files::ReadBack;
use stacks_testkit::{Frame, Row, UFrame};
pub(crate) use stacks_testkit::{Scratch, stderr};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_stacks-pack");

/// Stream metadata as the recorder and symbolizer leave it.
pub(crate) fn stream_metadata() -> HashMap<String, String> {
    let mut md = HashMap::new();
    md.insert(meta::HOST.to_string(), "testhost".to_string());
    md.insert(meta::EVENTS.to_string(), "cpu-clock:99Hz".to_string());
    stacks_stream::stamp(&mut md, "stacks-record", "0.1.0", stage::RAW);
    stacks_stream::stamp(&mut md, "stacks-symbolize", "0.1.0", stage::SYMBOLIZED);
    md
}

pub(crate) fn symbolized() -> SchemaRef {
    Arc::new(stacks_stream::symbolized_schema(stream_metadata()))
}

/// Symbolized row `i`: every value derives from the row number, with null, empty and
/// multi-frame stacks mixed in.
fn row(i: usize) -> Row {
    Row {
        time: 1_700_000_000_000_000_000 + i as i64 * 1_000_003,
        kind: if i % 10 == 9 { "lost" } else { "profile" }.into(),
        pid: 100 + (i % 3) as i32,
        tid: 1000 + i as i32,
        comm: format!("comm{}", i % 3),
        thread: format!("thr-{i}"),
        cpu: (i % 4) as i32,
        value: 10_101_010 + i as i64,
        // kstack: null every 5th row, else 1..=4 kernel addresses.
        kstack: (!i.is_multiple_of(5)).then(|| {
            (0..i % 4 + 1)
                .map(|k| 0xffff_ffff_8100_0000 + (i * 16 + k) as u64)
                .collect()
        }),
        kstack_error: i.is_multiple_of(5).then_some(-14),
        // ustack: null every 7th row and where `stack` is empty (a stack is stored once per
        // symbolized stack, its raw halves with it, so rows with one `stack` have one raw
        // stack, as the symbolizer makes them), else 0..=2 frames (empty lists included).
        ustack: (!i.is_multiple_of(7) && !i.is_multiple_of(5)).then(|| {
            (0..i % 3)
                .map(|k| UFrame {
                    addr: 0x5555_0000 + (i * 8 + k) as u64,
                    module: (k == 0).then(|| "/usr/bin/app".to_string()),
                    build_id: Some(format!("{:040x}", i % 2)),
                    offset: (k == 0).then_some((i * 8) as u64),
                    error: (k == 1).then(|| "no module".to_string()),
                    symbol: (k == 2).then(|| "JS:*jitted".to_string()),
                })
                .collect()
        }),
        ustack_error: i.is_multiple_of(7).then_some(-2),
        // stack: always present, i%5 frames (kernel + user, some inlined, some unresolved).
        stack: Some(
            (0..i % 5)
                .map(|k| Frame {
                    function: (k != 3).then(|| format!("fn_{i}_{k}")),
                    file: (k % 2 == 0).then(|| format!("src/file{}.rs", i % 4)),
                    line: (k % 2 == 0).then_some((i * 10 + k) as u32),
                    column: (k == 0).then_some(7),
                    inlined: k == 1,
                    kernel: k == 0 && i.is_multiple_of(2),
                    module: (k > 0).then(|| "/usr/bin/app".to_string()),
                    build_id: (k > 0).then(|| "ab".repeat(20)),
                    offset: (k > 0).then_some((i * 4 + k) as u64),
                    addr: 0x4000_0000 + (i * 32 + k) as u64,
                    error: (k == 3).then(|| "no symbol".to_string()),
                    symbol: (k != 3).then(|| format!("_ZN3app4fn_{i}_{k}E")),
                    reason: (k == 3).then(|| "no_symbol".to_string()),
                })
                .collect(),
        ),
        ..Row::default()
    }
}

/// A batch of symbolized rows `start..start+n` (see [`row`]).
pub(crate) fn batch(schema: &SchemaRef, start: usize, n: usize) -> RecordBatch {
    let rows: Vec<Row> = (start..start + n).map(row).collect();
    stacks_testkit::batch(schema, &rows)
}

/// Batches of the given sizes, numbered consecutively from row 0.
pub(crate) fn batches(schema: &SchemaRef, sizes: &[usize]) -> Vec<RecordBatch> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            let b = batch(schema, start, n);
            start += n;
            b
        })
        .collect()
}

/// The IPC stream bytes and, for each batch, the stream length once it was written.
pub(crate) fn stream(
    schema: &Schema,
    batches: &[RecordBatch],
    finish: bool,
) -> (Vec<u8>, Vec<usize>) {
    stacks_testkit::stream_with_ends(schema, batches, finish)
}

/// Spawn the packer with piped stdin and captured stdout/stderr.
pub(crate) fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stacks-pack")
}

/// Run the packer with `input` on stdin.
pub(crate) fn run(args: &[&str], input: Vec<u8>) -> Output {
    stacks_testkit::run_tool(BIN, args, &input, Duration::from_secs(300))
}

/// Regular files in `dir`, sorted by name.
pub(crate) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// `*.samples.parquet` files in `dir` (one per pair), sorted by name.
pub(crate) fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .filter(|p| stacks_store::file_kind(p) == Some(stacks_store::FileKind::Samples))
        .collect()
}

/// Every file of the file sets of `dir`, samples, stacks and (when the stacks file refers to
/// frames) frames per set, sorted by samples name; asserts each samples file has its stacks
/// and frames files and there is nothing else.
pub(crate) fn pair_files(dir: &Path) -> Vec<PathBuf> {
    let pairs: Vec<PathBuf> = parquet_files(dir)
        .into_iter()
        .flat_map(|s| {
            let k = stacks_store::stacks_path(&s);
            assert!(k.is_file(), "{}: no stacks file", s.display());
            let mut set = vec![s.clone(), k.clone()];
            if framed(&k) {
                let f = stacks_store::frames_path(&s);
                assert!(f.is_file(), "{}: no frames file", s.display());
                set.push(f);
            }
            set
        })
        .collect();
    let mut all = pairs.clone();
    all.sort();
    assert_eq!(files(dir), all, "only file sets in {}", dir.display());
    pairs
}

/// Whether stacks file `stacks` holds frame ids (its frames are in the frames file).
pub(crate) fn framed(stacks: &Path) -> bool {
    read_file(stacks)
        .schema
        .field_with_name(stacks_store::frames::FRAME_IDS)
        .is_ok()
}

/// The rows of stacks file `path` with their whole stacks: as they are, or, for a stacks file
/// of frame ids, with `stack` assembled from the frames file (checking every stack's frames
/// and that the frames file holds only frames the stacks use, each once).
fn whole_stacks(path: &Path) -> RecordBatch {
    let stacks = read_file(path);
    let sb = arrow_select::concat::concat_batches(&stacks.schema, &stacks.batches).unwrap();
    let Ok(ids_at) = sb.schema().index_of(stacks_store::frames::FRAME_IDS) else {
        let ids = sb
            .column_by_name(stacks_stream::col::STACK_ID)
            .unwrap()
            .as_fixed_size_binary();
        for i in 1..ids.len() {
            assert!(ids.value(i - 1) < ids.value(i), "stacks sorted by id");
        }
        return sb;
    };
    let frames = read_file(&stacks_store::frames_path(path));
    let lookup = stacks_store::frames::FrameLookup::new(&frames.schema, &frames.batches).unwrap();
    let stack = lookup.assemble(sb.column(ids_at)).unwrap();
    let used: std::collections::HashSet<u32> = sb
        .column(ids_at)
        .as_list::<i32>()
        .values()
        .as_primitive::<arrow_array::types::UInt32Type>()
        .values()
        .iter()
        .copied()
        .collect();
    assert_eq!(
        used.len(),
        lookup.len(),
        "the frames file holds only used frames"
    );
    let id = sb
        .column_by_name(stacks_stream::col::STACK_ID)
        .unwrap()
        .clone();
    let schema = Arc::new(Schema::new(vec![
        arrow_schema::Field::new(stacks_stream::col::STACK_ID, id.data_type().clone(), false),
        arrow_schema::Field::new(stacks_stream::col::STACK, stack.data_type().clone(), true),
    ]));
    RecordBatch::try_new(schema, vec![id, Arc::new(stack)]).unwrap()
}

/// Read one Parquet file as it is.
pub(crate) fn read_file(path: &Path) -> ReadBack {
    stacks_testkit::read_parquet(path)
}

/// Read a samples file with its stacks put back: the stream's columns in contract order,
/// then `stack_id`; metadata (footer, row groups) of the samples file. Also checks that the
/// stacks file holds exactly the distinct ids of the samples, each once (sorted by id in a
/// stacks file of whole stacks).
pub(crate) fn read_parquet(path: &Path) -> ReadBack {
    let samples = read_file(path);
    let sb = whole_stacks(&stacks_store::stacks_path(path));
    let ids = sb
        .column_by_name(stacks_stream::col::STACK_ID)
        .unwrap()
        .as_fixed_size_binary()
        .clone();
    let mut at: HashMap<Vec<u8>, u32> = HashMap::new();
    for i in 0..ids.len() {
        assert!(
            at.insert(ids.value(i).to_vec(), i as u32).is_none(),
            "id twice"
        );
    }
    let mut used = std::collections::HashSet::new();
    let order: Vec<String> = stacks_stream::symbolized_schema(HashMap::new())
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .chain([stacks_stream::col::STACK_ID.to_string()])
        .collect();
    let rank = |name: &str| order.iter().position(|n| n == name).unwrap_or(usize::MAX);
    let stack_cols: Vec<usize> = (0..sb.num_columns())
        .filter(|&c| stacks_stream::dict::is_stack_column(sb.schema().field(c).name()))
        .collect();
    let mut fields: Vec<(usize, arrow_schema::FieldRef)> = samples
        .schema
        .fields()
        .iter()
        .cloned()
        .chain(stack_cols.iter().map(|&c| sb.schema().fields()[c].clone()))
        .map(|f| (rank(f.name()), f))
        .collect();
    fields.sort_by_key(|(r, _)| *r);
    let schema = Arc::new(Schema::new_with_metadata(
        fields.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>(),
        samples.schema.metadata().clone(),
    ));
    let batches = samples
        .batches
        .iter()
        .map(|b| {
            let bid = b
                .column_by_name(stacks_stream::col::STACK_ID)
                .unwrap()
                .as_fixed_size_binary();
            let idx: arrow_array::UInt32Array = (0..b.num_rows())
                .map(|r| {
                    bid.is_valid(r).then(|| {
                        used.insert(bid.value(r).to_vec());
                        *at.get(bid.value(r))
                            .expect("every stack_id in the stacks file")
                    })
                })
                .collect();
            let columns = schema
                .fields()
                .iter()
                .map(|f| match b.column_by_name(f.name()) {
                    Some(c) => c.clone(),
                    None => {
                        let c = sb.column_by_name(f.name()).unwrap();
                        arrow_select::take::take(c.as_ref(), &idx, None).unwrap()
                    }
                })
                .collect();
            RecordBatch::try_new(schema.clone(), columns).unwrap()
        })
        .collect();
    assert_eq!(
        used.len(),
        ids.len(),
        "the stacks file holds only used stacks"
    );
    ReadBack {
        metadata: samples.metadata,
        schema,
        batches,
    }
}

/// Wait until `cond` holds (at most 30 s).
pub(crate) fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The raw stack columns a store of a symbolized stream does not keep (its `stack` frames
/// hold what they do).
pub(crate) const RAW_STACKS: [&str; 3] = [
    stacks_stream::col::KSTACK,
    stacks_stream::col::USTACK,
    stacks_stream::col::KSTACK_SYMBOLS,
];

/// The schema stacks-pack writes for input `schema`: for a symbolized stack, the raw stack
/// columns left out and `stack_id` added.
pub(crate) fn packed(schema: &Schema) -> Schema {
    let mut fields: Vec<arrow_schema::FieldRef> = schema.fields().iter().cloned().collect();
    if schema
        .column_with_name(stacks_stream::col::STACK)
        .is_some_and(|(_, f)| stacks_stream::is_stack_type(f.data_type()))
    {
        fields.retain(|f| !RAW_STACKS.contains(&f.name().as_str()));
        fields.push(std::sync::Arc::new(arrow_schema::Field::new(
            stacks_stream::col::STACK_ID,
            stacks_stream::stack_id_type(),
            true,
        )));
    }
    Schema::new(fields)
}

/// Every row of `got` (in order) equals the rows of `want` (in order), column by column; where
/// `got` has the `stack_id` stacks-pack adds, it is the key of the row's stack, and the raw
/// stack columns it leaves out beside a symbolized stack are not compared.
pub(crate) fn assert_same_rows(want: &[RecordBatch], got: &[RecordBatch]) {
    let flat = |bs: &[RecordBatch]| -> Vec<(RecordBatch, usize)> {
        bs.iter()
            .flat_map(|b| (0..b.num_rows()).map(move |r| (b.clone(), r)))
            .collect()
    };
    let (w, g) = (flat(want), flat(got));
    assert_eq!(w.len(), g.len(), "row count");
    for (n, ((wb, wr), (gb, gr))) in w.iter().zip(&g).enumerate() {
        let id = stacks_stream::col::STACK_ID;
        let stacked = wb.schema().column_with_name(id).is_none()
            && gb.schema().column_with_name(id).is_some();
        let left_out: Vec<&str> = RAW_STACKS
            .into_iter()
            .filter(|c| {
                stacked
                    && wb.schema().column_with_name(c).is_some()
                    && gb.schema().column_with_name(c).is_none()
            })
            .collect();
        assert_eq!(
            wb.num_columns() + usize::from(stacked) - left_out.len(),
            gb.num_columns(),
            "columns: {:?}",
            gb.schema()
        );
        for c in 0..wb.num_columns() {
            let name = wb.schema().field(c).name().clone();
            if left_out.contains(&name.as_str()) {
                continue;
            }
            let a = wb.column(c).slice(*wr, 1);
            let b = gb.column_by_name(&name).expect("the column").slice(*gr, 1);
            assert!(
                a.as_ref() == b.as_ref(),
                "row {n}, column {}: wrote {a:?}, read {b:?}",
                wb.schema().field(c).name()
            );
        }
        if stacked {
            let stack = gb.column_by_name(stacks_stream::col::STACK).unwrap();
            let stack = stack.slice(*gr, 1);
            let want_id = stacks_stream::stack_key::stack_keys(
                arrow_array::cast::AsArray::as_list::<i32>(&stack),
                1,
            )
            .unwrap();
            let id = gb.column_by_name(stacks_stream::col::STACK_ID).unwrap();
            assert_eq!(
                id.slice(*gr, 1).as_ref(),
                &want_id as &dyn arrow_array::Array,
                "row {n}: stack_id"
            );
        }
    }
}
