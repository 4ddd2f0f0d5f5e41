//! Continuous recording on a busy host: a flood of IO events (a pipe ping-pong pair making
//! ~100k read/write calls a second, an fsyncing writer, two CPU hogs keeping both CPUs busy)
//! recorded with `-a` loses nothing of any kind. CPU samples come through their own ring
//! buffer; IO events the recorder cannot keep up with are summed in the kernel, so the
//! workload's own counts of calls and bytes come out exact, through the store, the bundled
//! queries and stacks-pprof.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use stacks_tests::{ScratchDir, bpf_available, bpf_serial, check, scratch, sh};

/// The events of the flood runs: the mix, all at once.
const EVENTS: &str = "profile:u:99,switch:uk,rss:u:29,vfs:u";

/// One recording of the contention workload with `-a` through symbolize and pack.
struct Flood {
    dir: ScratchDir,
    stderr: String,
    report: Value,
}

/// Record `-a -e events` (with `extra` recorder options) while `stacks-workload contention`
/// runs for `seconds`, started once the recorder is ready.
fn flood(name: &str, events: &str, extra: &str, seconds: u32) -> Flood {
    let dir = scratch(name);
    let d = dir.display();
    let out = sh(&format!(
        "stacks-record -a -e {events} {extra} -d {} 2> {d}/rec.err \
           | stacks-symbolize | stacks-pack {d}/out &
         for i in $(seq 200); do grep -q recording {d}/rec.err && break; sleep 0.05; done
         stacks-workload --report {d}/report.json contention --seconds {seconds} --dir {d} \
           > /dev/null || exit 1
         wait $!",
        seconds + 2
    ));
    let stderr = std::fs::read_to_string(dir.join("rec.err")).unwrap_or_default();
    check(&out, &format!("flood recording ({stderr})"));
    let report = serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap())
        .expect("workload report");
    Flood {
        dir,
        stderr,
        report,
    }
}

/// The rows of `sql` over the recording's store.
fn query(dir: &Path, sql: &str) -> Vec<Value> {
    let q = sh(&format!(
        "stacks-query -d {}/out --format ndjson -c \"{sql}\"",
        dir.display()
    ));
    check(&q, sql);
    String::from_utf8_lossy(&q.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("ndjson row"))
        .collect()
}

