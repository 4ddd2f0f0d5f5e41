//! `stacks-trace -f perfetto` on fixture streams, decoded by Perfetto's own Python bindings
//! (PyPI `perfetto`, installed by scripts/setup) through `perfetto_check.py`, which checks the
//! interning, tracks, slices and flows the way trace_processor reads them: every kind on its
//! track with the rows' counts, durations, bytes and stacks; wakeups as flows between the two
//! threads; hosts apart; bad input refused before any file is made, a broken stream leaving
//! none.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use stacks_testkit::events::{
    MS, app, event, events_stream, events_stream_encoded, every_kind, fixture, kernel, stream,
    stream_without_stack,
};
use stacks_testkit::rows::Row;

const BIN: &str = env!("CARGO_BIN_EXE_stacks-trace");

fn trace(args: &[&str], stdin: &[u8]) -> Output {
    stacks_testkit::run_tool(BIN, args, stdin, Duration::from_secs(120))
}

/// The checker script beside this file.
fn checker() -> PathBuf {
    stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("tests/perfetto_check.py")
}

/// Decode `path` with the `perfetto` package; the checker's summary (its errors must be none).
pub fn decode(path: &Path, stacks: bool) -> Value {
    let mut cmd = Command::new("python3");
    cmd.arg(checker()).arg(path);
    if stacks {
        cmd.arg("--stacks");
    }
    let o = cmd
        .output()
        .expect("run python3 (scripts/setup installs the perfetto package)");
    assert!(
        o.status.success(),
        "perfetto_check.py failed (is PyPI `perfetto` installed? scripts/setup):\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("checker JSON");
    assert_eq!(v["errors"], serde_json::json!([]), "{}", v["errors"]);
    v
}

/// Convert `stream` to a Perfetto trace in a scratch file; the decoded summary and the file's
/// size.
fn perfetto(name: &str, args: &[&str], stream: &[u8]) -> (Value, u64) {
    let dir = stacks_testkit::scratch(name);
    let out = dir.join("trace.pftrace");
    let mut all = vec!["-f", "perfetto", "-o", out.to_str().unwrap()];
    all.extend(args);
    let o = trace(&all, stream);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let size = std::fs::metadata(&out).expect("trace written").len();
    (decode(&out, true), size)
}

#[test]
fn every_kind_on_its_track() {
    let (v, size) = perfetto("perfetto-every-kind", &[], &events_stream(&every_kind()));
    assert_eq!(v["first_flags"], 1, "the first packet clears the sequence");
    assert_eq!(v["processes"]["10"]["name"], "app");
    assert_eq!(
        v["processes"]["10"]["labels"],
        serde_json::json!(["host=testbox"])
    );
    assert_eq!(v["threads"]["10"]["name"], "main");
    assert_eq!(v["threads"]["11"]["name"], "io");
    assert_eq!(v["threads"]["11"]["pid"], 10);
    let io = &v["per_thread"]["11"];
    // Off-CPU: the 4 ms and 3 ms slices with their switch-out stack (root first); the folded
    // row an instant; on-CPU between the two (7 ms .. 8 ms), none after the last.
    assert_eq!(
        io["slices"]["off-CPU (sleeping)"],
        serde_json::json!([2, 7 * MS])
    );
    assert_eq!(io["slices"]["on-CPU"], serde_json::json!([1, MS]));
    assert_eq!(
        io["offcpu_stacks"],
        serde_json::json!([["main", "wait", "schedule"], ["main", "wait", "schedule"]])
    );
    assert_eq!(io["instants"]["folded short off-CPU intervals"], 1);
    // IO on the thread's lanes, with bytes.
    assert_eq!(
        io["lanes"]["block"]["block write"],
        serde_json::json!([1, 2 * MS, 8192])
    );
    assert_eq!(
        io["lanes"]["io"]["pread64"],
        serde_json::json!([1, MS, 100])
    );
    let main = &v["per_thread"]["10"];
    assert_eq!(
        main["instants"]["tcp send"], 1,
        "net without a duration: an instant"
    );
    assert_eq!(
        main["lanes"]["io"]["tcp send"],
        serde_json::json!([1, 0, 1500])
    );
    assert_eq!(main["instants"]["exec"], 1);
    assert_eq!(main["instants"]["fork"], 1);
    assert_eq!(main["instants"]["exit"], 1);
    // The probe's 3 hits weigh its stack.
    assert_eq!(main["weights"]["uprobe:/usr/bin/app:parse"], 3.0);
    // CPU samples as perf samples with their stacks; rss a counter; the lost events as data
    // loss and an instant.
    assert_eq!(v["perf_samples"]["10"], 4);
    assert_eq!(v["perf_samples_with_stack"]["10"], 4);
    assert_eq!(v["counters"]["rss"], 2);
    assert_eq!(v["lost"], 2);
    assert_eq!(v["lost_instants"], 2);
    // Frames interned once with their kind: the distinct (function, place) pairs.
    assert!(
        v["frame_kinds"]["KIND_KERNEL"].as_u64() >= Some(3),
        "{}",
        v["frame_kinds"]
    );
    assert!(
        v["frame_kinds"]["KIND_NATIVE"].as_u64() >= Some(8),
        "{}",
        v["frame_kinds"]
    );
    // A dictionary-encoded stream gives the same trace.
    let (encoded, encoded_size) = perfetto(
        "perfetto-every-kind-encoded",
        &[],
        &events_stream_encoded(&every_kind()),
    );
    assert_eq!(encoded["per_thread"], v["per_thread"]);
    assert_eq!(encoded_size, size);
    // Smaller than the JSON even here, where nothing repeats.
    let json = trace(&[], &events_stream(&every_kind()));
    assert!(
        size < json.stdout.len() as u64,
        "{size} vs {}",
        json.stdout.len()
    );
}

/// `wake` rows: main (10) wakes io (11) out of its 4 ms sleep, [timer] (tid 0) a thread never
/// otherwise seen (12).
#[test]
fn wakeups_are_flows_from_the_waker_to_the_woken() {
    let switch = Row {
        stack: Some(vec![kernel("schedule", 0xffff_ffff_8100_0200)]),
        duration: Some(4 * MS),
        state: Some("sleeping".into()),
        waker: Some(10),
        ..event("switch", 11, 4 * MS)
    };
    let wake = |tid: i32, wakee: i32| Row {
        stack: Some(vec![kernel("try_to_wake_up", 0xffff_ffff_8100_0400)]),
        duration: Some(3 * MS),
        wakee: Some(wakee),
        ..event("wake", tid, 3 * MS)
    };
    let rows = vec![switch, wake(10, 11), wake(10, 12)];
    let (v, _) = perfetto("perfetto-wake", &[], &events_stream(&rows));
    assert_eq!(v["flows"], serde_json::json!([[10, 11], [10, 12]]));
    assert_eq!(v["per_thread"]["10"]["instants"]["wakeup"], 2);
    assert_eq!(v["per_thread"]["11"]["instants"]["woken"], 1);
    assert_eq!(v["per_thread"]["12"]["instants"]["woken"], 1);
    // A wake row is no off-CPU slice of its waker.
    assert_eq!(v["per_thread"]["10"]["slices"], serde_json::json!({}));
}

/// `state` rows: a task-state event each, and runs on the thread's state lane.
#[test]
fn thread_states_are_task_state_events_and_runs() {
    let sample = |tid: i32, state: &str, syscall: Option<&str>| Row {
        state: Some(state.into()),
        syscall: syscall.map(Into::into),
        stack: syscall.map(|s| vec![kernel(s, 0xffff_ffff_8100_0100)]),
        ..event("state", tid, MS)
    };
    let rows = vec![
        sample(11, "sleeping", Some("read")),
        sample(11, "sleeping", Some("read")),
        sample(11, "running", None),
        sample(11, "uninterruptible", Some("fsync")),
        sample(10, "runnable", None),
    ];
    let (v, _) = perfetto("perfetto-states", &[], &events_stream(&rows));
    assert_eq!(v["states"], serde_json::json!({"11": 4, "10": 1}));
    assert_eq!(
        v["state_names"],
        serde_json::json!({
            "TASK_STATE_INTERRUPTIBLE_SLEEP": 2,
            "TASK_STATE_RUNNING": 1,
            "TASK_STATE_UNINTERRUPTIBLE_SLEEP": 1,
            "TASK_STATE_RUNNABLE": 1,
        })
    );
    let lane = &v["per_thread"]["11"]["lanes"]["state"];
    assert_eq!(lane["sleeping: read"], serde_json::json!([1, 2 * MS, 0]));
    assert_eq!(lane["running"], serde_json::json!([1, MS, 0]));
    assert_eq!(
        lane["uninterruptible: fsync"],
        serde_json::json!([1, MS, 0])
    );
}

/// Rows of two hosts with the same pids and tids: two processes, the second host's ids
/// offset by 2^22.
#[test]
fn hosts_are_separate_processes() {
    let on = |host: &str, kind: &str| Row {
        host: Some(host.into()),
        stack: Some(vec![app("busy", 30, false, 0x1200)]),
        ..event(kind, 10, 10 * MS)
    };
    let rows = vec![on("a", "profile"), on("b", "profile"), on("b", "profile")];
    let (v, _) = perfetto("perfetto-hosts", &[], &events_stream(&rows));
    let second = (10 + (1 << 22)).to_string();
    assert_eq!(
        v["processes"]["10"]["labels"],
        serde_json::json!(["host=a"])
    );
    assert_eq!(
        v["processes"][&second]["labels"],
        serde_json::json!(["host=b"])
    );
    assert_eq!(v["perf_samples"]["10"], 1);
    assert_eq!(v["perf_samples"][&second], 2);
}

#[test]
fn window_keeps_overlapping_events() {
    // 4.5 ms .. 6 ms after the start: the first off-CPU slice (3..7 ms) reaches in, the
    // profile row at 4 ms does not, the rss row at 5 ms and the block request at 6 ms do.
    let (v, _) = perfetto(
        "perfetto-window",
        &["--from", "+4.5ms", "--to", "2023-11-14T22:13:20.006Z"],
        &events_stream(&every_kind()),
    );
    let io = &v["per_thread"]["11"];
    assert_eq!(
        io["slices"]["off-CPU (sleeping)"],
        serde_json::json!([1, 4 * MS])
    );
    assert_eq!(v["perf_samples"], serde_json::json!({}));
    assert_eq!(v["counters"]["rss"], 1);
    assert_eq!(io["lanes"]["block"]["block write"][0], 1);
}

fn assert_error(o: &Output, needle: &str) {
    stacks_testkit::assert_one_line_error(o, "stacks-trace", 1, needle);
}

#[test]
fn bad_input_leaves_no_file() {
    let dir = stacks_testkit::scratch("perfetto-bad");
    let out = dir.join("t.pftrace");
    let args = ["-f", "perfetto", "-o", out.to_str().unwrap()];
    assert_error(
        &trace(&args, &stream_without_stack()),
        "stdin: missing column `time`",
    );
    assert_error(&trace(&args, &stream(&fixture())), "missing column `tid`");
    assert!(!out.exists());
    // A stream that breaks off: an error, and neither the file nor its partial copy.
    let full = events_stream(&every_kind());
    let o = trace(&args, &full[..full.len() * 3 / 4]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("truncated"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // A file that was there stays as it was.
    std::fs::write(&out, b"old").unwrap();
    let o = trace(&args, &full[..full.len() * 3 / 4]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
}

/// `-o /dev/null` is written in place (not aside and renamed over the device); a symbolic
/// link's target is replaced, the link kept.
#[test]
fn devices_in_place_links_followed() {
    use std::os::unix::fs::FileTypeExt;
    let o = trace(
        &["-f", "perfetto", "-o", "/dev/null"],
        &events_stream(&every_kind()),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = std::fs::metadata("/dev/null").unwrap();
    assert!(m.file_type().is_char_device());
    assert!(!Path::new("/dev/.null.partial").exists());
    let dir = stacks_testkit::scratch("perfetto-link");
    let (file, link) = (dir.join("real.pftrace"), dir.join("link.pftrace"));
    std::fs::write(&file, b"old").unwrap();
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let o = trace(
        &["-f", "perfetto", "-o", link.to_str().unwrap()],
        &events_stream(&every_kind()),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    decode(&file, false);
}
