//! `uring` against ground truth: a program of ours submits io_uring requests of known outcome
//! (tests/fixtures/uring/requests.c: timeouts of 2 ms, a read of a closed descriptor, a write
//! linked to an fsync, a receive armed before its data and a send over loopback TCP), and fio's
//! io_uring engine reads a file of known size by 4 KiB direct random reads at depth 8 three
//! ways (inline, through io-wq workers with `--force_async=1`, from an SQPOLL thread with
//! `--sqthread_poll=1`): the rows are the requests, with the outcome the program saw, fio's
//! count of reads and bytes, and the submitter's user stack; the io-wq workers' disk reads
//! carry the submitter and its stack.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use stacks_tests::{
    ScratchDir, bpf_available, bpf_serial, check, read_stream, scratch, sh, unreported_switches,
};

/// One `uring` row, with its stack's functions (symbolized; empty when it has none).
#[derive(Debug)]
struct Request {
    tid: i32,
    thread: String,
    op: String,
    value: i64,
    duration: i64,
    /// Requests the row stands for (more than 1: requests shorter than MIN, folded).
    count: i64,
    fd: Option<i32>,
    path: Option<String>,
    errno: Option<i32>,
    mode: String,
    /// `block` rows: the io_uring submitter an io-wq worker issued the request for.
    submitter: Option<i32>,
    functions: Vec<String>,
    user_frames: usize,
}

fn text(b: &RecordBatch, col: &str, i: usize) -> Option<String> {
    let c = b
        .column_by_name(col)
        .unwrap_or_else(|| panic!("no column {col}"));
    let c = arrow_cast::cast(c, &arrow_schema::DataType::Utf8).expect("a text column");
    let c = c.as_string::<i32>();
    c.is_valid(i).then(|| c.value(i).to_string())
}

fn int(b: &RecordBatch, col: &str, i: usize) -> Option<i64> {
    let c = b
        .column_by_name(col)
        .unwrap_or_else(|| panic!("no column {col}"));
    let c = arrow_cast::cast(c, &arrow_schema::DataType::Int64).expect("an integer column");
    let c = c.as_primitive::<Int64Type>();
    c.is_valid(i).then(|| c.value(i))
}

/// The `uring` rows of symbolized stream `path`.
fn requests(path: &Path) -> Vec<Request> {
    rows_of(path, "uring")
}

/// The rows of kind `kind` of symbolized stream `path`.
fn rows_of(path: &Path, kind: &str) -> Vec<Request> {
    let batches = read_stream(path);
    let stacks = stacks_tests::stack_functions(&batches);
    let mut out = Vec::new();
    let mut row = 0;
    for b in &batches {
        for i in 0..b.num_rows() {
            let stack = &stacks[row];
            row += 1;
            if text(b, "kind", i).as_deref() != Some(kind) {
                continue;
            }
            out.push(Request {
                tid: b
                    .column_by_name("tid")
                    .unwrap()
                    .as_primitive::<Int32Type>()
                    .value(i),
                thread: text(b, "thread", i).unwrap_or_default(),
                op: text(b, "op", i).unwrap_or_default(),
                value: int(b, "value", i).unwrap_or(-1),
                duration: int(b, "duration", i).unwrap_or(-1),
                count: int(b, "count", i).unwrap_or(1),
                fd: int(b, "fd", i).map(|v| v as i32),
                path: text(b, "path", i),
                errno: int(b, "errno", i).map(|v| v as i32),
                mode: text(b, "mode", i).unwrap_or_default(),
                submitter: int(b, "submitter", i).map(|v| v as i32),
                functions: stack.iter().filter_map(|(f, _)| f.clone()).collect(),
                user_frames: stack.iter().filter(|(_, kernel)| !kernel).count(),
            });
        }
    }
    out
}

/// Record `command` with `-e EVENTS` through stacks-symbolize into `dir/NAME.arrow` (and, with
/// `store`, packed into `dir/NAME`); returns the file and the recorder's summary, which must
/// say nothing was lost.
fn record(dir: &Path, name: &str, events: &str, command: &str, store: bool) -> (PathBuf, String) {
    let out = dir.join(format!("{name}.arrow"));
    let pack = if store {
        format!(
            " | tee {} | stacks-pack {}",
            out.display(),
            dir.join(format!("{name}-store")).display()
        )
    } else {
        format!(" > {}", out.display())
    };
    let rec = sh(&format!(
        "stacks-record -e {events} -- {command} | stacks-symbolize{pack}"
    ));
    check(&rec, &format!("record {name}"));
    let summary = String::from_utf8_lossy(&rec.stderr).into_owned();
    // Block completions the kernel reported to no program are counted, not lost silently
    // (`completion_unseen:block`, tests/resources.rs): they are the only loss allowed.
    let unseen = summary
        .split(&format!(
            "{} ",
            stacks_stream::lost::COMPLETION_UNSEEN_BLOCK
        ))
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or("0");
    assert!(
        summary.contains(&format!("lost {unseen} events")),
        "{name}: lost events: {summary}"
    );
    (out, summary)
}

/// Skip (visibly) without BPF; otherwise hold the BPF test lock.
fn bpf_guard(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    bpf_available(test).then(bpf_serial)
}

