//! Python frames without opt-in (#35): CPython running known functions (`outer` → `middle` →
//! `leaf`, which spins), recorded with CPU samples: the Python functions are in the stacks, in
//! call order, interleaved with the interpreter's native frames, with `leaf`'s file and the
//! line of its loop. For Debian's python3.11 (the interpreter in the executable) and pyenv's
//! 3.11.7, 3.12.1 and 3.13.0 (in libpython; 3.13's layout from its debug offsets), each when
//! installed, and Debian sid's 3.14 and 3.15 (stripped executables, layouts from their debug
//! offsets; scripts/setup-pythons); compared with py-spy when it is installed; `--no-python`
//! turns it off. Threads, off-CPU kinds, attaching and truncation: [`kinds`].

#[path = "python/asyncio.rs"]
mod asyncio;
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

/// The `usr` directory of CPython `minor`'s prefix (its `PYTHONHOME`).
fn newer_usr(minor: &str) -> String {
    newer(minor)
        .strip_suffix(&format!("/bin/python{minor}"))
        .expect("a prefix's executable")
        .to_string()
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

/// A stdlib workload: difflib comparing two lists of lines, most of its time in
/// `SequenceMatcher.find_longest_match`, for `argv[1]` seconds.
const DIFFLIB: &str = "import difflib, random, sys, time
random.seed(7)
a = [''.join(random.choice('abcdefgh') for _ in range(6)) for _ in range(3000)]
b = list(a)
for i in range(0, len(b), 7):
    b[i] = b[i][::-1]
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
";

/// Of the folded samples in the comparison (a frame of `SequenceMatcher`: start-up and
/// imports, which weigh differently when the machine is busy — py-spy samples wall-clock time
/// while the process runs or waits for a CPU, stacks-record its CPU time —, are left out): the
/// share whose stack holds `function` (ours qualified, `Class.function`; py-spy's `function
/// (file:line)`), and their total.
fn share_naming(folded: &str, function: &str) -> (f64, u64) {
    let names = |stack: &str| -> Vec<String> {
        stack
            .split(';')
            .map(|f| f.split(" (").next().unwrap_or(f).to_string())
            .collect()
    };
    let in_loop: String = folded
        .lines()
        .filter(|l| {
            let stack = l.rsplit_once(' ').map_or(*l, |(s, _)| s);
            names(stack).iter().any(|f| f.contains("SequenceMatcher"))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    stacks_tests::folded_share(&in_loop, |stack| {
        names(stack)
            .iter()
            .any(|f| f == function || f.rsplit('.').next() == Some(function))
    })
}

/// CPython 3.14 and 3.15 against py-spy on difflib (5 s, 199 Hz each, one after the other):
/// the share of the loop's samples naming the hot function within 0.03 of py-spy's.
#[test]
fn newer_pythons_name_difflib_as_py_spy_does() {
    if !bpf_available("newer_pythons_name_difflib_as_py_spy_does") {
        return;
    }
    let _serial = bpf_serial();
    assert!(
        sh("command -v py-spy").status.success(),
        "py-spy is missing: scripts/setup installs it"
    );
    for minor in NEWER {
        let python = newer(minor);
        assert!(installed(&python));
        let dir = scratch(&format!("python-difflib-{minor}"));
        let d = dir.display();
        std::fs::write(dir.join("diff.py"), DIFFLIB).expect("write the script");
        let ours = sh(&format!(
            "stacks-record -e profile:u:199 -o {d}/raw.arrow -- {python} {d}/diff.py 5 && \
             stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
        ));
        check(&ours, &format!("recording difflib on {python}"));
        let theirs = sh(&format!(
            "py-spy record -r 199 -f raw -o {d}/py-spy.txt -- {python} {d}/diff.py 5 \
               > /dev/null 2>&1 && cat {d}/py-spy.txt"
        ));
        check(&theirs, &format!("py-spy on {python}"));
        let hot = "find_longest_match";
        let (ours_share, ours_n) = share_naming(&String::from_utf8_lossy(&ours.stdout), hot);
        let (theirs_share, theirs_n) = share_naming(&String::from_utf8_lossy(&theirs.stdout), hot);
        eprintln!(
            "{python}: samples naming {hot}: stacks {ours_share:.3} ({ours_n} ns), py-spy \
             {theirs_share:.3} ({theirs_n} samples)"
        );
        assert!(ours_n >= 500_000_000, "{python}: under 0.5 s of samples");
        assert!(theirs_n >= 200, "{python}: py-spy took {theirs_n} samples");
        assert!(
            (ours_share - theirs_share).abs() <= 0.03,
            "{python}: {hot} in {ours_share:.3} of our samples, {theirs_share:.3} of py-spy's:\n{}",
            String::from_utf8_lossy(&ours.stderr)
        );
    }
}

/// A program that embeds the interpreter: it loads `argv[1]` (a libpython) and runs
/// `Py_BytesMain` with the rest of its arguments.
const EMBED: &str = "#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
\tvoid *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
\tif (!h) { fprintf(stderr, \"%s\\n\", dlerror()); return 1; }
\tint (*run)(int, char **) = (int (*)(int, char **))dlsym(h, \"Py_BytesMain\");
\tif (!run) { fprintf(stderr, \"no Py_BytesMain\\n\"); return 1; }
\treturn run(argc - 1, argv + 1);
}
";

/// CPython 3.14 and 3.15 embedded in another program (`libpython3.N.so` loaded by it): found by
/// the library's name, read like the executable's.
#[test]
fn embedded_newer_pythons_are_read() {
    if !bpf_available("embedded_newer_pythons_are_read") {
        return;
    }
    let _serial = bpf_serial();
    for minor in NEWER {
        let python = newer(minor);
        assert!(installed(&python));
        // The prefix's /usr, and its libraries (sid's C library the program must run with).
        let usr = newer_usr(minor);
        let prefix = usr.strip_suffix("/usr").expect("a prefix's usr");
        let libs = format!("{usr}/lib/x86_64-linux-gnu");
        let dir = scratch(&format!("python-embed-{minor}"));
        let d = dir.display();
        std::fs::write(dir.join("embed.c"), EMBED).expect("write the program");
        std::fs::write(dir.join("script.py"), SCRIPT).expect("write the script");
        let rec = sh(&format!(
            "cc -fno-omit-frame-pointer -o {d}/embed {d}/embed.c && \
             patchelf --set-interpreter {prefix}/usr/lib64/ld-linux-x86-64.so.2 --force-rpath \
               --set-rpath {libs} {d}/embed && \
             PYTHONHOME={usr} stacks-record -e profile:u:999 -o {d}/raw.arrow -- \
               {d}/embed {libs}/libpython{minor}.so.1.0 {d}/script.py 2 && \
             stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow"
        ));
        check(&rec, &format!("recording CPython {minor} embedded"));
        let (exact, rows, miss) = frames_share(&dir.join("sym.arrow"), &format!("{d}/script.py"));
        eprintln!("embedded {minor}: leaf;middle;outer with file and line in {exact:.3} of {rows}");
        assert!(rows >= 200, "embedded {minor}: {rows} samples");
        assert!(
            exact >= 0.9,
            "embedded {minor}: {exact:.3} of samples; first miss:\n{miss}\n{}",
            String::from_utf8_lossy(&rec.stderr)
        );
    }
}

/// `bytes` with every NUL-delimited `name` (a symbol's name in the string table) renamed to
/// `other` (same length): the symbol is no longer found by its name.
fn rename_symbol(bytes: &mut [u8], name: &[u8], other: &[u8]) -> usize {
    assert_eq!(name.len(), other.len());
    let mut n = 0;
    let w = name.len() + 2;
    for at in 0..bytes.len().saturating_sub(w) {
        if bytes[at] == 0 && bytes[at + w - 1] == 0 && &bytes[at + 1..at + w - 1] == name {
            bytes[at + 1..at + w - 1].copy_from_slice(other);
            n += 1;
        }
    }
    n
}

/// A 3.14/3.15 executable whose `_PyRuntime` and `Py_Version` symbols are gone (renamed in a
/// copy): `_PyRuntime` is found by its section `.PyRuntime`, the version read from its debug
/// offsets, and the frames read as before.
#[test]
fn newer_pythons_are_found_without_symbols() {
    if !bpf_available("newer_pythons_are_found_without_symbols") {
        return;
    }
    let _serial = bpf_serial();
    for minor in NEWER {
        let python = newer(minor);
        assert!(installed(&python));
        let usr = newer_usr(minor);
        let dir = scratch(&format!("python-nosym-{minor}"));
        let d = dir.display();
        std::fs::create_dir_all(dir.join("bin")).expect("bin");
        let mut bytes = std::fs::read(&python).expect("read the interpreter");
        assert!(rename_symbol(&mut bytes, b"_PyRuntime", b"_PyRuntimX") >= 1);
        assert!(rename_symbol(&mut bytes, b"Py_Version", b"Py_VersioX") >= 1);
        let copy = dir.join(format!("bin/python{minor}"));
        std::fs::write(&copy, &bytes).expect("write the copy");
        std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        std::fs::write(dir.join("script.py"), SCRIPT).expect("write the script");
        let rec = sh(&format!(
            "readelf --dyn-syms -W {copy} | grep -cw -e _PyRuntime -e Py_Version; \
             PYTHONHOME={usr} stacks-record -e profile:u:999 -o {d}/raw.arrow -- \
               {copy} {d}/script.py 2 && stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow",
            copy = copy.display()
        ));
        check(
            &rec,
            &format!("recording CPython {minor} without its symbols"),
        );
        assert_eq!(
            String::from_utf8_lossy(&rec.stdout).trim(),
            "0",
            "the copy still names the symbols"
        );
        let (exact, rows, miss) = frames_share(&dir.join("sym.arrow"), &format!("{d}/script.py"));
        eprintln!("{minor} without symbols: leaf;middle;outer in {exact:.3} of {rows}");
        assert!(
            exact >= 0.9,
            "{minor} without symbols: {exact:.3} of {rows} samples; first miss:\n{miss}\n{}",
            String::from_utf8_lossy(&rec.stderr)
        );
    }
}
