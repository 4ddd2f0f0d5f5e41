//! stacks-agent's CPU budget end to end (#44 item 4): a flood of system calls from a recorded
//! process, far over a low `--budget-cpu`, makes the agent shed within 30 s — a log line and
//! its metrics — after which the recording costs less than the budget; the file sets carry
//! the lower rate (`profile` rows' `value` is their period); when the flood stops, the agent
//! restores a level after a minute under budget, with a log line and a metric again.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stacks_tests::{bin, bpf_available, bpf_serial, run_tool, scratch};

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

/// `/metrics` of the agent on 127.0.0.1:`port`: `name{labels}` → value.
fn metrics(port: u16) -> BTreeMap<String, f64> {
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return BTreeMap::new();
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = write!(c, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let mut text = String::new();
    let _ = c.read_to_string(&mut text);
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
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
            let m = metrics(port);
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
    let m = metrics(port);
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
    // Shed within 30 s: more than twice the budget, so straight to the last level.
    let (shed_after, m) = wait_for("a shed", Duration::from_secs(30), &|m| {
        get(m, "stacks_agent_budget_changes_total{direction=\"shed\"}") >= 1.0
    });
    assert_eq!(
        get(&m, "stacks_agent_budget_level"),
        3.0,
        "{m:?}\n{}",
        log()
    );
    let shed_line = log()
        .lines()
        .find(|l| l.starts_with("stacks-agent: budget: over budget for 10s"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("a log line for the shed:\n{}", log()));
    assert!(
        shed_line.contains("shedding to level 3 of 3 (IO kinds stopped)")
            && shed_line.ends_with(
                "the recorder restarts with -e profile:u:12 (the packer finishes its set first)"
            ),
        "{shed_line}"
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

    // Restored after a minute under budget (plus the settling of the restarted stages).
    let (restore_after, m) = wait_for("a restore", Duration::from_secs(100), &|m| {
        get(
            m,
            "stacks_agent_budget_changes_total{direction=\"restore\"}",
        ) >= 1.0
    });
    assert_eq!(get(&m, "stacks_agent_budget_level"), 2.0, "{m:?}");
    let restore_line = log()
        .lines()
        .find(|l| l.starts_with("stacks-agent: budget: under budget for 60s"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("a log line for the restore:\n{}", log()));
    assert!(
        restore_line.contains("restoring level 2 of 3 (IO kinds without stacks)")
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
    let out = run_tool(
        bin("stacks-query"),
        &[
            "-d",
            store.to_str().unwrap(),
            "-f",
            "csv",
            "-c",
            "select value, count(*) as n from stacks where kind = 'profile' group by value order by value",
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
    let periods: Vec<u64> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').next()?.parse().ok())
        .collect();
    assert_eq!(
        periods,
        [1_000_000_000 / 49, 1_000_000_000 / 12],
        "profile rows at 49 Hz, then 12 Hz: {text}"
    );
    eprintln!(
        "budget: shed {shed_after:.1?} into the flood, under budget ({:.2}%) {under_after:.1?} after; restored {restore_after:.1?} after the flood stopped",
        used_shed * 100.0
    );
}
