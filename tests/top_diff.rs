//! stacks-top's diff against ground truth: two recordings of the `cpu` workload with its two
//! functions' ratio swapped (3:1, then 1:3), compared with `--once --diff`, give each
//! function's change of share within 0.05 of the workload's own CPU clock, and the values
//! add up to `--once --flame` of each store; in tmux, over the two phases of the `phases`
//! workload, `[` `b` `]` `d` name the functions whose share shrank and grew by the known
//! amounts, `F` draws the flame against the baseline and `s` opens a sandwich, and Space's
//! exclusion changes the table; bad input.

use std::path::Path;

use stacks_testkit::{assert_one_line_error, bin, bpf_available, bpf_serial, scratch};
use stacks_tests::tmux::Tmux;
use stacks_tests::{check, sh};

/// The diff's share changes and the workload's may differ by this much.
const TOLERANCE: f64 = 0.05;

fn stdout(cmd: &str, what: &str) -> String {
    let out = sh(cmd);
    check(&out, what);
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Record `stacks-workload --report REPORT workload` with `events` into `store`; the report.
fn record(events: &str, workload: &str, store: &Path, report: &Path) -> serde_json::Value {
    check(
        &sh(&format!(
            "stacks-record -e {events} -- stacks-workload --report {} {workload} \
             | stacks-symbolize | stacks-pack {}",
            report.display(),
            store.display()
        )),
        &format!("record {workload}"),
    );
    serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap()
}

/// The total of the folded lines whose stack contains `f` (each line once).
fn through(folded: &str, f: &str) -> i64 {
    folded
        .lines()
        .filter(|l| l.rsplit_once(' ').unwrap().0.contains(f))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<i64>().unwrap())
        .sum()
}

#[test]
fn the_diff_of_two_recordings_gives_the_change_of_known_shares() {
    if !bpf_available("the_diff_of_two_recordings_gives_the_change_of_known_shares") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("top-diff");
    let (a, b) = (dir.join("a"), dir.join("b"));
    let ta = record(
        "profile:u:999",
        "cpu --seconds 3 --heavy 3 --light 1",
        &a,
        &dir.join("a.json"),
    );
    let tb = record(
        "profile:u:999",
        "cpu --seconds 3 --heavy 1 --light 3",
        &b,
        &dir.join("b.json"),
    );
    let (a, b) = (a.display(), b.display());
    let csv = stdout(
        &format!("stacks-top -d {b} --kind profile --once --diff {a} -f csv"),
        "stacks-top --once --diff -f csv",
    );
    eprintln!("{}", csv.lines().take(4).collect::<Vec<_>>().join("\n"));
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<String>> = lines
        .map(|l| {
            // The function is the first column and may hold commas (quoted).
            let (name, rest) = if let Some(q) = l.strip_prefix('"') {
                let end = q.find("\",").unwrap();
                (q[..end].to_string(), &q[end + 2..])
            } else {
                let (n, r) = l.split_once(',').unwrap();
                (n.to_string(), r)
            };
            std::iter::once(name)
                .chain(rest.split(',').map(str::to_string))
                .collect()
        })
        .collect();
    let row = |f: &str| {
        rows.iter()
            .find(|r| r[0].ends_with(f))
            .unwrap_or_else(|| panic!("no {f}:\n{csv}"))
    };
    let cpu =
        |t: &serde_json::Value, k: &str| t[k].as_f64().unwrap() / t["cpu_ns"].as_f64().unwrap();
    let fa = stdout(
        &format!("stacks-top -d {a} --kind profile --once --flame"),
        "--once --flame of the baseline",
    );
    let fb = stdout(
        &format!("stacks-top -d {b} --kind profile --once --flame"),
        "--once --flame of the view",
    );
    for (f, key) in [("::burn_heavy", "heavy_ns"), ("::burn_light", "light_ns")] {
        let r = row(f);
        let got = r[col("delta_share")].parse::<f64>().unwrap();
        let want = cpu(&tb, key) - cpu(&ta, key);
        eprintln!("{f}: Δ share {got:+.3}, the workload's {want:+.3}");
        assert!(
            (got - want).abs() <= TOLERANCE,
            "{f}: Δ {got:.3} vs {want:.3} ± {TOLERANCE}\n{csv}"
        );
        // The values are those of the two flames, exactly.
        let (base, now) = (
            r[col("base_total")].parse::<i64>().unwrap(),
            r[col("total")].parse::<i64>().unwrap(),
        );
        assert_eq!((base, now), (through(&fa, f), through(&fb, f)), "{f}");
    }
    // The two functions changed the most, one up and one down.
    assert!(
        rows[0][0].contains("burn_") && rows[1][0].contains("burn_"),
        "{csv}"
    );

    // The table: the same order; folded stacks side by side add up to each flame.
    let table = stdout(
        &format!("stacks-top -d {b} --kind profile --once --diff {a}"),
        "stacks-top --once --diff",
    );
    assert!(table.starts_with("Diff against the baseline ("), "{table}");
    let third = table.lines().nth(2).unwrap();
    assert!(third.ends_with(&rows[0][0]), "{table}");
    let both = stdout(
        &format!("stacks-top -d {b} --kind profile --once --flame --diff {a}"),
        "stacks-top --once --flame --diff",
    );
    let sum = |text: &str, from_end: usize| -> i64 {
        text.lines()
            .map(|l| {
                let v: Vec<&str> = l.rsplitn(3, ' ').collect();
                v[from_end].parse::<i64>().unwrap()
            })
            .sum()
    };
    assert_eq!(sum(&both, 1), sum(&fa, 0), "the baseline's column");
    assert_eq!(sum(&both, 0), sum(&fb, 0), "the view's column");
}

