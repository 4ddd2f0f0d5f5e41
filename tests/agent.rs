//! stacks-agent end to end: a bad configuration is one line and exit status 2 with nothing
//! started; its systemd unit passes `systemd-analyze verify`; and the ground truth of #44: a
//! system-wide agent beside a process churn keeps its store within `--max-total` (plus one
//! set), the store is read by `stacks-top --once` while it is written, `/metrics` counts rows
//! of every kind recorded, a `kill -9` of its stacks-symbolize is one counted restart after
//! which file sets keep arriving, a real Prometheus scrapes it and answers PromQL about it, and
//! SIGTERM ends it within 10 s. Its `/metrics` passes `promtool check metrics`, with the label
//! values known in advance at 0 from the first scrape (#65).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use stacks_tests::{bin, bpf_available, bpf_serial, child_running, run_tool, scratch};

/// Run stacks-agent with `args`; (status, stdout, stderr).
fn agent(args: &[&str]) -> (Option<i32>, String, String) {
    let out = run_tool(bin("stacks-agent"), args, b"", Duration::from_secs(30));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A refusal: exit status 2, one line `stacks-agent: error: …` containing `names`.
fn refused(args: &[&str], names: &str) {
    let (code, out, err) = agent(args);
    assert_eq!(code, Some(2), "{args:?}: {err}");
    assert!(out.is_empty(), "{args:?}: stdout {out}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("stacks-agent: error: "), "{err}");
    assert!(err.contains(names), "{args:?}: {err} should name {names}");
}

#[test]
fn a_bad_configuration_is_one_line_and_exit_2_with_nothing_started() {
    let dir = scratch("agent-config");
    let store = dir.join("store");
    let store_s = store.to_str().unwrap();
    let conf = dir.join("agent.toml");
    let conf_s = conf.to_str().unwrap();
    std::fs::write(
        &conf,
        format!("all = true\nstore = \"{store_s}\"\nretian = \"7d\"\n"),
    )
    .unwrap();
    refused(&["-c", conf_s], "unknown field `retian`");
    refused(&["-c", conf_s], conf_s);
    std::fs::write(
        &conf,
        format!("all = true\nstore = \"{store_s}\"\nretain = \"a week\"\n"),
    )
    .unwrap();
    refused(&["-c", conf_s], "retain: ");
    refused(
        &["-a", "--store", store_s, "--max-age", "soon"],
        "max_age: ",
    );
    refused(
        &["-a", "--store", store_s, "--max-total", "lots"],
        "max_total: ",
    );
    refused(
        &["-a", "--store", store_s, "--metrics", "everywhere"],
        "metrics: ",
    );
    refused(&["--store", store_s], "nothing to record");
    refused(
        &["-a", "--store", store_s, "--budget-cpu", "1"],
        "budget_cpu: `1`: a percentage",
    );
    refused(
        &["-a", "--store", store_s, "--budget-cpu", "1%"],
        "budget_cpu: needs events",
    );
    refused(
        &["-c", dir.join("missing.toml").to_str().unwrap()],
        "missing.toml",
    );
    assert!(
        !store.exists(),
        "nothing made before the configuration was checked"
    );
    refused(
        &["-a", "--store", "/proc/stacks-store"],
        "/proc/stacks-store",
    );
    // A port taken: refused before any stage starts.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    refused(&["-a", "--store", store_s, "--metrics", &addr], &addr);

    // --print-config: the file under the flags, as TOML that reads back the same.
    std::fs::write(
        &conf,
        format!("all = true\nstore = \"{store_s}\"\nmax_age = \"1m\"\nretain = \"7d\"\n"),
    )
    .unwrap();
    let (code, shown, err) = agent(&["-c", conf_s, "--max-age", "5s", "--print-config"]);
    assert_eq!(code, Some(0), "{err}");
    for line in [
        "max_age = \"5s\"",
        "retain = \"7d\"",
        "all = true",
        "metrics = \"127.0.0.1:9464\"",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} in {shown}");
    }
    std::fs::write(&conf, &shown).unwrap();
    let (code, again, err) = agent(&["-c", conf_s, "--print-config"]);
    assert_eq!((code, again), (Some(0), shown), "{err}");
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(
        stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../packaging/stacks-agent.service"),
    )
    .unwrap();
    for want in [
        "User=stacks",
        "ProtectSystem=strict",
        "StateDirectory=stacks",
        "AmbientCapabilities=CAP_BPF CAP_PERFMON",
        "NoNewPrivileges=yes",
    ] {
        assert!(unit.lines().any(|l| l.starts_with(want)), "{want}");
    }
    // verify checks the executable exists: the built one stands in for /usr/local/bin's.
    let dir = scratch("agent-unit");
    let path = dir.join("stacks-agent.service");
    let exe = bin("stacks-agent");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/stacks-agent", exe.to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (scripts/setup installs systemd)");
    let err = String::from_utf8_lossy(&out.stderr);
    // It exits 0 on unknown keys and bad values too: what it says is the verdict.
    assert!(out.status.success(), "{err}");
    let about: Vec<&str> = err.lines().filter(|l| l.contains("stacks-agent")).collect();
    assert!(about.is_empty(), "systemd-analyze verify: {err}");
}

