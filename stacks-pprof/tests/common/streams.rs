//! Fixture streams shared by the integration tests of stacks-pprof and stacks-trace: symbolized
//! stacks streams as bytes, with known stacks and totals.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
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
    let stacks: Vec<Option<Vec<Frame>>> = rows.iter().map(|r| Some(r.stack.clone())).collect();
    stack_list(&stacks)
}

/// A `stack` column of the contract's type; `None` rows are null stacks.
pub fn stack_list(stacks: &[Option<Vec<Frame>>]) -> ArrayRef {
    let frames: Vec<&Frame> = stacks.iter().flatten().flatten().collect();
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
        strings(&|f| f.function),
    ];
    let structs = StructArray::new(frame_fields(), columns, None);
    let DataType::List(element) = stack_type() else {
        unreachable!("the contract's stack type is a list")
    };
    let nulls = NullBuffer::from(stacks.iter().map(Option::is_some).collect::<Vec<_>>());
    Arc::new(ListArray::new(
        element,
        OffsetBuffer::<i32>::from_lengths(stacks.iter().map(|s| s.as_ref().map_or(0, Vec::len))),
        Arc::new(structs),
        Some(nulls),
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
pub const UNRESOLVED: &str = "[libfoo.so.1+0x2a0]";

/// One event row of [`events_stream`]; columns left `None` are null.
#[derive(Clone, Default)]
pub struct Event {
    pub kind: &'static str,
    pub tid: i32,
    pub value: i64,
    pub stack: Option<Vec<Frame>>,
    pub duration: Option<i64>,
    pub count: Option<i64>,
    pub state: Option<&'static str>,
    pub op: Option<&'static str>,
    pub waker: Option<i32>,
    pub rss: Option<i64>,
    pub syscall: Option<&'static str>,
    pub path: Option<&'static str>,
    pub dev: Option<&'static str>,
    pub protocol: Option<&'static str>,
    pub remote: Option<&'static str>,
    pub child: Option<i32>,
    pub exit_code: Option<i32>,
}

pub const MS: i64 = 1_000_000;
pub const START: i64 = 1_700_000_000_000_000_000;

/// A symbolized stream (the stacks-symbolize schema) of `events`, one every ms from
/// [`START`], all in process 10 (`app`); threads `main` (tid 10) and `io` (tid 11); tid 0
/// rows (`lost`) have pid 0 and no names, as the recorder writes them.
pub fn events_stream(events: &[Event]) -> Vec<u8> {
    let metadata: HashMap<String, String> = [
        (
            meta::EVENTS,
            "profile:uk:99,switch:uk:1ms,rss:u:16,block:uk,vfs:u,net:u",
        ),
        (meta::HOST, "testbox"),
        (meta::START_NS, "1700000000000000000"),
        (meta::STAGE, "symbolized"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let schema = Arc::new(stacks_stream::symbolized_schema(metadata));
    let n = events.len();
    let stacks: Vec<Option<Vec<Frame>>> = events.iter().map(|e| e.stack.clone()).collect();
    let ints = |f: &dyn Fn(&Event) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from(events.iter().map(f).collect::<Vec<_>>()))
    };
    let strs = |f: &dyn Fn(&Event) -> Option<&'static str>| -> ArrayRef {
        Arc::new(StringArray::from(events.iter().map(f).collect::<Vec<_>>()))
    };
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "time",
            Arc::new(
                TimestampNanosecondArray::from_iter_values(
                    (0..n as i64).map(|i| START + (i + 1) * MS),
                )
                .with_timezone("UTC"),
            ),
        ),
        ("kind", strs(&|e| Some(e.kind))),
        // tid 0 is a `lost` row: no process, no names.
        (
            "pid",
            Arc::new(Int32Array::from(
                events
                    .iter()
                    .map(|e| if e.tid == 0 { 0 } else { 10 })
                    .collect::<Vec<_>>(),
            )),
        ),
        (
            "tid",
            Arc::new(Int32Array::from(
                events.iter().map(|e| e.tid).collect::<Vec<_>>(),
            )),
        ),
        ("comm", strs(&|e| Some(if e.tid == 0 { "" } else { "app" }))),
        (
            "thread",
            strs(&|e| {
                Some(match e.tid {
                    0 => "",
                    10 => "main",
                    _ => "io",
                })
            }),
        ),
        ("cpu", Arc::new(Int32Array::from(vec![0; n]))),
        ("value", ints(&|e| Some(e.value))),
        ("duration", ints(&|e| e.duration)),
        ("count", ints(&|e| e.count)),
        ("state", strs(&|e| e.state)),
        ("op", strs(&|e| e.op)),
        ("syscall", strs(&|e| e.syscall)),
        ("path", strs(&|e| e.path)),
        ("dev", strs(&|e| e.dev)),
        ("protocol", strs(&|e| e.protocol)),
        ("remote", strs(&|e| e.remote)),
        ("rss", ints(&|e| e.rss)),
        (
            "waker",
            Arc::new(Int32Array::from(
                events.iter().map(|e| e.waker).collect::<Vec<_>>(),
            )),
        ),
        (
            "child",
            Arc::new(Int32Array::from(
                events.iter().map(|e| e.child).collect::<Vec<_>>(),
            )),
        ),
        (
            "exit_code",
            Arc::new(Int32Array::from(
                events.iter().map(|e| e.exit_code).collect::<Vec<_>>(),
            )),
        ),
        ("stack", stack_list(&stacks)),
    ];
    let batch = stacks_stream::batch_by_name(schema.clone(), n, columns).expect("batch");
    let mut buf = Vec::new();
    let mut writer = StreamWriter::try_new(&mut buf, &schema).expect("stream writer");
    // Two batches, to aggregate across them.
    let half = n / 2;
    writer.write(&batch.slice(0, half)).expect("write");
    writer.write(&batch.slice(half, n - half)).expect("write");
    writer.finish().expect("finish");
    drop(writer);
    buf
}

