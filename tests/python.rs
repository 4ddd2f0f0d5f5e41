//! Python frames without opt-in (#35): CPython running known functions (`outer` → `middle` →
//! `leaf`, which spins), recorded with CPU samples: the Python functions are in the stacks, in
//! call order, interleaved with the interpreter's native frames, with `leaf`'s file and the
//! line of its loop. For Debian's python3.11 (the interpreter in the executable) and pyenv's
//! 3.11.7, 3.12.1 and 3.13.0 (in libpython; 3.13's layout from its debug offsets), each when
//! installed, and Debian sid's 3.14 and 3.15 (stripped executables, layouts from their debug
//! offsets; scripts/setup-pythons); compared with py-spy when it is installed; `--no-python`
//! turns it off. Threads, off-CPU kinds, attaching and truncation: [`kinds`].

#[path = "python/kinds.rs"]
mod kinds;

use stacks_tests::{bpf_available, bpf_serial, check, read_frames, read_stream, scratch, sh};

/// The script: `leaf`'s loop runs until the time given, `outer` is called in a loop for
/// `argv[1]` seconds.
const SCRIPT: &str = "import sys, time

def leaf(until):
    n = 0
    while time.monotonic() < until:
        n += 1
    return n

def middle(until):
    return leaf(until)

def outer(until):
    return middle(until)

end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    outer(min(end, time.monotonic() + 0.05))
";

/// The interpreters tried: the image's when installed (Debian's 3.11, pyenv's), and CPython
/// 3.14 and 3.15 from Debian sid, which scripts/setup-pythons always installs (their absence
/// fails the tests).
fn interpreters() -> Vec<String> {
    let mut all: Vec<String> = [
        "/usr/bin/python3.11",
        "/root/.pyenv/versions/3.11.7/bin/python3.11",
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
        "/root/.pyenv/versions/3.13.0/bin/python3.13",
    ]
    .map(String::from)
    .to_vec();
    all.extend(NEWER.iter().map(|v| newer(v)));
    all
}

/// The minors scripts/setup-pythons installs.
const NEWER: &[&str] = &["3.14", "3.15"];

