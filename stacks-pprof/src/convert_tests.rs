//! Unit tests of the conversion: hand-built record batches in, decoded profiles checked.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use stacks_stream::{frame, meta, stack_type, time_type};

use super::*;
use crate::{cumulative_function_totals, decode, leaf_function_totals};

/// A frame as the test writes it.
#[derive(Clone)]
struct F {
    function: Option<&'static str>,
    file: Option<&'static str>,
    line: Option<u32>,
    inlined: bool,
    kernel: bool,
    module: Option<&'static str>,
    build_id: Option<&'static str>,
    offset: Option<u64>,
    addr: u64,
}

fn kernel(function: Option<&'static str>, addr: u64) -> F {
    F {
        function,
        file: None,
        line: None,
        inlined: false,
        kernel: true,
        module: None,
        build_id: None,
        offset: None,
        addr,
    }
}

fn user(
    function: Option<&'static str>,
    line: u32,
    inlined: bool,
    module: &'static str,
    build_id: &'static str,
    offset: u64,
) -> F {
    F {
        function,
        file: function.map(|_| "src/app.c"),
        line: function.map(|_| line),
        inlined,
        kernel: false,
        module: Some(module),
        build_id: Some(build_id),
        offset: Some(offset),
        addr: 0x5555_0000_0000 + offset,
    }
}

const APP: &str = "/usr/bin/app";
const LIB: &str = "/usr/lib/libfoo.so.1";
const KUNRESOLVED: u64 = 0xffff_ffff_81ab_cdef;

/// Leaf first: two kernel frames (one unresolved), `inner` inlined into `outer`, an unresolved
/// library frame, `main`.
fn stack_a() -> Vec<F> {
    vec![
        kernel(Some("do_syscall_64"), 0xffff_ffff_8100_0100),
        kernel(None, KUNRESOLVED),
        user(Some("inner"), 10, true, APP, "abcd", 0x1100),
        user(Some("outer"), 20, false, APP, "abcd", 0x1100),
        user(None, 0, false, LIB, "ef01", 0x2a0),
        user(Some("main"), 5, false, APP, "abcd", 0x1000),
    ]
}

fn stack_b() -> Vec<F> {
    vec![
        user(Some("outer"), 25, false, APP, "abcd", 0x1200),
        user(Some("main"), 5, false, APP, "abcd", 0x1000),
    ]
}

/// The stack column; `renamed` uses a Parquet-style element name and another field order
/// without the `column` and `error` fields, to check fields are found by name.
fn stack_array(rows: &[Option<Vec<F>>], renamed: bool) -> ArrayRef {
    let frames: Vec<&F> = rows.iter().flatten().flatten().collect();
    let strings = |get: fn(&F) -> Option<&'static str>| -> ArrayRef {
        Arc::new(StringArray::from(
            frames.iter().map(|f| get(f)).collect::<Vec<_>>(),
        ))
    };
    let mut columns: Vec<(&str, DataType, ArrayRef)> = vec![
        (frame::FUNCTION, DataType::Utf8, strings(|f| f.function)),
        (frame::FILE, DataType::Utf8, strings(|f| f.file)),
        (
            frame::LINE,
            DataType::UInt32,
            Arc::new(UInt32Array::from(
                frames.iter().map(|f| f.line).collect::<Vec<_>>(),
            )),
        ),
        (
            frame::COLUMN,
            DataType::UInt32,
            Arc::new(UInt32Array::from(vec![None::<u32>; frames.len()])),
        ),
        (
            frame::INLINED,
            DataType::Boolean,
            Arc::new(BooleanArray::from(
                frames.iter().map(|f| f.inlined).collect::<Vec<_>>(),
            )),
        ),
        (
            frame::KERNEL,
            DataType::Boolean,
            Arc::new(BooleanArray::from(
                frames.iter().map(|f| f.kernel).collect::<Vec<_>>(),
            )),
        ),
        (frame::MODULE, DataType::Utf8, strings(|f| f.module)),
        (frame::BUILD_ID, DataType::Utf8, strings(|f| f.build_id)),
        (
            frame::OFFSET,
            DataType::UInt64,
            Arc::new(UInt64Array::from(
                frames.iter().map(|f| f.offset).collect::<Vec<_>>(),
            )),
        ),
        (
            frame::ADDR,
            DataType::UInt64,
            Arc::new(UInt64Array::from(
                frames.iter().map(|f| f.addr).collect::<Vec<_>>(),
            )),
        ),
        (frame::ERROR, DataType::Utf8, strings(|_| None)),
        (
            frame::SYMBOL,
            DataType::Utf8,
            strings(|f| f.function.filter(|n| *n == "outer").map(|_| "_Z5outerv")),
        ),
    ];
    if renamed {
        columns.retain(|(name, _, _)| {
            *name != frame::COLUMN && *name != frame::ERROR && *name != frame::SYMBOL
        });
        columns.reverse();
    }
    let fields: Fields = columns
        .iter()
        .map(|(name, dt, _)| Field::new(*name, dt.clone(), true))
        .collect();
    let structs = StructArray::new(
        fields.clone(),
        columns.into_iter().map(|(_, _, a)| a).collect(),
        None,
    );
    let offsets =
        OffsetBuffer::<i32>::from_lengths(rows.iter().map(|r| r.as_ref().map_or(0, Vec::len)));
    let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    let element = if renamed { "element" } else { "frame" };
    Arc::new(ListArray::new(
        Arc::new(Field::new(element, DataType::Struct(fields), true)),
        offsets,
        Arc::new(structs),
        Some(nulls),
    ))
}

