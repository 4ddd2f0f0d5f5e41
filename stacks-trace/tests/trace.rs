//! The `stacks-trace` binary on a stream of every event kind: the JSON is a valid Trace Event
//! document with the expected tracks, slices and totals, equal to `tests/golden/*.json`
//! (`STACKS_BLESS=1 cargo test -p stacks-trace --test trace` rewrites them); bad input gives
//! one-line errors, a closed pipe is quiet success.

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use stacks_testkit::events::{
    MS, event, events_stream, events_stream_encoded, every_kind, fixture, kernel, stream,
    stream_without_stack,
};
use stacks_testkit::trace_check::check;
use stacks_trace::{IO_LANE, STATE_LANE};

const BIN: &str = env!("CARGO_BIN_EXE_stacks-trace");

fn trace(args: &[&str], stdin: &[u8]) -> Output {
    stacks_testkit::run_tool(BIN, args, stdin, Duration::from_secs(120))
}

fn json(args: &[&str]) -> (String, Value) {
    let o = trace(args, &events_stream(&every_kind()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).expect("utf-8");
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    (text, v)
}

fn golden(name: &str, actual: &str) {
    let dir = stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    stacks_testkit::golden::check_text(&dir, name, actual);
}

fn events<'a>(v: &'a Value, name: &str) -> Vec<&'a Value> {
    v["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["name"] == name)
        .collect()
}

/// `state` rows, one a ms (each standing for 1 ms) of tid 11: three in `read` on a pipe, two
/// running, one in `futex`; then tid 10 once, sleeping.
#[test]
fn thread_states_are_runs_on_a_state_lane() {
    let sample = |tid: i32, state: &str, syscall: Option<&str>| stacks_testkit::rows::Row {
        state: Some(state.into()),
        syscall: syscall.map(Into::into),
        path: syscall.filter(|s| *s == "read").map(|_| "pipe:[7]".into()),
        duration: syscall.map(|_| MS),
        stack: syscall.map(|s| vec![kernel(s, 0xffff_ffff_8100_0100)]),
        ..event("state", tid, MS)
    };
    let rows = vec![
        sample(11, "sleeping", Some("read")),
        sample(11, "sleeping", Some("read")),
        sample(11, "sleeping", Some("read")),
        sample(11, "running", None),
        sample(11, "running", None),
        sample(11, "sleeping", Some("futex")),
        sample(10, "sleeping", Some("clock_nanosleep")),
    ];
    let o = trace(&[], &events_stream(&rows));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    assert_eq!(s.tracks[&(10, 11 + STATE_LANE)], "io state");
    assert_eq!(s.tracks[&(10, 10 + STATE_LANE)], "main state");
    let slices: Vec<(String, i64, f64, f64, i64)> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "state")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["tid"].as_i64().unwrap() - STATE_LANE,
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                e["args"]["samples"].as_i64().unwrap(),
            )
        })
        .collect();
    let want = |n: &str, tid, ts, dur, samples| (n.to_string(), tid, ts, dur, samples);
    assert_eq!(
        slices,
        [
            want("sleeping: read", 11, 1000.0, 3000.0, 3),
            want("running", 11, 4000.0, 2000.0, 2),
            // Runs still open at the end, by tid.
            want("sleeping: clock_nanosleep", 10, 7000.0, 1000.0, 1),
            want("sleeping: futex", 11, 6000.0, 1000.0, 1),
        ]
    );
    let read = events(&v, "sleeping: read");
    assert_eq!(read[0]["args"]["path"], "pipe:[7]");
    assert_eq!(read[0]["args"]["longest_in_syscall_ns"], MS);
    assert_eq!(read[0]["args"]["stack"], serde_json::json!(["read"]));
    assert!(read[0]["sf"].is_string(), "{}", read[0]);
}