/// The Δ total share (a fraction) of the diff line of a function ending in `f`, if listed.
fn delta(screen: &str, f: &str) -> Option<f64> {
    let line = screen.lines().find(|l| l.trim_end().ends_with(f))?;
    let pct = line.split_whitespace().next().unwrap();
    Some(pct.trim_end_matches('%').parse::<f64>().unwrap() / 100.0)
}

fn delta_of(screen: &str, f: &str) -> f64 {
    delta(screen, f).unwrap_or_else(|| panic!("no line for {f}:\n{screen}"))
}

#[test]
fn the_keys_compare_the_two_phases_of_a_recording() {
    if !bpf_available("the_keys_compare_the_two_phases_of_a_recording") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("top-diff-phases");
    let store = dir.join("store");
    // Phase 1 (3 s): spinner, reader-a and reader-b in block_in_read, napper and the main
    // thread in nap_until: 5 threads. Phase 2 (3 s): spinner, spinner-b, napper in nap_until,
    // the main thread joining: 4 threads.
    record(
        "state:u:20",
        "phases --seconds 3",
        &store,
        &dir.join("report.json"),
    );
    let t = Tmux::start(
        "diff",
        &format!("stacks-top -d {} --window 3s", store.display()),
    );
    t.wait(30, "the first screen", |s| {
        s.contains("GroupBy") && s.contains("samples")
    });
    t.keys(&["d"]);
    t.wait(10, "no baseline yet", |s| {
        s.contains("no baseline: b marks")
    });
    // The first phase is the baseline, the second the view.
    t.keys(&["["]);
    t.wait(10, "the first phase", |s| s.contains("3s ([ ] move"));
    t.keys(&["b"]);
    t.settled(10, "the baseline", |s| {
        s.lines().next().unwrap_or("").contains("baseline ")
    });
    t.keys(&["]", "d"]);
    t.settled(30, "the diff", |s| s.contains("Diff against the baseline"));
    // `/`: the workload's own functions only.
    let search = |text: &str| -> String {
        t.keys(&["/"]);
        t.run(&["send-keys", "-t", "t", "-l", text]);
        t.keys(&["Enter"]);
        t.wait(10, "the search", |s| s.contains(&format!("/{text} · Diff")))
    };
    let screen = search("phases::");
    let blocked = delta_of(&screen, "::phases::block_in_read");
    let napping = delta_of(&screen, "::phases::nap_until");
    let spinning = delta_of(&screen, "::phases::spin_until");
    // The function that grew the most is the spinners'.
    let grew = screen
        .lines()
        .find(|l| l.contains("::phases::") && l.trim_start().starts_with('+'))
        .unwrap_or_else(|| panic!("no phases function grew:\n{screen}"));
    assert!(grew.ends_with("::phases::spin_until"), "{screen}");
    // A running thread sampled on another CPU has no user stack: its samples count under
    // `[no stack]`, and only the spinners run.
    t.keys(&["Escape"]);
    let screen = search("[no stack");
    let unstacked = delta(&screen, "[no stack]").unwrap_or(0.0);
    eprintln!(
        "block_in_read {blocked:+.3}, nap_until {napping:+.3}, spin_until {spinning:+.3}, \
         [no stack] {unstacked:+.3}"
    );
    assert!((blocked + 0.40).abs() <= TOLERANCE, "2/5 → 0:\n{screen}");
    assert!((napping + 0.15).abs() <= TOLERANCE, "2/5 → 1/4:\n{screen}");
    assert!(
        (spinning + unstacked - 0.30).abs() <= TOLERANCE,
        "spinners 1/5 → 2/4: spin_until {spinning:+.3}, [no stack] {unstacked:+.3}"
    );
    // F: the flame of the view against the baseline; s: a sandwich, Esc back.
    t.keys(&["F"]);
    t.wait(10, "the flame", |s| s.contains("against the baseline's"));
    // Esc: the table; d: the diff again, its search kept no more; s on a function that is
    // in the view: its sandwich.
    // (A key typed before a view is drawn goes to the screen shown: wait for the diff.)
    t.keys(&["Escape", "d"]);
    t.settled(10, "the diff again", |s| {
        s.contains("Diff against the baseline")
    });
    t.keys(&["/"]);
    t.run(&["send-keys", "-t", "t", "-l", "spin_until"]);
    t.keys(&["Enter", "s"]);
    t.wait(10, "the sandwich", |s| s.contains("callers (who calls it"));
    t.keys(&["Escape"]);
    t.wait(10, "back to the diff", |s| {
        s.contains("Diff against the baseline")
    });
    // The table again; Space, n, Enter: every state but the first row's.
    t.keys(&["Escape", "Escape"]);
    let table = t.wait(10, "the table", |s| s.contains("avg_thr"));
    let states = |screen: &str| -> Vec<String> {
        screen
            .lines()
            .skip_while(|l| !l.starts_with("state "))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    let first = states(&table)[0].clone();
    assert!(states(&table).iter().any(|s| *s != first), "{table}");
    t.keys(&["Space"]);
    t.wait(10, "the menu", |s| s.contains("Space checks, n NOT"));
    t.keys(&["n", "Enter"]);
    let filtered = t.settled(10, "the exclusion", |s| {
        s.contains(&format!("Filters    state NOT IN ({first})"))
    });
    let left = states(&filtered);
    assert!(
        !left.is_empty() && left.iter().all(|s| *s != first),
        "{filtered}"
    );
    t.keys(&["q"]);
    t.wait(10, "the exit", |s| s.contains("TOP-EXIT=0"));
}

#[test]
fn a_bad_diff_store_is_one_line_before_any_screen() {
    let dir = scratch("top-diff-bad");
    let store = dir.join("store");
    let rows = stacks_testkit::recording::rows(20);
    stacks_tests::write_pair(
        &store,
        "fixture",
        &[stacks_testkit::recording::batch(&rows)],
        1000,
    );
    let top = |args: &[&str]| {
        std::process::Command::new(bin("stacks-top"))
            .args(args)
            .output()
            .unwrap()
    };
    let s = store.to_str().unwrap();
    let missing = dir.join("nope");
    assert_one_line_error(
        &top(&["-d", s, "--once", "--diff", missing.to_str().unwrap()]),
        "stacks-top",
        1,
        "--diff",
    );
    assert_one_line_error(
        &top(&["-d", s, "--once", "--diff", s, "--where", "nope = 1"]),
        "stacks-top",
        2,
        "--where",
    );
    // The same store both ways: nothing changed.
    let out = top(&[
        "-d", s, "--kind", "profile", "--once", "--diff", s, "-f", "csv",
    ]);
    check(&out, "--diff of a store with itself");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().count() > 2, "{text}");
    for l in text.lines().skip(1) {
        let delta = l.rsplit(',').nth(7).unwrap().parse::<f64>().unwrap();
        assert_eq!(delta, 0.0, "{l}");
    }
}