struct Row {
    stack: Option<Vec<F>>,
    pid: i32,
    comm: Option<&'static str>,
    cpu_ns: Option<i64>,
    time: i64,
}

fn schema(stack_dt: DataType) -> Arc<Schema> {
    let metadata: HashMap<String, String> = [
        (meta::EVENTS, "profile:u:99,switch:uk"),
        (meta::START_NS, "1700000000000000000"),
        (meta::HOST, "testbox"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("time", time_type(), false),
            Field::new("pid", DataType::Int32, false),
            Field::new("comm", DataType::Utf8, true),
            Field::new("cpu_ns", DataType::Int64, true),
            Field::new("kstack_error", DataType::Int32, true),
            Field::new("stack", stack_dt, true),
        ],
        metadata,
    ))
}

fn batch(rows: &[Row], renamed: bool) -> RecordBatch {
    let stacks: Vec<Option<Vec<F>>> = rows.iter().map(|r| r.stack.clone()).collect();
    let stack = stack_array(&stacks, renamed);
    let schema = schema(stack.data_type().clone());
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(
                TimestampNanosecondArray::from(rows.iter().map(|r| r.time).collect::<Vec<_>>())
                    .with_timezone("UTC"),
            ),
            Arc::new(Int32Array::from(
                rows.iter().map(|r| r.pid).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.comm).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.cpu_ns).collect::<Vec<_>>(),
            )),
            Arc::new(Int32Array::from(vec![Some(0); rows.len()])),
            stack,
        ],
    )
    .expect("test batch")
}

fn row(stack: Option<Vec<F>>, pid: i32, comm: Option<&'static str>, cpu_ns: Option<i64>) -> Row {
    Row {
        stack,
        pid,
        comm,
        cpu_ns,
        time: 1_700_000_000_000_000_000 + i64::from(pid) * 1000 + cpu_ns.unwrap_or(0),
    }
}

/// Two batches: the first row of stack A, then a duplicate of it (to be summed across
/// batches), the same stack in another pid, stack B with null comm and value, a null stack.
fn batches(renamed: bool) -> Vec<RecordBatch> {
    vec![
        batch(&[row(Some(stack_a()), 1, Some("app"), Some(100))], renamed),
        batch(
            &[
                row(Some(stack_a()), 1, Some("app"), Some(200)),
                row(Some(stack_a()), 2, Some("app"), Some(5)),
                row(Some(stack_b()), 1, None, None),
                row(None, 1, Some("app"), Some(7)),
            ],
            renamed,
        ),
    ]
}

fn profile_of(batches: &[RecordBatch], options: &Options) -> Profile {
    let mut c = Converter::new(&batches[0].schema(), "test", options).expect("converter");
    for b in batches {
        c.push(b).expect("push");
    }
    assert_eq!(
        c.rows(),
        batches.iter().map(|b| b.num_rows() as u64).sum::<u64>()
    );
    // Round trip through the wire format, as a consumer would see it.
    decode(&encode(&c.finish()).expect("encode")).expect("decode")
}