#[test]
fn every_kind_on_its_track() {
    let (text, v) = json(&[]);
    let s = check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    // Tracks named from comm and thread; the IO lane of tid 11.
    assert_eq!(s.tracks[&(10, 0)], "app");
    assert_eq!(s.tracks[&(10, 10)], "main");
    assert_eq!(s.tracks[&(10, 11)], "io");
    assert_eq!(s.tracks[&(10, 11 + IO_LANE)], "io io");
    // Off-CPU: 4 ms + 3 ms slices with state and stack; the folded row as an instant.
    assert_eq!(s.durations_ns["off-CPU (sleeping)"], 7 * MS);
    let off = events(&v, "off-CPU (sleeping)");
    assert_eq!(off[0]["ts"].as_f64(), Some(3000.0), "µs since the start");
    assert_eq!(off[0]["args"]["state"], "sleeping");
    assert_eq!(off[0]["args"]["waker"], 10);
    assert_eq!(
        off[0]["args"]["stack"],
        serde_json::json!(["schedule", "wait", "main"])
    );
    let short = events(&v, "folded short off-CPU intervals");
    assert_eq!(short[0]["args"]["count"], 4);
    assert_eq!(short[0]["args"]["total_ns"], 400_000);
    // On-CPU between the two switch rows: back at 7 ms, out again at 8 ms. Back at 11 ms
    // after the second, the thread has no later row: no slice after it.
    assert_eq!(s.durations_ns["on-CPU"], MS);
    let on = events(&v, "on-CPU");
    assert_eq!(
        (on[0]["ts"].as_f64(), on[0]["tid"].as_i64()),
        (Some(7000.0), Some(11))
    );
    // CPU samples with stacks from the frame table, root → leaf through parents.
    let samples = events(&v, "cpu sample");
    assert_eq!(samples.len(), 4);
    let frames = &v["stackFrames"];
    let mut chain = Vec::new();
    let mut at = samples[0]["sf"].as_str().expect("sf").to_string();
    loop {
        let f = &frames[&at];
        chain.push(f["name"].as_str().expect("name").to_string());
        match f["parent"].as_str() {
            Some(p) => at = p.to_string(),
            None => break,
        }
    }
    assert_eq!(chain, ["do_syscall_64", "inner", "outer", "main"]);
    assert_eq!(
        frames[&samples[0]["sf"].as_str().unwrap()]["category"],
        "kernel"
    );
    // IO: the vfs call on the IO lane, block as an async slice, net as an instant.
    let vfs = events(&v, "pread64");
    assert_eq!(vfs[0]["tid"], 11 + IO_LANE);
    assert_eq!(vfs[0]["dur"].as_f64(), Some(1000.0));
    assert_eq!(vfs[0]["args"]["bytes"], 100);
    assert_eq!(vfs[0]["args"]["path"], "/etc/hosts");
    let block = events(&v, "block write");
    assert_eq!(block.len(), 2);
    assert_eq!(
        (&block[0]["ph"], &block[1]["ph"]),
        (&"b".into(), &"e".into())
    );
    assert_eq!(block[0]["args"]["bytes"], 8192);
    let net = events(&v, "tcp send");
    assert_eq!(net[0]["args"]["remote"], "127.0.0.1:8080");
    // RSS counter and process events.
    let rss = events(&v, "rss");
    assert_eq!(rss.len(), 2);
    assert_eq!(rss[0]["args"]["rss_bytes"], 1 << 20);
    assert_eq!(events(&v, "exec")[0]["args"]["path"], "/usr/bin/app");
    assert_eq!(events(&v, "fork")[0]["args"]["child"], 12);
    assert_eq!(events(&v, "exit")[0]["args"]["exit_code"], 0);
    assert_eq!(events(&v, "lost events")[0]["args"]["count"], 2);
    assert_eq!(v["otherData"]["host"], "testbox");
    golden("every-kind.json", &text);
}

#[test]
fn window_keeps_overlapping_events() {
    // 4.5 ms .. 6 ms after the start: the first off-CPU slice (3..7 ms) reaches in, the
    // profile row at 4 ms does not, the rss row at 5 ms and the block request at 6 ms do.
    let (text, v) = json(&["--from", "+4.5ms", "--to", "2023-11-14T22:13:20.006Z"]);
    let s = check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    assert_eq!(s.durations_ns["off-CPU (sleeping)"], 4 * MS);
    assert!(!s.names.contains_key("cpu sample"), "{text}");
    assert_eq!(s.names["rss"], 1);
    assert_eq!(s.names["block write"], 2);
    assert!(!s.names.contains_key("exec"));
    golden("window.json", &text);
}

fn assert_error(o: &Output, needle: &str) {
    stacks_testkit::assert_one_line_error(o, "stacks-trace", 1, needle);
}

#[test]
fn bad_input_and_flags() {
    assert_error(&trace(&[], b"not arrow"), "not an Arrow IPC stream");
    assert_error(&trace(&[], b""), "empty input");
    assert_error(
        &trace(&[], &stream_without_stack()),
        "stdin: missing column `time`",
    );
    // pprof's fixture has time, pid and a stack but no tid or kind.
    assert_error(&trace(&[], &stream(&fixture())), "missing column `tid`");
    assert_error(
        &trace(&["--from", "yesterday"], &events_stream(&every_kind())),
        "--from `yesterday`",
    );
    // A stream that breaks off: what was read is written (the output streams), then the
    // error, and the JSON stays incomplete so no reader mistakes it for a whole trace.
    let full = events_stream(&every_kind());
    let o = trace(&[], &full[..full.len() * 3 / 4]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("truncated"), "{stderr}");
    assert!(serde_json::from_slice::<Value>(&o.stdout).is_err());
}

