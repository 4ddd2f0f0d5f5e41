//! Test support: build symbolized stacks streams with known rows, run the `stacks-pack`
//! binary, and read its Parquet output back.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, FieldRef, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use stacks_stream::{meta, stage};

pub const BIN: &str = env!("CARGO_BIN_EXE_stacks-pack");

/// A scratch directory removed on drop (permissions restored first).
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "stacks-pack-test-{}-{tag}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(entries) = walk(&self.0) {
            for p in entries {
                let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o755));
            }
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn walk(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = vec![dir.to_path_buf()];
    for e in fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            out.extend(walk(&p)?);
        }
    }
    Ok(out)
}

/// Stream metadata as the recorder and symbolizer leave it.
pub fn stream_metadata() -> HashMap<String, String> {
    let mut md = HashMap::new();
    md.insert(meta::HOST.to_string(), "testhost".to_string());
    md.insert(meta::EVENTS.to_string(), "cpu-clock:99Hz".to_string());
    stacks_stream::stamp(&mut md, "stacks-record", "0.1.0", stage::RAW);
    stacks_stream::stamp(&mut md, "stacks-symbolize", "0.1.0", stage::SYMBOLIZED);
    md
}

pub fn symbolized() -> SchemaRef {
    Arc::new(stacks_stream::symbolized_schema(stream_metadata()))
}

fn list_field(dt: DataType) -> FieldRef {
    match dt {
        DataType::List(f) => f,
        other => panic!("not a list type: {other}"),
    }
}

fn struct_fields(f: &FieldRef) -> arrow_schema::Fields {
    match f.data_type() {
        DataType::Struct(fields) => fields.clone(),
        other => panic!("not a struct: {other}"),
    }
}