/// The capabilities the unit grants (its `AmbientCapabilities`), as setpriv's
/// `+bpf,+perfmon,…`.
fn unit_capabilities(unit: &str) -> String {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("AmbientCapabilities in the unit");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_agent_records_as_a_user_with_only_the_units_capabilities() {
    let test = "the_agent_records_as_a_user_with_only_the_units_capabilities";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let unit = std::fs::read_to_string(
        stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR"))
            .join("../packaging/stacks-agent.service"),
    )
    .unwrap();
    let caps = unit_capabilities(&unit);
    assert_eq!(
        caps, "+bpf,+perfmon,+sys_ptrace,+dac_read_search,+syslog",
        "the set this test and docs/agent.md justify"
    );
    // `nobody`: a user that exists on every system, owning nothing but the store.
    let dir = scratch("agent-caps");
    let store = dir.join("store");
    std::fs::create_dir(&store).unwrap();
    // SAFETY: chown(2) of a path we made, with a NUL-terminated copy.
    let path = std::ffi::CString::new(store.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::chown(path.as_ptr(), 65534, 65534) }, 0);
    // A root process the user may not read without the capabilities: its maps, its files.
    let workload = Command::new(bin("stacks-workload"))
        .args(["cpu", "--seconds", "60"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut running = Reap(vec![workload]);
    let all = format!("-all,{caps}");
    let agent = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--no-new-privs",
        ])
        .arg(format!("--inh-caps={all}"))
        .arg(format!("--ambient-caps={all}"))
        .arg(format!("--bounding-set={all}"))
        .arg("--")
        .arg(bin("stacks-agent"))
        .args(["stacks-workload", "-e", "profile:uk:49,switch:uk,vfs:u"])
        .args(["--store", store.to_str().unwrap(), "--max-age", "3s"])
        .args(["--metrics", "off"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .expect("setpriv (util-linux)");
    running.0.push(agent);
    let log = || std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    let start = Instant::now();
    while store_sets(&store).0.len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "file sets from the agent as nobody:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut agent = running.0.pop().unwrap();
    // SAFETY: SIGTERM to our own child (setpriv execs the agent: same pid).
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    assert!(agent.wait().unwrap().success(), "{}", log());
    let log = log();
    // Nothing refused or degraded for want of a capability (kernel frames unnamed without
    // kallsyms' addresses, a process's maps or files unreadable); other warnings may come from
    // other processes of that name on a shared machine.
    for bad in [
        "error:",
        "kallsyms",
        "needs root",
        "ermission denied",
        "not permitted",
    ] {
        assert!(
            !log.lines().any(|l| l.contains(bad)),
            "`{bad}` in the agent's log:\n{log}"
        );
    }
    // The root process's CPU samples, by function (its file read by the symbolizer).
    let out = run_tool(
        bin("stacks-query"),
        &[
            "-d",
            store.to_str().unwrap(),
            "-f",
            "csv",
            "-c",
            "select count(*) filter (where stack_fold(stack) like '%burn_heavy%') as named, \
             count(*) as n \
             from stacks where kind = 'profile' and comm = 'stacks-workload'",
        ],
        b"",
        Duration::from_secs(120),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: Vec<u64> = text
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split(',')
        .filter_map(|v| v.parse().ok())
        .collect();
    let [named, n] = row[..] else {
        panic!("{text}")
    };
    assert!(n >= 20 && named * 2 >= n, "{text}\n{log}");
    eprintln!("as nobody with {caps}: {n} CPU samples of a root process, {named} in burn_heavy");
}

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

/// A free port on loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` from 127.0.0.1:`port`: (status line, body).
fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

use stacks_tests::metric_samples as samples;

/// The finished file sets under `dir`: (base name → bytes, newest samples file's mtime).
fn store_sets(dir: &Path) -> (BTreeMap<String, u64>, Option<SystemTime>) {
    let mut sets = BTreeMap::new();
    let mut newest = None;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                todo.push(e.path());
                continue;
            }
            if let Some(base) = name.strip_suffix(".samples.parquet") {
                newest = newest.max(meta.modified().ok());
                *sets.entry(base.to_string()).or_default() += meta.len();
            } else if let Some(base) = name
                .strip_suffix(".stacks.parquet")
                .or_else(|| name.strip_suffix(".frames.parquet"))
            {
                *sets.entry(base.to_string()).or_default() += meta.len();
            }
        }
    }
    (sets, newest)
}

