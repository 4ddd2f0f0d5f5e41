//! Bad-input corpus, stressed pipelines and fault reconciliation across all tools.
//!
//! The corpus is generated here, at test time, from small valid streams (tests/corpus/README.md
//! lists the cases). Every stream tool gets every case on stdin and must refuse it cleanly:
//! exit 1 (2 for usage errors), exactly one `tool: error:` line naming the problem, no panic,
//! no hang (each run is killed and failed after a timeout). Absurd but valid input must pass
//! with every row accounted for, and a pipeline fed a broken stream must fail as a whole, each
//! tool after the break reporting it.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::builder::{ListBuilder, StructBuilder, UInt64Builder};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, UnionArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, UnionFields};
use stacks_tests::{
    assert_refused, bin, fuzz_case, raw_fixture, refusal_problem, run_command, scratch, sh,
    stream_bytes,
};

/// Debug binaries on a shared two-core machine: generous, but a hang still fails.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A stream tool under test: name, arguments (`OUT` is replaced by a scratch path) and
/// whether it reads symbolized rows (else raw rows).
struct Tool {
    name: &'static str,
    args: &'static [&'static str],
    symbolized: bool,
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "stacks-symbolize",
        args: &[],
        symbolized: false,
    },
    Tool {
        name: "stacks-pack",
        args: &["-o", "OUT"],
        symbolized: false,
    },
    Tool {
        name: "stacks-pprof",
        args: &["-o", "/dev/null"],
        symbolized: true,
    },
    Tool {
        name: "stacks-trace",
        args: &["-o", "/dev/null"],
        symbolized: true,
    },
    Tool {
        name: "stacks-otlp",
        args: &["-o", "/dev/null"],
        symbolized: true,
    },
];

/// Every stream tool.
fn tools() -> impl Iterator<Item = &'static Tool> {
    TOOLS.iter()
}

fn run(tool: &Tool, input: &[u8], dir: &Path) -> Output {
    let mut cmd = Command::new(bin(tool.name));
    for a in tool.args {
        if *a == "OUT" {
            cmd.arg(dir.join("out.parquet"));
        } else {
            cmd.arg(a);
        }
    }
    run_command(cmd, input, TIMEOUT)
}

/// No panic; either success or a clean one-line refusal with exit status 1.
fn assert_clean(out: &Output, tool: &str, case: &str) {
    if out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{tool} [{case}]:\n{stderr}");
    } else {
        assert_refused(out, tool, 1, "", case);
    }
}

// ---- valid inputs and stream surgery ----

fn decode(bytes: &[u8]) -> (SchemaRef, Vec<RecordBatch>) {
    let input =
        stacks_stream::InputStream::new("fixture", Box::new(std::io::Cursor::new(bytes.to_vec())))
            .expect("fixture stream");
    let schema = input.schema();
    let batches = input
        .collect::<Result<Vec<_>, _>>()
        .expect("fixture batches");
    (schema, batches)
}

/// The raw fixture as three batches of 20 rows, so a stream has several messages to cut.
fn raw3() -> Vec<u8> {
    let (schema, batches) = decode(&raw_fixture(60, true));
    assert_eq!(batches.len(), 1, "the raw fixture is one batch");
    let parts: Vec<RecordBatch> = (0..3).map(|i| batches[0].slice(i * 20, 20)).collect();
    stream_bytes(&schema, &parts, true)
}