/// The value at quantile `q` of `v` (sorted here).
fn quantile(v: &mut [i64], q: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// tests/fixtures/uring/requests.c built with frame pointers into `dir`.
fn build_requests(dir: &ScratchDir) -> PathBuf {
    let src = stacks_tests::crate_dir().join("fixtures/uring/requests.c");
    let exe = dir.join("requests");
    let out = sh(&format!(
        "${{CC:-cc}} -O1 -g -fno-omit-frame-pointer -o {} {} -luring",
        exe.display(),
        src.display()
    ));
    check(&out, "building requests.c (liburing-dev: scripts/setup)");
    exe
}

/// Each request of the program is one row with the op, bytes and errno its completion gave
/// the program, the file or socket, how it ran, its time to completion (the timeouts: 2 ms)
/// and the stack of the function that submitted it.
#[test]
fn requests_are_rows_as_the_program_saw_them() {
    let Some(_serial) = bpf_guard("requests_are_rows_as_the_program_saw_them") else {
        return;
    };
    let dir = scratch("uring-requests");
    let exe = build_requests(&dir);
    let (out, summary) = record(
        &dir,
        "requests",
        "uring",
        &format!("{} {}", exe.display(), dir.display()),
        true,
    );
    let rows = requests(&out);
    // What the program saw: `op res` per completion.
    let seen: Vec<(String, i64)> = std::fs::read_to_string(dir.join("report.txt"))
        .expect("the program's report")
        .lines()
        .map(|l| {
            let (op, res) = l.split_once(' ').expect("op res");
            (op.to_string(), res.parse().expect("res"))
        })
        .collect();
    assert_eq!(seen.len(), 25, "{seen:?}");
    let mut want: Vec<(String, i64, Option<i32>)> = seen
        .iter()
        .map(|(op, res)| {
            let bytes = ["read", "write", "send", "recv"].contains(&op.as_str());
            let value = if bytes && *res > 0 { *res } else { 0 };
            (op.clone(), value, (*res < 0).then_some(-*res as i32))
        })
        .collect();
    let mut have: Vec<(String, i64, Option<i32>)> = rows
        .iter()
        .map(|r| (r.op.clone(), r.value, r.errno))
        .collect();
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "rows (op, value, errno) against the program's; {summary}"
    );
    let case = |r: &Request, f: &str| r.functions.iter().any(|g| g == f);
    let one = |op: &str| {
        rows.iter()
            .find(|r| r.op == op)
            .unwrap_or_else(|| panic!("no {op} row: {rows:?}"))
    };
    // Timeouts of 2 ms (ETIME): no file. A row's time (submission to the completion posted)
    // is at least the timer's and at most what the program measured around it (before its
    // submission to after it reaped the completion; a timer's completion is posted by the
    // waiting thread once it runs again, so on a busy machine both are longer than 2 ms).
    let mut timeouts: Vec<i64> = rows
        .iter()
        .filter(|r| r.op == "timeout")
        .map(|r| r.duration)
        .collect();
    for r in rows.iter().filter(|r| r.op == "timeout") {
        assert_eq!(
            (r.errno, r.fd, r.path.as_deref()),
            (Some(62), None, None),
            "{r:?}"
        );
        assert!(case(r, "case_timeouts"), "{r:?}");
    }
    let mut measured: Vec<i64> = std::fs::read_to_string(dir.join("timeouts.txt"))
        .expect("the program's timeouts")
        .lines()
        .map(|l| l.parse().expect("ns"))
        .collect();
    timeouts.sort_unstable();
    measured.sort_unstable();
    assert_eq!(timeouts.len(), measured.len());
    assert!(
        timeouts
            .iter()
            .zip(&measured)
            .all(|(ours, theirs)| (2_000_000..=*theirs).contains(ours)),
        "timeouts recorded {timeouts:?}, measured by the program {measured:?}"
    );
    // The read of a closed descriptor: EBADF, the descriptor, no file.
    let read = one("read");
    assert_eq!(
        (read.errno, read.path.as_deref()),
        (Some(9), None),
        "{read:?}"
    );
    assert!(read.fd.is_some_and(|fd| fd >= 3), "{read:?}");
    assert!(case(read, "case_closed_fd"), "{read:?}");
    // The write and its linked fsync: the file written.
    let written = dir.join("written.dat").display().to_string();
    for op in ["write", "fsync"] {
        let r = one(op);
        assert_eq!(r.path.as_deref(), Some(written.as_str()), "{r:?}");
        assert!(case(r, "case_write_fsync"), "{r:?}");
    }
    // A receive submitted before its data is armed for poll; the send ran inline; sockets.
    let (recv, send) = (one("recv"), one("send"));
    assert_eq!((recv.mode.as_str(), recv.value), ("poll", 1000), "{recv:?}");
    assert_eq!(
        (send.mode.as_str(), send.value),
        ("inline", 1000),
        "{send:?}"
    );
    for r in [recv, send] {
        assert!(
            r.path.as_deref().is_some_and(|p| p.starts_with("socket:[")),
            "{r:?}"
        );
        assert!(case(r, "case_socket"), "{r:?}");
    }
    // Every row is the submitting thread's, with its user stack.
    let main = rows[0].tid;
    assert!(
        rows.iter().all(|r| r.tid == main && r.user_frames > 0),
        "{rows:?}"
    );

    // The bundled queries over the packed recording say the same.
    let store = dir.join("requests-store");
    let query = |name: &str| -> Vec<serde_json::Value> {
        let q = sh(&format!(
            "stacks-query -d {} {name} -f ndjson",
            store.display()
        ));
        check(&q, name);
        String::from_utf8_lossy(&q.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("an ndjson row"))
            .collect()
    };
    let n = |v: &serde_json::Value, c: &str| v[c].as_i64().unwrap_or(-1);
    let latency = query("uring-latency");
    let t = latency
        .iter()
        .find(|v| v["op"] == "timeout")
        .expect("a timeout row");
    assert_eq!(
        (n(t, "requests"), n(t, "errors"), n(t, "bytes")),
        (20, 20, 0),
        "{t}"
    );
    assert!(
        (2_000_000..=quantile(&mut measured, 0.5)).contains(&n(t, "p50_ns"))
            && n(t, "p50_ns") <= n(t, "p90_ns")
            && n(t, "p90_ns") <= n(t, "p99_ns")
            && n(t, "p99_ns") <= n(t, "max_ns")
            && n(t, "max_ns") == *timeouts.iter().max().unwrap(),
        "{t} against {timeouts:?} (the program measured {measured:?})"
    );
    let by_stack = query("uring");
    let total = |c: &str| by_stack.iter().map(|v| n(v, c)).sum::<i64>();
    assert_eq!(
        (total("requests"), total("errors"), total("bytes")),
        (25, 21, 65536 + 2 * 1000),
        "{by_stack:?}"
    );
    let w = by_stack
        .iter()
        .find(|v| v["op"] == "write")
        .expect("a write row");
    assert_eq!(
        (w["path"].as_str(), n(w, "bytes")),
        (Some(written.as_str()), 65536),
        "{w}"
    );
    assert!(w["stack"].to_string().contains("case_write_fsync"), "{w}");
}

