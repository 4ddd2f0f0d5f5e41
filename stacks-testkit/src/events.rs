//! The fixture streams of the converters' tests (stacks-pprof, stacks-trace and the end-to-end
//! rendering tests): symbolized stacks streams with known stacks and totals.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use stacks_stream::{meta, stack_type, time_type};

use crate::files::stream_bytes;
use crate::rows::{Encoder, Frame, Keys, Row, batch, stack_array};

pub const APP: &str = "/usr/bin/app";
pub(crate) const APP_BUILD_ID: &str = "0123456789abcdef";
pub const LIB: &str = "/usr/lib/libfoo.so.1";
pub const MS: i64 = 1_000_000;
pub const START: i64 = 1_700_000_000_000_000_000;
/// Name of the unresolved libfoo frame of [`fixture`].
pub const UNRESOLVED: &str = "[libfoo.so.1+0x2a0]";

/// A resolved kernel frame.
pub fn kernel(function: &str, addr: u64) -> Frame {
    Frame {
        function: Some(function.into()),
        line: Some(0),
        kernel: true,
        addr,
        symbol: Some(function.into()),
        ..Frame::default()
    }
}

/// A resolved frame of [`APP`] at `offset`, in `src/app.c`.
pub fn app(function: &str, line: u32, inlined: bool, offset: u64) -> Frame {
    Frame {
        function: Some(function.into()),
        file: Some("src/app.c".into()),
        line: Some(line),
        inlined,
        module: Some(APP.into()),
        build_id: Some(APP_BUILD_ID.into()),
        offset: Some(offset),
        addr: 0x5555_5555_0000 + offset,
        symbol: Some(function.into()),
        ..Frame::default()
    }
}

/// A frame of [`LIB`] at `offset` that has no symbol.
pub(crate) fn unresolved_lib(offset: u64) -> Frame {
    Frame {
        module: Some(LIB.into()),
        build_id: Some("feedface".into()),
        offset: Some(offset),
        addr: 0x7f00_0000_0000 + offset,
        error: Some("no symbol".into()),
        reason: Some(stacks_stream::Unresolved::NoSymbol.as_str().into()),
        ..Frame::default()
    }
}

fn metadata(entries: &[(&str, &str)]) -> HashMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// An Arrow IPC stream of `batches` (each a list of rows) with columns time (1 ms apart),
/// pid, comm, cpu_ns (the rows' `value`), stack and the recording metadata.
pub fn stream(batches: &[Vec<Row>]) -> Vec<u8> {
    let schema = Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("time", time_type(), false),
            Field::new("pid", DataType::Int32, false),
            Field::new("comm", DataType::Utf8, false),
            Field::new("cpu_ns", DataType::Int64, false),
            Field::new("stack", stack_type(), true),
        ],
        metadata(&[
            (meta::EVENTS, "profile:u:100"),
            (meta::HOST, "testbox"),
            (meta::START_NS, "1700000000000000000"),
        ]),
    ));
    let contract = Arc::new(Schema::new(vec![
        Field::new("time", time_type(), false),
        Field::new("pid", DataType::Int32, false),
        Field::new("comm", DataType::Utf8, false),
        Field::new("value", DataType::Int64, false),
    ]));
    let mut t = START;
    let batches: Vec<RecordBatch> = batches
        .iter()
        .map(|rows| {
            let rows: Vec<Row> = rows
                .iter()
                .map(|r| {
                    t += MS;
                    Row {
                        time: t,
                        ..r.clone()
                    }
                })
                .collect();
            let mut columns = batch(&contract, &rows).columns().to_vec();
            columns.push(stack_array(
                &rows.iter().map(|r| r.stack.as_deref()).collect::<Vec<_>>(),
            ));
            RecordBatch::try_new(schema.clone(), columns).expect("batch")
        })
        .collect();
    stream_bytes(&schema, &batches, true)
}

/// A stream of one `Int64` column `n` and no stack.
pub fn stream_without_stack() -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
    let column: ArrayRef = Arc::new(Int64Array::from(vec![1, 2, 3]));
    let b = RecordBatch::try_new(schema.clone(), vec![column]).expect("batch");
    stream_bytes(&schema, &[b], true)
}

/// `do_syscall_64` (kernel) ← `inner` inlined in `outer` ← `main`.
fn syscall_stack() -> Vec<Frame> {
    vec![
        kernel("do_syscall_64", 0xffff_ffff_8100_0100),
        app("inner", 10, true, 0x1100),
        app("outer", 20, false, 0x1100),
        app("main", 5, false, 0x1000),
    ]
}