/// stacks-symbolize's output for `raw`.
fn symbolize(raw: &[u8]) -> Vec<u8> {
    let out = run_command(Command::new(bin("stacks-symbolize")), raw, TIMEOUT);
    assert!(
        out.status.success(),
        "symbolizing the fixture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Byte spans of the stream's messages (schema, batches), without the end-of-stream marker.
fn messages(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        assert_eq!(
            bytes[pos..pos + 4],
            [0xff; 4],
            "continuation marker at {pos}"
        );
        let len = i32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let meta = &bytes[pos + 8..pos + 8 + len];
        let msg = arrow_ipc::root_as_message(meta).expect("message flatbuffer");
        let end = pos + 8 + len + msg.bodyLength() as usize;
        spans.push((pos, end));
        pos = end;
    }
    spans
}

/// Rebuild every batch (and the schema, metadata kept) through `f` on (field, column) pairs.
fn reshape(bytes: &[u8], f: impl Fn(Vec<(Field, ArrayRef)>) -> Vec<(Field, ArrayRef)>) -> Vec<u8> {
    let (schema, batches) = decode(bytes);
    let mut out_schema = None;
    let mut out = Vec::new();
    for b in &batches {
        let cols = schema
            .fields()
            .iter()
            .map(|fld| fld.as_ref().clone())
            .zip(b.columns().iter().cloned())
            .collect();
        let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = f(cols).into_iter().unzip();
        let s = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        out.push(RecordBatch::try_new(s.clone(), arrays).expect("reshaped batch"));
        out_schema = Some(s);
    }
    stream_bytes(&out_schema.expect("a batch"), &out, true)
}

fn without(name: &'static str) -> impl Fn(Vec<(Field, ArrayRef)>) -> Vec<(Field, ArrayRef)> {
    move |cols| cols.into_iter().filter(|(f, _)| f.name() != name).collect()
}

fn renamed(
    from: &'static str,
    to: &'static str,
) -> impl Fn(Vec<(Field, ArrayRef)>) -> Vec<(Field, ArrayRef)> {
    move |cols| {
        cols.into_iter()
            .map(|(f, a)| {
                if f.name() == from {
                    (f.with_name(to), a)
                } else {
                    (f, a)
                }
            })
            .collect()
    }
}

/// Replace column `name` by `make(old column)` with the new array's type.
fn retyped(
    name: &'static str,
    make: fn(&ArrayRef) -> ArrayRef,
) -> impl Fn(Vec<(Field, ArrayRef)>) -> Vec<(Field, ArrayRef)> {
    move |cols| {
        cols.into_iter()
            .map(|(f, a)| {
                if f.name() == name {
                    let new = make(&a);
                    (Field::new(name, new.data_type().clone(), true), new)
                } else {
                    (f, a)
                }
            })
            .collect()
    }
}

fn as_int64(a: &ArrayRef) -> ArrayRef {
    Arc::new(Int64Array::from_iter(
        (0..a.len()).map(|i| a.is_valid(i).then_some(i as i64)),
    ))
}

fn as_text(a: &ArrayRef) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(
        (0..a.len()).map(|i| format!("v{i}")),
    ))
}

fn as_int_lists(a: &ArrayRef) -> ArrayRef {
    let mut b = ListBuilder::new(UInt64Builder::new());
    for i in 0..a.len() {
        b.values().append_value(i as u64);
        b.append(true);
    }
    Arc::new(b.finish())
}

/// The stream with its schema metadata changed by `f` (batches re-stamped with it).
fn with_metadata(bytes: &[u8], key: &str, value: &str) -> Vec<u8> {
    let (schema, batches) = decode(bytes);
    let mut md = schema.metadata().clone();
    md.insert(key.into(), value.into());
    let s = Arc::new(Schema::new_with_metadata(schema.fields().clone(), md));
    let batches: Vec<RecordBatch> = batches
        .iter()
        .map(|b| RecordBatch::try_new(s.clone(), b.columns().to_vec()).unwrap())
        .collect();
    stream_bytes(&s, &batches, true)
}

/// Write `batch`'s columns under `schema` without the checks `RecordBatch::try_new` makes, as
/// a broken writer could: the IPC writer serializes what it is given.
fn forged(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Vec<u8> {
    let loose = Arc::new(Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    ));
    let batch = RecordBatch::try_new(loose, columns).expect("loose batch");
    let mut buf = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
    }
    buf
}

/// Column `name` replaced by `array` in the first batch, forged under the original schema.
fn forged_column(bytes: &[u8], name: &str, array: impl Fn(usize) -> ArrayRef) -> Vec<u8> {
    let (schema, batches) = decode(bytes);
    let b = &batches[0];
    let idx = schema.index_of(name).unwrap();
    let mut cols = b.columns().to_vec();
    cols[idx] = array(b.num_rows());
    forged(&schema, cols)
}

/// `comm` values that are not UTF-8.
fn non_utf8(n: usize) -> ArrayRef {
    let bytes = arrow_array::BinaryArray::from_vec(vec![&[b'a', 0xff, 0xfe][..]; n]);
    let data = bytes.to_data().into_builder().data_type(DataType::Utf8);
    // SAFETY: the array is only serialized (byte copies), never read as strings here.
    Arc::new(StringArray::from(unsafe { data.build_unchecked() }))
}