/// Percent-encode a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The instant vector of PromQL `q` from the Prometheus at `port`: labels → value.
fn promql(port: u16, q: &str) -> Vec<(serde_json::Value, f64)> {
    let (status, body) = http_get(port, &format!("/api/v1/query?query={}", encode(q)))
        .unwrap_or_else(|| panic!("Prometheus did not answer {q}"));
    assert!(status.contains("200"), "{q}: {status} {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
            (r["metric"].clone(), value)
        })
        .collect()
}

#[test]
fn agent_keeps_a_bounded_readable_store_restarts_a_killed_stage_and_is_scraped() {
    let test = "agent_keeps_a_bounded_readable_store_restarts_a_killed_stage_and_is_scraped";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    // Below what the churn writes in the test's time (a debug build recorded ~1.3 MB in two
    // minutes), so retention has sets to delete.
    const LIMIT: u64 = 512 << 10;
    const SECONDS: u64 = 40;
    let dir = scratch("agent-ground-truth");
    let store = dir.join("store");
    let port = free_port();
    let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
    let events = "profile:u:49,state:uk:5";
    let agent = Command::new(bin("stacks-agent"))
        .args(["-a", "-e", events, "--store", store.to_str().unwrap()])
        .args(["--max-age", "5s", "--max-total", "512K"])
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(log("agent.log"))
        .spawn()
        .unwrap();
    let agent_pid = agent.id();
    let churn = Command::new(bin("stacks-workload"))
        .args(["churn", "--seconds", &(SECONDS + 10).to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // A real Prometheus scraping the agent every second.
    let prom_port = free_port();
    let prom_conf = dir.join("prometheus.yml");
    std::fs::write(
        &prom_conf,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: stacks-agent\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", prom_conf.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(log("prometheus.log"))
        .spawn()
        .expect("prometheus (scripts/setup installs Debian's prometheus)");
    let mut running = Reap(vec![agent, churn, prometheus]);
    let agent_log = || std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();

    let start = Instant::now();
    let mut largest_set = 0u64;
    let mut worst_total = 0u64;
    let mut reads = 0;
    let mut killed_at: Option<SystemTime> = None;
    // At least SECONDS, 15 s past the kill, and until retention has deleted a set and
    // stacks-top has read the store twice (a debug build's first set takes a while), at most
    // 2 minutes.
    let metric = |name: &str| {
        http_get(port, "/metrics")
            .and_then(|(_, text)| samples(&text).get(name).copied())
            .unwrap_or(0.0)
    };
    // A set finished after the restart: the restarted pipeline's recorder loads its programs
    // and the first set takes `--max-age` after that (longer when the stopped recorder took
    // its grace period to drain a churning host's backlog).
    let set_after_kill = |killed: Option<SystemTime>| {
        killed.is_some_and(|k| {
            store_sets(&store)
                .1
                .is_some_and(|n| n > k + Duration::from_secs(2))
        })
    };
    while start.elapsed() < Duration::from_secs(SECONDS)
        || killed_at.is_none_or(|k| k.elapsed().unwrap_or_default() < Duration::from_secs(15))
        || ((metric("stacks_store_deleted_file_sets_total") == 0.0
            || reads < 2
            || !set_after_kill(killed_at))
            && start.elapsed() < Duration::from_secs(120))
    {
        std::thread::sleep(Duration::from_secs(2));
        let (sets, _) = store_sets(&store);
        largest_set = largest_set.max(sets.values().copied().max().unwrap_or(0));
        let total: u64 = sets.values().sum();
        worst_total = worst_total.max(total);
        assert!(
            total <= LIMIT + largest_set,
            "the store holds {total} bytes, past {LIMIT} + one set ({largest_set}): {sets:?}\n{}",
            agent_log()
        );
        let t = start.elapsed().as_secs();
        if t >= 18 && killed_at.is_none() {
            let sym = child_running(agent_pid, "stacks-symbolize")
                .unwrap_or_else(|| panic!("no stacks-symbolize under the agent:\n{}", agent_log()));
            // SAFETY: SIGKILL to the pid of our agent's child.
            unsafe { libc::kill(sym, libc::SIGKILL) };
            killed_at = Some(SystemTime::now());
        }
        // The store read while it is written, sets deleted under the reader.
        if t >= 8 && !sets.is_empty() && reads < 3 {
            let out = run_tool(
                bin("stacks-top"),
                &["-d", store.to_str().unwrap(), "--once"],
                b"",
                Duration::from_secs(60),
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "stacks-top --once -d: {err}");
            assert!(!out.stdout.is_empty(), "stacks-top printed its table");
            reads += 1;
        }
    }
    assert!(reads >= 2, "stacks-top read the store {reads} times");
    let killed_at = killed_at.expect("killed");
    let (sets, newest) = store_sets(&store);
    assert!(
        newest.is_some_and(|n| n > killed_at + Duration::from_secs(2)),
        "new file sets after the restart: {sets:?}\n{}",
        agent_log()
    );

    let (status, text) = http_get(port, "/metrics").expect("/metrics answers");
    assert!(status.contains("200"), "{status}");
    let m = samples(&text);
    let get = |k: &str| m.get(k).copied().unwrap_or_else(|| panic!("{k} in {text}"));
    assert_eq!(
        get("stacks_agent_stage_restarts_total{stage=\"symbolize\"}"),
        1.0,
        "{}",
        agent_log()
    );
    assert_eq!(
        get("stacks_agent_stage_restarts_total{stage=\"record\"}"),
        0.0
    );
    assert_eq!(
        get("stacks_agent_stage_restarts_total{stage=\"pack\"}"),
        0.0
    );
    assert_eq!(get("stacks_agent_pipeline_starts_total"), 2.0);
    for kind in ["profile", "state"] {
        assert!(
            get(&format!("stacks_rows_total{{kind=\"{kind}\"}}")) > 0.0,
            "{kind}: {text}"
        );
        assert!(
            get(&format!("stacks_events_total{{kind=\"{kind}\"}}"))
                >= get(&format!("stacks_rows_total{{kind=\"{kind}\"}}")),
            "{kind}: {text}"
        );
    }
    for stage in ["record", "symbolize", "pack"] {
        assert!(
            get(&format!(
                "stacks_agent_stage_resident_memory_bytes{{stage=\"{stage}\"}}"
            )) > 1e6
        );
        assert!(
            get(&format!(
                "stacks_agent_stage_cpu_seconds_total{{stage=\"{stage}\"}}"
            )) > 0.0
        );
    }
    assert!(
        get("stacks_store_deleted_file_sets_total") > 0.0,
        "retention deleted: {text}"
    );
    assert!(get("stacks_store_bytes") <= (LIMIT + largest_set) as f64);
    assert!(get("stacks_store_file_sets") >= 1.0, "{text}");

    // PromQL over what Prometheus scraped.
    let restarts = promql(
        prom_port,
        "stacks_agent_stage_restarts_total{stage=\"symbolize\"}",
    );
    assert_eq!(
        restarts.len(),
        1,
        "{restarts:?}\n{}",
        std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
    );
    assert_eq!(restarts[0].1, 1.0);
    let rows = promql(
        prom_port,
        "sum by (kind) (increase(stacks_rows_total[30s])) > 0",
    );
    let kinds: Vec<&str> = rows
        .iter()
        .filter_map(|(m, _)| m["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"profile") && kinds.contains(&"state"),
        "{rows:?}"
    );

    // SIGTERM: the agent drains and exits within 10 s, its stages with it.
    let stages: Vec<i32> = ["stacks-record", "stacks-symbolize", "stacks-pack"]
        .iter()
        .filter_map(|t| child_running(agent_pid, t))
        .collect();
    assert_eq!(stages.len(), 3, "{}", agent_log());
    let mut agent = running.0.remove(0);
    let asked = Instant::now();
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(agent_pid as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(s) = agent.try_wait().unwrap() {
            break s;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "not stopped in 10 s:\n{}",
            agent_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = asked.elapsed();
    assert!(status.success(), "{status}: {}", agent_log());
    for pid in stages {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "stage {pid} left running"
        );
    }
    eprintln!(
        "agent: largest store {worst_total} bytes (limit {LIMIT}, largest set {largest_set}), {} sets at the end, {reads} reads by stacks-top, stopped in {took:.1?}",
        sets.len()
    );
}

/// `promtool check metrics` on `text`: its complaints (none when the exposition is valid and
/// follows Prometheus's naming and typing practice).
fn promtool_check(text: &str) -> String {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/setup installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && said.trim().is_empty() {
        String::new()
    } else {
        format!("promtool: {}: {said}", out.status)
    }
}

/// #65 item 4: the agent's `/metrics` passes `promtool check metrics` from its first scrape
/// (before any stage reported) to a running pipeline under a budget, and the label values
/// known in advance — every cause of loss, every kind, both stacks, every stage, both budget
/// directions — are there at 0 before anything was counted.
#[test]
fn metrics_pass_promtool_with_known_labels_at_zero_from_the_start() {
    let test = "metrics_pass_promtool_with_known_labels_at_zero_from_the_start";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("agent-promtool");
    let port = free_port();
    let agent = Command::new(bin("stacks-agent"))
        .args(["-e", "profile:u:49,state:uk:5,switch:uk,wake:u"])
        .args(["--store", dir.join("store").to_str().unwrap()])
        .args(["--budget-cpu", "50%"])
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .arg("stacks-no-such-process")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    let _running = Reap(vec![agent]);
    let scrape = || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((status, body)) = http_get(port, "/metrics") {
                assert!(status.contains("200"), "{status}");
                return body;
            }
            assert!(Instant::now() < deadline, "no /metrics on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let first = scrape();
    assert_eq!(promtool_check(&first), "", "first scrape:\n{first}");
    let at_first = samples(&first);
    let mut zero: Vec<String> = [
        "stacks_lost_events_total{cause=\"ring_buffer_full:switch\"}",
        "stacks_lost_events_total{cause=\"ring_buffer_full:wake\"}",
        "stacks_lost_events_total{cause=\"no_task_storage:switch_out\"}",
        "stacks_lost_events_total{cause=\"map_full:block\"}",
        "stacks_stack_capture_errors_total{stack=\"kernel\"}",
        "stacks_stack_capture_errors_total{stack=\"user\"}",
        "stacks_agent_stage_restarts_total{stage=\"record\"}",
        "stacks_agent_stage_restarts_total{stage=\"pack\"}",
    ]
    .map(str::to_string)
    .to_vec();
    for kind in ["profile", "state", "switch", "wake", "lost"] {
        zero.push(format!("stacks_rows_total{{kind=\"{kind}\"}}"));
        zero.push(format!("stacks_events_total{{kind=\"{kind}\"}}"));
    }
    for name in &zero {
        assert_eq!(at_first.get(name), Some(&0.0), "{name} in\n{first}");
    }
    // Running: the stages up, the budget's families in.
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = loop {
        let text = scrape();
        let s = samples(&text);
        if s.get("stacks_agent_stage_up{stage=\"record\"}") == Some(&1.0)
            && s.contains_key("stacks_agent_budget_used_cpu_ratio")
        {
            break text;
        }
        assert!(Instant::now() < deadline, "never running:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(promtool_check(&running), "", "running:\n{running}");
    let s = samples(&running);
    for name in [
        "stacks_agent_budget_changes_total{direction=\"shed\"}",
        "stacks_agent_budget_changes_total{direction=\"restore\"}",
        "stacks_lost_events_total{cause=\"ring_buffer_full:switch\"}",
    ] {
        assert_eq!(s.get(name), Some(&0.0), "{name} in\n{running}");
    }
}