/// CPython `minor`'s executable from scripts/setup-pythons' prefix.
fn newer(minor: &str) -> String {
    let root = std::env::var("STACKS_PYTHONS").unwrap_or_else(|_| {
        format!(
            "{}/.cache/stacks-pythons",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    format!("{root}/{minor}/usr/bin/python{minor}")
}

/// Whether `python` is installed (saying so when not: its tests are skipped); one that
/// scripts/setup-pythons installs must be.
fn installed(python: &str) -> bool {
    let there = std::path::Path::new(python).exists();
    if !there {
        assert!(
            !NEWER.iter().any(|v| newer(v) == python),
            "{python} is missing: run scripts/setup-pythons (scripts/setup does)"
        );
        eprintln!("{python} not installed: its Python frames are not tested");
    }
    there
}

/// The first installed interpreter, for the tests that need one (not all of them).
fn any_python() -> String {
    interpreters()
        .into_iter()
        .find(|p| installed(p))
        .expect("no CPython 3.11+ installed to test with")
}

/// The lines of `leaf`'s loop (the `while` and its body).
fn loop_lines() -> Vec<u32> {
    SCRIPT
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("while time.monotonic() < until") || l.contains("n += 1"))
        .map(|(i, _)| i as u32 + 1)
        .collect()
}

/// Share of the folded stacks' samples (`root;…;leaf N` lines) whose stack has `outer`,
/// `middle` and `leaf` in that order (other frames, native ones, may stand between), and the
/// samples' total.
fn folded_share(folded: &str) -> (f64, u64) {
    stacks_tests::folded_share(folded, |stack| {
        let mut want = ["outer", "middle", "leaf"].iter().peekable();
        for f in stack.split(';') {
            // py-spy's frames are `name (file:line)`.
            let name = f.split(" (").next().unwrap_or(f);
            if want.peek().is_some_and(|w| **w == name) {
                want.next();
            }
        }
        want.peek().is_none()
    })
}

/// Of the symbolized stream at `path`'s CPU samples: the share whose Python frames, innermost
/// first, start `leaf`, `middle`, `outer`, with `leaf` in `script` at a line of its loop; the
/// samples; and the first sample that does not, for the failure message.
fn frames_share(path: &std::path::Path, script: &str) -> (f64, usize, String) {
    let lines = loop_lines();
    let (mut hit, mut all, mut miss) = (0usize, 0usize, String::new());
    for frames in read_frames(&read_stream(path)).into_iter().flatten() {
        all += 1;
        let py: Vec<_> = frames
            .iter()
            .filter(|f| f.module.as_deref() == Some("[python]"))
            .collect();
        let names: Vec<&str> = py.iter().filter_map(|f| f.function.as_deref()).collect();
        let ok = names.starts_with(&["leaf", "middle", "outer"])
            && py[0].file.as_deref() == Some(script)
            && py[0].line.is_some_and(|l| lines.contains(&l));
        if ok {
            hit += 1;
        } else if miss.is_empty() {
            miss = format!("{frames:#?}");
        }
    }
    (hit as f64 / all.max(1) as f64, all, miss)
}

/// py-spy's share on the same script, when it is installed.
fn py_spy_share(python: &str, d: &str) -> Option<(f64, u64)> {
    if !sh("command -v py-spy").status.success() {
        eprintln!("py-spy not installed: no comparison");
        return None;
    }
    let out = sh(&format!(
        "py-spy record -r 999 -f raw -o {d}/py-spy.txt -- {python} {d}/script.py 3 \
           > /dev/null 2>&1 && cat {d}/py-spy.txt"
    ));
    if !out.status.success() {
        eprintln!(
            "py-spy failed, no comparison: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(folded_share(&String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn python_functions_are_in_cpu_samples_with_file_and_line() {
    if !bpf_available("python_functions_are_in_cpu_samples_with_file_and_line") {
        return;
    }
    let _serial = bpf_serial();
    let mut tried = 0;
    for (i, python) in interpreters().iter().enumerate() {
        if !installed(python) {
            continue;
        }
        tried += 1;
        let dir = scratch(&format!("python-{i}"));
        let d = dir.display();
        let script = format!("{d}/script.py");
        std::fs::write(&script, SCRIPT).expect("write the script");
        let rec = sh(&format!(
            "stacks-record -e profile:u:999 -o {d}/raw.arrow -- {python} {script} 3 && \
             stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow && \
             stacks-pprof -f folded {d}/sym.arrow"
        ));
        check(&rec, &format!("recording {python}"));
        let folded = String::from_utf8_lossy(&rec.stdout);
        let stderr = String::from_utf8_lossy(&rec.stderr);
        let (ours, n) = folded_share(&folded);
        let (exact, rows, miss) = frames_share(&dir.join("sym.arrow"), &script);
        let theirs = py_spy_share(python, &d.to_string());
        eprintln!(
            "{python}: samples naming outer;middle;leaf: stacks {ours:.3} ({n} ns), with leaf's \
             file and loop line {exact:.3} of {rows} samples; py-spy {}",
            theirs.map_or("not run".into(), |(s, n)| format!("{s:.3} of {n}"))
        );
        // A busy machine samples fewer than 999 a second: 300 ms of samples at least.
        assert!(n >= 300_000_000, "under 300 ms of samples:\n{stderr}");
        assert!(
            ours >= 0.9,
            "{python}: outer;middle;leaf in {ours:.3} of samples:\n{folded}\n{stderr}"
        );
        assert!(
            exact >= 0.9,
            "{python}: leaf;middle;outer at {script}:{:?} in {exact:.3} of samples; first \
             miss:\n{miss}\n{stderr}",
            loop_lines()
        );
        assert!(
            stderr.contains("Python frames: "),
            "no Python summary line:\n{stderr}"
        );
    }
    assert!(tried > 0, "no CPython 3.11+ installed to test with");
}

#[test]
fn no_python_keeps_native_stacks_only() {
    if !bpf_available("no_python_keeps_native_stacks_only") {
        return;
    }
    let _serial = bpf_serial();
    let python = any_python();
    let dir = scratch("python-off");
    let d = dir.display();
    std::fs::write(dir.join("script.py"), SCRIPT).expect("write the script");
    let rec = sh(&format!(
        "stacks-record --no-python -e profile:u:999 -- {python} {d}/script.py 1 | \
         stacks-symbolize | stacks-pprof -f folded"
    ));
    check(&rec, "recording with --no-python");
    let folded = String::from_utf8_lossy(&rec.stdout);
    let (ours, n) = folded_share(&folded);
    assert!(n > 0, "no samples");
    assert_eq!(ours, 0.0, "Python frames despite --no-python:\n{folded}");
    assert!(
        folded.contains("_PyEval_EvalFrameDefault"),
        "the interpreter's native frames are kept:\n{folded}"
    );
}

#[test]
fn older_versions_are_refused_with_a_warning_and_native_stacks() {
    if !bpf_available("older_versions_are_refused_with_a_warning_and_native_stacks") {
        return;
    }
    let _serial = bpf_serial();
    let python = "/root/.pyenv/versions/3.10.13/bin/python3.10";
    if !installed(python) {
        return;
    }
    let dir = scratch("python-old");
    let d = dir.display();
    std::fs::write(dir.join("script.py"), SCRIPT).expect("write the script");
    let rec = sh(&format!(
        "stacks-record -e profile:u:999 -- {python} {d}/script.py 1 | \
         stacks-symbolize | stacks-pprof -f folded"
    ));
    check(&rec, "recording CPython 3.10");
    let stderr = String::from_utf8_lossy(&rec.stderr);
    let folded = String::from_utf8_lossy(&rec.stdout);
    assert_eq!(
        stderr.matches("CPython 3.10 is not supported").count(),
        1,
        "one warning:\n{stderr}"
    );
    let (ours, n) = folded_share(&folded);
    assert!(n > 0, "no samples:\n{stderr}");
    assert_eq!(
        ours, 0.0,
        "Python frames of an unsupported version:\n{folded}"
    );
    assert!(
        folded.contains("_PyEval_EvalFrameDefault"),
        "the interpreter's native frames are kept:\n{folded}"
    );
}