/// A list column whose offsets go backwards (a corrupt writer); for a dictionary-encoded one,
/// its dictionary's.
fn backwards_offsets(a: &ArrayRef) -> ArrayRef {
    if let Some(dict) = a.as_dictionary_opt::<arrow_array::types::Int32Type>() {
        let values = backwards_offsets(dict.values());
        return Arc::new(
            arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::try_new(
                dict.keys().clone(),
                values,
            )
            .unwrap(),
        );
    }
    let list = a.as_list::<i32>();
    let n = list.len();
    let total = list.value_offsets()[n];
    let mut offsets: Vec<i32> = list.value_offsets().to_vec();
    if n >= 2 {
        offsets[1] = total;
        offsets[2] = 0.max(offsets[2].min(total));
        if offsets[2] >= offsets[1] {
            offsets[2] = 0;
        }
    }
    let mut buffer = arrow_array::builder::BufferBuilder::<i32>::new(offsets.len());
    buffer.append_slice(&offsets);
    let data = list
        .to_data()
        .into_builder()
        .offset(0)
        .buffers(vec![buffer.finish()]);
    // SAFETY: only serialized; the reader must reject it.
    Arc::new(ListArray::from(unsafe { data.build_unchecked() }))
}

fn arrow_file(bytes: &[u8]) -> Vec<u8> {
    let (schema, batches) = decode(bytes);
    let mut buf = Vec::new();
    {
        // Stack dictionaries grow from batch to batch: deltas (the file format allows them).
        let options = arrow_ipc::writer::IpcWriteOptions::default()
            .with_dictionary_handling(arrow_ipc::writer::DictionaryHandling::Delta);
        let mut w = arrow_ipc::writer::FileWriter::try_new_with_options(&mut buf, &schema, options)
            .unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
    }
    buf
}

/// Pseudo-random bytes (xorshift), not starting with the Arrow continuation marker.
fn garbage(n: usize, mut seed: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    v[0] = 0x42;
    v
}

/// A case of the corpus: its name, the bytes, and what the error must mention.
struct Case {
    name: String,
    bytes: Vec<u8>,
    needle: &'static str,
}

fn case(name: impl Into<String>, bytes: Vec<u8>, needle: &'static str) -> Case {
    Case {
        name: name.into(),
        bytes,
        needle,
    }
}

/// Cases every stream tool must refuse, derived from `full`, a valid stream it accepts.
fn generic_cases(full: &[u8], parquet: &[u8]) -> Vec<Case> {
    let mut cases = vec![
        case("empty", Vec::new(), "empty input"),
        case(
            "text",
            b"kind,pid\nprofile,1\n".to_vec(),
            "not an Arrow IPC stream",
        ),
        case("garbage", garbage(4096, 7), "not an Arrow IPC stream"),
        case("arrow-file", arrow_file(full), "Arrow IPC *file*"),
        case("parquet-file", parquet.to_vec(), "Parquet"),
        case(
            "newer-schema-version",
            with_metadata(full, stacks_stream::meta::SCHEMA_VERSION, "999"),
            "newer",
        ),
        case(
            "null-pid",
            forged_column(full, "pid", |n| {
                Arc::new(Int32Array::from_iter(
                    (0..n).map(|i| (i % 2 == 0).then_some(7)),
                ))
            }),
            "pid",
        ),
        case(
            "non-utf8-comm",
            forged_column(full, "comm", non_utf8),
            "UTF",
        ),
    ];
    {
        let (schema, batches) = decode(full);
        let idx = schema.index_of("kstack").unwrap();
        let mut cols = batches[0].columns().to_vec();
        cols[idx] = backwards_offsets(&cols[idx]);
        cases.push(case(
            "kstack-offsets-backwards",
            forged(&schema, cols),
            "offset",
        ));
    }
    // From bad_input.rs: the end marker missing, and the stream cut at half its bytes.
    cases.push(case(
        "no-end-marker",
        full[..full.len() - 8].to_vec(),
        "truncated",
    ));
    cases.push(case(
        "cut-at-half",
        full[..full.len() / 2].to_vec(),
        "truncated",
    ));
    // A message whose metadata is not a flatbuffer.
    let mut bogus = vec![0xff, 0xff, 0xff, 0xff, 64, 0, 0, 0];
    bogus.extend(std::iter::repeat_n(0x41, 64));
    bogus.extend([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    cases.push(case("garbage-message", bogus, "invalid Arrow stream"));
    cases.push(case(
        "end-marker-only",
        vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0],
        "invalid Arrow stream",
    ));
    // Cut at every message boundary (the end marker is missing) and inside every message.
    let spans = messages(full);
    assert!(spans.len() >= 4, "schema and three batches: {spans:?}");
    for (i, &(start, end)) in spans.iter().enumerate() {
        cases.push(case(
            format!("cut-after-message-{i}"),
            full[..end].to_vec(),
            "truncated",
        ));
        let mut cuts = vec![start + 2, start + 6, start + 12, (start + end) / 2, end - 1];
        cuts.retain(|&c| c > start && c < end);
        cuts.dedup();
        for c in cuts {
            cases.push(case(
                format!("cut-in-message-{i}-at-{}", c - start),
                full[..c].to_vec(),
                "truncated",
            ));
        }
    }
    cases
}

/// A stream of one Int64 column `x` (from bad_input.rs).
fn only_x() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .unwrap();
    stream_bytes(&schema, &[batch], true)
}