/// Every kind of event, with known totals:
///
/// * profile: 3 × `do_syscall_64` ← `inner` (inlined in `outer`) ← `main`, 1 × `busy` ← `main`,
///   10 ms each (tid 10)
/// * switch: `schedule` ← `wait` ← `main` off CPU 4 ms and 3 ms (sleeping, tid 11), and a
///   folded row of 4 short intervals totalling 0.4 ms (runnable, no stack)
/// * rss: 2 rows of `alloc` ← `main`, 40960 bytes over 10 events each
/// * block: `submit_bio` ← `flush` ← `main`, 8192 bytes, 2 ms (tid 11)
/// * vfs: `read_file` ← `main`, 100 bytes, 1 ms; net: `send_msg` ← `main`, 1500 bytes
/// * exec, fork, exit without stacks; a `lost` row of 2
pub fn every_kind() -> Vec<Event> {
    let s1 = || {
        vec![
            kernel("do_syscall_64", 0xffff_ffff_8100_0100),
            app("inner", 10, true, 0x1100),
            app("outer", 20, false, 0x1100),
            app("main", 5, false, 0x1000),
        ]
    };
    let at = |f, off| vec![app(f, 40, false, off), app("main", 8, false, 0x1030)];
    let ev = |kind, tid, value| Event {
        kind,
        tid,
        value,
        ..Event::default()
    };
    let profile = |stack| Event {
        stack: Some(stack),
        ..ev("profile", 10, 10 * MS)
    };
    let switch = |ms: i64| Event {
        stack: Some(vec![
            kernel("schedule", 0xffff_ffff_8100_0200),
            app("wait", 50, false, 0x1300),
            app("main", 9, false, 0x1040),
        ]),
        duration: Some(ms * MS),
        state: Some("sleeping"),
        waker: Some(10),
        ..ev("switch", 11, ms * MS)
    };
    let rss = Event {
        stack: Some(at("alloc", 0x1400)),
        count: Some(10),
        op: Some("anon"),
        rss: Some(1 << 20),
        ..ev("rss", 10, 40960)
    };
    vec![
        Event {
            path: Some("/usr/bin/app"),
            ..ev("exec", 10, 1)
        },
        profile(s1()),
        switch(4),
        profile(s1()),
        rss.clone(),
        Event {
            stack: Some(vec![
                kernel("submit_bio", 0xffff_ffff_8100_0300),
                app("flush", 60, false, 0x1500),
                app("main", 10, false, 0x1050),
            ]),
            duration: Some(2 * MS),
            op: Some("write"),
            dev: Some("8:0"),
            ..ev("block", 11, 8192)
        },
        profile(vec![
            app("busy", 30, false, 0x1200),
            app("main", 6, false, 0x1010),
        ]),
        switch(3),
        Event {
            count: Some(4),
            state: Some("runnable"),
            ..ev("switch", 11, 400_000)
        },
        ev("lost", 0, 2),
        Event {
            stack: Some(at("read_file", 0x1600)),
            duration: Some(MS),
            op: Some("read"),
            syscall: Some("pread64"),
            path: Some("/etc/hosts"),
            ..ev("vfs", 11, 100)
        },
        profile(s1()),
        rss,
        Event {
            stack: Some(at("send_msg", 0x1700)),
            op: Some("send"),
            protocol: Some("tcp"),
            remote: Some("127.0.0.1:8080"),
            ..ev("net", 10, 1500)
        },
        Event {
            child: Some(12),
            ..ev("fork", 10, 1)
        },
        Event {
            exit_code: Some(0),
            ..ev("exit", 10, 1)
        },
    ]
}
