//! stacks-agent's CPU budget end to end (#44 item 4, #65): a flood of system calls from a
//! recorded process, far over a low `--budget-cpu`, makes the agent shed within 30 s — first
//! in place (the profile rate), then, still a flood, to the last level — each a log line and
//! its metrics, after which the recording costs less than the budget; the file sets carry the
//! lower rate (`profile` rows' `value` is their period); when the flood stops, the agent
//! restores the level before once it is estimated to fit, or tries it once the last one was
//! held for its probe time (60 windows). And a steady workload over the budget degraded in
//! place, with honest totals (below).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stacks_tests::{agent_metrics, bin, bpf_available, bpf_serial, python, scratch};

/// Kill what is still running when the test fails half-way.
struct Reap(Vec<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_flood_over_the_budget_is_shed_and_restored_when_it_stops() {
    let test = "a_flood_over_the_budget_is_shed_and_restored_when_it_stops";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("agent-budget");
    let store = dir.join("store");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // 5% of the host's CPUs; the flood (one-byte writes to /dev/null as fast as a thread can,
    // each a `vfs` event with its user stack) costs the recorder, the BPF programs and the
    // symbolizer several times that.
    const BUDGET: f64 = 0.05;
    let agent = Command::new(bin("stacks-agent"))
        .args(["stacks-workload", "-e", "profile:u:49,vfs:u"])
        .args(["--store", store.to_str().unwrap(), "--max-age", "5s"])
        .args([
            "--metrics",
            &format!("127.0.0.1:{port}"),
            "--budget-cpu",
            "5%",
            "--budget-window",
            "2s",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    let mut running = Reap(vec![agent]);
    let log = || std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let get = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(-1.0);
    let wait_for = |what: &str, limit: Duration, ok: &dyn Fn(&BTreeMap<String, f64>) -> bool| {
        let start = Instant::now();
        loop {
            let m = agent_metrics(port);
            if ok(&m) {
                return (start.elapsed(), m);
            }
            assert!(
                start.elapsed() < limit,
                "{what} within {limit:?}: {m:?}\n{}",
                log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    // Idle: the configured events, four levels (profile at a quarter of its rate, vfs without
    // stacks, vfs stopped), none taken.
    wait_for("the agent up", Duration::from_secs(30), &|m| {
        get(m, "stacks_agent_stage_up{stage=\"record\"}") == 1.0
            && get(m, "stacks_agent_budget_levels") == 4.0
    });
    std::thread::sleep(Duration::from_secs(5));
    let m = agent_metrics(port);
    assert_eq!(
        get(&m, "stacks_agent_budget_level"),
        0.0,
        "{m:?}\n{}",
        log()
    );
    assert_eq!(get(&m, "stacks_agent_budget_cpu_ratio"), BUDGET);
    assert_eq!(
        get(
            &m,
            "stacks_agent_recording_info{events=\"profile:u:49,vfs:u\"}"
        ),
        1.0,
        "{m:?}"
    );

    let flood = Command::new(bin("stacks-workload"))
        .args(["span-bench", "--layer", "none", "--pairs", "0"])
        .args(["--writes", "100000000000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    running.0.push(flood);
    // Shed within 30 s: more than twice the budget, so first to the last level taken in
    // place (the profile at a quarter of its rate: this flood is not of it), then straight
    // to the last level.
    let (shed_after, m) = wait_for("a shed to the last level", Duration::from_secs(60), &|m| {
        get(m, "stacks_agent_budget_level") == 3.0
    });
    assert_eq!(
        get(&m, "stacks_agent_budget_changes_total{direction=\"shed\"}"),
        2.0,
        "{m:?}\n{}",
        log()
    );
    let sheds: Vec<String> = log()
        .lines()
        .filter(|l| l.starts_with("stacks-agent: budget: over budget for 2s"))
        .map(str::to_string)
        .collect();
    assert!(
        sheds.len() == 2
            && sheds[0].contains(
                "shedding to level 1 of 3 (profile and state at a quarter of their rate)"
            )
            && sheds[0]
                .ends_with("the recorder records -e profile:u:12,vfs:u from now on (in place)")
            && sheds[1].contains("shedding to level 3 of 3 (IO kinds stopped)")
            && sheds[1].ends_with(
                "the recorder restarts with -e profile:u:12 (the packer finishes its set first)"
            ),
        "{sheds:?}\n{}",
        log()
    );
    // The recorder started again at that level (after handing over what it held: in a debug
    // build under this flood that takes a while), and the recording now costs less than the
    // budget though the flood goes on.
    let (under_after, m) = wait_for("under budget", Duration::from_secs(90), &|m| {
        get(m, "stacks_agent_recording_info{events=\"profile:u:12\"}") == 1.0
            && (0.0..BUDGET).contains(&get(m, "stacks_agent_budget_used_cpu_ratio"))
            && get(m, "stacks_agent_budget_used_cpu_ratio") > 0.0
    });
    let used_shed = get(&m, "stacks_agent_budget_used_cpu_ratio");
    // Profile rows at the shed rate reach the store while the flood runs.
    std::thread::sleep(Duration::from_secs(8));
    let mut flood = running.0.pop().unwrap();
    let _ = flood.kill();
    let _ = flood.wait();

    // Restored once level 2 is estimated to fit for 6 windows (what the last level costs
    // once the flood stopped, times what level 1 cost over it under the flood), or, if that
    // estimate stays over, tried again once the last level was held 60 windows (2 minutes:
    // at the last level the flood's kind is not recorded, so its end is not seen).
    let (restore_after, m) = wait_for("a restore", Duration::from_secs(200), &|m| {
        get(
            m,
            "stacks_agent_budget_changes_total{direction=\"restore\"}",
        ) >= 1.0
    });
    assert_eq!(get(&m, "stacks_agent_budget_level"), 2.0, "{m:?}");
    let restore_line = log()
        .lines()
        .find(|l| {
            l.starts_with("stacks-agent: budget: level 2 estimated at ")
                || l.starts_with("stacks-agent: budget: level 3 held for ")
        })
        .map(str::to_string)
        .unwrap_or_else(|| panic!("a log line for the restore:\n{}", log()));
    assert!(
        (restore_line.contains("restoring level 2 of 3 (IO kinds without stacks)")
            || restore_line.contains("trying level 2 of 3 again (IO kinds without stacks)"))
            && restore_line.contains("-e profile:u:12,vfs:n"),
        "{restore_line}"
    );
    wait_for(
        "the restored level recording",
        Duration::from_secs(30),
        &|m| {
            get(
                m,
                "stacks_agent_recording_info{events=\"profile:u:12,vfs:n\"}",
            ) == 1.0
        },
    );
    assert_eq!(
        get(&m, "stacks_agent_stage_restarts_total{stage=\"record\"}"),
        0.0,
        "a budget change is not a restart"
    );

    // SIGTERM, then the store: CPU samples at both rates, each row's value its period.
    let mut agent = running.0.remove(0);
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success(), "{}", log());
    let out = python(
        r#"
import glob, sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
t = pa.concat_tables([pq.read_table(f, columns=["kind", "value"])
                      for f in sorted(glob.glob(sys.argv[1] + "/*.samples.parquet"))])
t = t.filter(pc.equal(t["kind"], "profile"))
for v in sorted(set(t["value"].to_pylist())):
    print(v)
"#,
        &[store.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let periods: Vec<u64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert_eq!(
        periods,
        [1_000_000_000 / 49, 1_000_000_000 / 12],
        "profile rows at 49 Hz, then 12 Hz: {text}"
    );
    eprintln!(
        "budget: the last level {shed_after:.1?} into the flood, under budget ({:.2}%) {under_after:.1?} after; restored {restore_after:.1?} after the flood stopped",
        used_shed * 100.0
    );
}

/// #65 item 2: a steady workload over the budget is degraded in place. `stacks-workload sleep`
/// blocks ~900 times a second in 1 ms sleeps, each an off-CPU interval with its stacks and its
/// waker: as configured (`switch`'s MIN 1 ms) that costs the recording more than the 3% budget
/// in the test build (3.5-4.8% a second with its dependencies optimized; 7-11% when they were
/// not, so the budget was 6% then); not twice the budget, a flood, which would go at once to
/// the last level taken in place; `switch`'s MIN raised to 10 ms, written
/// to the running recorder, folds them (their time and count kept) and the recording costs
/// about 1%. Asserted: at least one level
/// taken and at most two, every one in place — 0 recorder restarts, one pipeline start, no
/// restart logged; the budget held after the change; the sleeper's `switch` rows in every 20 s
/// of its run; and its off-CPU time and number of blocks, summed over rows taken at both
/// levels (single intervals, then folded ones), within 2% of what the workload measured
/// (its wall time less its CPU time, and the kernel's count of its voluntary switches). The
/// controller's window is 5 s here (`--budget-window`), not 10 s, to keep the test short.
#[test]
fn a_steady_workload_is_degraded_in_place_with_honest_totals() {
    let test = "a_steady_workload_is_degraded_in_place_with_honest_totals";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("agent-budget-in-place");
    let store = dir.join("store");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    const BUDGET: f64 = 0.03;
    let agent = Command::new(bin("stacks-agent"))
        .args([
            "stacks-workload",
            "-e",
            "profile:u:49,state:uk:5,switch:uk,wake:u",
        ])
        .args(["--store", store.to_str().unwrap(), "--max-age", "10s"])
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .args(["--budget-cpu", "3%", "--budget-window", "5s"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    let mut running = Reap(vec![agent]);
    let log = || std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let get = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(-1.0);
    let start = Instant::now();
    loop {
        let m = agent_metrics(port);
        if get(&m, "stacks_agent_stage_up{stage=\"record\"}") == 1.0
            && get(&m, "stacks_agent_budget_levels") == 6.0
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the agent up: {m:?}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Past the recorder's start (its cost is not counted for 3 s).
    std::thread::sleep(Duration::from_secs(4));
    let report = dir.join("sleep.json");
    let mut sleeper = Command::new(bin("stacks-workload"))
        .args(["--report", report.to_str().unwrap()])
        .args(["sleep", "--count", "90000", "--ms", "1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Each second: the level, the cost; until the sleeper is done.
    let mut seen: Vec<(Duration, f64, f64, f64)> = Vec::new();
    let t0 = Instant::now();
    while sleeper.try_wait().unwrap().is_none() {
        let m = agent_metrics(port);
        let changes = get(&m, "stacks_agent_budget_changes_total{direction=\"shed\"}")
            + get(
                &m,
                "stacks_agent_budget_changes_total{direction=\"restore\"}",
            );
        seen.push((
            t0.elapsed(),
            get(&m, "stacks_agent_budget_level"),
            get(&m, "stacks_agent_budget_used_cpu_ratio"),
            changes,
        ));
        assert!(t0.elapsed() < Duration::from_secs(400), "the sleeper ends");
        std::thread::sleep(Duration::from_secs(1));
    }
    std::thread::sleep(Duration::from_secs(3));
    let m = agent_metrics(port);
    let changes = get(&m, "stacks_agent_budget_changes_total{direction=\"shed\"}")
        + get(
            &m,
            "stacks_agent_budget_changes_total{direction=\"restore\"}",
        );
    assert!(
        (1.0..=2.0).contains(&changes),
        "{changes} level changes: {seen:?}\n{}",
        log()
    );
    assert_eq!(
        get(&m, "stacks_agent_stage_restarts_total{stage=\"record\"}"),
        0.0,
        "{}",
        log()
    );
    assert_eq!(
        get(&m, "stacks_agent_pipeline_starts_total"),
        1.0,
        "no restart for a level: {}",
        log()
    );
    // Above level 0, what the level before would cost now: it was not restored, so the
    // estimate is over what a restore asks (3/4 of the budget) but for moments.
    let estimate = get(&m, "stacks_agent_budget_restore_estimate_cpu_ratio");
    assert!(estimate > 0.0, "{m:?}");
    assert!(
        log().contains("(in place)") && !log().contains("the recorder restarts with"),
        "{}",
        log()
    );
    // The recorder took it (MIN 10 ms, then intervals and wakeups 1 in 4, or, when the first
    // window was over twice the budget, the last level taken in place at once: MIN 100 ms,
    // intervals and wakeups 1 in 4 and the rates at a quarter).
    assert!(
        log()
            .lines()
            .any(|l| l.starts_with("stacks-record: control: recording ")
                && l.contains(",switch:uk:")
                && [
                    "ms,wake:u:1,state:uk:5 from now on (in place)",
                    "ms:4,wake:u:4,state:uk:5 from now on (in place)",
                    "ms:4,wake:u:4,state:uk:1 from now on (in place)"
                ]
                .iter()
                .any(|end| l.ends_with(end))),
        "{}",
        log()
    );
    // The budget held once the last level taken was measured (15 s after it).
    let last_change = seen
        .iter()
        .find(|s| s.3 == changes)
        .map(|s| s.0)
        .expect("the change seen");
    let after: Vec<f64> = seen
        .iter()
        .filter(|s| s.0 > last_change + Duration::from_secs(15))
        .map(|s| s.2)
        .collect();
    assert!(after.len() >= 30, "{seen:?}");
    let mean = after.iter().sum::<f64>() / after.len() as f64;
    assert!(
        mean < BUDGET,
        "{:.2}% after the change: {seen:?}",
        mean * 100.0
    );

    let mut agent = running.0.remove(0);
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success(), "{}", log());
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let tid = truth["tid"].as_i64().unwrap();
    let off_cpu_ns = truth["off_cpu_ns"].as_f64().unwrap();
    let blocked = truth["blocked"].as_f64().unwrap();
    // The sleeper's switch rows: sums, single and folded rows, rows in each 20 s of its run.
    let out = python(
        r#"
import glob, json, sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
store, tid = sys.argv[1], int(sys.argv[2])
t = pa.concat_tables([pq.read_table(f, columns=["time", "kind", "tid", "value", "count"])
                      for f in sorted(glob.glob(store + "/*.samples.parquet"))])
t = t.filter(pc.and_(pc.equal(t["kind"], "switch"), pc.equal(t["tid"], tid)))
times = [x.value for x in t["time"]]
counts = t["count"].to_pylist()
first, last = min(times), max(times)
buckets = [0] * (int((last - first) // 20_000_000_000) + 1)
for x in times:
    buckets[int((x - first) // 20_000_000_000)] += 1
print(json.dumps({"value": pc.sum(t["value"]).as_py(), "count": sum(counts),
                  "single": sum(1 for c in counts if c == 1),
                  "folded": sum(1 for c in counts if c > 1),
                  "span_s": (last - first) / 1e9, "buckets": buckets}))
"#,
        &[store.to_str().unwrap(), &tid.to_string()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let value = rows["value"].as_f64().unwrap();
    let count = rows["count"].as_f64().unwrap();
    let buckets: Vec<u64> = rows["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert!(
        rows["single"].as_u64().unwrap() > 0 && rows["folded"].as_u64().unwrap() > 0,
        "rows at both levels: {rows}"
    );
    assert!(
        rows["span_s"].as_f64().unwrap() > 80.0 && buckets.iter().all(|&b| b > 0),
        "switch rows in every 20 s: {rows}"
    );
    assert!(
        (value / off_cpu_ns - 1.0).abs() < 0.02,
        "off-CPU {:.3} s in the rows, {:.3} s measured: {rows} {truth}",
        value / 1e9,
        off_cpu_ns / 1e9
    );
    assert!(
        (count / blocked - 1.0).abs() < 0.02,
        "{count} intervals in the rows, {blocked} blocks: {rows} {truth}"
    );
    eprintln!(
        "in place: {changes} level change(s), {:.2}% of the host's CPUs after it (budget 3%; the level before estimated at {:.2}%); off-CPU {:.3} s in the rows vs {:.3} s measured ({:+.2}%), intervals {count} vs {blocked}",
        mean * 100.0,
        estimate * 100.0,
        value / 1e9,
        off_cpu_ns / 1e9,
        (value / off_cpu_ns - 1.0) * 100.0
    );
}