/// A batch of symbolized rows `start..start+n`; every value derives from the row number,
/// with null, empty and multi-frame stacks mixed in.
pub fn batch(schema: &SchemaRef, start: usize, n: usize) -> RecordBatch {
    let rows: Vec<usize> = (start..start + n).collect();
    let time = TimestampNanosecondArray::from(
        rows.iter()
            .map(|&i| 1_700_000_000_000_000_000 + i as i64 * 1_000_003)
            .collect::<Vec<_>>(),
    )
    .with_timezone("UTC");
    let kind = StringArray::from_iter_values(
        rows.iter()
            .map(|&i| if i % 10 == 9 { "lost" } else { "profile" }),
    );
    let pid = Int32Array::from_iter_values(rows.iter().map(|&i| 100 + (i % 3) as i32));
    let tid = Int32Array::from_iter_values(rows.iter().map(|&i| 1000 + i as i32));
    let comm = StringArray::from_iter_values(rows.iter().map(|&i| format!("comm{}", i % 3)));
    let thread = StringArray::from_iter_values(rows.iter().map(|&i| format!("thr-{i}")));
    let cpu = Int32Array::from_iter_values(rows.iter().map(|&i| (i % 4) as i32));
    let value = Int64Array::from_iter_values(rows.iter().map(|&i| 10_101_010 + i as i64));

    // kstack: null every 5th row, else 1..=4 kernel addresses.
    let kfield = list_field(stacks_stream::kstack_type());
    let klen: Vec<usize> = rows
        .iter()
        .map(|&i| if i % 5 == 0 { 0 } else { i % 4 + 1 })
        .collect();
    let kaddr = UInt64Array::from_iter_values(
        rows.iter()
            .zip(&klen)
            .flat_map(|(&i, &l)| (0..l).map(move |k| 0xffff_ffff_8100_0000 + (i * 16 + k) as u64)),
    );
    let knull = NullBuffer::from(rows.iter().map(|&i| i % 5 != 0).collect::<Vec<_>>());
    let kstack = ListArray::new(
        kfield,
        OffsetBuffer::from_lengths(klen),
        Arc::new(kaddr),
        Some(knull),
    );
    let kerr = Int32Array::from(
        rows.iter()
            .map(|&i| (i % 5 == 0).then_some(-14))
            .collect::<Vec<_>>(),
    );

    // ustack: null every 7th row, else 0..=2 frames (empty lists included).
    let ufield = list_field(stacks_stream::ustack_type());
    let ulen: Vec<usize> = rows
        .iter()
        .map(|&i| if i % 7 == 0 { 0 } else { i % 3 })
        .collect();
    let uidx: Vec<(usize, usize)> = rows
        .iter()
        .zip(&ulen)
        .flat_map(|(&i, &l)| (0..l).map(move |k| (i, k)))
        .collect();
    let ucols: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(
            uidx.iter().map(|&(i, k)| 0x5555_0000 + (i * 8 + k) as u64),
        )),
        Arc::new(StringArray::from(
            uidx.iter()
                .map(|&(_, k)| (k == 0).then_some("/usr/bin/app"))
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            uidx.iter()
                .map(|&(i, _)| Some(format!("{:040x}", i % 2)))
                .collect::<Vec<_>>(),
        )),
        Arc::new(UInt64Array::from(
            uidx.iter()
                .map(|&(i, k)| (k == 0).then_some((i * 8) as u64))
                .collect::<Vec<_>>(),
        )),
        Arc::new(StringArray::from(
            uidx.iter()
                .map(|&(_, k)| (k == 1).then_some("no module"))
                .collect::<Vec<_>>(),
        )),
    ];
    let uvalues = StructArray::new(struct_fields(&ufield), ucols, None);
    let unull = NullBuffer::from(rows.iter().map(|&i| i % 7 != 0).collect::<Vec<_>>());
    let ustack = ListArray::new(
        ufield,
        OffsetBuffer::from_lengths(ulen),
        Arc::new(uvalues),
        Some(unull),
    );
    let uerr = Int32Array::from(
        rows.iter()
            .map(|&i| (i % 7 == 0).then_some(-2))
            .collect::<Vec<_>>(),
    );

    // stack: always present, i%5 frames (kernel + user, some inlined, some unresolved).
    let sfield = list_field(stacks_stream::stack_type());
    let slen: Vec<usize> = rows.iter().map(|&i| i % 5).collect();
    let sidx: Vec<(usize, usize)> = rows
        .iter()
        .zip(&slen)
        .flat_map(|(&i, &l)| (0..l).map(move |k| (i, k)))
        .collect();
    let opt_str = |f: &dyn Fn(usize, usize) -> Option<String>| -> ArrayRef {
        Arc::new(StringArray::from(
            sidx.iter().map(|&(i, k)| f(i, k)).collect::<Vec<_>>(),
        ))
    };
    let scols: Vec<ArrayRef> = vec![
        opt_str(&|i, k| (k != 3).then(|| format!("fn_{i}_{k}"))),
        opt_str(&|i, k| (k % 2 == 0).then(|| format!("src/file{}.rs", i % 4))),
        Arc::new(UInt32Array::from(
            sidx.iter()
                .map(|&(i, k)| (k % 2 == 0).then_some((i * 10 + k) as u32))
                .collect::<Vec<_>>(),
        )),
        Arc::new(UInt32Array::from(
            sidx.iter()
                .map(|&(_, k)| (k == 0).then_some(7))
                .collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            sidx.iter().map(|&(_, k)| k == 1).collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            sidx.iter()
                .map(|&(i, k)| k == 0 && i % 2 == 0)
                .collect::<Vec<_>>(),
        )),
        opt_str(&|_, k| (k > 0).then(|| "/usr/bin/app".to_string())),
        opt_str(&|_, k| (k > 0).then(|| "ab".repeat(20))),
        Arc::new(UInt64Array::from(
            sidx.iter()
                .map(|&(i, k)| (k > 0).then_some((i * 4 + k) as u64))
                .collect::<Vec<_>>(),
        )),
        Arc::new(UInt64Array::from_iter_values(
            sidx.iter().map(|&(i, k)| 0x4000_0000 + (i * 32 + k) as u64),
        )),
        opt_str(&|_, k| (k == 3).then(|| "no symbol".to_string())),
        opt_str(&|i, k| (k != 3).then(|| format!("_ZN3app4fn_{i}_{k}E"))),
    ];
    let svalues = StructArray::new(struct_fields(&sfield), scols, None);
    let stack = ListArray::new(
        sfield,
        OffsetBuffer::from_lengths(slen),
        Arc::new(svalues),
        None,
    );

    stacks_stream::batch_by_name(
        schema.clone(),
        n,
        vec![
            ("time", Arc::new(time) as ArrayRef),
            ("kind", Arc::new(kind) as ArrayRef),
            ("pid", Arc::new(pid) as ArrayRef),
            ("tid", Arc::new(tid) as ArrayRef),
            ("comm", Arc::new(comm) as ArrayRef),
            ("thread", Arc::new(thread) as ArrayRef),
            ("cpu", Arc::new(cpu) as ArrayRef),
            ("value", Arc::new(value) as ArrayRef),
            ("kstack", Arc::new(kstack) as ArrayRef),
            ("kstack_error", Arc::new(kerr) as ArrayRef),
            ("ustack", Arc::new(ustack) as ArrayRef),
            ("ustack_error", Arc::new(uerr) as ArrayRef),
            ("stack", Arc::new(stack) as ArrayRef),
        ],
    )
    .unwrap()
}