/// fio's io_uring engine: 4 KiB direct random reads at depth 8 of a 64 MiB file, inline,
/// through io-wq workers and from an SQPOLL thread. The reads are fio's count and bytes
/// (±0.5%), every one with its mode; inline and async ones carry fio's user stack (≥ 99%),
/// SQPOLL ones are the `iou-sqp` thread's without one; their time to completion is no more
/// than fio's total latency and no less than the disk's (see below).
#[test]
fn fio_reads_are_rows_three_ways() {
    let Some(_serial) = bpf_guard("fio_reads_are_rows_three_ways") else {
        return;
    };
    let dir = scratch("uring-fio");
    let file = dir.join("data.bin");
    check(
        &sh(&format!(
            "fio --name=prepare --filename={} --size=64M --rw=write --bs=1M --direct=1 \
             --output=/dev/null",
            file.display()
        )),
        "fio: prepare the file",
    );
    for (mode, option) in [
        ("inline", ""),
        ("async", "--force_async=1"),
        ("sqpoll", "--sqthread_poll=1"),
    ] {
        let json = dir.join(format!("fio-{mode}.json"));
        // The disk's reads too, the lower bound of each request's time (below); in the async
        // run with the submitter's stack (the io-wq workers' block IO, tests below).
        let events = match mode {
            "async" => "uring,block:uk",
            "inline" => "uring,block",
            _ => "uring",
        };
        let (out, summary) = record(
            &dir,
            mode,
            events,
            &format!(
                "fio --name=r --filename={} --size=64M --ioengine=io_uring {option} \
                 --direct=1 --rw=randread --bs=4k --iodepth=8 --number_ios=8000 \
                 --lat_percentiles=1 --output-format=json --output={}",
                file.display(),
                json.display()
            ),
            false,
        );
        let fio: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("fio's report"))
                .expect("fio's JSON");
        let read = &fio["jobs"][0]["read"];
        let (ios, bytes) = (
            read["total_ios"].as_i64().unwrap(),
            read["io_bytes"].as_i64().unwrap(),
        );
        let percentile = |of: &str, p: &str| {
            read[of]["percentile"][p]
                .as_i64()
                .unwrap_or_else(|| panic!("{of} {p}"))
        };
        let rows: Vec<Request> = requests(&out)
            .into_iter()
            .filter(|r| r.op == "read")
            .collect();
        let case = format!("{mode}: fio {ios} reads, {bytes} bytes; {summary}");
        // Every read fio made is a row: none is lost, and a row is a request fio submitted
        // while recorded (fio's reads all are: the recorder holds the command until it is
        // attached). The tolerance is for a difference none of these runs showed.
        let n = rows.len() as i64;
        let sum: i64 = rows.iter().map(|r| r.value).sum();
        assert!(
            (n - ios).abs() as f64 <= 0.005 * ios as f64,
            "{n} rows, {case}"
        );
        assert!(
            (sum - bytes).abs() as f64 <= 0.005 * bytes as f64,
            "{sum} bytes, {case}"
        );
        let path = file.display().to_string();
        assert!(
            rows.iter()
                .all(|r| r.mode == mode && r.path.as_deref() == Some(path.as_str())),
            "not all {mode} reads of {path}: {:?}",
            rows.iter()
                .find(|r| r.mode != mode || r.path.as_deref() != Some(&path))
        );
        if mode == "sqpoll" {
            // Submitted by the ring's SQPOLL thread: its rows, no user stack.
            assert!(
                rows.iter()
                    .all(|r| r.thread.starts_with("iou-sqp") && r.user_frames == 0),
                "{case}"
            );
            // fio's own completion latency is not comparable here: its SQPOLL thread spins on
            // one of two CPUs the reaping thread shares (fio reported a median clat of
            // seconds in these runs).
            continue;
        }
        let stacked = rows.iter().filter(|r| r.user_frames > 0).count();
        assert!(
            stacked as f64 >= 0.99 * n as f64,
            "{stacked} of {n} reads with a user stack, {case}"
        );
        assert!(rows.iter().all(|r| r.thread == "fio"), "{case}");
        if mode == "async" {
            // The disk reads the io-wq workers issued for fio's requests carry fio's submitting
            // thread and its user stack (after the worker's kernel stack): ≥ 99% of the
            // workers' block bytes, which are fio's reads (no more than fio read). Against fio's
            // own bytes the block rows are short by the completions the kernel ran no program
            // for (0-1.4% in these runs: `on_block_complete` ran fewer times than
            // `on_block_start`, issue #64's first item), so that is not asserted here.
            let submitters: std::collections::HashSet<i32> = rows.iter().map(|r| r.tid).collect();
            let blocks = rows_of(&out, "block");
            let of_workers: Vec<&Request> = blocks
                .iter()
                .filter(|b| b.thread.starts_with("iou-wrk"))
                .collect();
            let worker_bytes: i64 = of_workers.iter().map(|b| b.value).sum();
            let on_behalf: i64 = of_workers
                .iter()
                .filter(|b| {
                    b.submitter.is_some_and(|t| submitters.contains(&t))
                        && b.user_frames > 0
                        && b.functions.iter().any(|f| f == "io_wq_submit_work")
                })
                .map(|b| b.value)
                .sum();
            eprintln!(
                "async: {on_behalf} of the io-wq workers' {worker_bytes} block bytes with fio's \
                 stack, fio read {bytes}"
            );
            assert!(
                on_behalf as f64 >= 0.99 * worker_bytes as f64
                    && worker_bytes as f64 >= 0.9 * bytes as f64
                    && worker_bytes as f64 <= 1.005 * bytes as f64,
                "{on_behalf} of {worker_bytes} block bytes carry the submitter, {case}"
            );
            // stacks-trace: each request an async slice `uring read` on fio's track, with its
            // mode; the workers' block slices name their submitter.
            let trace = sh(&format!("stacks-trace {}", out.display()));
            check(&trace, "stacks-trace of the async run");
            let trace: serde_json::Value =
                serde_json::from_slice(&trace.stdout).expect("stacks-trace's JSON");
            let events = trace["traceEvents"].as_array().expect("traceEvents");
            let begins = |cat: &str| {
                events
                    .iter()
                    .filter(|e| e["ph"] == "b" && e["cat"] == cat)
                    .collect::<Vec<_>>()
            };
            let reads = begins("uring")
                .into_iter()
                .filter(|e| e["name"] == "uring read" && e["args"]["mode"] == "async")
                .count();
            assert_eq!(reads as i64, n, "uring read slices in the trace, {case}");
            let named = begins("block")
                .into_iter()
                .filter(|e| {
                    e["args"]["submitter"]
                        .as_i64()
                        .is_some_and(|t| submitters.contains(&(t as i32)))
                })
                .count();
            assert!(
                named as f64 >= 0.99 * of_workers.len() as f64,
                "{named} block slices of {} name their submitter, {case}",
                of_workers.len()
            );
        }
        // Time to completion. The row's time runs from the submission inside io_uring_enter
        // to the completion posted in the kernel.
        //
        // Upper bound, fio's total latency (`lat`): it runs from fio's timestamp before
        // io_uring_enter to its reaping of the completion, so it contains the row's time (10%
        // for the histograms' buckets). fio's completion latency (`clat`) is no bound either
        // way: it starts only when io_uring_enter has returned (a request held in the call is
        // longer in ours), and it includes fio's wait to be woken and to reap, which on two
        // CPUs shared with other work is most of it (quiet runs: our median 61-75% of fio's
        // clat; CI under load: 182 of 465 us, 39%).
        //
        // Lower bound, the disk: each request's row contains its block request's issue ->
        // completion, so at every quantile the rows are at least as long as the block rows of
        // the same reads (recorded in the same run). Block rows missing a completion (see
        // above) are left out: with a fraction e of them missing, a row quantile at q + e is
        // still at least the block quantile at q. A row timed over only part of the request
        // (to the submission's end, or to the block completion before the CQE) fails this.
        let mut d: Vec<i64> = rows.iter().map(|r| r.duration).collect();
        for (q, p) in [(0.5, "50.000000"), (0.99, "99.000000")] {
            let ours = quantile(&mut d, q);
            let lat = percentile("lat_ns", p);
            eprintln!(
                "{mode}: p{} {ours} ns, fio's lat {lat} ns, clat {} ns",
                q * 100.0,
                percentile("clat_ns", p)
            );
            assert!(
                ours as f64 <= 1.10 * lat as f64,
                "p{} {ours} ns against fio's lat {lat} ns, {case}",
                q * 100.0
            );
        }
        let submitters: std::collections::HashSet<i32> = rows.iter().map(|r| r.tid).collect();
        let mut disk: Vec<i64> = rows_of(&out, "block")
            .into_iter()
            .filter(|b| {
                b.op == "read"
                    && b.duration >= 0
                    && (submitters.contains(&b.tid) || b.thread.starts_with("iou-wrk"))
            })
            .map(|b| b.duration)
            .collect();
        assert!(
            disk.len() as f64 >= 0.95 * n as f64 && disk.len() as i64 <= n,
            "{} block reads for {n} requests, {case}",
            disk.len()
        );
        let missing = (n - disk.len() as i64) as f64 / n as f64;
        for q in [0.1, 0.5, 0.9] {
            let (ours, blocks) = (
                quantile(&mut d, (q + missing).min(1.0)),
                quantile(&mut disk, q),
            );
            eprintln!(
                "{mode}: p{} {ours} ns, the block reads' {blocks} ns",
                q * 100.0
            );
            assert!(
                ours >= blocks,
                "p{} {ours} ns, shorter than the block reads' {blocks} ns, {case}",
                q * 100.0
            );
        }
    }
}

