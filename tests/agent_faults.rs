//! Faults under stacks-agent (#64 item 3), each with a real store and a workload of known
//! behaviour: `stacks-workload sleep` blocks in 1 ms sleeps, and the kernel's count of its
//! voluntary switches is the ground truth of its `switch` events. After each fault every
//! finished set is read whole (samples, stacks, frames, by pyarrow) and every event is either
//! in a stored row (`sum(coalesce(count, 1))` of the sleeper's `switch` rows) or counted in a
//! stored `lost` row of cause `…:switch` (within 2%, as tests/agent_budget.rs allows).
//!
//! - The store's disk full (a 16 MiB tmpfs filled by another file): the packer drops the rows,
//!   counted (`store_full:switch`), `/metrics` and the log say so, no stage restarts; the file
//!   removed, it writes again.
//! - A stage SIGSTOPped for 60 s (the symbolizer): the recorder's 1 MiB rings fill and what
//!   does not fit is counted (`ring_buffer_full:switch`); SIGCONT, the pipeline goes on, no
//!   restart.
//! - The store read-only (`mount -o remount,ro`): the same as full (`store_read_only:switch`);
//!   then, still read-only, the packer killed: the agent does not start the pipeline again
//!   until the store can be written (a log line, `stacks_store_writable` 0, the backoff in
//!   `/metrics`, no start meanwhile), and starts it once it can.
//! - A stage killed by its memory cgroup (the packer moved into a cgroup of its own whose limit
//!   is then set low, as a systemd `MemoryMax=` would): restarted, counted as `oom_kill`; the
//!   events that died with it (the set it was writing, the pipes) are counted as lost
//!   (`stage_died:switch`, from the recorder's `--stats` against the packer's) and stored by
//!   the next packer. The sleeper is held (SIGSTOP) from the packer's death until the new
//!   recorder runs: the restart itself is recorded by no one.
//!
//! The SIGSTOP runs beside the other three (two agents at a time), to keep the test near two
//! minutes.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stacks_tests::{
    Tmpfs, agent_metrics, bin, bpf_available, bpf_serial, child_running, free_port, python, scratch,
};

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

/// An agent recording the processes named `name` into `store`.
struct Agent {
    child: Reap,
    port: u16,
    log: PathBuf,
    what: &'static str,
}

impl Agent {
    fn start(dir: &Path, name: &str, store: &Path, what: &'static str) -> Agent {
        Agent::start_aged(dir, name, store, what, "3s")
    }