/// Schema cases for one tool: (case, needle) — the column the error must name.
fn schema_cases(tool: &str, full: &[u8]) -> Vec<Case> {
    match tool {
        "stacks-symbolize" => vec![
            case("only-column-x", only_x(), "kstack"),
            case("missing-kstack", reshape(full, without("kstack")), "kstack"),
            case(
                "renamed-ustack",
                reshape(full, renamed("ustack", "user_stack")),
                "ustack",
            ),
            case(
                "kstack_error-int64",
                reshape(full, retyped("kstack_error", as_int64)),
                "kstack_error",
            ),
            case(
                "ustack-of-ints",
                reshape(full, retyped("ustack", as_int_lists)),
                "ustack",
            ),
        ],
        "stacks-pprof" => vec![
            case("only-column-x", only_x(), "stack"),
            case("missing-stack", reshape(full, without("stack")), "stack"),
            case(
                "stack-of-ints",
                reshape(full, retyped("stack", as_int_lists)),
                "stack",
            ),
        ],
        "stacks-otlp" => vec![
            case("only-column-x", only_x(), "stack"),
            case("missing-stack", reshape(full, without("stack")), "stack"),
            case(
                "stack-of-ints",
                reshape(full, retyped("stack", as_int_lists)),
                "stack",
            ),
        ],
        "stacks-trace" => vec![
            case("missing-time", reshape(full, without("time")), "time"),
            case("missing-kind", reshape(full, without("kind")), "kind"),
            case("pid-text", reshape(full, retyped("pid", as_text)), "pid"),
        ],
        _ => Vec::new(),
    }
}

struct Inputs {
    raw: Vec<u8>,
    symbolized: Vec<u8>,
    /// The samples file of the packed fixture (`-o` writes a pair).
    parquet: Vec<u8>,
    /// Its stacks file.
    stacks: Vec<u8>,
    /// Its frames file.
    frames: Vec<u8>,
}

impl Inputs {
    /// The packed fixture as the set `NAME.samples.parquet` + `NAME.stacks.parquet` +
    /// `NAME.frames.parquet` in `dir`.
    fn write_pair(&self, dir: &Path, name: &str) {
        std::fs::write(dir.join(format!("{name}.samples.parquet")), &self.parquet).unwrap();
        std::fs::write(dir.join(format!("{name}.stacks.parquet")), &self.stacks).unwrap();
        std::fs::write(dir.join(format!("{name}.frames.parquet")), &self.frames).unwrap();
    }
}