/// In stream `path`: the `uring` rows of reads, and the `value` total of the `lost` rows of
/// A thread waiting in `io_uring_enter` for completions names them: recorded with `switch`, a
/// request counted by a wait (`min_complete`) carries the waiting thread (`wakee`) and the
/// `time` of the waiter's off-CPU row it was in (`offcpu_since`). The program (requests.c
/// `waits`) reaps a nop without waiting, then waits in one call for 4 reads of pipes a child
/// fills 10 ms apart: it wakes at each completion, so each read names its own off-CPU
/// interval, one that began after the read was submitted and ended before it was posted; the
/// nop names none.
#[test]
fn waits_for_completions_name_their_requests() {
    let Some(_serial) = bpf_guard("waits_for_completions_name_their_requests") else {
        return;
    };
    let dir = scratch("uring-waits");
    let exe = build_requests(&dir);
    let (out, summary) = record(
        &dir,
        "waits",
        "uring:n,switch:n",
        &format!("{} {} waits", exe.display(), dir.display()),
        false,
    );
    let said = std::fs::read_to_string(dir.join("waits.txt")).expect("the program's waits");
    let (tid, waited) = said
        .trim()
        .split_once(' ')
        .map(|(t, n)| (t.parse::<i64>().unwrap(), n.parse::<usize>().unwrap()))
        .expect("`tid count`");
    // (kind, tid, op, time, duration, wakee, offcpu_since) of every row.
    let mut rows = Vec::new();
    for b in &read_stream(&out) {
        for i in 0..b.num_rows() {
            rows.push((
                text(b, "kind", i).unwrap_or_default(),
                int(b, "tid", i).unwrap_or(-1),
                text(b, "op", i).unwrap_or_default(),
                int(b, "time", i).unwrap_or(-1),
                int(b, "duration", i).unwrap_or(-1),
                int(b, "wakee", i),
                int(b, "offcpu_since", i),
            ));
        }
    }
    let case = format!("{rows:?}; {summary}");
    let uring = |op: &str| -> Vec<_> {
        rows.iter()
            .filter(|r| r.0 == "uring" && r.2 == op)
            .collect()
    };
    let nop = uring("nop");
    assert!(
        nop.len() == 1 && nop[0].5.is_none() && nop[0].6.is_none(),
        "the nop waited for: {case}"
    );
    let reads = uring("read");
    assert_eq!(reads.len(), waited, "{case}");
    let mut intervals = Vec::new();
    // An interval whose switch-in the tracepoint did not report ends at the thread's next
    // switch-out, past its read's completion: as many as the summary counts may.
    let mut unreported = unreported_switches(&summary);
    for r in &reads {
        assert_eq!(r.5, Some(tid), "a read without its waiter: {r:?}; {case}");
        let since =
            r.6.unwrap_or_else(|| panic!("no off-CPU interval: {r:?}; {case}"));
        let off = rows
            .iter()
            .find(|s| s.0 == "switch" && s.1 == tid && s.3 == since)
            .unwrap_or_else(|| panic!("no switch row of {tid} at {since}: {r:?}; {case}"));
        // Off CPU after the read's submission, back before its completion was posted.
        let (submitted, posted) = (r.3, r.3 + r.4);
        let late = off.3 + off.4 > posted && unreported > 0;
        unreported -= i64::from(late);
        assert!(
            off.3 >= submitted && off.4 >= 0 && (off.3 + off.4 <= posted || late),
            "{off:?} not within {r:?}; {case}"
        );
        intervals.push(since);
    }
    intervals.sort_unstable();
    intervals.dedup();
    assert_eq!(intervals.len(), waited, "one interval per read: {case}");
}

