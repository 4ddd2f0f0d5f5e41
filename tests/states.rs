//! End-to-end ground truth for `state` rows: the `states` workload keeps five named threads in
//! known states (on CPU, nanosleep, `read` on an empty pipe, write + fsync, `recvfrom` on an
//! idle TCP connection) and reports each one's tid and wall-clock life, and the file, pipe and
//! socket they wait on; `stacks-record -e state:uk:50` samples them and the symbolized rows
//! must account each thread's life, in the state and system call it was in, on that file;
//! stacks-top's average active threads by state are the rows per sampling pass.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use stacks_tests::{bpf_available, bpf_serial, check, read_frames, read_stream, scratch, sh};

/// One `state` row of a thread.
struct Sample {
    value: i64,
    state: String,
    syscall: Option<String>,
    /// How long it had waited in that system call at the pass (ns; null: its switch-out not
    /// seen).
    duration: Option<i64>,
    path: Option<String>,
    local: Option<String>,
    remote: Option<String>,
    /// Function names of its kernel frames.
    kernel: Vec<String>,
    user_frames: usize,
    /// Function names of its user frames.
    user: Vec<String>,
    /// -11 (EAGAIN): the thread ran while the pass read its stacks, none kept.
    ustack_error: Option<i32>,
}

fn text(b: &RecordBatch, name: &str, i: usize) -> Option<String> {
    let c = b.column_by_name(name).unwrap().as_string::<i32>();
    c.is_valid(i).then(|| c.value(i).to_string())
}

/// The `state` rows of the symbolized stream, by tid.
fn samples(batches: &[RecordBatch]) -> HashMap<i32, Vec<Sample>> {
    let stacks = read_frames(batches);
    let mut out: HashMap<i32, Vec<Sample>> = HashMap::new();
    let mut row = 0;
    for b in batches {
        let tid = b.column_by_name("tid").unwrap().as_primitive::<Int32Type>();
        let value = b
            .column_by_name("value")
            .unwrap()
            .as_primitive::<Int64Type>();
        let duration = b
            .column_by_name("duration")
            .unwrap()
            .as_primitive::<Int64Type>();
        let ustack_error = b
            .column_by_name("ustack_error")
            .unwrap()
            .as_primitive::<Int32Type>();
        for i in 0..b.num_rows() {
            let frames = stacks[row].clone().unwrap_or_default();
            row += 1;
            if text(b, "kind", i).as_deref() != Some("state") {
                continue;
            }
            out.entry(tid.value(i)).or_default().push(Sample {
                value: value.value(i),
                state: text(b, "state", i).expect("state rows have a state"),
                syscall: text(b, "syscall", i),
                duration: duration.is_valid(i).then(|| duration.value(i)),
                path: text(b, "path", i),
                local: text(b, "local", i),
                remote: text(b, "remote", i),
                kernel: frames
                    .iter()
                    .filter(|f| f.kernel)
                    .filter_map(|f| f.function.clone())
                    .collect(),
                user_frames: frames.iter().filter(|f| !f.kernel).count(),
                user: frames
                    .iter()
                    .filter(|f| !f.kernel)
                    .filter_map(|f| f.function.clone())
                    .collect(),
                ustack_error: ustack_error.is_valid(i).then(|| ustack_error.value(i)),
            });
        }
    }
    out
}

/// The share of `rows` for which `pred` holds, by value.
fn share(rows: &[Sample], pred: impl Fn(&Sample) -> bool) -> f64 {
    let total: i64 = rows.iter().map(|s| s.value).sum();
    let hit: i64 = rows.iter().filter(|s| pred(s)).map(|s| s.value).sum();
    hit as f64 / total.max(1) as f64
}

/// Sampling rate of the recording and of the /proc cross-check.
const HZ: u32 = 50;