/// The fixture of [`stream`]: three stacks over three batches, 10 ms of CPU per row.
///
/// * `do_syscall_64` (kernel) ← `inner` inlined in `outer` ← `main`: 3 rows, pid 1
/// * `busy` ← `main`: 2 rows, pid 2
/// * an unresolved frame in libfoo ← `main`: 1 row, pid 1
/// * an empty stack (nothing could be unwound): 1 row, pid 3
pub fn fixture() -> Vec<Vec<Row>> {
    let s1 = syscall_stack;
    let s2 = || {
        vec![
            app("busy", 30, false, 0x1200),
            app("main", 6, false, 0x1010),
        ]
    };
    let s3 = || vec![unresolved_lib(0x2a0), app("main", 7, false, 0x1020)];
    let row = |stack, pid, comm: &str| Row {
        stack: Some(stack),
        pid,
        comm: comm.into(),
        value: 10_000_000,
        ..Row::default()
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

/// An event of [`every_kind`]: `kind`, thread and value; other columns null.
pub fn event(kind: &str, tid: i32, value: i64) -> Row {
    Row {
        kind: kind.into(),
        tid,
        value,
        ..Row::default()
    }
}

/// A symbolized stream (the stacks-symbolize schema) of `events`, one every ms from
/// [`START`], all in process 10 (`app`); threads `main` (tid 10) and `io` (tid 11); tid 0
/// rows (`lost`) have pid 0 and no names, as the recorder writes them. The events' own time,
/// pid, comm, thread and cpu are replaced so.
pub fn events_stream(events: &[Row]) -> Vec<u8> {
    events_stream_as(events, false)
}

/// [`events_stream`] with its stack columns dictionary-encoded (schema version 2), each
/// distinct stack once in the stream.
pub fn events_stream_encoded(events: &[Row]) -> Vec<u8> {
    events_stream_as(events, true)
}

fn events_stream_as(events: &[Row], encoded: bool) -> Vec<u8> {
    let schema = Arc::new(stacks_stream::symbolized_schema(metadata(&[
        (
            meta::EVENTS,
            "profile:uk:99,switch:uk:1ms,rss:u:16,block:uk,vfs:u,net:u",
        ),
        (meta::HOST, "testbox"),
        (meta::START_NS, "1700000000000000000"),
        (meta::STAGE, "symbolized"),
    ])));
    let rows: Vec<Row> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // tid 0 is a `lost` row: no process, no names.
            let named = |s: &str| if e.tid == 0 { "" } else { s }.to_string();
            Row {
                time: START + (i as i64 + 1) * MS,
                pid: if e.tid == 0 { 0 } else { 10 },
                comm: named("app"),
                thread: named(if e.tid == 10 { "main" } else { "io" }),
                cpu: 0,
                ..e.clone()
            }
        })
        .collect();
    // Two batches, to aggregate across them.
    let (n, half) = (rows.len(), rows.len() / 2);
    if encoded {
        let mut e = Encoder::new(&schema, Keys::PerColumn);
        let batches = [e.batch(&rows[..half]), e.batch(&rows[half..])];
        return stream_bytes(&e.schema(), &batches, true);
    }
    let b = batch(&schema, &rows);
    stream_bytes(&schema, &[b.slice(0, half), b.slice(half, n - half)], true)
}

/// One-batch streams of the first batch of [`events_stream_encoded`] of [`every_kind`], each
/// with one broken or odd dictionary (see [`crate::rows::broken_dictionaries`]), named.
pub fn broken_dictionary_streams() -> Vec<(String, Vec<u8>)> {
    let bytes = events_stream_encoded(&every_kind());
    let input = stacks_stream::InputStream::new("fixture", Box::new(std::io::Cursor::new(bytes)))
        .expect("fixture stream");
    let schema = input.schema();
    let first = input
        .into_iter()
        .next()
        .expect("a batch")
        .expect("fixture batch");
    crate::rows::broken_dictionaries(&first)
        .into_iter()
        .map(|(what, b)| (what, stream_bytes(&schema, &[b], true)))
        .collect()
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
/// * probe: 3 hits of `uprobe:/usr/bin/app:parse` in `parse` ← `main` (a counting row)
/// * exec, fork, exit without stacks; a `lost` row of 2
pub fn every_kind() -> Vec<Row> {
    let s1 = syscall_stack;
    let at = |f, off| vec![app(f, 40, false, off), app("main", 8, false, 0x1030)];
    let text = |s: &str| Some(s.to_string());
    let profile = |stack| Row {
        stack: Some(stack),
        ..event("profile", 10, 10 * MS)
    };
    let switch = |ms: i64| Row {
        stack: Some(vec![
            kernel("schedule", 0xffff_ffff_8100_0200),
            app("wait", 50, false, 0x1300),
            app("main", 9, false, 0x1040),
        ]),
        duration: Some(ms * MS),
        state: text("sleeping"),
        waker: Some(10),
        ..event("switch", 11, ms * MS)
    };
    let rss = Row {
        stack: Some(at("alloc", 0x1400)),
        count: Some(10),
        op: text("anon"),
        rss: Some(1 << 20),
        ..event("rss", 10, 40960)
    };
    vec![
        Row {
            path: text("/usr/bin/app"),
            ..event("exec", 10, 1)
        },
        profile(s1()),
        switch(4),
        profile(s1()),
        rss.clone(),
        Row {
            stack: Some(vec![
                kernel("submit_bio", 0xffff_ffff_8100_0300),
                app("flush", 60, false, 0x1500),
                app("main", 10, false, 0x1050),
            ]),
            duration: Some(2 * MS),
            op: text("write"),
            dev: text("8:0"),
            ..event("block", 11, 8192)
        },
        profile(vec![
            app("busy", 30, false, 0x1200),
            app("main", 6, false, 0x1010),
        ]),
        switch(3),
        Row {
            count: Some(4),
            state: text("runnable"),
            ..event("switch", 11, 400_000)
        },
        event("lost", 0, 2),
        Row {
            stack: Some(at("read_file", 0x1600)),
            duration: Some(MS),
            op: text("read"),
            syscall: text("pread64"),
            path: text("/etc/hosts"),
            ..event("vfs", 11, 100)
        },
        profile(s1()),
        rss,
        Row {
            stack: Some(at("send_msg", 0x1700)),
            op: text("send"),
            protocol: text("tcp"),
            remote: text("127.0.0.1:8080"),
            ..event("net", 10, 1500)
        },
        Row {
            child: Some(12),
            ..event("fork", 10, 1)
        },
        Row {
            stack: Some(at("parse", 0x1800)),
            count: Some(3),
            probe: text("uprobe:/usr/bin/app:parse"),
            ..event("probe", 10, 3)
        },
        Row {
            exit_code: Some(0),
            ..event("exit", 10, 1)
        },
    ]
}
