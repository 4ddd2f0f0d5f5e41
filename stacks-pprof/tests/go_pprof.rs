//! `go tool pprof` reads what stacks-pprof writes (`-raw`, `-top`) and reports the totals that
//! went into the stream. Needs Go on PATH (Debian: `apt-get install -y golang-go`).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::*;

/// Fail with a clear message when `go` is missing, rather than skipping silently.
fn require_go() {
    match Command::new("go").arg("version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`go version` failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "`go` is not on PATH ({e}); these tests need `go tool pprof`: install Go \
             (Debian: apt-get install -y golang-go)"
        ),
    }
}

/// `go tool pprof -symbolize=none ARGS PROFILE`, which must succeed; its stdout.
fn pprof(args: &[&str], profile: &Path) -> String {
    let o = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(profile)
        .output()
        .expect("run go tool pprof");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "go tool pprof {args:?} failed ({}):\n{stderr}\n{stdout}",
        o.status
    );
    stdout
}

/// The `-top -unit=ns` table: function → (flat, cum) in ns, and the profile total.
fn top(profile: &Path, extra: &[&str]) -> (HashMap<String, (i64, i64)>, i64) {
    let mut args = vec!["-top", "-unit=ns", "-nodecount=1000"];
    args.extend_from_slice(extra);
    let out = pprof(&args, profile);
    let ns = |s: &str| -> i64 {
        s.trim_end_matches("ns")
            .parse()
            .unwrap_or_else(|e| panic!("bad value {s:?} ({e}) in:\n{out}"))
    };
    let total = out
        .lines()
        .find_map(|l| l.strip_prefix("Showing nodes accounting for "))
        .and_then(|l| l.split(" of ").nth(1))
        .and_then(|l| l.strip_suffix(" total"))
        .map(ns)
        .unwrap_or_else(|| panic!("no total in:\n{out}"));
    let rows = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() >= 6).then(|| (cols[5..].join(" "), (ns(cols[0]), ns(cols[3]))))
        })
        .collect();
    (rows, total)
}