fn int(v: &Value, key: &str) -> i64 {
    v[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer `{key}` in {v}"))
}

/// (calls, bytes) the recording has of thread `tid`'s `op` calls (any op: None).
fn recorded(sums: &HashMap<(i64, String), (i64, i64)>, tid: i64, op: Option<&str>) -> (i64, i64) {
    sums.iter()
        .filter(|((t, o), _)| *t == tid && op.is_none_or(|op| op == o))
        .fold((0, 0), |(c, b), (_, (c2, b2))| (c + c2, b + b2))
}

/// Checks a flood recording: nothing lost, the workload's writes (`ping`, `writer`: their
/// reads include the schedstat reads of their own measurement) and all of `pong`'s calls
/// exact. Returns the events aggregated and the vfs rows of more than one call.
fn check_totals(f: &Flood, run: usize) -> (u64, i64) {
    assert!(
        f.stderr.contains("lost 0 events"),
        "run {run}: events were lost:\n{}",
        f.stderr
    );
    let lost = query(
        &f.dir,
        "SELECT count(*) AS n FROM samples WHERE kind = 'lost'",
    );
    assert_eq!(int(&lost[0], "n"), 0, "run {run}: lost rows");
    let rows = query(
        &f.dir,
        "SELECT tid, op, CAST(sum(coalesce(count, 1)) AS BIGINT) AS calls, \
         CAST(sum(value) AS BIGINT) AS bytes FROM samples WHERE kind = 'vfs' GROUP BY tid, op",
    );
    let sums: HashMap<(i64, String), (i64, i64)> = rows
        .iter()
        .map(|r| {
            (
                (int(r, "tid"), r["op"].as_str().unwrap_or("").to_string()),
                (int(r, "calls"), int(r, "bytes")),
            )
        })
        .collect();
    for t in f.report["threads"].as_array().unwrap() {
        let (tid, calls, bytes) = (int(t, "tid"), int(t, "vfs_calls"), int(t, "vfs_bytes"));
        match t["thread"].as_str().unwrap() {
            // One write and one read of a byte per call.
            "ping" => assert_eq!(
                recorded(&sums, tid, Some("write")),
                (calls / 2, bytes / 2),
                "run {run}: ping's writes"
            ),
            "writer" => assert_eq!(
                recorded(&sums, tid, Some("write")),
                (calls, bytes),
                "run {run}: writer's writes"
            ),
            _ => {}
        }
    }
    let pong = &f.report["pong"];
    assert_eq!(
        recorded(&sums, int(pong, "tid"), None),
        (int(pong, "vfs_calls"), int(pong, "vfs_bytes")),
        "run {run}: pong's reads and writes"
    );
    let folded = query(
        &f.dir,
        "SELECT count(*) AS n FROM samples WHERE kind = 'vfs' AND count > 1",
    );
    (aggregated(&f.stderr), int(&folded[0], "n"))
}

/// The summary's count of vfs events aggregated in the kernel (0 when none were).
fn aggregated(stderr: &str) -> u64 {
    stderr
        .split("; ")
        .find(|p| p.ends_with("vfs events aggregated in the kernel (ring buffer backed up)"))
        .and_then(|p| p.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// CPU samples over the hogs' window (both CPUs busy all along: more runnable threads than
/// CPUs) against CPUs × 99 Hz × seconds.
fn check_cpu_samples(f: &Flood, run: usize) {
    let hogs: Vec<&Value> = f.report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["thread"].as_str().unwrap().starts_with("hog"))
        .collect();
    // The window where every thread ran (each measures from its own start to its own end).
    let start = hogs.iter().map(|t| int(t, "start_ns")).max().unwrap();
    let end = hogs.iter().map(|t| int(t, "end_ns")).min().unwrap();
    let rows = query(
        &f.dir,
        &format!(
            "SELECT cpu, CAST(time AS BIGINT) AS t FROM samples WHERE kind = 'profile' \
             AND CAST(time AS BIGINT) >= {start} AND CAST(time AS BIGINT) < {end} ORDER BY cpu, t"
        ),
    );
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut times: Vec<Vec<i64>> = vec![Vec::new(); cpus];
    for r in &rows {
        times[int(r, "cpu") as usize].push(int(r, "t"));
    }
    let stalled = machine_stalls(&times, start, end);
    let seconds = (end - start - stalled) as f64 / 1e9;
    let expected = cpus as f64 * 99.0 * seconds;
    let got = rows.len() as f64;
    eprintln!(
        "run {run}: {got} CPU samples in {seconds:.3} s (the machine stalled {:.1} ms), expected \
         {expected:.0}",
        stalled as f64 / 1e6
    );
    assert!(
        (got - expected).abs() <= expected * 0.02,
        "run {run}: {got} CPU samples in the hogs' {seconds:.3} s, expected {expected:.0} \
         ({cpus} CPUs × 99 Hz) ± 2%"
    );
}

/// Time no CPU was sampled (every CPU's samples have a gap of more than two periods around
/// it) between `start` and `end`: the virtual machine was not running (its host's
/// scheduler), and no CPU-clock timer fired, nor did any thread run. A loss of the recorder is
/// on one CPU at a time (a full ring buffer, a skipped program run) and counted as such.
fn machine_stalls(times: &[Vec<i64>], start: i64, end: i64) -> i64 {
    const GAP: i64 = 2 * 1_000_000_000 / 99;
    // Each CPU's gaps, as intervals.
    let gaps: Vec<Vec<(i64, i64)>> = times
        .iter()
        .map(|ts| {
            let mut edges = vec![start];
            edges.extend(ts);
            edges.push(end);
            edges
                .windows(2)
                .filter(|w| w[1] - w[0] > GAP)
                .map(|w| (w[0], w[1]))
                .collect()
        })
        .collect();
    // Their intersection over every CPU, less one period at each end (the sample that would
    // have come anyway).
    let mut common = gaps[0].clone();
    for other in &gaps[1..] {
        let mut next = Vec::new();
        for &(a, b) in &common {
            for &(c, d) in other {
                let (lo, hi) = (a.max(c), b.min(d));
                if hi > lo {
                    next.push((lo, hi));
                }
            }
        }
        common = next;
    }
    common.iter().map(|(a, b)| (b - a - GAP / 2).max(0)).sum()
}

/// The flood, five runs: 0 lost of every kind, CPU samples within 2% of CPUs × HZ ×
/// seconds, the writer's and the ping-pong's bytes and calls exact in the store.
#[test]
fn a_flood_of_io_loses_nothing_and_keeps_exact_totals() {
    if !bpf_available("a_flood_of_io_loses_nothing_and_keeps_exact_totals") {
        return;
    }
    let _serial = bpf_serial();
    for run in 0..5 {
        let f = flood("flood", EVENTS, "", 3);
        let (aggregated, _) = check_totals(&f, run);
        check_cpu_samples(&f, run);
        eprintln!("run {run}: {aggregated} vfs events aggregated in the kernel");
    }
}

/// A small IO ring forces the switch to aggregation and back within one recording: rows of
/// single calls and summed rows add up exactly to the workload's counts, and so do the
/// bundled `vfs-write` query and stacks-pprof's profile of it.
#[test]
fn aggregation_switches_on_and_back_with_exact_totals() {
    if !bpf_available("aggregation_switches_on_and_back_with_exact_totals") {
        return;
    }
    let _serial = bpf_serial();
    let f = flood("aggregate", "vfs:u", "--ringbuf-mb 1", 3);
    let (aggregated, summed_rows) = check_totals(&f, 0);
    assert!(
        aggregated > 0 && summed_rows > 0,
        "no aggregation with a 1 MiB ring: {}",
        f.stderr
    );
    let pong = &f.report["pong"];
    let single = query(
        &f.dir,
        &format!(
            "SELECT count(*) AS n FROM samples WHERE kind = 'vfs' AND tid = {} AND count = 1",
            int(pong, "tid")
        ),
    );
    assert!(
        int(&single[0], "n") > 0,
        "the recording never went back to single rows: {}",
        f.stderr
    );
    // The bundled query and the profile made of it count what the workload did.
    let writer = f.report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["thread"] == "writer")
        .unwrap();
    let d = f.dir.display();
    let q = sh(&format!(
        "stacks-query -d {d}/out vfs-write --format ndjson > {d}/q.ndjson && \
         stacks-query -d {d}/out vfs-write > {d}/q.arrow && \
         stacks-pprof --value calls {d}/q.arrow > {d}/calls.pb.gz && \
         go tool pprof -raw {d}/calls.pb.gz > /dev/null && \
         stacks-pprof --value calls -f folded {d}/q.arrow"
    ));
    check(&q, "vfs-write through stacks-pprof and go tool pprof");
    let rows: Vec<Value> = std::fs::read_to_string(f.dir.join("q.ndjson"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tid = int(writer, "tid");
    let (calls, bytes) = rows
        .iter()
        .filter(|r| int(r, "tid") == tid)
        .fold((0, 0), |(c, b), r| {
            (c + int(r, "calls"), b + int(r, "bytes"))
        });
    assert_eq!(
        (calls, bytes),
        (int(writer, "vfs_calls"), int(writer, "vfs_bytes")),
        "vfs-write's rows of the writer"
    );
    let all_calls: i64 = rows.iter().map(|r| int(r, "calls")).sum();
    let profile_calls: i64 = String::from_utf8_lossy(&q.stdout)
        .lines()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum();
    assert_eq!(
        profile_calls, all_calls,
        "stacks-pprof's calls against the query's"
    );
}

/// `--cgroup`: a workload in a cgroup made for the test is recorded, the same workload outside
/// it is not (filtered in the kernel: not a row of it), and a missing cgroup is a one-line
/// error naming it.
#[test]
fn cgroup_records_only_the_processes_in_it() {
    if !bpf_available("cgroup_records_only_the_processes_in_it") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("cgroup");
    let d = dir.display();
    let name = format!("stacks-test-{}", std::process::id());
    let out = sh(&format!(
        "root=$(awk '$9 == \"cgroup2\" {{ print $5; exit }}' /proc/self/mountinfo)
         test -n \"$root\" || {{ echo no cgroup2 mount >&2; exit 1; }}
         cg=$root/{name}; mkdir -p $cg/inner
         trap 'rmdir $cg/inner $cg' EXIT
         stacks-record --cgroup /{name} -e profile:u:99,vfs:u -d 4 -o {d}/raw.arrow \
           2> {d}/rec.err &
         for i in $(seq 200); do grep -q recording {d}/rec.err && break; sleep 0.05; done
         sh -c \"echo \\$\\$ > $cg/inner/cgroup.procs && exec stacks-workload \
           --report {d}/in.json contention --seconds 1 --dir {d}\" > /dev/null &
         stacks-workload --report {d}/out.json contention --seconds 1 --dir {d} > /dev/null
         wait"
    ));
    let stderr = std::fs::read_to_string(dir.join("rec.err")).unwrap_or_default();
    check(&out, &format!("recording a cgroup ({stderr})"));
    let report = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
    };
    let tids = |r: &Value| -> Vec<i64> {
        r["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| int(t, "tid"))
            .chain([int(&r["pong"], "tid")])
            .collect()
    };
    let (inside, outside) = (tids(&report("in.json")), tids(&report("out.json")));
    let mut by_tid: HashMap<i64, (u64, String)> = HashMap::new();
    for b in stacks_tests::read_stream(&dir.join("raw.arrow")) {
        use arrow_array::cast::AsArray;
        use arrow_array::types::Int32Type;
        let tid = b.column_by_name("tid").unwrap().as_primitive::<Int32Type>();
        let cgroup = b.column_by_name("cgroup").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            let e = by_tid
                .entry(i64::from(tid.value(i)))
                .or_insert((0, cgroup.value(i).to_string()));
            e.0 += 1;
        }
    }
    for tid in &inside {
        let (rows, cgroup) = by_tid
            .get(tid)
            .unwrap_or_else(|| panic!("no rows of thread {tid} in the cgroup: {stderr}"));
        assert!(*rows > 0);
        assert_eq!(cgroup, &format!("/{name}/inner"), "thread {tid}'s cgroup");
    }
    for tid in &outside {
        assert!(
            !by_tid.contains_key(tid),
            "thread {tid}, outside the cgroup, was recorded"
        );
    }
    assert!(
        by_tid
            .values()
            .all(|(_, c)| c.starts_with(&format!("/{name}"))),
        "rows of other cgroups: {:?}",
        by_tid
            .values()
            .map(|(_, c)| c)
            .collect::<std::collections::BTreeSet<_>>()
    );
    // A missing cgroup: one line naming it, before anything is recorded.
    let missing = sh("stacks-record --cgroup /no-such-cgroup.service -d 1 -o /dev/null");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success(), "a missing cgroup was accepted");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(
        err.contains("--cgroup /no-such-cgroup.service: no such cgroup"),
        "{err}"
    );
}