/// Batches of the given sizes, numbered consecutively from row 0.
pub fn batches(schema: &SchemaRef, sizes: &[usize]) -> Vec<RecordBatch> {
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
pub fn stream(schema: &Schema, batches: &[RecordBatch], finish: bool) -> (Vec<u8>, Vec<usize>) {
    let mut w = StreamWriter::try_new(Vec::new(), schema).unwrap();
    let mut ends = Vec::new();
    for b in batches {
        w.write(b).unwrap();
        ends.push(w.get_ref().len());
    }
    if finish {
        w.finish().unwrap();
    }
    // Not `into_inner`: it would add the end-of-stream marker.
    (w.get_ref().clone(), ends)
}

/// Spawn the packer with piped stdin and captured stdout/stderr.
pub fn spawn(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Run the packer with `input` on stdin.
pub fn run(args: &[&str], input: Vec<u8>) -> Output {
    let mut child = spawn(args);
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Regular files in `dir`, sorted by name.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// `*.parquet` files in `dir`, sorted by name.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect()
}

/// Wait until `cond` holds (at most 30 s).
pub fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One Parquet file read back: its footer, Arrow schema and batches.
pub struct ReadBack {
    pub metadata: Arc<ParquetMetaData>,
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
}

impl ReadBack {
    pub fn rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }

    /// Parquet key-value metadata as a map.
    pub fn kv(&self) -> HashMap<String, String> {
        self.metadata
            .file_metadata()
            .key_value_metadata()
            .into_iter()
            .flatten()
            .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
            .collect()
    }
}

pub fn read_parquet(path: &Path) -> ReadBack {
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
    let builder =
        ParquetRecordBatchReaderBuilder::try_new_with_options(File::open(path).unwrap(), options)
            .unwrap();
    let metadata = builder.metadata().clone();
    let schema = builder.schema().clone();
    let batches = builder
        .build()
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    ReadBack {
        metadata,
        schema,
        batches,
    }
}

/// The schema stacks-pack writes for input `schema`: `stack_id` added after a symbolized stack.
pub fn packed(schema: &Schema) -> Schema {
    let mut fields: Vec<arrow_schema::FieldRef> = schema.fields().iter().cloned().collect();
    if schema
        .column_with_name(stacks_stream::col::STACK)
        .is_some_and(|(_, f)| stacks_stream::is_stack_type(f.data_type()))
    {
        fields.push(std::sync::Arc::new(arrow_schema::Field::new(
            stacks_stream::col::STACK_ID,
            stacks_stream::stack_id_type(),
            true,
        )));
    }
    Schema::new(fields)
}

/// Every row of `got` (in order) equals the rows of `want` (in order), column by column; where
/// `got` has the `stack_id` stacks-pack adds, it is the key of the row's stack.
pub fn assert_same_rows(want: &[RecordBatch], got: &[RecordBatch]) {
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
        assert_eq!(
            wb.num_columns() + usize::from(stacked),
            gb.num_columns(),
            "columns: {:?}",
            gb.schema()
        );
        for c in 0..wb.num_columns() {
            let a = wb.column(c).slice(*wr, 1);
            let b = gb.column(c).slice(*gr, 1);
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
