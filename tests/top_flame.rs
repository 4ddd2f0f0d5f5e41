//! stacks-top's flame graph and sandwich against ground truth: `--once --flame` equals
//! `stacks-query | stacks-pprof --format folded` for the same view (CPU samples, and off-CPU
//! intervals with kernel frames and marker frames); the flame shares of the `cpu` workload's
//! 3:1 split next to perf's on the same workload; the flame view in tmux (`F`, down the
//! hottest path, Enter zooms into the known function, `/` gives its share, `s` its sandwich);
//! the sandwich of `burn_shared`, called from two known callers in a known ratio; and the
//! live flame following the stream, its zoom kept, its whole the workload's CPU time; and on
//! a store whose flame graph takes a minute, keys answered and `q` quitting mid-query.

use std::path::Path;

use stacks_testkit::{bpf_available, bpf_serial, scratch};
use stacks_tests::tmux::Tmux;
use stacks_tests::{check, folded_share, perf_share_by, sh};

/// The shares of the flame and of perf may differ by this much.
const PERF_TOLERANCE: f64 = 0.03;

/// `cmd`'s stdout, checked.
fn stdout(cmd: &str, what: &str) -> String {
    let out = sh(cmd);
    check(&out, what);
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Record `workload` (stacks-workload arguments) with `events` into store `dir`.
fn record(events: &str, workload: &str, dir: &Path) {
    check(
        &sh(&format!(
            "stacks-record -e {events} -- stacks-workload {workload} \
             | stacks-symbolize | stacks-pack {}",
            dir.display()
        )),
        &format!("record {workload}"),
    );
}

/// The share after `total N UNIT (` in a status line: `(75.12%)` as 0.7512.
fn total_share(line: &str) -> Option<f64> {
    let rest = &line[line.find(" total ")?..];
    let open = rest.find('(')?;
    let close = rest.find("%)")?;
    rest[open + 1..close].parse::<f64>().ok().map(|p| p / 100.0)
}

#[test]
fn once_flame_is_the_folded_profile_and_its_3_to_1_split_is_perfs() {
    if !bpf_available("once_flame_is_the_folded_profile_and_its_3_to_1_split_is_perfs") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("top-flame");
    let store = dir.join("store");
    record("profile:u:999,switch:uk", "cpu --seconds 4", &store);
    let s = store.display();

    // The same view both ways: CPU samples with a stack (the `cpu` query leaves the others
    // out), and off-CPU intervals, kernel frames, `[no stack]` and folded short ones included.
    let ours = stdout(
        &format!("stacks-top -d {s} --kind profile --where 'stack_id IS NOT NULL' --once --flame"),
        "stacks-top --once --flame",
    );
    let theirs = stdout(
        &format!("stacks-query -d {s} cpu | stacks-pprof --format folded"),
        "stacks-query cpu | stacks-pprof --format folded",
    );
    assert!(ours.lines().count() > 1, "{ours}");
    assert_eq!(
        ours, theirs,
        "CPU: stacks-top --once --flame vs stacks-pprof"
    );
    let ours = stdout(
        &format!("stacks-top -d {s} --kind switch --once --flame"),
        "stacks-top --kind switch --once --flame",
    );
    let theirs = stdout(
        &format!("stacks-query -d {s} offcpu | stacks-pprof --format folded"),
        "stacks-query offcpu | stacks-pprof --format folded",
    );
    assert!(!ours.is_empty(), "no off-CPU stacks");
    assert_eq!(
        ours, theirs,
        "off-CPU: stacks-top --once --flame vs stacks-pprof"
    );

    // The split of the whole view (every CPU sample) next to perf's of the same workload.
    let flame = stdout(
        &format!("stacks-top -d {s} --kind profile --once --flame"),
        "stacks-top --once --flame",
    );
    let perf = stdout(
        &format!(
            "perf record -q -e cpu-clock -F 999 -g -o {d}/perf.data -- \
             stacks-workload cpu --seconds 4 > /dev/null 2>&1 && \
             perf script -i {d}/perf.data -F ip,sym 2>/dev/null",
            d = dir.display()
        ),
        "perf record of the cpu workload",
    );
    // Each function's share of the two: perf's frame-pointer walk loses the loop's function
    // from a sample taken at the first instruction or the `ret` of a function it calls (rbp
    // is still, or again, its caller's), 4-7% of this debug build's samples, which it gives
    // to `cpu::run`; stacks-record takes that caller from the top of the stack, so the shares
    // of all samples differ by that much while the split between the two does not.
    let both = |share: &dyn Fn(&str) -> f64| share("burn_heavy") + share("burn_light");
    let flame_both = both(&|f| folded_share(&flame, |stack| stack.contains(f)).0);
    let perf_both = both(&|f| perf_share_by(&perf, |name| name.contains(f)).0);
    for f in ["burn_heavy", "burn_light"] {
        let (flame_share, n) = folded_share(&flame, |stack| stack.contains(f));
        let (perf_share, pn) = perf_share_by(&perf, |name| name.contains(f));
        eprintln!("{f}: flame {flame_share:.3} of {n} ns, perf {perf_share:.3} of {pn} samples");
        let (flame_share, perf_share) = (flame_share / flame_both, perf_share / perf_both);
        assert!(pn > 1000, "perf took {pn} samples");
        assert!(
            (flame_share - perf_share).abs() <= PERF_TOLERANCE,
            "{f}: flame {flame_share:.3}, perf {perf_share:.3} (±{PERF_TOLERANCE})"
        );
    }
    let (heavy, _) = folded_share(&flame, |stack| stack.contains("burn_heavy"));
    let (light, _) = folded_share(&flame, |stack| stack.contains("burn_light"));
    assert!(
        (heavy / (heavy + light) - 0.75).abs() <= 0.05,
        "3:1 of iterations: {heavy:.3} vs {light:.3}"
    );

    // The screen: F, down the hottest path to burn_heavy, Enter zooms into it.
    let t = Tmux::start("flame", &format!("stacks-top -d {s} --kind profile"));
    t.wait(30, "the first screen", |s| s.contains("GroupBy"));
    t.keys(&["F"]);
    t.wait(30, "the flame graph", |s| s.contains("Flame graph"));
    // The status line: the last line but the keys.
    let status = |screen: &str| -> String {
        let mut lines = screen.lines().rev().filter(|l| !l.trim().is_empty());
        lines.nth(1).unwrap_or("").to_string()
    };
    let mut found = false;
    for _ in 0..40 {
        if status(&t.screen()).starts_with("stacks_workload::cpu::burn_heavy ") {
            found = true;
            break;
        }
        t.keys(&["Down"]);
    }
    let screen = t.screen();
    assert!(found, "burn_heavy is not on the hottest path:\n{screen}");
    let selected = total_share(&status(&screen)).expect("a total share");
    t.keys(&["Enter"]);
    let zoomed = t.wait(10, "the zoom", |s| s.contains("Flame graph zoomed into"));
    let title = zoomed
        .lines()
        .find(|l| l.starts_with("Flame graph zoomed into"))
        .unwrap();
    assert!(
        title.ends_with("stacks_workload::cpu::burn_heavy"),
        "{zoomed}"
    );
    let first_row = zoomed
        .lines()
        .skip_while(|l| !l.starts_with("Flame graph"))
        .nth(1)
        .unwrap_or("");
    assert!(
        first_row.starts_with("stacks_workload::cpu::burn_heavy"),
        "the zoomed frame is the full width:\n{zoomed}"
    );
    // The screen's share is the folded profile's (checked against perf's split above).
    let (folded_heavy, _) = folded_share(&flame, |stack| stack.contains("burn_heavy"));
    assert!(
        (selected - folded_heavy).abs() <= 0.005,
        "burn_heavy on the screen {selected:.3}, in --once --flame {folded_heavy:.3}:\n{screen}"
    );
    // The search gives the share of every stack through a match.
    t.keys(&[
        "/", "b", "u", "r", "n", "_", "l", "i", "g", "h", "t", "Enter",
    ]);
    let searched = t.wait(10, "the search", |s| s.contains("/burn_light: "));
    let line = searched
        .lines()
        .find(|l| l.contains("/burn_light: "))
        .unwrap();
    let share = line
        .rsplit_once('(')
        .and_then(|(_, p)| p.split_once("%)"))
        .and_then(|(p, _)| p.parse::<f64>().ok())
        .expect("a share")
        / 100.0;
    let (perf_light, _) = perf_share_by(&perf, |name| name.contains("burn_light"));
    assert!(
        (share - perf_light).abs() <= PERF_TOLERANCE,
        "burn_light searched {share:.3}, perf {perf_light:.3}:\n{searched}"
    );
    // s: the sandwich of the zoomed frame names its caller.
    t.keys(&["Escape", "s"]);
    let sandwich = t.wait(10, "the sandwich", |s| s.contains("callers (who calls it"));
    assert!(sandwich.contains("stacks_workload::cpu::run"), "{sandwich}");
    t.keys(&["Escape", "Escape", "q"]);
    t.wait(10, "the exit", |s| s.contains("TOP-EXIT=0"));
}

#[test]
fn the_sandwich_of_a_function_lists_its_two_callers_with_their_shares() {
    if !bpf_available("the_sandwich_of_a_function_lists_its_two_callers_with_their_shares") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("top-sandwich");
    let store = dir.join("store");
    let report = dir.join("report.json");
    record(
        "profile:u:999",
        &format!("--report {} callers --seconds 4", report.display()),
        &store,
    );
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let text = stdout(
        &format!(
            "stacks-top -d {} --kind profile --once --sandwich burn_shared",
            store.display()
        ),
        "stacks-top --once --sandwich",
    );
    eprintln!("{text}");
    let mut lines = text.lines();
    let title = lines.next().unwrap();
    assert!(
        title.starts_with("stacks_workload::callers::burn_shared  self "),
        "{text}"
    );
    // Callers: the function at depth 0, its callers at depth 1 (two spaces in).
    let callers: Vec<(f64, String)> = lines
        .by_ref()
        .skip_while(|l| !l.starts_with("callers"))
        .skip(1)
        .take_while(|l| !l.starts_with("callees"))
        .filter_map(|l| {
            let (pct, rest) = l.trim_start().split_once("%  ")?;
            let rest = rest.trim_start();
            let (_, name) = rest.split_once("  ")?;
            (name.starts_with("  ") && !name.starts_with("    "))
                .then(|| (pct.parse::<f64>().unwrap() / 100.0, name.trim().to_string()))
        })
        .collect();
    let share = |f: &str| {
        callers
            .iter()
            .find(|(_, n)| n.ends_with(f))
            .map(|(s, _)| *s)
            .unwrap_or_else(|| panic!("no caller {f}:\n{text}"))
    };
    let (a, b) = (share("::caller_a"), share("::caller_b"));
    let (ta, tb) = (
        truth["a_fraction"].as_f64().unwrap(),
        truth["b_fraction"].as_f64().unwrap(),
    );
    eprintln!("caller_a {a:.3} (truth {ta:.3}), caller_b {b:.3} (truth {tb:.3})");
    assert!((a - ta).abs() <= 0.05, "caller_a {a:.3} vs {ta:.3}\n{text}");
    assert!((b - tb).abs() <= 0.05, "caller_b {b:.3} vs {tb:.3}\n{text}");
    // A sample in burn_shared's prologue (its frame not yet pushed) names its caller's
    // caller: the two make the rest.
    assert!(a + b >= 0.98, "the two callers make {:.3}: {text}", a + b);
}

/// The value after `total ` in a status line: `total 123 ns (` as 123.
fn total_value(line: &str) -> Option<i64> {
    let rest = &line[line.find(" total ")? + 7..];
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn the_live_flame_follows_the_stream_and_keeps_its_zoom() {
    if !bpf_available("the_live_flame_follows_the_stream_and_keeps_its_zoom") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("top-flame-live");
    let report = dir.join("report.json");
    let t = Tmux::start(
        "flame-live",
        &format!(
            "stacks-record -e profile:u:999 -- stacks-workload --report {} cpu --seconds 20 \
             2>/dev/null | stacks-symbolize 2>/dev/null | stacks-top --kind profile",
            report.display()
        ),
    );
    t.wait(30, "the live screen", |s| {
        s.contains("stdin (live") && s.contains("burn_")
    });
    t.keys(&["F"]);
    t.wait(10, "the flame", |s| s.contains("Flame graph: "));
    let status = |screen: &str| -> String {
        let mut lines = screen.lines().rev().filter(|l| !l.trim().is_empty());
        lines.nth(1).unwrap_or("").to_string()
    };
    // Three frames down the hottest path, and Enter zooms into that one.
    t.keys(&["Down", "Down", "Down"]);
    // A loaded machine draws late: the name once the selection stays.
    let mut name = String::new();
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(700));
        let now = status(&t.screen())
            .split("  self ")
            .next()
            .unwrap()
            .to_string();
        if now == name {
            break;
        }
        name = now;
    }
    let line = status(&t.screen());
    assert!(!name.is_empty() && name != "all", "{line}");
    t.keys(&["Enter"]);
    let zoomed_into = |s: &str| {
        s.lines()
            .any(|l| l.starts_with("Flame graph zoomed into") && l.ends_with(name.as_str()))
    };
    let zoomed = t.wait(10, "the zoom", |s| zoomed_into(s));
    let before = total_value(&status(&zoomed)).expect("a total");
    assert!(
        zoomed.contains("stdin (live"),
        "the stream ended already:\n{zoomed}"
    );
    // The stream goes on: the frame grows, still zoomed into and selected.
    t.wait(10, "the flame to follow the stream", |s| {
        let line = status(s);
        zoomed_into(s)
            && line.starts_with(&format!("{name}  self "))
            && total_value(&line).is_some_and(|v| v > before)
    });
    // At the end, out of the zoom, the whole is the workload's CPU time.
    t.wait(30, "the end of the stream", |s| s.contains("stdin (ended"));
    t.keys(&["BSpace"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let end = t.screen();
    let title = end
        .lines()
        .find(|l| l.starts_with("Flame graph: "))
        .unwrap_or_else(|| panic!("no title:\n{end}"));
    let all: f64 = title["Flame graph: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let cpu = truth["cpu_ns"].as_f64().unwrap();
    eprintln!("live flame {all:.0} ns, the workload's CPU clock {cpu:.0} ns");
    assert!((all / cpu - 1.0).abs() <= 0.05, "{all} vs {cpu}\n{end}");
    t.keys(&["q"]);
    t.wait(10, "the exit", |s| s.contains("TOP-EXIT=0"));
}

/// Frames of each stack of [`heavy_store`].
const HEAVY_DEPTH: usize = 24;

/// A store whose flame graph takes seconds to compute: `stacks` distinct stacks of CPU
/// samples (a tree of `HEAVY_DEPTH` levels fanning out, each stack its own leaf), every one
/// sampled `copies` times, 0.1 ms apart.
fn heavy_store(dir: &Path, stacks: usize, copies: usize) {
    let rows: Vec<stacks_tests::Row> = (0..stacks)
        .map(|i| {
            let mut frames: Vec<stacks_tests::Frame> = (0..HEAVY_DEPTH)
                .map(|d| stacks_tests::Frame {
                    function: Some(if d + 1 == HEAVY_DEPTH {
                        format!("heavy::leaf_{i}")
                    } else {
                        format!("heavy::level{d}::f{}", (i >> (d / 2)) % 3)
                    }),
                    ..Default::default()
                })
                .collect();
            frames.reverse();
            stacks_tests::Row {
                time: 1_795_413_600_000_000_000 + i as i64 * 100_000,
                kind: "profile".into(),
                pid: 4242,
                tid: 4242 + (i % 8) as i32,
                comm: "heavy".into(),
                thread: "heavy".into(),
                value: 100_000,
                stack: Some(frames),
                ..Default::default()
            }
        })
        .collect();
    let batch = stacks_testkit::recording::batch(&rows);
    stacks_tests::write_pair_copies(dir, "heavy", &batch, copies, stacks as i64 * 100_000);
}

/// The screen answers keys while a query runs: on a store whose flame graph takes seconds,
/// `F` says it is computing the flame graph, `↓` still moves the row, Esc cancels it, and `q`
/// pressed while it runs again ends stacks-top within a second, the terminal given back.
#[test]
fn q_quits_at_once_while_the_flame_graph_is_computed() {
    let dir = scratch("top-heavy");
    let store = dir.join("store");
    heavy_store(&store, 60_000, 12);
    let t = Tmux::start(
        "heavy",
        &format!(
            "stacks-top -d {} --kind profile --group tid",
            store.display()
        ),
    );
    t.wait(120, "the first screen", |s| {
        s.contains("GroupBy") && s.contains("4249") && !s.contains("computing")
    });
    // The table's lines with their colours: the highlighted row is drawn on another
    // background (capture-pane -e), the text the same.
    let rows = || -> Vec<String> {
        let plain = t.screen();
        let out = t.run(&["capture-pane", "-e", "-p", "-t", "t"]);
        let coloured: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        plain
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("42"))
            .take(2)
            .map(|(i, _)| coloured[i].clone())
            .collect()
    };
    t.keys(&["F"]);
    t.wait(10, "computing", |s| s.contains("computing the flame graph"));
    let before = rows();
    t.keys(&["Down"]);
    let after = rows();
    let s = t.screen();
    assert!(
        s.contains("computing the flame graph"),
        "the flame graph came too soon for this check (a faster machine: a larger store):\n{s}"
    );
    assert_eq!(before.len(), 2, "{before:?}");
    assert_ne!(
        before, after,
        "↓ did not move the highlighted row while the query ran"
    );
    t.keys(&["Escape"]);
    t.wait(5, "cancelled", |s| s.contains("the flame graph cancelled"));
    t.keys(&["F"]);
    t.wait(10, "computing again", |s| {
        s.contains("computing the flame graph")
    });
    let t0 = std::time::Instant::now();
    t.run(&["send-keys", "-t", "t", "q"]);
    let done = t.wait(10, "the exit", |s| s.contains("TOP-EXIT=0"));
    let took = t0.elapsed();
    assert!(
        took < std::time::Duration::from_secs(1),
        "q took {took:?} to end stacks-top mid-query"
    );
    assert!(
        !done.contains("GroupBy"),
        "the screen was not cleared:\n{done}"
    );
    t.assert_alternate_screen_off();
    eprintln!("q during the flame graph's query: stacks-top ended in {took:?}");
}