/// `uring:d`: the submitter's user stack at submission unwound by the recorder from the
/// mapped files' CFI (a copy of its registers and stack top sent apart at submission, paired
/// with the request's row at its completion). fio is built without frame pointers: a
/// frame-pointer walk gives fio's leaf frame only, CFI gives its callers (`td_io_commit`,
/// `td_io_queue`). Every read of fio's is a row (its count); ≥ 99% carry fio's frames, and the
/// ones unwound by CFI (all but those taken by frame pointers while the ring buffer was more
/// than half full, which the summary counts) carry `td_io_queue`.
#[test]
fn d_stacks_of_fio_submissions_carry_fios_frames() {
    let Some(_serial) = bpf_guard("d_stacks_of_fio_submissions_carry_fios_frames") else {
        return;
    };
    let dir = scratch("uring-d");
    let file = dir.join("data.bin");
    check(
        &sh(&format!(
            "fio --name=prepare --filename={} --size=64M --rw=write --bs=1M --direct=1 \
             --output=/dev/null",
            file.display()
        )),
        "fio: prepare the file",
    );
    let json = dir.join("fio.json");
    // A 64 MiB ring buffer and fio held to 2,000 reads a second: the recorder keeps up even
    // on a busy machine (each request's copy is ~25 KiB; past half a ring the kernel takes
    // frame-pointer stacks instead).
    let (out, summary) = record(
        &dir,
        "d",
        "uring:d --ringbuf-mb 64",
        &format!(
            "fio --name=r --filename={} --size=64M --ioengine=io_uring --direct=1 \
             --rw=randread --bs=4k --iodepth=8 --number_ios=8000 --rate_iops=2000 \
             --output-format=json --output={}",
            file.display(),
            json.display()
        ),
        false,
    );
    let fio: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("fio's report"))
            .expect("fio's JSON");
    let ios = fio["jobs"][0]["read"]["total_ios"].as_i64().unwrap();
    let batches = read_stream(&out);
    let frames = stacks_tests::read_frames(&batches);
    // (module of each user frame, its functions, how it was unwound) per `uring` read row.
    let mut rows = Vec::new();
    let mut at = 0;
    for b in &batches {
        for i in 0..b.num_rows() {
            let stack = frames[at].clone().unwrap_or_default();
            at += 1;
            if text(b, "kind", i).as_deref() != Some("uring")
                || text(b, "op", i).as_deref() != Some("read")
            {
                continue;
            }
            let user: Vec<_> = stack.into_iter().filter(|f| !f.kernel).collect();
            rows.push((
                user.iter()
                    .any(|f| f.module.as_deref().is_some_and(|m| m.ends_with("/fio"))),
                user.iter()
                    .any(|f| f.function.as_deref() == Some("td_io_queue")),
                text(b, "ustack_unwind", i).unwrap_or_default(),
            ));
        }
    }
    let n = rows.len() as i64;
    let with_fio = rows.iter().filter(|r| r.0).count();
    let by_cfi: Vec<_> = rows.iter().filter(|r| r.2.starts_with("dwarf")).collect();
    let case = format!(
        "fio {ios} reads: {n} rows, {with_fio} with fio's frames, {} unwound by CFI; {summary}",
        by_cfi.len()
    );
    eprintln!("{case}");
    assert!((n - ios).abs() as f64 <= 0.005 * ios as f64, "{case}");
    assert!(with_fio as f64 >= 0.99 * n as f64, "{case}");
    // Most are unwound by CFI (the frame-pointer fallback is for a backed-up ring buffer),
    // and each of those reaches fio's callers.
    assert!(by_cfi.len() as f64 >= 0.5 * n as f64, "{case}");
    assert!(by_cfi.iter().all(|r| r.1), "{case}");
}