#[test]
fn closed_stdout_is_quiet_success() {
    let (o, _) = stacks_testkit::run_with_closed_stdout(BIN, &[], &events_stream(&every_kind()));
    assert!(o.status.success(), "{:?}", o.status);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A query result: some columns only, other types (Int64 pid, Utf8View kind), no stacks.
#[test]
fn query_results_read_the_same() {
    use std::sync::Arc;

    use arrow_array::RecordBatch;
    use arrow_schema::{DataType, Field, Schema};

    let full = events_stream(&every_kind());
    let input = stacks_stream::InputStream::new("fixture", Box::new(std::io::Cursor::new(full)))
        .expect("read fixture");
    let schema = input.schema();
    let batches: Vec<RecordBatch> = input.collect::<Result<_, _>>().expect("batches");
    let cols = [
        "time", "kind", "pid", "tid", "thread", "value", "duration", "state",
    ];
    let to = |name: &str| match name {
        "pid" => DataType::Int64,
        "kind" => DataType::Utf8View,
        other => schema
            .field_with_name(other)
            .expect("column")
            .data_type()
            .clone(),
    };
    let fields: Vec<Field> = cols.iter().map(|c| Field::new(*c, to(c), true)).collect();
    let out_schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let out: Vec<RecordBatch> = batches
        .iter()
        .map(|b| {
            let arrays = cols
                .iter()
                .map(|c| {
                    arrow_cast::cast(b.column_by_name(c).expect("column"), &to(c)).expect("cast")
                })
                .collect();
            RecordBatch::try_new(out_schema.clone(), arrays).expect("batch")
        })
        .collect();
    let buf = stacks_testkit::stream_bytes(&out_schema, &out, true);
    let o = trace(&[], &buf);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let s = check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    assert_eq!(s.durations_ns["off-CPU (sleeping)"], 7 * MS);
    assert_eq!(s.durations_ns["on-CPU"], MS);
    assert_eq!(s.frames, 0, "no stack column, no frames");
    assert_eq!(s.tracks[&(10, 11)], "io");
    assert!(
        !s.tracks.contains_key(&(10, 0)),
        "no comm column, no process name"
    );
}

/// Absurd numbers (a duration of i64::MAX, negative ones) make odd slices, never a panic.
#[test]
fn absurd_values_do_not_panic() {
    let mut events = every_kind();
    for e in events
        .iter_mut()
        .filter(|e| e.kind == "switch" || e.kind == "vfs")
    {
        e.duration = Some(if e.kind == "vfs" { -5 } else { i64::MAX });
        e.value = i64::MIN;
    }
    let o = trace(
        &["--from", "+0ns", "--to", "+1000000h"],
        &events_stream(&events),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(v["traceEvents"].as_array().is_some_and(|a| !a.is_empty()));
}

#[test]
fn dictionary_stacks_give_the_same_trace() {
    let plain = trace(&[], &events_stream(&every_kind()));
    let encoded = trace(&[], &events_stream_encoded(&every_kind()));
    assert!(
        encoded.status.success(),
        "{}",
        String::from_utf8_lossy(&encoded.stderr)
    );
    assert!(plain.status.success());
    assert_eq!(
        String::from_utf8_lossy(&encoded.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "a dictionary-encoded stack column converts to the same trace"
    );
    let v: Value = serde_json::from_slice(&encoded.stdout).expect("json");
    assert!(
        !v["stackFrames"]
            .as_object()
            .expect("stackFrames")
            .is_empty(),
        "stacks were converted"
    );
}

#[test]
fn broken_dictionaries_are_refused_or_read_as_no_stack() {
    let streams = stacks_testkit::events::broken_dictionary_streams();
    assert!(streams.len() >= 3, "{}", streams.len());
    for (what, bytes) in streams {
        let o = trace(&[], &bytes);
        if what.ends_with("null entry") {
            assert!(
                o.status.success(),
                "{what}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let v: Value = serde_json::from_slice(&o.stdout).expect("json");
            check(&v).unwrap_or_else(|e| panic!("{what}: invalid trace:\n{}", e.join("\n")));
        } else {
            // The trace header may already be out: the error is the stream's first batch.
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{what}: {stderr}");
            let lines: Vec<&str> = stderr.lines().collect();
            assert!(
                lines.len() == 1
                    && lines[0].starts_with("stacks-trace: error: ")
                    && lines[0].contains("invalid Arrow stream"),
                "{what}: {stderr}"
            );
        }
    }
}

/// A `vfs` row the kernel summed (`count` > 1) is an instant naming the calls, with their
/// total time, not a slice as long as their summed time.
#[test]
fn summed_io_rows_are_instants_with_their_calls() {
    let mut events = every_kind();
    let vfs = events
        .iter_mut()
        .find(|e| e.kind == "vfs")
        .expect("a vfs row");
    vfs.count = Some(500);
    vfs.duration = Some(40 * MS);
    let o = trace(&[], &events_stream(&events));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    let summed = self::events(&v, "pread64 ×500");
    assert_eq!(summed.len(), 1, "{v}");
    assert_eq!(summed[0]["ph"], "i");
    assert_eq!(summed[0]["args"]["calls"], 500);
    assert_eq!(summed[0]["args"]["total_ns"], 40 * MS);
    assert!(self::events(&v, "pread64").is_empty());
}

/// `alloc` rows: a sampled allocation is an instant `alloc` with its stack, address (hex), size
/// and weight; the free of its block an instant `free` with the address and size, no stack; a
/// free without a size (OpenTelemetry's otel_memory:free) has none in its args.
#[test]
fn alloc_rows_are_alloc_and_free_instants_with_address_and_size() {
    let row = |op: &str, args: Vec<i64>, value: i64| stacks_testkit::rows::Row {
        op: Some(op.into()),
        args: Some(args),
        count: Some(1),
        stack: (op == "alloc")
            .then(|| vec![stacks_testkit::events::app("site_leak", 12, false, 0x1000)]),
        ..event("alloc", 10, value)
    };
    let rows = vec![
        row("alloc", vec![0x7f00_0000_1000, 4096], 65_536),
        row("free", vec![0x7f00_0000_1000, 4096], 0),
        row("free", vec![0x7f00_0000_2000, 0], 0),
    ];
    let o = trace(&[], &events_stream(&rows));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    let alloc = events(&v, "alloc");
    assert_eq!(alloc.len(), 1, "{v}");
    assert_eq!(
        (&alloc[0]["ph"], &alloc[0]["cat"]),
        (&"i".into(), &"alloc".into())
    );
    assert_eq!(alloc[0]["args"]["address"], "0x7f0000001000");
    assert_eq!(alloc[0]["args"]["size"], 4096);
    assert_eq!(alloc[0]["args"]["weight"], 65_536);
    let leaf = alloc[0]["sf"].as_str().expect("the allocation's stack");
    assert_eq!(v["stackFrames"][leaf]["name"], "site_leak");
    let free = events(&v, "free");
    assert_eq!(free.len(), 2, "{v}");
    assert_eq!(free[0]["args"]["address"], "0x7f0000001000");
    assert_eq!(free[0]["args"]["size"], 4096);
    assert!(free[0]["sf"].is_null() && free[0]["args"]["weight"].is_null());
    assert_eq!(free[1]["args"]["address"], "0x7f0000002000");
    assert!(free[1]["args"]["size"].is_null(), "{}", free[1]);
    assert!(events(&v, "probe").is_empty(), "no generic probe instants");
}

/// A `wake` row is an instant `wakeup` on the waker's track naming the woken thread, not an
/// off-CPU slice of the waker (its `duration` is the woken thread's wait).
#[test]
fn wake_rows_are_wakeup_instants() {
    let rows = vec![
        stacks_testkit::rows::Row {
            duration: Some(3 * MS),
            wakee: Some(11),
            stack: Some(vec![kernel("try_to_wake_up", 0xffff_ffff_8100_0400)]),
            ..event("wake", 10, 3 * MS)
        },
        event("profile", 10, 10 * MS),
    ];
    let o = trace(&[], &events_stream(&rows));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = check(&v).unwrap_or_else(|e| panic!("invalid trace:\n{}", e.join("\n")));
    assert!(
        !s.durations_ns.keys().any(|k| k.starts_with("off-CPU")),
        "{v}"
    );
    assert!(!s.durations_ns.contains_key("on-CPU"), "{v}");
    let w = events(&v, "wakeup");
    assert_eq!(w.len(), 1);
    assert_eq!(
        (&w[0]["tid"], &w[0]["args"]["wakee"]),
        (&10.into(), &11.into())
    );
    assert_eq!(w[0]["args"]["waited_ns"], 3 * MS);
}
