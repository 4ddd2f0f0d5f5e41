//! Test helpers shared by the integration tests: build symbolized stacks streams as bytes and
//! run the `stacks-pprof` binary on them.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{DataType, Field, Schema};
use stacks_stream::{frame_fields, meta, stack_type, time_type};

/// A symbolized frame.
#[derive(Clone, Debug)]
pub struct Frame {
    pub function: Option<&'static str>,
    pub line: u32,
    pub inlined: bool,
    pub kernel: bool,
    pub module: Option<&'static str>,
    pub build_id: Option<&'static str>,
    pub offset: Option<u64>,
    pub addr: u64,
}

pub const APP: &str = "/usr/bin/app";
pub const APP_BUILD_ID: &str = "0123456789abcdef";
pub const LIB: &str = "/usr/lib/libfoo.so.1";

pub fn kernel(function: &'static str, addr: u64) -> Frame {
    Frame {
        function: Some(function),
        line: 0,
        inlined: false,
        kernel: true,
        module: None,
        build_id: None,
        offset: None,
        addr,
    }
}

pub fn app(function: &'static str, line: u32, inlined: bool, offset: u64) -> Frame {
    Frame {
        function: Some(function),
        line,
        inlined,
        kernel: false,
        module: Some(APP),
        build_id: Some(APP_BUILD_ID),
        offset: Some(offset),
        addr: 0x5555_5555_0000 + offset,
    }
}

pub fn unresolved_lib(offset: u64) -> Frame {
    Frame {
        function: None,
        line: 0,
        inlined: false,
        kernel: false,
        module: Some(LIB),
        build_id: Some("feedface"),
        offset: Some(offset),
        addr: 0x7f00_0000_0000 + offset,
    }
}

/// One row: its stack (leaf first), pid, comm and `cpu_ns` value.
pub struct Row {
    pub stack: Vec<Frame>,
    pub pid: i32,
    pub comm: &'static str,
    pub cpu_ns: i64,
}

fn stack_column(rows: &[Row]) -> ArrayRef {
    let frames: Vec<&Frame> = rows.iter().flat_map(|r| r.stack.iter()).collect();
    let strings = |get: &dyn Fn(&Frame) -> Option<&'static str>| -> ArrayRef {
        Arc::new(StringArray::from(
            frames.iter().map(|f| get(f)).collect::<Vec<_>>(),
        ))
    };
    let columns: Vec<ArrayRef> = vec![
        strings(&|f| f.function),
        strings(&|f| f.function.filter(|_| !f.kernel).map(|_| "src/app.c")),
        Arc::new(UInt32Array::from(
            frames
                .iter()
                .map(|f| f.function.map(|_| f.line))
                .collect::<Vec<_>>(),
        )),
        Arc::new(UInt32Array::from(vec![None::<u32>; frames.len()])),
        Arc::new(BooleanArray::from(
            frames.iter().map(|f| f.inlined).collect::<Vec<_>>(),
        )),
        Arc::new(BooleanArray::from(
            frames.iter().map(|f| f.kernel).collect::<Vec<_>>(),
        )),
        strings(&|f| f.module),
        strings(&|f| f.build_id),
        Arc::new(UInt64Array::from(
            frames.iter().map(|f| f.offset).collect::<Vec<_>>(),
        )),
        Arc::new(UInt64Array::from(
            frames.iter().map(|f| f.addr).collect::<Vec<_>>(),
        )),
        strings(&|f| f.function.is_none().then_some("no symbol")),
    ];
    let structs = StructArray::new(frame_fields(), columns, None);
    let DataType::List(element) = stack_type() else {
        unreachable!("the contract's stack type is a list")
    };
    Arc::new(ListArray::new(
        element,
        OffsetBuffer::<i32>::from_lengths(rows.iter().map(|r| r.stack.len())),
        Arc::new(structs),
        None,
    ))
}

/// An Arrow IPC stream of `batches` (each a list of rows) with columns time, pid, comm,
/// cpu_ns, stack and the recording metadata.
pub fn stream(batches: &[Vec<Row>]) -> Vec<u8> {
    let metadata: HashMap<String, String> = [
        (meta::EVENTS, "profile:u:100"),
        (meta::HOST, "testbox"),
        (meta::START_NS, "1700000000000000000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let schema = Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("time", time_type(), false),
            Field::new("pid", DataType::Int32, false),
            Field::new("comm", DataType::Utf8, false),
            Field::new("cpu_ns", DataType::Int64, false),
            Field::new("stack", stack_type(), true),
        ],
        metadata,
    ));
    let mut buf = Vec::new();
    let mut writer = StreamWriter::try_new(&mut buf, &schema).expect("stream writer");
    let mut t = 1_700_000_000_000_000_000i64;
    for rows in batches {
        let times: Vec<i64> = rows
            .iter()
            .map(|_| {
                t += 1_000_000;
                t
            })
            .collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(TimestampNanosecondArray::from(times).with_timezone("UTC")),
                Arc::new(Int32Array::from(
                    rows.iter().map(|r| r.pid).collect::<Vec<_>>(),
                )),
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.comm).collect::<Vec<_>>(),
                )),
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.cpu_ns).collect::<Vec<_>>(),
                )),
                stack_column(rows),
            ],
        )
        .expect("batch");
        writer.write(&batch).expect("write batch");
    }
    writer.finish().expect("finish stream");
    drop(writer);
    buf
}

/// A stream of one `Int64` column `n` and no stack.
pub fn stream_without_stack() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    )
    .expect("batch");
    let mut buf = Vec::new();
    let mut writer = StreamWriter::try_new(&mut buf, &schema).expect("stream writer");
    writer.write(&batch).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    buf
}

/// Run `stacks-pprof args…` with `stdin` piped in.
pub fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stacks-pprof"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stacks-pprof");
    let mut input = child.stdin.take().expect("stdin");
    // The tool may exit before reading everything (bad input); that is not a test failure.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("wait for stacks-pprof")
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stacks-pprof-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The fixture every test converts: three stacks over two batches, 10 ms of CPU per row.
///
/// * `do_syscall_64` (kernel) ← `inner` inlined in `outer` ← `main`: 3 rows, pid 1
/// * `busy` ← `main`: 2 rows, pid 2
/// * an unresolved frame in libfoo ← `main`: 1 row, pid 1
/// * an empty stack (nothing could be unwound): 1 row, pid 3
pub fn fixture() -> Vec<Vec<Row>> {
    let s1 = || {
        vec![
            kernel("do_syscall_64", 0xffff_ffff_8100_0100),
            app("inner", 10, true, 0x1100),
            app("outer", 20, false, 0x1100),
            app("main", 5, false, 0x1000),
        ]
    };
    let s2 = || {
        vec![
            app("busy", 30, false, 0x1200),
            app("main", 6, false, 0x1010),
        ]
    };
    let s3 = || vec![unresolved_lib(0x2a0), app("main", 7, false, 0x1020)];
    let row = |stack, pid, comm| Row {
        stack,
        pid,
        comm,
        cpu_ns: 10_000_000,
    };
    vec![
        vec![
            row(s1(), 1, "app"),
            row(s1(), 1, "app"),
            row(s2(), 2, "worker"),
        ],
        vec![
            row(s1(), 1, "app"),
            row(s2(), 2, "worker"),
            row(s3(), 1, "app"),
        ],
        vec![row(Vec::new(), 3, "idle")],
    ]
}

/// Name of the unresolved libfoo frame of [`fixture`].
pub const UNRESOLVED: &str = "libfoo.so.1+0x2a0";