/// `uring:u:MIN`: fio's io_uring reads (4 KiB direct random reads at depth 8) completed
/// sooner than MIN (100 µs, near fio's median on this disk) are folded into rows of `count`
/// requests summed in the kernel, without a stack; the others are rows of their own, with
/// fio's stack. Rows and folded counts are fio's reads, and their bytes fio's bytes.
#[test]
fn requests_shorter_than_min_are_folded() {
    let Some(_serial) = bpf_guard("requests_shorter_than_min_are_folded") else {
        return;
    };
    let dir = scratch("uring-min");
    let file = dir.join("data.bin");
    check(
        &sh(&format!(
            "fio --name=prepare --filename={} --size=64M --rw=write --bs=1M --direct=1 \
             --output=/dev/null",
            file.display()
        )),
        "fio: prepare the file",
    );
    let json = dir.join("fio.json");
    let min_ns = 100_000;
    let (out, summary) = record(
        &dir,
        "min",
        "uring:u:100us",
        &format!(
            "fio --name=r --filename={} --size=64M --ioengine=io_uring --direct=1 \
             --rw=randread --bs=4k --iodepth=8 --number_ios=20000 --output-format=json \
             --output={}",
            file.display(),
            json.display()
        ),
        true,
    );
    let fio: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("fio's report"))
            .expect("fio's JSON");
    let read = &fio["jobs"][0]["read"];
    let (ios, bytes) = (
        read["total_ios"].as_i64().unwrap(),
        read["io_bytes"].as_i64().unwrap(),
    );
    let rows: Vec<Request> = requests(&out)
        .into_iter()
        .filter(|r| r.op == "read")
        .collect();
    // Folded: a group's mean time is under MIN (each of its requests' was); kept: at least MIN.
    let (folded, kept): (Vec<&Request>, Vec<&Request>) =
        rows.iter().partition(|r| r.duration < min_ns * r.count);
    let n_folded: i64 = folded.iter().map(|r| r.count).sum();
    let case = format!(
        "fio {ios} reads, {bytes} bytes; {} rows of one, {} folded rows of {n_folded}; {summary}",
        kept.len(),
        folded.len()
    );
    eprintln!("{case}");
    // Every read is a row or counted in one, with its bytes (exact in these runs; the
    // tolerance is the other fio test's).
    let n: i64 = rows.iter().map(|r| r.count).sum();
    let sum: i64 = rows.iter().map(|r| r.value).sum();
    assert!(
        (n - ios).abs() as f64 <= 0.005 * ios as f64,
        "{n} reads, {case}"
    );
    assert!(
        (sum - bytes).abs() as f64 <= 0.005 * bytes as f64,
        "{sum} bytes, {case}"
    );
    // Both kinds of rows are there (fio's median is near MIN), each as the kernel made it.
    assert!(n_folded > 0 && !kept.is_empty(), "{case}");
    assert!(
        kept.iter()
            .all(|r| r.count == 1 && r.duration >= min_ns && r.user_frames > 0),
        "{case}"
    );
    let path = file.display().to_string();
    assert!(
        folded.iter().all(|r| r.user_frames == 0
            && r.mode == "inline"
            && r.path.as_deref() == Some(path.as_str())
            && r.thread == "fio"),
        "{:?}; {case}",
        folded
            .iter()
            .find(|r| r.user_frames > 0 || r.path.as_deref() != Some(&path))
    );
    // A group a second at most per thread, file and latency bucket: far fewer rows than reads.
    assert!(folded.len() as i64 * 20 < n_folded, "{case}");

    // The bundled latency query counts a folded row as `count` requests of its mean time: its
    // requests and bytes are fio's, its maximum the longest kept request's (or group mean),
    // its median the rows' weighted median (±10%: a t-digest).
    let q = sh(&format!(
        "stacks-query -d {} uring-latency -f ndjson",
        dir.join("min-store").display()
    ));
    check(&q, "uring-latency");
    let text = String::from_utf8_lossy(&q.stdout);
    let v: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("an ndjson row"))
        .find(|v| v["op"] == "read")
        .expect("a read row");
    let get = |c: &str| v[c].as_i64().unwrap_or(-1);
    let mut means: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| (r.duration / r.count, r.count))
        .collect();
    means.sort_unstable();
    // The weighted quantile q of the rows' means: the first mean whose running count reaches
    // q of all.
    let quantile = |q: f64| {
        let mut seen = 0;
        means
            .iter()
            .find(|(_, c)| {
                seen += c;
                seen as f64 >= q * n as f64
            })
            .unwrap()
            .0
    };
    let median = quantile(0.5);
    assert_eq!((get("requests"), get("bytes")), (n, sum), "{v}; {case}");
    assert_eq!(get("max_ns"), means.last().unwrap().0, "{v}; {case}");
    // Within 10% of the median, or within 5% of the ranks of it: a folded row is one point
    // of thousands of requests at MIN's edge, where the digest's value may jump to the first
    // kept request's (seen: 100000 for a median 90128 in rows folded 8814 of 16384).
    let p50 = get("p50_ns");
    assert!(
        (p50 - median).abs() as f64 <= 0.1 * median as f64
            || (quantile(0.45)..=quantile(0.55)).contains(&p50),
        "{v}: the rows' median {median}, 45th {} and 55th percentiles {}; {case}",
        quantile(0.45),
        quantile(0.55)
    );
    // stacks-trace: each kept request a slice, each folded row an instant `uring read ×N`.
    let t = sh(&format!("stacks-trace < {}", out.display()));
    check(&t, "stacks-trace");
    let trace: serde_json::Value = serde_json::from_slice(&t.stdout).expect("trace JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let uring_events = events.iter().filter(|e| e["cat"] == "uring");
    let slices = uring_events.clone().filter(|e| e["ph"] == "b").count() as i64;
    let instants: Vec<&serde_json::Value> = uring_events.filter(|e| e["ph"] == "i").collect();
    let in_instants: i64 = instants
        .iter()
        .map(|e| e["args"]["requests"].as_i64().unwrap())
        .sum();
    // (A group of one folded request is a slice: it is one request.)
    let single = rows.iter().filter(|r| r.count == 1).count() as i64;
    assert_eq!(
        (slices, instants.len() as i64, slices + in_instants),
        (single, rows.len() as i64 - single, n),
        "{case}"
    );
}

/// cause `cause`.
fn reads_and_lost(path: &Path, cause: &str) -> (i64, i64) {
    let (mut reads, mut lost) = (0, 0);
    for b in read_stream(path) {
        for i in 0..b.num_rows() {
            match text(&b, "kind", i).as_deref() {
                Some("uring") if text(&b, "op", i).as_deref() == Some("read") => reads += 1,
                Some("lost") if text(&b, "cause", i).as_deref() == Some(cause) => {
                    lost += int(&b, "value", i).unwrap_or(0)
                }
                _ => {}
            }
        }
    }
    (reads, lost)
}