/// The state letters of `/proc/PID/task/TID/stat` per tid, sampled HZ times a second by the
/// test itself (what a user-space sampler sees) from when a `stacks-workload` process whose
/// command line contains `marker` appears until it exits or `stop` is set.
fn proc_states(marker: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<ProcStates> {
    std::thread::spawn(move || {
        let find = || {
            std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
                let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
                let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                (comm.trim_end() == "stacks-workload"
                    && String::from_utf8_lossy(&cmd).contains(&marker))
                .then_some(pid)
            })
        };
        let mut out = ProcStates::new();
        let pid = loop {
            if stop.load(Ordering::Relaxed) {
                return out;
            }
            if let Some(pid) = find() {
                break pid;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let period = Duration::from_secs(1) / HZ;
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                break;
            };
            for t in tasks.flatten() {
                let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                // `pid (comm) S …`: the state follows the last `)`.
                if let Ok(stat) = std::fs::read_to_string(t.path().join("stat"))
                    && let Some(state) = stat
                        .rsplit_once(')')
                        .and_then(|(_, r)| r.trim().chars().next())
                {
                    *out.entry(tid).or_default().entry(state).or_default() += 1;
                }
            }
            next += period;
            match next.checked_duration_since(Instant::now()) {
                Some(d) => std::thread::sleep(d),
                None => next = Instant::now(),
            }
        }
        out
    })
}

type ProcStates = HashMap<i32, HashMap<char, u32>>;

/// The /proc letter of a `state` row's state: R (running or runnable), S, D, or other.
fn proc_letter(state: &str) -> char {
    match state {
        "running" | "runnable" => 'R',
        "sleeping" => 'S',
        "uninterruptible" => 'D',
        _ => '?',
    }
}

fn histogram(rows: &[Sample]) -> String {
    let mut h: HashMap<(String, Option<String>), usize> = HashMap::new();
    for s in rows {
        *h.entry((s.state.clone(), s.syscall.clone())).or_default() += 1;
    }
    let mut v: Vec<_> = h.into_iter().collect();
    v.sort();
    format!("{v:?}")
}