fn inputs(dir: &Path) -> Inputs {
    let raw = raw3();
    let symbolized = symbolize(&raw);
    let file = dir.join("fixture.parquet");
    let out = run_command(
        {
            let mut c = Command::new(bin("stacks-pack"));
            c.arg("-o").arg(&file);
            c
        },
        &symbolized,
        TIMEOUT,
    );
    assert!(
        out.status.success(),
        "packing the fixture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parquet = std::fs::read(dir.join("fixture.samples.parquet")).unwrap();
    let stacks = std::fs::read(dir.join("fixture.stacks.parquet")).unwrap();
    let frames = std::fs::read(dir.join("fixture.frames.parquet")).unwrap();
    Inputs {
        raw,
        symbolized,
        parquet,
        stacks,
        frames,
    }
}

#[test]
fn valid_fixtures_pass_every_tool() {
    // The corpus is derived from these: they must be accepted, or every refusal below would
    // be meaningless.
    let dir = scratch("robust-valid");
    let inp = inputs(&dir);
    for tool in tools() {
        let full = if tool.symbolized {
            &inp.symbolized
        } else {
            &inp.raw
        };
        let out = run(tool, full, &dir);
        assert!(
            out.status.success(),
            "{}: {}",
            tool.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn corpus_is_refused_by_every_stream_tool() {
    let dir = scratch("robust-corpus");
    let inp = inputs(&dir);
    let mut checked = 0;
    let mut problems = Vec::new();
    for tool in tools() {
        let full = if tool.symbolized {
            &inp.symbolized
        } else {
            &inp.raw
        };
        let mut cases = generic_cases(full, &inp.parquet);
        cases.extend(schema_cases(tool.name, full));
        for c in &cases {
            let out = run(tool, &c.bytes, &dir);
            problems.extend(refusal_problem(&out, tool.name, 1, c.needle, &c.name));
            checked += 1;
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 100, "only {checked} cases ran");
}

/// Inputs the fuzzers found (stacks-testkit/corpus/fuzz/, named after the target that found
/// them): every stream tool must handle every one cleanly, success or a one-line error, and
/// quickly (some were slow units: seconds and gigabytes to refuse a few hundred bytes).
#[test]
fn fuzz_findings_stay_fixed() {
    let dir = scratch("robust-fuzz");
    let corpus = stacks_testkit::fuzz_corpus();
    let mut files: Vec<_> = std::fs::read_dir(&corpus)
        .expect("stacks-testkit/corpus/fuzz")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("stream_")
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no fuzz findings in {}",
        corpus.display()
    );
    let mut problems = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let case = file.file_name().unwrap().to_string_lossy().to_string();
        for tool in tools() {
            let start = std::time::Instant::now();
            let out = run(tool, &bytes, &dir);
            let took = start.elapsed();
            if took > Duration::from_secs(5) {
                problems.push(format!("{} [{case}] took {took:?}", tool.name));
            }
            if !out.status.success() {
                problems.extend(refusal_problem(&out, tool.name, 1, "", &case));
            } else if String::from_utf8_lossy(&out.stderr).contains("panicked") {
                problems.push(format!("{} [{case}] panicked", tool.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// One raw row per stack: (kernel addresses, user offsets); `None` = not requested.
fn raw_with_stacks(stacks: &[(Option<usize>, Option<usize>)]) -> Vec<u8> {
    let (schema, batches) = decode(&raw_fixture(stacks.len(), true));
    let b = &batches[0];
    let kfield = match schema.field_with_name("kstack").unwrap().data_type() {
        DataType::List(f) => f.clone(),
        _ => unreachable!(),
    };
    let ufield = match schema.field_with_name("ustack").unwrap().data_type() {
        DataType::List(f) => f.clone(),
        _ => unreachable!(),
    };
    let DataType::Struct(ufields) = ufield.data_type().clone() else {
        unreachable!()
    };
    let mut k = ListBuilder::new(UInt64Builder::new()).with_field(kfield);
    let mut u = ListBuilder::new(StructBuilder::from_fields(ufields, 0)).with_field(ufield);
    for &(kn, un) in stacks {
        match kn {
            None => k.append_null(),
            Some(n) => {
                for i in 0..n {
                    k.values().append_value(0xffff_ffff_8100_0000 + i as u64);
                }
                k.append(true);
            }
        }
        match un {
            None => u.append_null(),
            Some(n) => {
                let s = u.values();
                for i in 0..n {
                    s.field_builder::<UInt64Builder>(0)
                        .unwrap()
                        .append_value(0x5555_0000 + i as u64);
                    s.field_builder::<arrow_array::builder::StringBuilder>(1)
                        .unwrap()
                        .append_value("/nonexistent/app");
                    s.field_builder::<arrow_array::builder::StringBuilder>(2)
                        .unwrap()
                        .append_null();
                    s.field_builder::<UInt64Builder>(3)
                        .unwrap()
                        .append_value(0x1000 + i as u64);
                    // error, then symbol and file (perf maps, Python): none here.
                    for field in [4, 5, 6] {
                        s.field_builder::<arrow_array::builder::StringBuilder>(field)
                            .unwrap()
                            .append_null();
                    }
                    s.field_builder::<arrow_array::builder::UInt32Builder>(7)
                        .unwrap()
                        .append_null();
                    s.append(true);
                }
                u.append(true);
            }
        }
    }
    let mut cols = b.columns().to_vec();
    cols[schema.index_of("kstack").unwrap()] = Arc::new(k.finish());
    cols[schema.index_of("ustack").unwrap()] = Arc::new(u.finish());
    let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
    stream_bytes(&schema, &[batch], true)
}

#[test]
fn absurd_stacks_pass_with_every_row_and_frame() {
    let dir = scratch("robust-absurd");
    let raw = raw_with_stacks(&[
        (Some(10_000), Some(10_000)),
        (Some(0), Some(0)),
        (None, None),
        (Some(1), None),
    ]);
    let symbolized = symbolize(&raw);
    let (_, batches) = decode(&symbolized);
    let frames: Vec<usize> = stacks_tests::stack_functions(&batches)
        .iter()
        .map(Vec::len)
        .collect();
    assert_eq!(
        frames,
        [20_000, 0, 0, 1],
        "frames per row after symbolizing"
    );
    for tool in tools() {
        let input = if tool.symbolized { &symbolized } else { &raw };
        let out = run(tool, input, &dir);
        assert!(
            out.status.success(),
            "{}: {}",
            tool.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every row reaches the Parquet file.
    let out = run(
        TOOLS.iter().find(|t| t.name == "stacks-pack").unwrap(),
        &symbolized,
        &dir,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("4 rows"), "{stderr}");
}

#[test]
fn a_stream_without_batches_is_not_a_failure() {
    let dir = scratch("robust-nobatch");
    for (stage, bytes) in [(false, raw3()), (true, symbolize(&raw3()))] {
        let (schema, _) = decode(&bytes);
        let empty = stream_bytes(&schema, &[], true);
        for tool in tools().filter(|t| t.symbolized == stage) {
            let out = run(tool, &empty, &dir);
            assert_clean(&out, tool.name, "no batches");
        }
    }
    // stacks-symbolize passes an empty stream on as an empty stream.
    let (schema, _) = decode(&raw3());
    let out = run(&TOOLS[0], &stream_bytes(&schema, &[], true), &dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, batches) = decode(&out.stdout);
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
}

/// Column `name` (time, a string or an integer column) declared nullable, with every other
/// value null.
fn holey(name: &'static str) -> impl Fn(Vec<(Field, ArrayRef)>) -> Vec<(Field, ArrayRef)> {
    use arrow_array::types::{Int32Type, Int64Type, TimestampNanosecondType};
    move |cols| {
        cols.into_iter()
            .map(|(f, a)| {
                if f.name() != name {
                    return (f, a);
                }
                let keep = |i: usize| i.is_multiple_of(2) && a.is_valid(i);
                let n = a.len();
                let holed: ArrayRef = match a.data_type() {
                    DataType::Utf8 => {
                        let v = a.as_string::<i32>();
                        Arc::new(StringArray::from_iter(
                            (0..n).map(|i| keep(i).then(|| v.value(i))),
                        ))
                    }
                    DataType::Int32 => {
                        let v = a.as_primitive::<Int32Type>();
                        Arc::new(Int32Array::from_iter(
                            (0..n).map(|i| keep(i).then(|| v.value(i))),
                        ))
                    }
                    DataType::Int64 => {
                        let v = a.as_primitive::<Int64Type>();
                        Arc::new(Int64Array::from_iter(
                            (0..n).map(|i| keep(i).then(|| v.value(i))),
                        ))
                    }
                    DataType::Timestamp(_, tz) => {
                        let v = a.as_primitive::<TimestampNanosecondType>();
                        Arc::new(
                            arrow_array::TimestampNanosecondArray::from_iter(
                                (0..n).map(|i| keep(i).then(|| v.value(i))),
                            )
                            .with_timezone_opt(tz.clone()),
                        )
                    }
                    other => panic!("holey: {name} has type {other}"),
                };
                (f.with_nullable(true), holed)
            })
            .collect()
    }
}

/// Nulls in columns every row should have, declared nullable (as a query result may): each
/// tool either handles the rows or refuses the stream in one line; none panics.
#[test]
fn nulls_in_row_columns_are_handled() {
    let dir = scratch("robust-nulls");
    let raw = raw3();
    let symbolized = symbolize(&raw);
    let mut problems = Vec::new();
    for column in [
        "time", "kind", "pid", "tid", "comm", "thread", "cpu", "value",
    ] {
        for tool in tools() {
            let full = if tool.symbolized { &symbolized } else { &raw };
            let input = reshape(full, holey(column));
            let out = run(tool, &input, &dir);
            let case = format!("nulls in {column}");
            if !out.status.success() {
                problems.extend(refusal_problem(&out, tool.name, 1, column, &case));
            } else if String::from_utf8_lossy(&out.stderr).contains("panicked") {
                problems.push(format!("{} [{case}] panicked", tool.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The stream cut in the middle of its last batch: two complete batches of three.
fn cut_in_last_batch(full: &[u8]) -> Vec<u8> {
    let spans = messages(full);
    let (start, end) = spans[spans.len() - 1];
    full[..(start + end) / 2].to_vec()
}

/// A tool reading a truncated stream directly reports it and fails; the packer keeps the rows
/// it received, in complete files, and still fails.
#[test]
fn truncated_input_fails_each_tool_after_what_it_could_keep() {
    let dir = scratch("robust-cut");
    let raw = raw3();
    let symbolized = symbolize(&raw);
    for tool in tools() {
        let full = if tool.symbolized { &symbolized } else { &raw };
        let out = run(tool, &cut_in_last_batch(full), &dir);
        assert_refused(
            &out,
            tool.name,
            1,
            "stdin: truncated",
            "cut in the last batch",
        );
    }
    let pack = TOOLS.iter().find(|t| t.name == "stacks-pack").unwrap();
    let out = run(pack, &cut_in_last_batch(&raw), &dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stacks-pack: 40 rows in 1 file"),
        "{stderr}"
    );
}

/// The next tools in a pipeline after a truncated stream.
fn next_tools(dir: &Path) -> Vec<String> {
    let mut nexts = vec![
        format!("stacks-pack {}", dir.join("packed").display()),
        "stacks-pprof -o /dev/null".to_string(),
    ];
    nexts.push("stacks-trace -o /dev/null".to_string());
    nexts.push("stacks-otlp -o /dev/null".to_string());
    nexts
}

/// `cat truncated | stacks-symbolize | NEXT`: the pipeline fails (pipefail), the symbolizer
/// says the stream was truncated, nothing panics.
#[test]
fn pipelines_fed_a_truncated_stream_fail() {
    let dir = scratch("robust-pipe");
    let cut = dir.join("cut.arrow");
    std::fs::write(&cut, cut_in_last_batch(&raw3())).unwrap();
    for next in next_tools(&dir) {
        let script = format!("cat {} | stacks-symbolize | {next}", cut.display());
        let out = sh(&script);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{script} succeeded:\n{stderr}");
        assert!(!stderr.contains("panicked"), "{script}:\n{stderr}");
        assert!(
            stderr.contains("stacks-symbolize: error: stdin: truncated"),
            "{script}:\n{stderr}"
        );
    }
}

/// The tool after the symbolizer must not succeed on the partial stream it was handed: it
/// reports the upstream truncation itself.
#[test]
fn pipelines_report_the_upstream_truncation_downstream() {
    let dir = scratch("robust-pipe-down");
    let cut = dir.join("cut.arrow");
    std::fs::write(&cut, cut_in_last_batch(&raw3())).unwrap();
    for next in next_tools(&dir) {
        let script = format!("cat {} | stacks-symbolize | {next}", cut.display());
        let out = sh(&script);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tool = next.split(' ').next().unwrap();
        assert!(
            stderr.contains(&format!("{tool}: error: stdin: truncated")),
            "{script}: {tool} must report the upstream failure:\n{stderr}"
        );
    }
}

fn query(dir: &Path) -> Output {
    let mut cmd = Command::new(bin("stacks-query"));
    cmd.arg("-d")
        .arg(dir)
        .args(["-c", "SELECT count(*) AS n FROM stacks", "-f", "csv"]);
    run_command(cmd, b"", TIMEOUT)
}

#[test]
fn query_names_a_corrupt_parquet_file() {
    let dir = scratch("robust-query");
    let inp = inputs(&dir);
    let good = inp.parquet.clone();
    let mut body = good.clone();
    for b in body.iter_mut().skip(4).take(good.len() / 2) {
        *b = !*b;
    }
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("text", b"not parquet at all\n".to_vec()),
        ("arrow-stream", inp.symbolized.clone()),
        ("cut-in-half", good[..good.len() / 2].to_vec()),
    ];
    // Alone, and next to a good file.
    let mut problems = Vec::new();
    for (name, bytes) in &cases {
        for with_good in [false, true] {
            let d = dir.join(format!("{name}-{with_good}"));
            std::fs::create_dir_all(&d).unwrap();
            if with_good {
                inp.write_pair(&d, "a-good");
            }
            std::fs::write(d.join("b-bad.parquet"), bytes).unwrap();
            let out = query(&d);
            problems.extend(refusal_problem(
                &out,
                "stacks-query",
                1,
                "b-bad.parquet",
                name,
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // An empty file is an unfinished one: skipped, not an error.
    let d = dir.join("zero-bytes");
    std::fs::create_dir_all(&d).unwrap();
    inp.write_pair(&d, "a-good");
    std::fs::write(d.join("b-empty.parquet"), b"").unwrap();
    let out = query(&d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "n\n60");
    // A body with flipped bytes (footer intact): the error names the file when it is read.
    let d = dir.join("flipped");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("b-bad.parquet"), &body).unwrap();
    let out = query(&d);
    assert_clean(&out, "stacks-query", "flipped body");
    // The good file alone is fine: the refusals above come from the bad one.
    let d = dir.join("good-only");
    std::fs::create_dir_all(&d).unwrap();
    inp.write_pair(&d, "a-good");
    let out = query(&d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "n\n60");
}

#[test]
fn query_refuses_an_absurd_parquet_footer_length() {
    let dir = scratch("robust-footer");
    let inp = inputs(&dir);
    let mut footer = inp.parquet.clone();
    let n = footer.len();
    footer[n - 8..n - 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let d = dir.join("data");
    std::fs::create_dir_all(&d).unwrap();
    // Next to a good file, which is read first for the recording's metadata.
    inp.write_pair(&d, "a-good");
    std::fs::write(d.join("b-bad.parquet"), &footer).unwrap();
    assert_refused(
        &query(&d),
        "stacks-query",
        1,
        "b-bad.parquet",
        "footer length",
    );
}

#[test]
fn pprof_refuses_a_text_value_column() {
    let dir = scratch("robust-pprof-value");
    let symbolized = symbolize(&raw3());
    let pprof = TOOLS.iter().find(|t| t.name == "stacks-pprof").unwrap();
    let out = run(
        pprof,
        &reshape(&symbolized, retyped("value", as_text)),
        &dir,
    );
    assert_refused(&out, "stacks-pprof", 1, "value", "value-text");
}

#[test]
fn pprof_svg_survives_huge_values() {
    let input = fuzz_case("stream_pprof-svg-sum-overflow.arrow");
    let mut cmd = Command::new(bin("stacks-pprof"));
    cmd.args(["-f", "svg", "-o", "/dev/null"]);
    let out = run_command(cmd, &input, TIMEOUT);
    assert_clean(&out, "stacks-pprof", "svg of huge values");
}

/// Every binary of the workspace but the bundled workload.
const EVERY_TOOL: [&str; 6] = [
    "stacks-symbolize",
    "stacks-pack",
    "stacks-pprof",
    "stacks-query",
    "stacks-record",
    "stacks-trace",
];

#[test]
fn usage_errors_exit_2_without_a_panic() {
    for tool in EVERY_TOOL {
        let mut cmd = Command::new(bin(tool));
        cmd.arg("--bogus-flag");
        let out = run_command(cmd, b"", TIMEOUT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{tool}: {stderr}");
        assert!(!stderr.contains("panicked"), "{tool}: {stderr}");
        assert!(stderr.contains("--bogus-flag"), "{tool}: {stderr}");
    }
}

#[test]
fn usage_errors_are_one_line() {
    for tool in EVERY_TOOL {
        let mut cmd = Command::new(bin(tool));
        cmd.arg("--bogus-flag");
        let out = run_command(cmd, b"", TIMEOUT);
        assert_refused(&out, tool, 2, "--bogus-flag", "unknown flag");
    }
}

#[test]
fn pack_refuses_a_duplicate_time_column() {
    let dir = scratch("robust-dup-time");
    let twice = reshape(&raw3(), |mut cols| {
        let n = cols[0].1.len();
        cols.push((
            Field::new("time", DataType::Utf8, false),
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("t{i}")),
            )),
        ));
        cols
    });
    let pack = TOOLS.iter().find(|t| t.name == "stacks-pack").unwrap();
    assert_clean(&run(pack, &twice, &dir), "stacks-pack", "two time columns");
    // The stream_pack fuzzer's own way there.
    let found = fuzz_case("stream_pack-duplicate-time-column.arrow");
    assert_clean(
        &run(pack, &found, &dir),
        "stacks-pack",
        "fuzzed two time columns",
    );
}

#[test]
fn pack_refuses_a_union_column() {
    let dir = scratch("robust-union");
    let raw = raw3();
    let with_union = reshape(&raw, |mut cols| {
        let n = cols[0].1.len();
        let fields =
            UnionFields::try_new(vec![0], vec![Field::new("i", DataType::Int32, true)]).unwrap();
        let union = UnionArray::try_new(
            fields.clone(),
            vec![0i8; n].into(),
            None,
            vec![Arc::new(Int32Array::from(vec![1; n])) as ArrayRef],
        )
        .unwrap();
        cols.push((
            Field::new(
                "u",
                DataType::Union(fields, arrow_schema::UnionMode::Sparse),
                false,
            ),
            Arc::new(union),
        ));
        cols
    });
    let pack = TOOLS.iter().find(|t| t.name == "stacks-pack").unwrap();
    let out = run(pack, &with_union, &dir);
    assert_refused(&out, "stacks-pack", 1, "`u`", "union column");
    // The stream_pack fuzzer's own way there.
    let found = fuzz_case("stream_pack-union-column.arrow");
    assert_clean(
        &run(pack, &found, &dir),
        "stacks-pack",
        "fuzzed union column",
    );
}

#[test]
fn record_command_line_never_panics() {
    for args in [
        vec!["-d", "99999999999999999999999", "-p", "1"],
        vec!["-e", "profile", "-d", "1ms", "aaaaaaaaaaaaaaéé"],
    ] {
        let mut cmd = Command::new(bin("stacks-record"));
        cmd.args(&args);
        let out = run_command(cmd, b"", TIMEOUT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0..=2)),
            "{args:?}: exit {:?}: {stderr}",
            out.status
        );
    }
}