/// Convert the fixture to a profile file; returns the scratch directory (removed when
/// dropped) and the file.
fn convert_to_file(test: &str, args: &[&str]) -> (stacks_testkit::ScratchDir, std::path::PathBuf) {
    let dir = scratch(test);
    let input = dir.join("in.arrow");
    std::fs::write(&input, stream(&fixture())).expect("write stream");
    let profile = dir.join("out.pb.gz");
    let o = Command::new(env!("CARGO_BIN_EXE_stacks-pprof"))
        .arg(&input)
        .arg("-o")
        .arg(&profile)
        .args(args)
        .output()
        .expect("run stacks-pprof");
    assert!(
        o.status.success(),
        "stacks-pprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty(), "with -o nothing goes to stdout");
    (dir, profile)
}

const MS: i64 = 1_000_000;

#[test]
fn pprof_top_reports_the_stream_totals() {
    require_go();
    let (_dir, profile) = convert_to_file("top", &[]);
    let (rows, total) = top(&profile, &[]);
    assert_eq!(
        total,
        70 * MS,
        "every row counts, the empty stack too: {rows:?}"
    );
    assert_eq!(rows["do_syscall_64"], (30 * MS, 30 * MS));
    assert_eq!(rows["busy"], (20 * MS, 20 * MS));
    assert_eq!(rows[UNRESOLVED], (10 * MS, 10 * MS));
    assert_eq!(rows["main"], (0, 60 * MS));
    assert_eq!(rows["outer"], (0, 30 * MS));
    assert_eq!(rows["inner (inline)"], (0, 30 * MS));
    assert_eq!(rows.len(), 6, "{rows:?}");

    // The library's view of the same file agrees with pprof's.
    let decoded = stacks_pprof::decode(&std::fs::read(&profile).expect("read profile"))
        .expect("decode profile");
    let flat = stacks_pprof::leaf_function_totals(&decoded, 0);
    let cum = stacks_pprof::cumulative_function_totals(&decoded, 0);
    for (name, (f, c)) in &rows {
        let name = name.trim_end_matches(" (inline)");
        assert_eq!(flat.get(name).copied().unwrap_or(0), *f, "flat {name}");
        assert_eq!(cum.get(name).copied().unwrap_or(0), *c, "cum {name}");
    }

    // Labels survive: focusing on pid 2 leaves the `busy` stack only.
    let (rows, total) = top(&profile, &["-tagfocus=pid=2"]);
    assert_eq!(total, 70 * MS);
    assert_eq!(rows["busy"], (20 * MS, 20 * MS));
    assert!(!rows.contains_key("do_syscall_64"), "{rows:?}");
}

#[test]
fn pprof_raw_shows_types_lines_and_mappings() {
    require_go();
    let (_dir, profile) = convert_to_file("raw", &[]);
    let raw = pprof(&["-raw"], &profile);
    for expected in [
        "PeriodType: cpu nanoseconds",
        "Period: 10000000",
        "Comment: host=testbox",
        "Comment: events=profile:u:100",
        "cpu/nanoseconds[dflt]",
        "   30000000: ",
        "   20000000: ",
        "comm:[worker]",
        "pid:[2]",
    ] {
        assert!(raw.contains(expected), "missing {expected:?} in:\n{raw}");
    }

    // Mappings: `id: start/limit/offset file build_id flags`.
    let mappings: HashMap<String, String> = raw
        .lines()
        .skip_while(|l| *l != "Mappings")
        .skip(1)
        .filter_map(|l| l.split_once(": "))
        .map(|(id, rest)| (id.trim().to_string(), rest.to_string()))
        .collect();
    assert_eq!(mappings.len(), 3, "{raw}");
    // Locations: `id: address M=mapping function file:line s=0`, inlined callers on
    // continuation lines.
    let lines: Vec<&str> = raw
        .lines()
        .skip_while(|l| *l != "Locations")
        .skip(1)
        .take_while(|l| *l != "Mappings")
        .collect();
    let location = |needle: &str| -> (usize, String, String) {
        let i = lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no location with {needle:?} in:\n{raw}"));
        let fields: Vec<&str> = lines[i].split_whitespace().collect();
        let address = fields[1].to_string();
        let mapping = fields[2].trim_start_matches("M=").to_string();
        (i, address, mappings[&mapping].clone())
    };

    let (_, address, mapping) = location(" do_syscall_64 ");
    assert_eq!(address, "0xffffffff81000100");
    assert!(mapping.contains("[kernel.kallsyms]"), "{mapping}");

    let (i, address, mapping) = location(" inner src/app.c:10 ");
    assert_eq!(address, "0x1100", "user locations carry the file offset");
    assert!(
        lines[i + 1].trim_start().starts_with("outer src/app.c:20"),
        "the containing function follows the inlined one:\n{raw}"
    );
    assert!(
        mapping.contains("/usr/bin/app 0123456789abcdef [FN][FL][LN][IN]"),
        "{mapping}"
    );

    let (_, address, mapping) = location(UNRESOLVED);
    assert_eq!(address, "0x2a0");
    assert!(
        mapping.contains("/usr/lib/libfoo.so.1 feedface"),
        "{mapping}"
    );
}

#[test]
fn pprof_reads_stdout_output_without_labels() {
    require_go();
    let o = run(&["--no-labels"], &stream(&fixture()));
    assert!(
        o.status.success(),
        "stacks-pprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = scratch("stdout");
    let profile = dir.join("out.pb.gz");
    std::fs::write(&profile, &o.stdout).expect("write profile");
    let raw = pprof(&["-raw"], &profile);
    assert!(!raw.contains("pid:["), "no labels asked for:\n{raw}");
    let (rows, total) = top(&profile, &[]);
    assert_eq!(total, 70 * MS);
    assert_eq!(rows["main"], (0, 60 * MS));
}