/// A flood loses nothing silently: fio reading as fast as it can into 1 MiB ring buffers
/// (`uring:u`), and with 20,000 requests in flight at once, more than the in-flight table's
/// 16,384 (`uring:n`): every read fio made is a row or counted in a `lost` row of its cause,
/// exactly.
#[test]
fn a_flood_of_requests_is_rows_or_counted_lost() {
    let Some(_serial) = bpf_guard("a_flood_of_requests_is_rows_or_counted_lost") else {
        return;
    };
    let dir = scratch("uring-flood");
    let file = dir.join("data.bin");
    check(
        &sh(&format!(
            "fio --name=prepare --filename={} --size=64M --rw=write --bs=1M --output=/dev/null",
            file.display()
        )),
        "fio: prepare the file",
    );
    for (name, events, options, cause) in [
        (
            "ring",
            "uring:u --ringbuf-mb 1",
            "--iodepth=64",
            "ring_buffer_full:uring",
        ),
        (
            "table",
            "uring:n",
            "--direct=1 --iodepth=20000 --iodepth_batch_submit=20000 \
             --iodepth_batch_complete_min=20000",
            "map_full:uring",
        ),
    ] {
        let json = dir.join(format!("fio-{name}.json"));
        let out = dir.join(format!("{name}.arrow"));
        let rec = sh(&format!(
            "stacks-record -e {events} -o {} -- fio --name=f --filename={} --size=64M \
             --ioengine=io_uring --rw=randread --bs=4k {options} --time_based --runtime=3 \
             --output-format=json --output={}",
            out.display(),
            file.display(),
            json.display()
        ));
        check(&rec, &format!("record the {name} flood"));
        let summary = String::from_utf8_lossy(&rec.stderr);
        let fio: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("fio's report"))
                .expect("fio's JSON");
        let ios = fio["jobs"][0]["read"]["total_ios"].as_i64().unwrap();
        let (rows, lost) = reads_and_lost(&out, cause);
        eprintln!("{name}: fio {ios} reads: {rows} rows, {lost} counted as {cause}");
        assert_eq!(rows + lost, ios, "{name}: {summary}");
        if name == "table" {
            assert!(
                lost > 0,
                "20,000 in flight lost none to the table: {summary}"
            );
        }
    }
}

/// PostgreSQL 18's programs from scripts/setup-postgres' prefix (Debian sid's 18.6).
fn postgres_bin() -> PathBuf {
    let root =
        std::env::var("STACKS_POSTGRES").unwrap_or_else(|_| "/var/cache/stacks-postgres".into());
    let bin = PathBuf::from(root).join("18/usr/lib/postgresql/18/bin");
    assert!(
        bin.join("postgres").exists() && bin.join("pgbench").exists(),
        "{} is missing: run scripts/setup-postgres (scripts/setup does)",
        bin.display()
    );
    bin
}

/// A PostgreSQL cluster of the test, run as `nobody` (the server refuses root) from `home`;
/// stopped on drop.
struct Cluster {
    bin: PathBuf,
    home: PathBuf,
}

impl Cluster {
    /// Run `program` of PostgreSQL's with `args` (a shell fragment) as the cluster's user.
    fn run(&self, program: &str, args: &str) -> std::process::Output {
        sh(&format!(
            "cd {home} && setpriv --reuid=65534 --regid=65534 --clear-groups env HOME={home} \
             {bin}/{program} {args}",
            home = self.home.display(),
            bin = self.bin.display()
        ))
    }

    /// One SQL statement's result, unaligned (`psql -At`).
    fn sql(&self, statement: &str) -> String {
        let out = self.run(
            "psql",
            &format!(
                "-h {} -U pg -d postgres -Atc \"{statement}\"",
                self.home.display()
            ),
        );
        check(&out, statement);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.run("pg_ctl", "-D data -m immediate -w stop");
    }
}