fn s(p: &Profile, idx: i64) -> &str {
    &p.string_table[idx as usize]
}

fn function_name(p: &Profile, id: u64) -> &str {
    let f = p.function.iter().find(|f| f.id == id).expect("function");
    s(p, f.name)
}

fn location(p: &Profile, id: u64) -> &proto::Location {
    p.location.iter().find(|l| l.id == id).expect("location")
}

fn label_str(p: &Profile, sample: &proto::Sample, key: &str) -> Option<String> {
    sample
        .label
        .iter()
        .find(|l| s(p, l.key) == key && l.str != 0)
        .map(|l| s(p, l.str).to_string())
}

fn label_num(p: &Profile, sample: &proto::Sample, key: &str) -> Option<i64> {
    sample
        .label
        .iter()
        .find(|l| s(p, l.key) == key && l.str == 0)
        .map(|l| l.num)
}

fn check_profile(p: &Profile) {
    assert_eq!(p.string_table[0], "");
    let unique: HashSet<&String> = p.string_table.iter().collect();
    assert_eq!(
        unique.len(),
        p.string_table.len(),
        "strings are deduplicated"
    );

    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(p, t.r#type), s(p, t.unit)))
        .collect();
    assert_eq!(
        types,
        [("cpu", "nanoseconds")],
        "kstack_error and pid are no values"
    );
    assert_eq!(s(p, p.default_sample_type), "cpu");

    // A/pid 1, A/pid 2, B, the empty stack.
    assert_eq!(p.sample.len(), 4);
    let a_pid1: Vec<_> = p
        .sample
        .iter()
        .filter(|x| x.location_id.len() == 5 && label_num(p, x, "pid") == Some(1))
        .collect();
    assert_eq!(a_pid1.len(), 1);
    let a = a_pid1[0];
    assert_eq!(a.value, [300], "duplicate rows summed across batches");
    assert_eq!(label_str(p, a, "comm").as_deref(), Some("app"));
    let b = p
        .sample
        .iter()
        .find(|x| x.location_id.len() == 2)
        .expect("stack B");
    assert_eq!(b.value, [0], "null value counts 0");
    assert_eq!(label_str(p, b, "comm"), None, "null comm is no label");
    let empty = p
        .sample
        .iter()
        .find(|x| x.location_id.is_empty())
        .expect("null stack");
    assert_eq!(empty.value, [7]);

    // Stack A, leaf first: kernel, unresolved kernel, inner+outer, unresolved lib, main.
    let locs: Vec<&proto::Location> = a.location_id.iter().map(|id| location(p, *id)).collect();
    let mapping = |l: &proto::Location| {
        p.mapping
            .iter()
            .find(|m| m.id == l.mapping_id)
            .expect("location mapping")
    };
    let names = |l: &proto::Location| -> Vec<&str> {
        l.line
            .iter()
            .map(|x| function_name(p, x.function_id))
            .collect()
    };
    assert_eq!(names(locs[0]), ["do_syscall_64"]);
    assert_eq!(
        locs[0].address, 0xffff_ffff_8100_0100,
        "kernel address is addr"
    );
    assert_eq!(s(p, mapping(locs[0]).filename), "[kernel.kallsyms]");
    assert_eq!(names(locs[1]), ["[kernel 0xffffffff81abcdef]"]);
    assert_eq!(mapping(locs[1]).id, mapping(locs[0]).id);
    assert_eq!(
        names(locs[2]),
        ["inner", "outer"],
        "innermost inlined first"
    );
    let lines: Vec<i64> = locs[2].line.iter().map(|l| l.line).collect();
    assert_eq!(lines, [10, 20]);
    assert_eq!(locs[2].address, 0x1100, "user address is the file offset");
    let app = mapping(locs[2]);
    assert_eq!(s(p, app.filename), APP);
    assert_eq!(s(p, app.build_id), "abcd");
    assert!(
        app.has_functions && app.has_filenames && app.has_line_numbers && app.has_inline_frames
    );
    assert_eq!(names(locs[3]), ["[libfoo.so.1+0x2a0]"]);
    let lib = mapping(locs[3]);
    assert_eq!((s(p, lib.filename), s(p, lib.build_id)), (LIB, "ef01"));
    assert_eq!(names(locs[4]), ["main"]);
    assert_eq!(mapping(locs[4]).id, app.id, "one mapping per module");
    assert_eq!(s(p, p.mapping[0].filename), APP, "main binary first");
    for l in &p.location {
        let m = mapping(l);
        assert!(m.memory_start <= l.address && l.address < m.memory_limit);
    }
    assert_eq!(p.mapping.len(), 3);

    let outer: Vec<_> = p
        .function
        .iter()
        .filter(|f| s(p, f.name) == "outer")
        .collect();
    assert_eq!(outer.len(), 1, "functions deduplicated");
    assert_eq!(s(p, outer[0].filename), "src/app.c");

    let leaf = leaf_function_totals(p, 0);
    assert_eq!(leaf.get("do_syscall_64"), Some(&305));
    assert_eq!(leaf.get("outer"), Some(&0));
    let cum = cumulative_function_totals(p, 0);
    assert_eq!(cum.get("main"), Some(&305));
    assert_eq!(cum.get("inner"), Some(&305));
    assert_eq!(cum.get("[libfoo.so.1+0x2a0]"), Some(&305));
}

#[test]
fn converts_symbolized_batches() {
    let p = profile_of(&batches(false), &Options::default());
    check_profile(&p);
    assert_eq!(system_names(&p, "outer"), ["_Z5outerv"], "the raw symbol");
    assert_eq!(system_names(&p, "main"), ["main"], "no symbol: the name");
    let pt = p.period_type.as_ref().expect("period type");
    assert_eq!((s(&p, pt.r#type), s(&p, pt.unit)), ("cpu", "nanoseconds"));
    assert_eq!(p.period, 1_000_000_000 / 99);
    assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
    // Times: pid*1000 + value: 1100, 1200, 2005, 1000, 1007; the recording started at 0.
    assert_eq!(p.duration_nanos, 2005);
    let comments: Vec<&str> = p.comment.iter().map(|c| s(&p, *c)).collect();
    assert_eq!(comments, ["host=testbox", "events=profile:u:99,switch:uk"]);
}

#[test]
fn fields_found_by_name() {
    let p = profile_of(&batches(true), &Options::default());
    check_profile(&p);
    assert_eq!(
        system_names(&p, "outer"),
        ["outer"],
        "no symbol field: the name"
    );
}

/// The system names of the functions called `name`.
fn system_names<'a>(p: &'a Profile, name: &str) -> Vec<&'a str> {
    p.function
        .iter()
        .filter(|f| s(p, f.name) == name)
        .map(|f| s(p, f.system_name))
        .collect()
}

#[test]
fn no_labels_merges_across_labels() {
    let options = Options {
        no_labels: true,
        ..Options::default()
    };
    let p = profile_of(&batches(false), &options);
    assert_eq!(p.sample.len(), 3);
    assert!(p.sample.iter().all(|x| x.label.is_empty()));
    let a = p
        .sample
        .iter()
        .find(|x| x.location_id.len() == 5)
        .expect("stack A");
    assert_eq!(a.value, [305]);
}

#[test]
fn explicit_values_and_synthetic_count() {
    let options = Options {
        values: vec!["kstack_error".into(), "cpu_ns".into()],
        ..Options::default()
    };
    let p = profile_of(&batches(false), &options);
    let types: Vec<&str> = p.sample_type.iter().map(|t| s(&p, t.r#type)).collect();
    assert_eq!(types, ["kstack_error", "cpu"]);
    assert_eq!(s(&p, p.default_sample_type), "cpu");
    assert!(p.sample.iter().all(|x| x.value.len() == 2));

    // No numeric value column at all: one count per row.
    let b = &batches(false)[1];
    let keep = ["pid", "comm", "stack"].map(|c| b.schema().index_of(c).expect("column"));
    let projected = b.project(&keep).expect("project");
    let p = profile_of(&[projected], &Options::default());
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(&p, t.r#type), s(&p, t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count")]);
    let total: i64 = p.sample.iter().map(|x| x.value[0]).sum();
    assert_eq!(total, 4);
    assert_eq!(p.duration_nanos, 0);
}

#[test]
fn dangling_inlined_frames_get_a_location() {
    // An inlined frame with no containing frame after it, then one at another address.
    let stack = vec![
        user(Some("lonely"), 1, true, APP, "abcd", 0x1300),
        user(Some("main"), 5, false, APP, "abcd", 0x1000),
        user(Some("tail"), 2, true, APP, "abcd", 0x1400),
    ];
    let b = batch(&[row(Some(stack), 1, None, Some(1))], false);
    let p = profile_of(&[b], &Options::default());
    let sample = &p.sample[0];
    let names: Vec<Vec<&str>> = sample
        .location_id
        .iter()
        .map(|id| {
            location(&p, *id)
                .line
                .iter()
                .map(|l| function_name(&p, l.function_id))
                .collect()
        })
        .collect();
    assert_eq!(names, [vec!["lonely"], vec!["main"], vec!["tail"]]);
}

#[test]
fn bad_stack_field_type_is_named() {
    let fields = Fields::from(vec![
        Field::new(frame::FUNCTION, DataType::Utf8, true),
        Field::new(frame::ADDR, DataType::new_list(DataType::Int8, true), true),
    ]);
    let dt = DataType::new_list(DataType::Struct(fields), true);
    let schema = Schema::new(vec![Field::new("stack", dt, true)]);
    let err = Converter::new(&schema, "stdin", &Options::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("stack.addr"), "{err}");
    // The stack_type of the contract is fine.
    Converter::new(
        &Schema::new(vec![Field::new("stack", stack_type(), true)]),
        "stdin",
        &Options::default(),
    )
    .expect("contract stack type");
}

/// `batches` with their `stack` column dictionary-encoded as one stream: each distinct stack
/// an entry once, the dictionary growing from batch to batch.
fn dictionary_encoded(batches: &[RecordBatch]) -> Vec<RecordBatch> {
    use arrow_array::Array;
    use stacks_stream::dict::{StackDictionary, encoded_schema};
    let schema = Arc::new(encoded_schema(&batches[0].schema()));
    let i = schema.index_of("stack").expect("stack");
    let mut dict = StackDictionary::new(batches[0].column(i).data_type());
    let mut seen: Vec<arrow_array::ArrayRef> = Vec::new();
    batches
        .iter()
        .map(|b| {
            let stack = b.column(i);
            let keys: Int32Array = (0..b.num_rows())
                .map(|row| {
                    if stack.is_null(row) {
                        return None;
                    }
                    let one = stack.slice(row, 1);
                    let at = seen.iter().position(|s| s.to_data() == one.to_data());
                    Some(at.unwrap_or_else(|| {
                        dict.extend(one.as_ref()).expect("extend");
                        seen.push(one);
                        seen.len() - 1
                    }) as i32)
                })
                .collect();
            let mut columns = b.columns().to_vec();
            columns[i] = dict.column(keys).expect("dictionary column");
            RecordBatch::try_new(schema.clone(), columns).expect("encoded batch")
        })
        .collect()
}

#[test]
fn dictionary_stacks_convert_once_to_the_same_profile() {
    let plain = batches(false);
    let encoded = dictionary_encoded(&plain);
    assert!(matches!(
        encoded[1]
            .schema()
            .field_with_name("stack")
            .unwrap()
            .data_type(),
        DataType::Dictionary(..)
    ));
    for options in [
        Options::default(),
        Options {
            process_name: true,
            delimiter: true,
            ..Options::default()
        },
    ] {
        let p = profile_of(&encoded, &options);
        assert_eq!(p, profile_of(&plain, &options), "{options:?}");
        assert_eq!(
            crate::folded::folded(&p, 0, true),
            crate::folded::folded(&profile_of(&plain, &options), 0, true)
        );
    }
    check_profile(&profile_of(&encoded, &Options::default()));
    let mut c = Converter::new(&encoded[0].schema(), "test", &Options::default()).unwrap();
    for b in &encoded {
        c.push(b).unwrap();
    }
    assert_eq!(
        c.reader.entries_converted(),
        2,
        "stacks A and B converted once each for five rows"
    );
}
