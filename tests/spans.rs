//! End-to-end ground truth for `tracing` span labels: the `spans` workload (tracing-stacks
//! layer) runs a loop of spans with known CPU, sleep and IO, and reports each span's CPU time
//! by its thread's CPU clock; the recorded rows, through symbolize, pack and the bundled
//! queries, must say the same per span name: CPU in the same ratios, the nap's off-CPU time,
//! the io span's bytes exactly, one span id per iteration, inner spans under their outer span.
//! The same on tokio (where a parked worker is in no span), when the recorder attaches to the
//! running process, for a stripped copy of the workload; a program without the layer records
//! no spans and no warning, and a thread context whose offset does not check out is refused.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use stacks_tests::{ScratchDir, bin, bpf_available, bpf_serial, check, scratch, sh};

/// The columns of `stacks-query -d STORE --format json ARGS` as rows of JSON objects.
fn query(store: &Path, args: &str) -> Vec<Value> {
    let out = sh(&format!(
        "stacks-query -d {} --format json {args}",
        store.display()
    ));
    check(&out, &format!("stacks-query {args}"));
    match serde_json::from_slice(&out.stdout).expect("stacks-query json") {
        Value::Array(rows) => rows,
        other => panic!("not an array: {other}"),
    }
}

fn int(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// One recording of the workload: its report and store.
struct Run {
    dir: ScratchDir,
    truth: Value,
    stderr: String,
    /// The BPF tests' lock, when the test holds it through the run.
    _serial: Option<std::sync::MutexGuard<'static, ()>>,
}

impl Run {
    fn store(&self) -> std::path::PathBuf {
        self.dir.join("store")
    }

    /// `spans` query rows of the workload's process, by span name.
    fn spans(&self) -> HashMap<String, Value> {
        query(&self.store(), "spans -p comm=stacks-workload")
            .into_iter()
            .map(|r| (r["span_name"].as_str().unwrap_or("none").to_string(), r))
            .collect()
    }

    /// CPU ns per span name (`none`: no span) on the workload's loop threads.
    fn cpu_by_span(&self, thread: &str) -> HashMap<String, i64> {
        query(
            &self.store(),
            &format!(
                "-c \"select coalesce(span_name, 'none') as s, sum(value) as ns from samples \
                 where kind = 'profile' and thread = '{thread}' group by 1\""
            ),
        )
        .into_iter()
        .map(|r| (r["s"].as_str().unwrap().to_string(), int(&r, "ns")))
        .collect()
    }

    fn truth_ns(&self, span: &str) -> f64 {
        self.truth["cpu_ns"][span].as_i64().unwrap() as f64
    }
}

/// Record the command `workload` under `events` (`env`: variables for stacks-record),
/// symbolized and packed into a scratch store; the workload's report is its truth.
fn record(test: &str, env: &str, events: &str, workload: &str) -> Run {
    let dir = scratch(test);
    let d = dir.display();
    let out = sh(&format!(
        "{env} stacks-record -e {events} -- {workload} --report {d}/truth.json \
         | stacks-symbolize | stacks-pack {d}/store"
    ));
    check(&out, &format!("record {workload}"));
    let truth = serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    Run {
        dir,
        truth,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        _serial: None,
    }
}

/// The `spans` workload for `seconds`, its io file in `dir`.
fn spans_workload(dir: &Path, seconds: f64, extra: &str) -> String {
    format!(
        "{} spans --seconds {seconds} --file {}/io.tmp {extra}",
        bin("stacks-workload").display(),
        dir.display()
    )
}

/// The CPU split by span on `thread` matches the workload's own clocks: burn against the time
/// in no span (the 30:10 loop) and inner against outer (5:5), each within 5 points.
fn check_cpu_ratios(run: &Run, thread: &str) {
    let cpu = run.cpu_by_span(thread);
    let got = |s: &str| *cpu.get(s).unwrap_or(&0) as f64;
    let share = |a: f64, b: f64| a / (a + b);
    let burn = share(got("burn"), got("none"));
    let want = share(run.truth_ns("burn"), run.truth_ns("none"));
    assert!(
        (burn - want).abs() <= 0.05 && (burn - 0.75).abs() <= 0.05,
        "burn share of burn+none: recorded {burn:.3}, workload {want:.3} (cpu {cpu:?})"
    );
    let inner = share(got("inner"), got("outer"));
    let want = share(run.truth_ns("inner"), run.truth_ns("outer"));
    assert!(
        (inner - want).abs() <= 0.05,
        "inner share of inner+outer: recorded {inner:.3}, workload {want:.3}"
    );
    assert!(
        got("nap") <= 0.02 * cpu.values().sum::<i64>() as f64,
        "nap spins no CPU: {cpu:?}"
    );
}

/// IO bytes of the `io` span are exactly what the workload wrote; one burn span id per
/// iteration; every inner span sits under an outer span of the same trace.
fn check_io_ids_nesting(run: &Run) {
    let spans = run.spans();
    let iterations = run.truth["iterations"].as_i64().unwrap();
    let io = &spans["io"];
    assert_eq!(int(io, "write_bytes"), int(&run.truth, "io_bytes"), "{io}");
    assert_eq!(int(&spans["burn"], "spans"), iterations, "burn span ids");
    assert_eq!(int(&spans["inner"], "spans"), iterations, "inner span ids");
    let orphans = query(
        &run.store(),
        "-c \"select count(*) as n from samples i where i.span_name = 'inner' and not exists \
         (select 1 from samples o where o.span_name = 'outer' and o.span_id = i.parent_span_id \
         and o.trace_id = i.trace_id)\"",
    );
    assert_eq!(
        int(&orphans[0], "n"),
        0,
        "inner rows not under an outer span"
    );
}

/// Record the spans workload's loop (`extra`: its options) under `events` for test `test` and
/// check what every variant must give: CPU ratios on the loop's `thread`, IO bytes, span ids
/// and nesting. `None` (skipped) without BPF. The run holds the BPF tests' lock until dropped.
fn recorded_loop(test: &str, events: &str, extra: &str, thread: &str) -> Option<Run> {
    if !bpf_available(test) {
        return None;
    }
    let serial = bpf_serial();
    let io = scratch(&format!("{test}.io"));
    let mut run = record(test, "", events, &spans_workload(&io, 3.0, extra));
    run._serial = Some(serial);
    check_cpu_ratios(&run, thread);
    check_io_ids_nesting(&run);
    Some(run)
}

#[test]
fn spans_label_cpu_offcpu_and_io() {
    let Some(run) = recorded_loop(
        "spans_label_cpu_offcpu_and_io",
        "profile:u:999,switch:u,vfs:u,block:u",
        "",
        "spans",
    ) else {
        return;
    };
    let spans = run.spans();
    // The nap's sleeps, folded short ones included, are its off-CPU time.
    let nap = int(&spans["nap"], "offcpu_ns") as f64;
    let want = int(&run.truth, "nap_wall_ns") as f64;
    assert!(
        (nap / want - 1.0).abs() <= 0.10,
        "nap off-CPU {nap} vs {want}"
    );
    let nominal = run.truth["iterations"].as_f64().unwrap() * 20e6;
    assert!(
        (nap / nominal - 1.0).abs() <= 0.10,
        "nap off-CPU {nap} vs N x 20 ms {nominal}"
    );
    assert!(
        int(&spans["io"], "block_bytes") > 0,
        "fsync's block writes in io: {spans:?}"
    );
    // The pprof of the cpu query is labelled by span: go tool pprof filters on it.
    let pb = run.dir.join("cpu.pb.gz");
    check(
        &sh(&format!(
            "stacks-query -d {} cpu | stacks-pprof -o {}",
            run.store().display(),
            pb.display()
        )),
        "cpu | stacks-pprof",
    );
    let tags = std::process::Command::new("go")
        .args(["tool", "pprof", "-tags", "-tagfocus", "span_name=burn"])
        .arg(&pb)
        .output()
        .expect("go tool pprof");
    check(&tags, "go tool pprof -tags");
    let text = String::from_utf8_lossy(&tags.stdout);
    let names: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("span_name: Total"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(
        !names.is_empty() && names.iter().all(|l| l.ends_with("%): burn")),
        "{text}"
    );
}

#[test]
fn tokio_tasks_carry_their_spans_and_parked_workers_none() {
    let Some(run) = recorded_loop(
        "tokio_tasks_carry_their_spans_and_parked_workers_none",
        "profile:u:999,switch:u,vfs:u",
        "--tokio",
        "spans-worker",
    ) else {
        return;
    };
    // The nap is a timer: the task is parked, its worker waits in no span.
    let spans = run.spans();
    let want = int(&run.truth, "nap_wall_ns") as f64;
    let nap = spans.get("nap").map_or(0, |r| int(r, "offcpu_ns")) as f64;
    assert!(
        nap <= 0.05 * want,
        "nap off-CPU {nap} of {want}: a parked task has no thread"
    );
    let idle = query(
        &run.store(),
        "-c \"select coalesce(sum(value), 0) as ns from samples where kind = 'switch' and \
         thread = 'spans-worker' and state = 'sleeping' and span_name is null\"",
    );
    assert!(
        int(&idle[0], "ns") as f64 >= 0.9 * want,
        "parked workers' sleep {} in no span vs the naps {want}",
        idle[0]
    );
}

#[test]
fn spans_read_when_attaching_to_a_running_stripped_process() {
    if !bpf_available("spans_read_when_attaching_to_a_running_stripped_process") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("spans_attach_stripped");
    let d = dir.display();
    // A stripped copy: the thread context is found in .dynsym (the workload's build script
    // exports it with tracing_stacks::build::export).
    check(
        &sh(&format!(
            "cp {} {d}/app && strip {d}/app && ! readelf -S {d}/app | grep -q symtab",
            bin("stacks-workload").display()
        )),
        "strip a copy of the workload",
    );
    let out = sh(&format!(
        "{d}/app spans --seconds 4 --file {d}/io.tmp --report {d}/truth.json & sleep 1; \
         stacks-record -p $! -d 2 -e profile:u:999 | stacks-symbolize | stacks-pack {d}/store; \
         rc=$?; wait; exit $rc"
    ));
    check(&out, "record the running stripped workload");
    let truth = serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    let run = Run {
        dir,
        truth,
        stderr: String::new(),
        _serial: None,
    };
    // Spans entered before the recorder started are read like the rest.
    check_cpu_ratios(&run, "spans");
}

#[test]
fn no_spans_without_the_layer_and_a_bad_offset_is_refused() {
    if !bpf_available("no_spans_without_the_layer_and_a_bad_offset_is_refused") {
        return;
    }
    let _serial = bpf_serial();
    let w = bin("stacks-workload");
    let run = record(
        "no_spans_without_the_layer",
        "",
        "profile:u:999",
        &format!("{} cpu --seconds 1", w.display()),
    );
    let labelled = query(
        &run.store(),
        "-c \"select count(*) as n, count(span_id) as s from samples\"",
    );
    assert!(int(&labelled[0], "n") > 100, "{labelled:?}");
    assert_eq!(int(&labelled[0], "s"), 0, "no span labels");
    assert!(
        !run.stderr.contains("span labels") && !run.stderr.contains("`tracing`"),
        "no span warnings: {}",
        run.stderr
    );

    // The canary is looked for 8 bytes off: the check fails, nothing is labelled, and the
    // recorder says so.
    let dir = scratch("bad_offset.io");
    let run = record(
        "bad_offset_is_refused",
        "STACKS_TEST_SPAN_SKEW=8",
        "profile:u:999",
        &spans_workload(&dir, 1.0, ""),
    );
    let labelled = query(
        &run.store(),
        "-c \"select count(*) as n, count(span_id) as s from samples\"",
    );
    assert!(int(&labelled[0], "n") > 100, "{labelled:?}");
    assert_eq!(int(&labelled[0], "s"), 0, "no span labels");
    assert!(
        run.stderr.contains("span labels off for pid")
            && run.stderr.contains("TLS offset did not check out"),
        "{}",
        run.stderr
    );
}

#[test]
fn span_rows_time_each_entry_nest_and_stuck_spans_are_found() {
    if !bpf_available("span_rows_time_each_entry_nest_and_stuck_spans_are_found") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("span_rows_time_each_entry_nest_and_stuck_spans_are_found");
    let d = dir.display();
    // The recording ends (2 s) while the workload still runs (it is then terminated, and
    // stacks-record exits with its status, 128 + SIGTERM): its `stuck` thread is in its span
    // for good, the loop thread somewhere in its loop.
    let out = sh(&format!(
        "{{ stacks-record -d 2 -e profile:u:999,switch:u,span:u -- {} --stuck || [ $? = 143 ]; }} \
         | stacks-symbolize | stacks-pack {d}/store",
        spans_workload(&dir, 4.0, "")
    ));
    check(&out, "record the spans workload with -e span");
    let store = dir.join("store");
    let rows = query(
        &store,
        "-c \"select span_name, span_id, parent_span_id, \
         cast(time as bigint) as t, duration from samples where kind = 'span' order by t\"",
    );
    let of =
        |name: &str| -> Vec<&Value> { rows.iter().filter(|r| r["span_name"] == name).collect() };
    let done = |name: &str| -> Vec<(i64, i64, i64)> {
        of(name)
            .into_iter()
            .filter(|r| !r["duration"].is_null())
            .map(|r| (int(r, "span_id"), int(r, "t"), int(r, "duration")))
            .collect()
    };
    let (burn, nap, outer, inner) = (done("burn"), done("nap"), done("outer"), done("inner"));
    assert!(burn.len() >= 15, "burn entries: {}", burn.len());
    // Each entry is a new span (ids distinct) lasting what the loop spent in it.
    let ids: std::collections::HashSet<i64> = burn.iter().map(|b| b.0).collect();
    assert_eq!(ids.len(), burn.len(), "one span id per burn entry");
    let median = |v: &[(i64, i64, i64)]| {
        let mut d: Vec<i64> = v.iter().map(|x| x.2).collect();
        d.sort_unstable();
        d[d.len() / 2] as f64 / 1e6
    };
    let (b, n) = (median(&burn), median(&nap));
    assert!(
        (30.0..=45.0).contains(&b),
        "burn median {b} ms (30 ms of CPU)"
    );
    assert!(
        (20.0..=25.0).contains(&n),
        "nap median {n} ms (20 ms sleeps)"
    );
    // Each inner entry lies within an outer entry that is its parent.
    let parents: HashMap<i64, (i64, i64)> = outer.iter().map(|o| (o.0, (o.1, o.2))).collect();
    for r in of("inner").into_iter().filter(|r| !r["duration"].is_null()) {
        let (t, dur) = (int(r, "t"), int(r, "duration"));
        let parent = int(r, "parent_span_id");
        let &(ot, od) = parents
            .get(&parent)
            .unwrap_or_else(|| panic!("inner {r} has no outer parent among {}", parents.len()));
        assert!(
            ot <= t && t + dur <= ot + od,
            "inner {r} not within its outer ({ot}, {od})"
        );
    }
    assert!(
        inner.len() + 1 >= outer.len(),
        "{} inner, {} outer",
        inner.len(),
        outer.len()
    );

    // The stuck span: entered, never left, parked in a read of an empty pipe.
    let stuck = query(&store, "stuck-spans -p comm=stacks-workload");
    let s: Vec<&Value> = stuck.iter().filter(|r| r["span_name"] == "stuck").collect();
    assert_eq!(s.len(), 1, "{stuck:?}");
    let s = s[0];
    assert_eq!(s["thread"], "stuck");
    assert_eq!(s["parked_state"], "sleeping");
    assert!(int(s, "parked_ns") >= 1_000_000_000, "{s}");
    assert!(
        s["parked_stack"].to_string().contains("wait_forever"),
        "parked where: {s}"
    );

    // stacks-trace draws the span rows as slices on each thread's span lane.
    let out = sh(&format!(
        "stacks-query -d {} -c 'select * from stacks' | stacks-trace",
        store.display()
    ));
    check(&out, "stacks-trace");
    let trace: Value = serde_json::from_slice(&out.stdout).unwrap();
    let slices: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "span" && e["ph"] == "X")
        .collect();
    assert_eq!(slices.len(), rows.len(), "a slice per span row");
    assert!(
        slices
            .iter()
            .any(|e| e["name"] == "burn" && e["args"]["span"] == "burn")
    );
}