/// PostgreSQL 18 with `io_method = io_uring` under pgbench: its data-file reads are `uring`
/// rows of the backends that submitted them, with their stacks (PostgreSQL's read stream
/// submitting through its AIO layer), and with the reads it does synchronously (`vfs` rows)
/// they are pg_stat_io's read bytes over the same interval.
///
/// The cluster: 16 MB of shared buffers, `debug_io_direct = data` (every read goes to the disk,
/// none is served by the page cache), a pgbench database of scale 10 (134 MB of
/// `pgbench_accounts`). The workload mixes pgbench's `select-only` (index lookups) with a
/// sequential scan of `pgbench_accounts`: PostgreSQL 18 reads a single block it waits for at
/// once (`ReadBuffer`, the index lookups) synchronously (pread64 in the backend: `vfs` rows,
/// not io_uring), and a read stream's look-ahead (the scan) through io_uring.
#[test]
fn postgres_reads_through_io_uring_are_rows_with_the_backends_stacks() {
    let Some(_serial) =
        bpf_guard("postgres_reads_through_io_uring_are_rows_with_the_backends_stacks")
    else {
        return;
    };
    let bin = postgres_bin();
    let dir = scratch("uring-pg");
    let home = dir.join("pg");
    std::fs::create_dir_all(&home).unwrap();
    check(
        &sh(&format!("chown 65534:65534 {}", home.display())),
        "chown the cluster's directory",
    );
    let pg = Cluster {
        bin,
        home: home.clone(),
    };
    check(
        &pg.run("initdb", "-D data -A trust -U pg --no-sync"),
        "initdb",
    );
    let conf = format!(
        "io_method = io_uring\nshared_buffers = 16MB\ndebug_io_direct = data\nfsync = off\n\
         listen_addresses = ''\nunix_socket_directories = '{}'\nautovacuum = off\n\
         max_parallel_workers_per_gather = 0\n",
        home.display()
    );
    check(
        &sh(&format!(
            "cat >> {}/data/postgresql.conf <<'EOF'\n{conf}EOF",
            home.display()
        )),
        "configure",
    );
    check(&pg.run("pg_ctl", "-D data -l log -w start"), "pg_ctl start");
    assert_eq!(pg.sql("show io_method"), "io_uring");
    check(
        &pg.run(
            "pgbench",
            &format!("-h {} -U pg -i -s 10 -q postgres", home.display()),
        ),
        "pgbench -i",
    );
    std::fs::write(
        home.join("scan.sql"),
        "select sum(abalance) from pgbench_accounts;\n",
    )
    .unwrap();
    let postmaster = std::fs::read_to_string(home.join("data/postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();

    // Record the postmaster and the backends it forks.
    let raw = dir.join("pg.raw");
    let log = dir.join("record.log");
    let mut rec = std::process::Command::new(stacks_tests::bin("stacks-record"))
        .args([
            "-e",
            "uring:u,vfs:u,tp:io_uring:io_uring_complete:n",
            "-p",
            &postmaster,
            "-o",
        ])
        .arg(&raw)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start stacks-record");
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("Ctrl-C stops")
    {
        assert!(
            started.elapsed().as_secs() < 60,
            "the recorder did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    pg.sql("select pg_stat_reset_shared('io')");
    let bench = pg.run(
        "pgbench",
        &format!(
            "-h {} -U pg -n -c 2 -T 6 -b select-only@20 -f scan.sql@1 postgres",
            home.display()
        ),
    );
    check(&bench, "pgbench");
    // pgbench's backends send their IO statistics as they exit.
    std::thread::sleep(std::time::Duration::from_secs(1));
    // One query (a second connection's own reads at its start would be counted by the
    // first's).
    let stat = pg.sql(
        "select string_agg(backend_type || '/' || context || ' ' || reads || ' ' || read_bytes, \
         ';') from pg_stat_io where object = 'relation' and reads > 0",
    );
    check(&sh(&format!("kill -INT {}", rec.id())), "stop the recorder");
    assert!(rec.wait().unwrap().success(), "stacks-record failed");
    let summary = std::fs::read_to_string(&log).unwrap();
    assert!(summary.contains("lost 0 events"), "{summary}");
    let sym = dir.join("pg.arrow");
    check(
        &sh(&format!(
            "stacks-symbolize < {} > {}",
            raw.display(),
            sym.display()
        )),
        "stacks-symbolize",
    );
    let (mut stat_reads, mut stat_bytes, mut bulk_bytes) = (0i64, 0i64, 0i64);
    for line in stat.split(';') {
        let mut w = line.rsplitn(3, ' ');
        let bytes: i64 = w.next().unwrap().parse().unwrap();
        let reads: i64 = w.next().unwrap().parse().unwrap();
        stat_reads += reads;
        stat_bytes += bytes;
        if w.next() == Some("client backend/bulkread") {
            bulk_bytes += bytes;
        }
    }

    // Reads of the cluster's relation files (not the WAL, not pg_internal.init).
    let data = home.join("data").display().to_string();
    let relation = |p: &Option<String>| {
        p.as_deref().is_some_and(|p| {
            let rest = p.strip_prefix(&data).unwrap_or("");
            (rest.starts_with("/base/") || rest.starts_with("/global/"))
                && rest
                    .rsplit('/')
                    .next()
                    .is_some_and(|f| f.starts_with(|c: char| c.is_ascii_digit()))
        })
    };
    let uring: Vec<Request> = requests(&sym)
        .into_iter()
        .filter(|r| relation(&r.path))
        .collect();
    let sync: Vec<Request> = rows_of(&sym, "vfs")
        .into_iter()
        .filter(|r| r.op == "read" && relation(&r.path))
        .collect();
    let uring_bytes: i64 = uring.iter().map(|r| r.value).sum();
    let sync_bytes: i64 = sync.iter().map(|r| r.value).sum();
    let mut modes = std::collections::BTreeMap::new();
    for r in &uring {
        *modes.entry(r.mode.as_str()).or_insert(0) += 1;
    }
    let report = format!(
        "uring: {} reads, {uring_bytes} bytes; synchronous: {} reads, {sync_bytes} bytes; \
         pg_stat_io: {stat_reads} reads, {stat_bytes} bytes ({stat}); modes {modes:?}; pgbench: {}; {summary}",
        uring.len(),
        sync.len(),
        String::from_utf8_lossy(&bench.stdout)
            .lines()
            .filter(|l| l.contains("tps") || l.contains("processed"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!("{report}");
    // The scans' reads (pg_stat_io's `bulkread` context: a large sequential scan's ring of
    // buffers) are the io_uring rows (equal in four runs, 36,560 to 71,833 reads).
    assert!(
        uring_bytes > 0 && (uring_bytes - bulk_bytes).abs() as f64 <= 0.005 * bulk_bytes as f64,
        "{report}"
    );
    assert!(
        uring
            .iter()
            .all(|r| ["read", "readv"].contains(&r.op.as_str())),
        "{report}"
    );
    // Both ways together are what PostgreSQL counted, in reads and bytes, within 0.5%: the
    // psql sessions that reset and read the statistics read catalog pages at their start,
    // which are rows here but reach pg_stat_io only when the session reports (the reset's
    // after the reset, the last query's after it ran): a few reads (15 of 72,462 in one run).
    let total = uring_bytes + sync_bytes;
    let reads = (uring.len() + sync.len()) as i64;
    assert!(
        (total - stat_bytes).abs() as f64 <= 0.005 * stat_bytes as f64
            && (reads - stat_reads).abs() as f64 <= 0.005 * stat_reads as f64,
        "{report}"
    );
    // Each io_uring read is the submitting backend's (a process of one thread, not the
    // postmaster), with the backend's stack: the read stream's look-ahead submitting through
    // PostgreSQL's AIO layer, under the backend's main loop.
    let pm: i32 = postmaster.parse().unwrap();
    let pids: std::collections::BTreeSet<i32> = uring.iter().map(|r| r.tid).collect();
    assert!(!pids.contains(&pm), "{report}");
    // Which task posted each completion (the tracepoint's rows are the current task's): the
    // submitting backend's, for every request (a read's completion is queued as task work of
    // the submitter, so another backend reaping the ring only reads what it posted).
    let mut posted = std::collections::BTreeMap::new();
    for r in rows_of(&sym, "probe") {
        *posted.entry(r.tid).or_insert(0i64) += 1;
    }
    let mut submitted = std::collections::BTreeMap::new();
    for r in requests(&sym) {
        *submitted.entry(r.tid).or_insert(0i64) += 1;
    }
    assert_eq!(
        posted, submitted,
        "completions posted by task, against requests by submitter"
    );
    let with_stack = uring
        .iter()
        .filter(|r| {
            let has = |f: &str| r.functions.iter().any(|g| g == f);
            has("pgaio_submit_staged") && has("read_stream_next_buffer") && has("PostgresMain")
        })
        .count();
    assert!(
        with_stack as f64 >= 0.99 * uring.len() as f64,
        "{with_stack} of {} uring rows with the backend's stack; e.g. {:?}; {report}",
        uring.len(),
        uring
            .iter()
            .find(|r| !r.functions.iter().any(|g| g == "PostgresMain"))
    );
}