#[test]
fn thread_states_match_the_workload() {
    if !bpf_available("thread_states_match_the_workload") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("states");
    let (report, sym) = (dir.join("report.json"), dir.join("sym.arrow"));
    let stop = Arc::new(AtomicBool::new(false));
    let proc = proc_states(dir.display().to_string(), Arc::clone(&stop));
    let rec = sh(&format!(
        "stacks-record -e state:uk:{HZ} -- stacks-workload --report {} states --seconds 2 \
         --dir {} | stacks-symbolize > {}",
        report.display(),
        dir.display(),
        sym.display()
    ));
    stop.store(true, Ordering::Relaxed);
    let proc = proc.join().unwrap();
    check(&rec, "record the states workload");
    // Threads blocked since the previous pass keep their stacks: not captured again (and the
    // rows below still carry them).
    let log = String::from_utf8_lossy(&rec.stderr);
    assert!(
        log.contains("state rows repeating stacks of threads that had not run"),
        "{log}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let by_tid = samples(&read_stream(&sym));
    let threads = report["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 5, "the workload reports its five threads");
    let named = |key: &str| report[key].as_str().unwrap().to_string();
    let (file, pipe) = (named("file"), named("pipe"));
    let (local, remote) = (named("local"), named("remote"));
    for t in threads {
        let name = t["thread"].as_str().unwrap();
        let tid = t["tid"].as_i64().unwrap() as i32;
        let wall = t["wall_ns"].as_i64().unwrap() as f64;
        let rows = by_tid.get(&tid).map(Vec::as_slice).unwrap_or_default();
        let recorded = rows.iter().map(|s| s.value).sum::<i64>() as f64;
        let hist = histogram(rows);
        eprintln!(
            "{name}: {} samples, {:.3} s recorded, {:.3} s wall: {hist}",
            rows.len(),
            recorded / 1e9,
            wall / 1e9
        );
        // The same split as /proc/PID/task/TID/stat read at the same rate: R, S, D shares
        // within the issue's ±5 points. Not for the fsyncer, whose state changes many times a
        // second: two independent samplers of ~100 draws each differ by a binomial error of
        // sd sqrt(p(1-p)·2/100), 6.5 points at p = 0.7 (5 runs: 0.6 to 14 points); its bound
        // is 4 of those sd, or 5 points when larger.
        let seen = proc.get(&tid).cloned().unwrap_or_default();
        let proc_total: u32 = seen.values().sum();
        assert!(proc_total > 0, "{name}: /proc never showed tid {tid}");
        for letter in ['R', 'S', 'D'] {
            let ours = share(rows, |s| proc_letter(&s.state) == letter);
            let theirs = f64::from(seen.get(&letter).copied().unwrap_or(0)) / f64::from(proc_total);
            let tolerance = if name == "fsyncer" {
                let p = (ours + theirs) / 2.0;
                let n = (rows.len() as f64, f64::from(proc_total));
                (4.0 * (p * (1.0 - p) * (1.0 / n.0 + 1.0 / n.1)).sqrt()).max(0.05)
            } else {
                0.05
            };
            eprintln!(
                "{name}: {letter} {ours:.3} recorded, {theirs:.3} in /proc ({proc_total} reads, \
                 ±{tolerance:.3})"
            );
            assert!(
                (ours - theirs).abs() <= tolerance,
                "{name}: {letter} share {ours:.3} recorded, {theirs:.3} in /proc (±{tolerance:.3}): \
                 {hist}, /proc {seen:?}"
            );
        }
        // Every pass sees every live thread: a thread's samples add up to its life, give or
        // take one period at either end (1% of 2 s at 50 Hz) and passes the driver ran late
        // on this 2-core machine (skipped, not run in a burst): within the issue's ±5 points
        // (5 runs: 0.6% at most).
        assert!(
            (recorded - wall).abs() <= wall * 0.05,
            "{name}: recorded {recorded:.0} ns, lived {wall:.0} ns (±5%): {hist}"
        );
        // A blocked thread's user stack is in the function that blocks.
        if let Some(f) = match name {
            "sleeper" => Some("sleep_until"),
            "reader" => Some("read_until_eof"),
            "receiver" => Some("recv_until_eof"),
            _ => None,
        } {
            let inside = share(rows, |s| s.user.iter().any(|u| u.ends_with(f)));
            assert!(
                inside >= 0.95,
                "{name}: {inside:.2} of its samples with {f} on the user stack: {:?}",
                rows.first().map(|s| &s.user)
            );
        }
        match name {
            "spinner" => {
                let on = share(rows, |s| s.state == "running" || s.state == "runnable");
                assert!(on >= 0.95, "{name}: {on:.2} running or runnable: {hist}");
            }
            "sleeper" => {
                let asleep = share(rows, |s| {
                    s.state == "sleeping"
                        && matches!(s.syscall.as_deref(), Some("clock_nanosleep" | "nanosleep"))
                });
                assert!(
                    asleep >= 0.95,
                    "{name}: {asleep:.2} sleeping in nanosleep: {hist}"
                );
                assert!(
                    rows.iter()
                        .any(|s| s.kernel.iter().any(|f| f.contains("nanosleep"))),
                    "{name}: no kernel stack with a nanosleep frame"
                );
                // Every sleeping row has its user stack, but those of passes that read it as
                // the thread woke (it ran meanwhile: a torn read, none kept), a few at most.
                let torn = rows.iter().filter(|s| s.ustack_error == Some(-11)).count();
                assert!(
                    rows.iter()
                        .filter(|s| s.state == "sleeping")
                        .all(|s| s.user_frames > 0 || s.ustack_error == Some(-11))
                        && torn * 20 <= rows.len(),
                    "{name}: a sleeping sample without user frames, or {torn} of {} torn",
                    rows.len()
                );
                // It sleeps 100 ms a call: how long each row's call had lasted, from the
                // thread's switch-out in it (state's own record: `switch` is off here), so over
                // 2 s the rows spread from 0 to 100 ms.
                let calls: Vec<i64> = rows
                    .iter()
                    .filter(|s| {
                        matches!(s.syscall.as_deref(), Some("clock_nanosleep" | "nanosleep"))
                    })
                    .filter_map(|s| s.duration)
                    .collect();
                let longest = calls.iter().copied().max().unwrap_or(0);
                assert!(
                    calls.len() * 10 >= rows.len() * 9
                        && calls.iter().all(|&d| d > 0 && d <= 110_000_000)
                        && longest >= 60_000_000,
                    "{name}: {} of {} rows with the call's duration, all in (0, 110 ms], the \
                     longest at least 60 ms: {calls:?}",
                    calls.len(),
                    rows.len()
                );
            }
            "reader" => {
                let blocked = share(rows, |s| {
                    s.state == "sleeping"
                        && s.syscall.as_deref() == Some("read")
                        && s.path.as_deref() == Some(pipe.as_str())
                });
                assert!(
                    blocked >= 0.95,
                    "{name}: {blocked:.2} sleeping in read on {pipe}: {hist}"
                );
            }
            "receiver" => {
                let blocked = share(rows, |s| {
                    s.state == "sleeping"
                        && s.syscall.as_deref() == Some("recvfrom")
                        && s.path.as_deref().is_some_and(|p| p.starts_with("socket:["))
                        && s.local.as_deref() == Some(local.as_str())
                        && s.remote.as_deref() == Some(remote.as_str())
                });
                assert!(
                    blocked >= 0.95,
                    "{name}: {blocked:.2} sleeping in recvfrom on {local} <- {remote}: {hist}"
                );
            }
            "fsyncer" => {
                let d = rows.iter().filter(|s| s.state == "uninterruptible").count();
                assert!(d > 0, "{name}: no uninterruptible sample: {hist}");
                let in_io: Vec<&Sample> = rows
                    .iter()
                    .filter(|s| matches!(s.syscall.as_deref(), Some("write" | "fsync")))
                    .collect();
                assert!(!in_io.is_empty(), "{name}: never in write or fsync: {hist}");
                let on_file = in_io
                    .iter()
                    .filter(|s| s.path.as_deref() == Some(file.as_str()))
                    .count();
                assert_eq!(
                    on_file,
                    in_io.len(),
                    "{name}: write/fsync samples not on {file}: {:?}",
                    in_io.iter().map(|s| &s.path).collect::<Vec<_>>()
                );
            }
            other => panic!("unexpected thread {other} in the report"),
        }
    }
    queries_and_pprof(&dir, &sym, &report, &by_tid);
    top_counts_threads_per_pass(&dir.join("out"), &report);
}

/// The recording through stacks-pack and the state queries: `stuck` lists the reader and the
/// receiver (one call each for the whole run) on their pipe and socket, and nothing shorter;
/// `state-stacks` and the raw rows are `wall` profiles whose samples carry a `state` label
/// adding up to the rows of that state.
fn queries_and_pprof(
    dir: &std::path::Path,
    sym: &std::path::Path,
    report: &serde_json::Value,
    by_tid: &HashMap<i32, Vec<Sample>>,
) {
    let out = dir.join("out");
    check(
        &sh(&format!(
            "stacks-pack {} < {}",
            out.display(),
            sym.display()
        )),
        "stacks-pack",
    );
    let tid_of = |name: &str| {
        report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["thread"] == name)
            .and_then(|t| t["tid"].as_i64())
            .unwrap()
    };
    let q = sh(&format!("stacks-query -d {} stuck -f json", out.display()));
    check(&q, "stacks-query stuck");
    let stuck: Vec<serde_json::Value> = serde_json::from_slice(&q.stdout).unwrap();
    let row = |name: &str| {
        stuck
            .iter()
            .find(|r| r["tid"].as_i64() == Some(tid_of(name)))
            .unwrap_or_else(|| panic!("stuck: no row of {name}: {stuck:?}"))
    };
    let reader = row("reader");
    assert_eq!(reader["syscall"], "read", "{reader}");
    assert_eq!(reader["path"], report["pipe"], "{reader}");
    let receiver = row("receiver");
    assert_eq!(receiver["syscall"], "recvfrom", "{receiver}");
    assert_eq!(receiver["local"], report["local"], "{receiver}");
    assert_eq!(receiver["remote"], report["remote"], "{receiver}");
    for r in &stuck {
        let longest = r["longest_ns"].as_i64().unwrap();
        assert!(longest >= 1_000_000_000, "stuck lists a short call: {r}");
        assert!(
            ![tid_of("spinner"), tid_of("sleeper")].contains(&r["tid"].as_i64().unwrap()),
            "stuck lists a thread never 1 s in one call: {r}"
        );
    }
    // stacks-trace: the reader's state lane is one `sleeping: read` run on the pipe, about as
    // long as its life.
    let res = sh(&format!("stacks-trace < {}", sym.display()));
    check(&res, "stacks-trace");
    let trace: serde_json::Value = serde_json::from_slice(&res.stdout).unwrap();
    let lane = tid_of("reader") + (1 << 31);
    let runs: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "state" && e["tid"].as_i64() == Some(lane))
        .collect();
    let reader_wall = report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["thread"] == "reader")
        .and_then(|t| t["wall_ns"].as_f64())
        .unwrap();
    let longest = runs
        .iter()
        .filter(|e| e["name"] == "sleeping: read" && e["args"]["path"] == report["pipe"])
        .filter_map(|e| e["dur"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        longest * 1e3 >= reader_wall * 0.9,
        "reader: longest `sleeping: read` run {longest} µs of {reader_wall} ns: {runs:?}"
    );
    // Thread-seconds of each state in the rows, the truth the profiles must add up to.
    let mut by_state: HashMap<String, i64> = HashMap::new();
    for s in by_tid.values().flatten() {
        *by_state.entry(s.state.clone()).or_default() += s.value;
    }
    // process-states: the same thread-seconds by process, state and system call; the reader
    // and receiver each make one thread in `read` and `recvfrom`.
    let q = sh(&format!(
        "stacks-query -d {} process-states -f json",
        out.display()
    ));
    check(&q, "stacks-query process-states");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&q.stdout).unwrap();
    let mut got: HashMap<String, i64> = HashMap::new();
    for r in &rows {
        *got.entry(r["state"].as_str().unwrap().to_string())
            .or_default() += r["thread_ns"].as_i64().unwrap();
    }
    assert_eq!(got, by_state, "process-states: thread_ns by state");
    for call in ["read", "recvfrom"] {
        assert!(
            rows.iter()
                .any(|r| r["syscall"] == call && r["state"] == "sleeping" && r["threads"] == 1),
            "process-states: no one sleeping thread in {call}: {rows:?}"
        );
    }
    for (what, cmd) in [
        (
            "state-stacks | stacks-pprof",
            format!(
                "stacks-query -d {} state-stacks | stacks-pprof",
                out.display()
            ),
        ),
        (
            "stacks-pprof --kind state",
            format!("stacks-pprof --kind state < {}", sym.display()),
        ),
    ] {
        let res = sh(&cmd);
        check(&res, what);
        let p = stacks_pprof::decode(&res.stdout).expect("a pprof profile");
        let name = |i: i64| p.string_table[i as usize].as_str();
        let types: Vec<(&str, &str)> = p
            .sample_type
            .iter()
            .map(|t| (name(t.r#type), name(t.unit)))
            .collect();
        let wall = types
            .iter()
            .position(|t| *t == ("wall", "nanoseconds"))
            .unwrap_or_else(|| panic!("{what}: no wall/nanoseconds in {types:?}"));
        let default = name(p.default_sample_type);
        assert_eq!(default, "wall", "{what}: default sample type");
        let mut got: HashMap<String, i64> = HashMap::new();
        for s in &p.sample {
            let state = s
                .label
                .iter()
                .find(|l| name(l.key) == "state")
                .map(|l| name(l.str).to_string())
                .unwrap_or_else(|| panic!("{what}: a sample without a state label"));
            *got.entry(state).or_default() += s.value[wall];
        }
        assert_eq!(got, by_state, "{what}: wall time by state label");
    }
}

/// stacks-top's average active threads (docs/top.md, "Average active threads") by state over
/// the recording: the rows of each state per sampling pass that ran, whatever passes the
/// recorder skipped (a divisor of the window's length instead is off by the skipped passes, and
/// by one pass of the window's edges: 1-2% here, 40% at load 7). They add up to the workload's
/// threads alive per pass: the main thread in every pass and each of the five in the passes of
/// its life; its spinner on (or waiting for) a CPU, and the sleeper, reader and receiver (and
/// the main thread, waiting for them) asleep. The same bounds as explore's notebook test.
fn top_counts_threads_per_pass(out: &std::path::Path, report: &serde_json::Value) {
    let top = sh(&format!(
        "stacks-top -d {} --once --kind state --group state -f json",
        out.display()
    ));
    check(&top, "stacks-top --once");
    let top: Vec<serde_json::Value> = serde_json::from_slice(&top.stdout).unwrap();
    let avg: HashMap<String, f64> = top
        .iter()
        .map(|r| {
            let state = r["state"].as_str().unwrap().to_string();
            (state, r["avg_thr"].as_f64().unwrap())
        })
        .collect();
    let query = |sql: &str| -> Vec<serde_json::Value> {
        let q = sh(&format!(
            "stacks-query -d {} -f json -c \"{sql}\"",
            out.display()
        ));
        check(&q, sql);
        serde_json::from_slice(&q.stdout).unwrap()
    };
    let passes_in = |lo: i64, hi: i64| {
        query(&format!(
            "SELECT count(DISTINCT time) AS n FROM samples WHERE kind = 'state' \
             AND CAST(time AS BIGINT) >= {lo} AND CAST(time AS BIGINT) < {hi}"
        ))[0]["n"]
            .as_f64()
            .unwrap()
    };
    let passes = passes_in(i64::MIN, i64::MAX);
    let rows =
        query("SELECT state, count(*) AS n FROM samples WHERE kind = 'state' GROUP BY state");
    eprintln!("stacks-top: average threads by state {avg:?} over {passes} passes");
    assert_eq!(
        avg.len(),
        rows.len(),
        "stacks-top's states: {avg:?}, the rows': {rows:?}"
    );
    for r in &rows {
        let state = r["state"].as_str().unwrap();
        let per_pass = r["n"].as_f64().unwrap() / passes;
        let got = avg[state];
        assert!(
            (got - per_pass).abs() < 0.005,
            "{state}: stacks-top avg_thr {got:.4}, rows per pass {per_pass:.4}"
        );
    }
    let threads = report["threads"].as_array().unwrap();
    let alive = 1.0
        + threads
            .iter()
            .map(|t| {
                passes_in(
                    t["start_ns"].as_i64().unwrap(),
                    t["end_ns"].as_i64().unwrap(),
                )
            })
            .sum::<f64>()
            / passes;
    let total: f64 = avg.values().sum();
    assert!(
        (total - alive).abs() <= 0.1,
        "stacks-top: {total:.2} threads in all, {alive:.2} alive per pass: {avg:?}"
    );
    let get = |s: &str| avg.get(s).copied().unwrap_or(0.0);
    let on_cpu = get("running") + get("runnable");
    assert!(
        (0.95..=2.05).contains(&on_cpu),
        "stacks-top: {on_cpu:.2} threads on or waiting for a CPU: {avg:?}"
    );
    assert!(
        (3.6..=5.05).contains(&get("sleeping")),
        "stacks-top: threads sleeping: {avg:?}"
    );
}

/// The command's process before its exec is the recorder's own child held at the gate (named
/// `stacks-record`, running the recorder's image): none of its rows are the target's. Thread
/// states sampled 100 times a second from the start see it while the recorder reads kernel
/// symbols, so rows of it would show here.
#[test]
fn the_gate_child_is_not_a_thread_of_the_target() {
    if !bpf_available("the_gate_child_is_not_a_thread_of_the_target") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("gate");
    let raw = dir.join("raw.arrow");
    let rec = sh(&format!(
        "stacks-record -e state:uk:100,switch:uk:0,profile:u:999 -- sleep 0.3 > {}",
        raw.display()
    ));
    check(&rec, "record a command");
    let batches = read_stream(&raw);
    let mut state_rows = 0;
    // `sleep 0.3` is one 300 ms call: with `switch` on, its rows' time in it is the time since
    // `switch`'s switch-out, growing pass by pass to about 300 ms.
    let mut waits: Vec<Option<i64>> = Vec::new();
    for b in &batches {
        let duration = b
            .column_by_name("duration")
            .unwrap()
            .as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let (kind, comm, thread) = (
                text(b, "kind", i).unwrap_or_default(),
                text(b, "comm", i).unwrap_or_default(),
                text(b, "thread", i).unwrap_or_default(),
            );
            assert!(
                comm != "stacks-record" && thread != "stacks-record",
                "a {kind} row of the recorder's own pre-exec child: comm {comm:?}, thread {thread:?}"
            );
            if kind == "state" {
                state_rows += 1;
                assert_eq!(comm, "sleep", "state rows are the command's");
                if text(b, "syscall", i).as_deref() == Some("clock_nanosleep") {
                    waits.push(duration.is_valid(i).then(|| duration.value(i)));
                }
            }
        }
    }
    assert!(state_rows > 0, "the command's thread states are recorded");
    let known: Vec<i64> = waits.iter().flatten().copied().collect();
    assert!(
        waits.len() >= 10
            && known.len() == waits.len()
            && known.windows(2).all(|w| w[0] < w[1])
            && known.iter().all(|&d| d > 0 && d <= 310_000_000)
            && known.last().is_some_and(|&d| d >= 200_000_000),
        "the sleep's rows: each with its time in the call so far, growing to 200-310 ms: \
         {waits:?}"
    );
}