    /// [`Agent::start`] with the packer's `--max-age`.
    fn start_aged(
        dir: &Path,
        name: &str,
        store: &Path,
        what: &'static str,
        max_age: &str,
    ) -> Agent {
        let port = free_port();
        let log = dir.join(format!("agent-{what}.log"));
        let child = Command::new(bin("stacks-agent"))
            .args([name, "-e", "switch:u", "--ringbuf-mb", "1"])
            .args(["--store", store.to_str().unwrap(), "--max-age", max_age])
            .args(["--metrics", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let agent = Agent {
            child: Reap(vec![child]),
            port,
            log,
            what,
        };
        agent.wait_for("the pipeline up", 60, &|m| {
            ["record", "symbolize", "pack"]
                .iter()
                .all(|s| get(m, &format!("stacks_agent_stage_up{{stage=\"{s}\"}}")) == 1.0)
        });
        // The recorder's programs attached (it is up before they are).
        std::thread::sleep(Duration::from_secs(3));
        agent
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.0[0].id()
    }

    /// `/metrics`: `name{labels}` → value.
    fn metrics(&self) -> BTreeMap<String, f64> {
        agent_metrics(self.port)
    }

    /// Wait up to `secs` for `ok` of `/metrics`; how long it took and the metrics then.
    fn wait_for(
        &self,
        what: &str,
        secs: u64,
        ok: &dyn Fn(&BTreeMap<String, f64>) -> bool,
    ) -> (Duration, BTreeMap<String, f64>) {
        let start = Instant::now();
        loop {
            let m = self.metrics();
            if ok(&m) {
                return (start.elapsed(), m);
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "[{}] {what} within {secs} s: {m:?}\n{}",
                self.what,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The running stage `tool`'s pid.
    fn stage(&self, tool: &str) -> i32 {
        child_running(self.pid(), tool)
            .unwrap_or_else(|| panic!("[{}] no {tool}:\n{}", self.what, self.log()))
    }

    /// SIGTERM; it ends with success.
    fn stop(mut self) -> String {
        let mut child = self.child.0.remove(0);
        // SAFETY: SIGTERM to our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        let log = self.log();
        assert!(status.success(), "[{}] {status}:\n{log}", self.what);
        log
    }
}

fn get(m: &BTreeMap<String, f64>, k: &str) -> f64 {
    m.get(k).copied().unwrap_or(-1.0)
}

/// The restarts of every stage.
fn restarts(m: &BTreeMap<String, f64>) -> f64 {
    ["record", "symbolize", "pack"]
        .iter()
        .map(|s| {
            get(
                m,
                &format!("stacks_agent_stage_restarts_total{{stage=\"{s}\"}}"),
            )
        })
        .sum()
}

/// The workload under a name of its own (so each agent records only its own sleeper), in
/// `dir`.
fn named_workload(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    std::fs::copy(bin("stacks-workload"), &exe).unwrap();
    exe
}

/// A sleeper of `count` 1 ms sleeps, its report to `report`.
fn sleeper(exe: &Path, report: &Path, count: u64) -> Child {
    Command::new(exe)
        .args(["--report", report.to_str().unwrap()])
        .args(["sleep", "--count", &count.to_string(), "--ms", "1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// The sleeper's report: (tid, voluntary switches, seconds it ran).
fn truth(report: &Path) -> (i64, f64, f64) {
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let wall = t["slept_ns"].as_f64().unwrap() / 1e9;
    (
        t["tid"].as_i64().unwrap(),
        t["blocked"].as_f64().unwrap(),
        wall,
    )
}

/// Every finished set of `store` read whole; the `switch` events of `tid` in its rows, and the
/// `lost` rows' events by cause: `{"sets", "stored", "lost": {cause: n}}`.
fn accounting(store: &Path, tid: i64) -> serde_json::Value {
    let out = python(
        r#"
import glob, json, sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
store, tid = sys.argv[1], int(sys.argv[2])
tables = []
files = sorted(glob.glob(store + "/**/*.samples.parquet", recursive=True))
for f in files:
    base = f[: -len(".samples.parquet")]
    for part in (".stacks.parquet", ".frames.parquet"):
        pq.read_table(base + part)
    tables.append(pq.read_table(f, columns=["kind", "tid", "value", "count", "cause"]))
t = pa.concat_tables(tables)
sw = t.filter(pc.and_(pc.equal(t["kind"], "switch"), pc.equal(t["tid"], tid)))
counts = pc.fill_null(sw["count"], 1)
lost = {}
lt = t.filter(pc.equal(t["kind"], "lost"))
for c, v in zip(lt["cause"].to_pylist(), lt["value"].to_pylist()):
    lost[c] = lost.get(c, 0) + v
print(json.dumps({"sets": len(files), "stored": pc.sum(counts).as_py() or 0, "lost": lost}))
"#,
        &[store.to_str().unwrap(), &tid.to_string()],
    );
    assert!(
        out.status.success(),
        "a finished set is not readable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `switch` events lost, by the stored `lost` rows.
fn lost_switch(acc: &serde_json::Value) -> f64 {
    acc["lost"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(c, _)| c.ends_with(":switch") || c.ends_with(":switch_out"))
        .map(|(_, v)| v.as_f64().unwrap())
        .sum()
}

/// Stored plus counted as lost is the truth, within `tolerance`.
fn assert_accounted(
    what: &str,
    acc: &serde_json::Value,
    blocked: f64,
    tolerance: f64,
    log: &str,
) -> f64 {
    let stored = acc["stored"].as_f64().unwrap();
    let lost = lost_switch(acc);
    let off = (stored + lost) / blocked - 1.0;
    assert!(
        off.abs() < tolerance,
        "[{what}] {stored} stored + {lost} lost vs {blocked} switches ({:+.2}%): {acc}\n{log}",
        off * 100.0
    );
    off
}

/// Wait for `child` to end.
fn wait_end(child: &mut Child, secs: u64) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "the workload ends"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fill the file system of `dir` with the file `fill` (until ENOSPC).
fn fill(file: &Path) {
    let mut f = std::fs::File::create(file).unwrap();
    let block = vec![0x5au8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

/// The store's disk full: rows dropped and counted, said in the log and `/metrics`, no
/// restart; room again, rows written again.
fn disk_full(dir: &Path) -> String {
    let mnt = Tmpfs::mount(&dir.join("full"), "size=16M");
    let store = mnt.0.join("store");
    let exe = named_workload(dir, "faults-full");
    let agent = Agent::start(dir, "faults-full", &store, "full");
    let report = dir.join("full.json");
    let mut work = Reap(vec![sleeper(&exe, &report, 30_000)]);
    std::thread::sleep(Duration::from_secs(7));
    fill(&mnt.0.join("fill"));
    let (full_after, _) = agent.wait_for("the store full", 20, &|m| {
        get(m, "stacks_store_writable") == 0.0
    });
    std::thread::sleep(Duration::from_secs(6));
    let m = agent.metrics();
    assert!(
        get(&m, "stacks_lost_events_total{cause=\"store_full:switch\"}") > 0.0,
        "{m:?}\n{}",
        agent.log()
    );
    std::fs::remove_file(mnt.0.join("fill")).unwrap();
    let (room_after, _) = agent.wait_for("writing again", 20, &|m| {
        get(m, "stacks_store_writable") == 1.0
    });
    wait_end(&mut work.0[0], 120);
    // The last set finished (max-age 3 s).
    std::thread::sleep(Duration::from_secs(6));
    let m = agent.metrics();
    assert_eq!(restarts(&m), 0.0, "{}", agent.log());
    let log = agent.stop();
    assert!(
        log.lines().any(|l| l.starts_with("stacks-pack: the store ")
            && l.contains(" is full (")
            && l.contains("No space left on device")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("can be written again") && l.contains("store_full:KIND")),
        "{log}"
    );
    let (tid, blocked, _) = truth(&report);
    let acc = accounting(&store, tid);
    assert!(
        acc["lost"]["store_full:switch"].as_f64().unwrap_or(0.0) > 0.0,
        "{acc}"
    );
    let off = assert_accounted("full", &acc, blocked, 0.02, &log);
    drop(mnt);
    format!(
        "disk full: noticed {full_after:.1?} after the fill, writing {room_after:.1?} after the room; {} switches stored + {} counted lost (store_full:switch {}) = {blocked} ({:+.2}%)",
        acc["stored"],
        lost_switch(&acc),
        acc["lost"]["store_full:switch"],
        off * 100.0
    )
}

/// The store read-only: as full; then the packer killed while it still is: no start until the
/// store can be written.
fn read_only(dir: &Path) -> String {
    let mnt = Tmpfs::mount(&dir.join("ro"), "size=64M");
    let store = mnt.0.join("store");
    let exe = named_workload(dir, "faults-ro");
    let agent = Agent::start(dir, "faults-ro", &store, "ro");
    let report = dir.join("ro.json");
    let mut work = Reap(vec![sleeper(&exe, &report, 20_000)]);
    std::thread::sleep(Duration::from_secs(5));
    let remount = |opt: &str| sh(&format!("mount -o remount,{opt} {}", mnt.0.display()));
    remount("ro");
    agent.wait_for("the store read-only", 20, &|m| {
        get(m, "stacks_store_writable") == 0.0
    });
    std::thread::sleep(Duration::from_secs(5));
    remount("rw");
    agent.wait_for("writing again", 20, &|m| {
        get(m, "stacks_store_writable") == 1.0
    });
    wait_end(&mut work.0[0], 120);
    std::thread::sleep(Duration::from_secs(6));
    let m = agent.metrics();
    assert_eq!(restarts(&m), 0.0, "{}", agent.log());
    let (tid, blocked, _) = truth(&report);
    let acc = accounting(&store, tid);
    assert!(
        acc["lost"]["store_read_only:switch"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0,
        "{acc}\n{}",
        agent.log()
    );
    let off = assert_accounted("read-only", &acc, blocked, 0.02, &agent.log());

    // Read-only again, and the packer killed: the pipeline is not started until the store can
    // be written, the wait in /metrics.
    // (The sleeper has ended: the packer, idle, has nothing to find the store read-only with.)
    remount("ro");
    let starts = get(&agent.metrics(), "stacks_agent_pipeline_starts_total");
    // SAFETY: SIGKILL to our agent's child.
    unsafe { libc::kill(agent.stage("stacks-pack"), libc::SIGKILL) };
    let (_, m) = agent.wait_for("waiting for the store", 20, &|m| {
        get(m, "stacks_agent_stage_up{stage=\"record\"}") == 0.0
            && get(m, "stacks_agent_restart_backoff_seconds") >= 1.0
            && get(m, "stacks_store_writable") == 0.0
    });
    assert_eq!(
        get(
            &m,
            "stacks_agent_stage_failures_total{stage=\"pack\",cause=\"signal\"}"
        ),
        1.0,
        "{m:?}"
    );
    std::thread::sleep(Duration::from_secs(10));
    let m = agent.metrics();
    assert_eq!(
        get(&m, "stacks_agent_pipeline_starts_total"),
        starts,
        "no start while the store is read-only: {}",
        agent.log()
    );
    assert_eq!(get(&m, "stacks_agent_stage_up{stage=\"record\"}"), 0.0);
    remount("rw");
    let (resumed, _) = agent.wait_for("started again", 20, &|m| {
        get(m, "stacks_agent_pipeline_starts_total") == starts + 1.0
            && get(m, "stacks_agent_stage_up{stage=\"pack\"}") == 1.0
    });
    let log = agent.stop();
    let waits: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("cannot be written (Read-only file system")
                && l.contains("): not starting the pipeline until it can")
        })
        .collect();
    assert_eq!(waits.len(), 1, "one line for the wait: {log}");
    assert!(
        log.lines()
            .any(|l| l.starts_with("stacks-pack: the store ") && l.contains(" is read-only (")),
        "{log}"
    );
    drop(mnt);
    format!(
        "read-only: {} switches stored + {} counted lost (store_read_only:switch {}) = {blocked} ({:+.2}%); killed while read-only, started again {resumed:.1?} after the remount, no start for the 10 s between",
        acc["stored"],
        lost_switch(&acc),
        acc["lost"]["store_read_only:switch"],
        off * 100.0
    )
}

/// Where memory cgroups are made here: the v2 root when it has the memory controller, else
/// the v1 `memory` hierarchy. (dir, its limit file).
fn memory_cgroup(name: &str) -> (PathBuf, &'static str) {
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        (v2.join(name), "memory.max")
    } else {
        (
            Path::new("/sys/fs/cgroup/memory").join(name),
            "memory.limit_in_bytes",
        )
    }
}

/// A cgroup made for the test, its processes moved out and it removed on drop.
struct Cgroup(PathBuf);

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Whether `pid` has ended (a zombie not reaped yet, or gone).
fn ended(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_none_or(|state| state == "Z" || state == "X")
}

/// The packer killed by its memory cgroup's OOM killer: restarted, counted as `oom_kill`; what
/// it held counted as lost (`stage_died:switch`) and stored by the next packer.
fn oom_kill(dir: &Path) -> String {
    let store = dir.join("oom-store");
    let exe = named_workload(dir, "faults-oom");
    // A long max-age: when it is killed the packer holds every row since it started (8 s and
    // more of the sleeper's), so that without counting them the store would miss far more
    // than 2% (asserted below: the test can fail).
    let agent = Agent::start_aged(dir, "faults-oom", &store, "oom", "60s");
    let died = "stacks_lost_events_total{cause=\"stage_died:switch\"}";
    assert_eq!(
        get(&agent.metrics(), died),
        0.0,
        "exported at 0 from the start"
    );
    let report = dir.join("oom.json");
    let mut work = Reap(vec![sleeper(&exe, &report, 25_000)]);
    let sleeper_pid = work.0[0].id() as i32;
    std::thread::sleep(Duration::from_secs(5));
    let (cg, limit) = memory_cgroup(&format!("stacks-faults-{}", std::process::id()));
    std::fs::create_dir_all(&cg).unwrap();
    let cg = Cgroup(cg);
    let pack = agent.stage("stacks-pack");
    std::fs::write(cg.0.join("cgroup.procs"), pack.to_string()).unwrap();
    // The agent looks at its stages' cgroups once a second.
    std::thread::sleep(Duration::from_secs(3));
    // What it holds was charged where it was: in its own cgroup it now has 2 MiB for what it
    // allocates from now on, less than a set of rows takes.
    std::fs::write(cg.0.join(limit), (2u64 << 20).to_string()).unwrap();
    // The sleeper is held the moment the packer dies (the agent notices within 100 ms and only
    // then stops the recorder), until the new recorder runs: its switches in between are
    // recorded by no one, by design, and are not what this test counts.
    let lowered = Instant::now();
    while !ended(pack) {
        assert!(
            lowered.elapsed() < Duration::from_secs(60),
            "[oom] the packer killed within 60 s:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_after = lowered.elapsed();
    // SAFETY: signals to our own child.
    unsafe { libc::kill(sleeper_pid, libc::SIGSTOP) };
    let (_, m) = agent.wait_for("the packer OOM-killed and restarted", 60, &|m| {
        get(
            m,
            "stacks_agent_stage_failures_total{stage=\"pack\",cause=\"oom_kill\"}",
        ) == 1.0
            && get(m, "stacks_agent_stage_up{stage=\"pack\"}") == 1.0
    });
    assert_eq!(
        get(&m, "stacks_agent_stage_restarts_total{stage=\"pack\"}"),
        1.0
    );
    assert_eq!(get(&m, "stacks_agent_pipeline_starts_total"), 2.0);
    let died_metric = get(&m, died);
    assert!(died_metric > 0.0, "{m:?}\n{}", agent.log());
    // The new recorder's programs attached (it is up before they are).
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: as above.
    unsafe { libc::kill(sleeper_pid, libc::SIGCONT) };
    wait_end(&mut work.0[0], 120);
    std::thread::sleep(Duration::from_secs(2));
    let log = agent.stop();
    assert!(
        log.lines().any(|l| l.starts_with(
            "stacks-agent: stacks-pack killed by signal 9 (out of memory: its memory cgroup's OOM killer)"
        ) && l.contains("(restart 1 of the pack stage)")),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.starts_with("stacks-agent: ")
            && l.contains(" events left the recorder and reached no file set (")
            && l.contains("stage_died:switch ")),
        "{log}"
    );
    let (tid, blocked, _) = truth(&report);
    let acc = accounting(&store, tid);
    let stored_died = acc["lost"]["stage_died:switch"].as_f64().unwrap_or(0.0);
    assert_eq!(
        stored_died, died_metric,
        "[oom] the lost row the next packer stored is what /metrics counted: {acc}\n{log}"
    );
    let off = assert_accounted("oom", &acc, blocked, 0.02, &log);
    // Without the count the store misses more than the bound: the assertion above can fail.
    // (Measured: 13,326 stored + 11,678 stage_died:switch of 25,001 switches, +0.01%; -46.7%
    // without; before the count, 5,357 were missing with the restart's own 6.5 s among them.)
    let stored = acc["stored"].as_f64().unwrap();
    let uncounted = (stored + lost_switch(&acc) - stored_died) / blocked - 1.0;
    assert!(
        uncounted < -0.02,
        "[oom] the packer held too little to tell ({:+.2}% without stage_died): {acc}",
        uncounted * 100.0
    );
    format!(
        "OOM kill: the packer killed {killed_after:.1?} after its limit was lowered, restarted, counted as oom_kill; {stored} switches stored + {} counted lost (stage_died:switch {stored_died}) = {blocked} ({:+.2}%; {:+.2}% without stage_died)",
        lost_switch(&acc),
        off * 100.0,
        uncounted * 100.0
    )
}

/// The symbolizer stopped for 60 s: the rings fill, losses are counted by cause, the pipeline
/// goes on, no restart.
fn sigstop(dir: &Path) -> String {
    let store = dir.join("stop-store");
    let exe = named_workload(dir, "faults-stop");
    let agent = Agent::start(dir, "faults-stop", &store, "stop");
    let report = dir.join("stop.json");
    let mut work = Reap(vec![sleeper(&exe, &report, 70_000)]);
    std::thread::sleep(Duration::from_secs(5));
    let sym = agent.stage("stacks-symbolize");
    // SAFETY: signals to our agent's child.
    unsafe { libc::kill(sym, libc::SIGSTOP) };
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_secs(60));
    let m = agent.metrics();
    unsafe { libc::kill(sym, libc::SIGCONT) };
    assert_eq!(
        get(&m, "stacks_agent_stage_up{stage=\"symbolize\"}"),
        1.0,
        "{m:?}"
    );
    assert_eq!(restarts(&m), 0.0, "{}", agent.log());
    let held = stopped.elapsed();
    let (drained, _) = agent.wait_for("losses counted", 60, &|m| {
        get(
            m,
            "stacks_lost_events_total{cause=\"ring_buffer_full:switch\"}",
        ) > 0.0
    });
    wait_end(&mut work.0[0], 120);
    std::thread::sleep(Duration::from_secs(6));
    let m = agent.metrics();
    assert_eq!(restarts(&m), 0.0, "{}", agent.log());
    let log = agent.stop();
    let (tid, blocked, _) = truth(&report);
    let acc = accounting(&store, tid);
    // With the rings full for a minute, a folded row of short intervals that did not fit was
    // once counted as one event lost, not as the intervals it stood for: -1.62% then, -0.75%
    // since each is counted.
    let off = assert_accounted("sigstop", &acc, blocked, 0.02, &log);
    format!(
        "SIGSTOP: the symbolizer stopped {held:.1?}, losses counted {drained:.1?} after SIGCONT; {} switches stored + {} counted lost ({:?}) = {blocked} ({:+.2}%)",
        acc["stored"],
        lost_switch(&acc),
        acc["lost"],
        off * 100.0
    )
}

#[test]
fn faults_under_the_agent_are_survived_and_every_event_is_stored_or_counted() {
    let test = "faults_under_the_agent_are_survived_and_every_event_is_stored_or_counted";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("agent-faults");
    let stop_dir = dir.to_path_buf();
    let stop = std::thread::spawn(move || sigstop(&stop_dir));
    let mut said = vec![disk_full(&dir), read_only(&dir), oom_kill(&dir)];
    said.push(stop.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
    for line in said {
        eprintln!("{line}");
    }
}
