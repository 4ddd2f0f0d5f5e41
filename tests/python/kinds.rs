//! Python frames at every kind that takes user stacks, per thread: CPython threads each running
//! a known chain carry their own chain in CPU samples (`profile`), a thread in `time.sleep`
//! carries its caller chain off CPU (`switch`, `state`), with `u` and with `d` stacks, file writes carry theirs (`vfs`, a
//! `uprobe` on libc's `write`); a process started before the recorder (`-p PID`) gets its
//! Python frames; a recursion deeper than the kernel side's walk ends in the truncation marker
//! frame.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use stacks_tests::{bpf_available, bpf_serial, check, read_frames, read_stream, scratch, sh};

use super::{SCRIPT, any_python, installed, interpreters};

/// Threads: `ta` runs `a_mid` → `a_leaf` → `spin`, `tb` `b_mid` → `b_leaf` → `spin` (both
/// CPU-bound), `ts` `s_mid` → `sleeper` → `time.sleep` (started first); each writes its native
/// thread id to the file `argv[2]`.
const THREADS: &str = "import sys, threading, time

def spin(until):
    n = 0
    while time.monotonic() < until:
        n += 1

def a_leaf(until):
    spin(until)

def a_mid(until):
    a_leaf(until)

def b_leaf(until):
    spin(until)

def b_mid(until):
    b_leaf(until)

def sleeper(until):
    while time.monotonic() < until:
        time.sleep(0.01)

def s_mid(until):
    sleeper(until)

def run(name, f, until):
    with open(sys.argv[2], 'a') as out:
        out.write(f'{name} {threading.get_native_id()}\\n')
    if name == 'ts':
        sleeping.set()
    f(until)

# The sleeper first: started once the spinners hold the GIL, it would wait for it in `run`.
sleeping = threading.Event()
end = time.monotonic() + float(sys.argv[1])
ts = [threading.Thread(target=run, args=('ts', s_mid, end))]
ts[0].start()
sleeping.wait()
ts += [threading.Thread(target=run, args=(n, f, end)) for n, f in (('ta', a_mid), ('tb', b_mid))]
for t in ts[1:]:
    t.start()
for t in ts:
    t.join()
";

/// `leaf` spins under 100 calls of `rec`: deeper than the 64 frames the kernel side walks.
const RECURSION: &str = "import sys, time

def leaf(until):
    n = 0
    while time.monotonic() < until:
        n += 1

def rec(depth, until):
    if depth:
        return rec(depth - 1, until)
    return leaf(until)

end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rec(100, min(end, time.monotonic() + 0.05))
";

/// `writer` ← `mid` ← `<module>` writes 4 KiB blocks to the file `argv[2]` for `argv[1]` s.
const WRITER: &str = "import sys, time

def writer(path, until):
    with open(path, 'wb') as f:
        while time.monotonic() < until:
            f.write(b'x' * 4096)
            f.flush()

def mid(path, until):
    writer(path, until)

mid(sys.argv[2], time.monotonic() + float(sys.argv[1]))
";

/// The function of the frame standing for Python frames not read.
const TRUNCATED: &str = "[more Python frames]";

/// A row of a symbolized stream: its kind, thread, weight (off-CPU ns for `switch`, 1
/// otherwise) and Python functions, innermost first.
struct PyRow {
    kind: String,
    tid: i32,
    path: Option<String>,
    weight: i64,
    py: Vec<String>,
}

fn py_rows(batches: &[RecordBatch]) -> Vec<PyRow> {
    let mut out = Vec::new();
    for b in batches {
        let frames = read_frames(std::slice::from_ref(b));
        let kind = b.column_by_name("kind").expect("kind").as_string::<i32>();
        let tid = b
            .column_by_name("tid")
            .expect("tid")
            .as_primitive::<Int32Type>();
        let duration = b.column_by_name("duration").expect("duration");
        let duration = duration.as_primitive::<Int64Type>();
        let path = b.column_by_name("path").expect("path").as_string::<i32>();
        for (row, frames) in frames.into_iter().enumerate() {
            let py = frames
                .unwrap_or_default()
                .into_iter()
                .filter(|f| f.module.as_deref() == Some("[python]"))
                .filter_map(|f| f.function)
                .collect();
            let weight = if kind.value(row) == "switch" && duration.is_valid(row) {
                duration.value(row)
            } else {
                1
            };
            out.push(PyRow {
                kind: kind.value(row).to_string(),
                tid: tid.value(row),
                path: path.is_valid(row).then(|| path.value(row).to_string()),
                weight,
                py,
            });
        }
    }
    out
}

/// Of the rows of `kind` of thread `tid`: the share of weight whose Python frames start with
/// `chain` (innermost first), the weight, and the most common other chains for a failure.
fn chain_share(rows: &[PyRow], kind: &str, tid: i32, chain: &[&str]) -> (f64, i64, String) {
    let (mut hit, mut all) = (0i64, 0i64);
    let mut misses = std::collections::HashMap::<String, i64>::new();
    for r in rows.iter().filter(|r| r.kind == kind && r.tid == tid) {
        all += r.weight;
        if r.py.len() >= chain.len() && r.py.iter().zip(chain).all(|(a, b)| a == b) {
            hit += r.weight;
        } else {
            *misses.entry(r.py.join(";")).or_default() += r.weight;
        }
    }
    let mut misses: Vec<_> = misses.into_iter().collect();
    misses.sort_by_key(|(_, w)| -w);
    misses.truncate(5);
    (hit as f64 / all.max(1) as f64, all, format!("{misses:?}"))
}

/// The native thread ids the threads script wrote (`name tid` lines).
fn thread_ids(stdout: &str) -> std::collections::HashMap<String, i32> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, t)| Some((n.to_string(), t.trim().parse().ok()?)))
        .collect()
}

#[test]
fn python_threads_each_carry_their_own_chain_on_and_off_cpu() {
    threads_carry_their_chains("u");
}

/// The same with `d` stacks: the Python frames follow the stack copy.
#[test]
fn python_threads_each_carry_their_own_chain_with_d_stacks() {
    threads_carry_their_chains("d");
}

/// The threads script's chains in `profile`, `switch` and `state` rows with `stacks` (`u`, `d`)
/// user stacks, for each installed interpreter.
fn threads_carry_their_chains(stacks: &str) {
    if !bpf_available(&format!(
        "python_threads_each_carry_their_own_chain ({stacks})"
    )) {
        return;
    }
    let _serial = bpf_serial();
    let mut tried = 0;
    for (i, python) in interpreters().iter().enumerate() {
        if !installed(python) {
            continue;
        }
        tried += 1;
        let dir = scratch(&format!("python-threads-{stacks}-{i}"));
        let d = dir.display();
        std::fs::write(dir.join("threads.py"), THREADS).expect("write the script");
        let rec = sh(&format!(
            "stacks-record -e profile:{stacks}:999,switch:{stacks},state:{stacks} \
               -o {d}/raw.arrow -- {python} {d}/threads.py 2 {d}/ids && \
             stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow"
        ));
        check(&rec, &format!("recording {python}"));
        let stderr = String::from_utf8_lossy(&rec.stderr);
        let ids = thread_ids(&std::fs::read_to_string(dir.join("ids")).unwrap_or_default());
        let rows = py_rows(&read_stream(&dir.join("sym.arrow")));
        let want: &[(&str, &str, &[&str])] = &[
            ("ta", "profile", &["spin", "a_leaf", "a_mid"]),
            ("tb", "profile", &["spin", "b_leaf", "b_mid"]),
            ("ts", "switch", &["sleeper", "s_mid"]),
            ("ts", "state", &["sleeper", "s_mid"]),
        ];
        for (thread, kind, chain) in want {
            let tid = *ids
                .get(*thread)
                .unwrap_or_else(|| panic!("{python}: no id of thread {thread}: {ids:?}"));
            let (share, weight, misses) = chain_share(&rows, kind, tid, chain);
            eprintln!("{python}: {thread} {kind}:{stacks}: {chain:?} in {share:.3} of {weight}");
            assert!(
                weight > 0,
                "{python}: no {kind} rows of {thread}:\n{stderr}"
            );
            assert!(
                share >= 0.9,
                "{python}: {thread}'s {kind} rows with {chain:?}: {share:.3} of {weight}; \
                 other chains {misses}\n{stderr}"
            );
        }
    }
    assert!(tried > 0, "no CPython 3.11+ installed to test with");
}

#[test]
fn python_process_started_before_the_recorder() {
    if !bpf_available("python_process_started_before_the_recorder") {
        return;
    }
    let _serial = bpf_serial();
    let python = any_python();
    let dir = scratch("python-attach");
    let d = dir.display();
    std::fs::write(dir.join("script.py"), SCRIPT).expect("write the script");
    let mut child = std::process::Command::new(&python)
        .arg(dir.join("script.py"))
        .arg("4")
        .spawn()
        .expect("start python");
    // Well into its loop: the interpreter found at the first samples, not at an exec.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let rec = sh(&format!(
        "stacks-record -e profile:u:999 -p {} -d 2s -o {d}/raw.arrow && \
         stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow",
        child.id()
    ));
    let _ = child.wait();
    check(&rec, "recording a running process");
    let stderr = String::from_utf8_lossy(&rec.stderr);
    let rows = py_rows(&read_stream(&dir.join("sym.arrow")));
    let (share, n, misses) = chain_share(
        &rows,
        "profile",
        child.id() as i32,
        &["leaf", "middle", "outer"],
    );
    eprintln!("{python} -p: leaf;middle;outer in {share:.3} of {n} samples");
    assert!(n >= 300, "under 300 samples:\n{stderr}");
    assert!(
        share >= 0.9,
        "leaf;middle;outer in {share:.3} of samples; other chains {misses}\n{stderr}"
    );
}

#[test]
fn python_recursion_deeper_than_the_walk_is_marked_truncated() {
    if !bpf_available("python_recursion_deeper_than_the_walk_is_marked_truncated") {
        return;
    }
    let _serial = bpf_serial();
    let python = any_python();
    let dir = scratch("python-recursion");
    let d = dir.display();
    std::fs::write(dir.join("rec.py"), RECURSION).expect("write the script");
    let rec = sh(&format!(
        "stacks-record -e profile:u:999 -o {d}/raw.arrow -- {python} {d}/rec.py 2 && \
         stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow"
    ));
    check(&rec, "recording the recursion");
    let stderr = String::from_utf8_lossy(&rec.stderr);
    let rows = py_rows(&read_stream(&dir.join("sym.arrow")));
    let samples: Vec<_> = rows.iter().filter(|r| r.kind == "profile").collect();
    // The innermost 64 frames read (leaf, then 63 calls of rec), then the marker.
    let mut want = vec!["leaf"];
    want.extend(std::iter::repeat_n("rec", 63));
    want.push(TRUNCATED);
    let hit = samples.iter().filter(|r| r.py == want).count();
    let share = hit as f64 / samples.len().max(1) as f64;
    eprintln!(
        "{python}: truncated recursion in {share:.3} of {} samples",
        samples.len()
    );
    assert!(samples.len() >= 300, "under 300 samples:\n{stderr}");
    assert!(
        share >= 0.9,
        "leaf, 63 rec, {TRUNCATED} in {share:.3} of samples; a miss: {:?}\n{stderr}",
        samples.iter().find(|r| r.py != want).map(|r| &r.py)
    );
    assert!(
        stderr.contains(" stacks truncated") && !stderr.contains(" 0 stacks truncated"),
        "truncations not counted:\n{stderr}"
    );
}

#[test]
fn python_frames_at_io_and_probe_events() {
    if !bpf_available("python_frames_at_io_and_probe_events") {
        return;
    }
    let _serial = bpf_serial();
    let python = any_python();
    let dir = scratch("python-io");
    let d = dir.display();
    std::fs::write(dir.join("writer.py"), WRITER).expect("write the script");
    let rec = sh(&format!(
        "stacks-record -e vfs:u,uprobe:libc.so.6:write:u -o {d}/raw.arrow -- \
           {python} {d}/writer.py 1 {d}/out.bin && \
         stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow"
    ));
    check(&rec, "recording writes");
    let stderr = String::from_utf8_lossy(&rec.stderr);
    let out = dir.join("out.bin").display().to_string();
    let rows = py_rows(&read_stream(&dir.join("sym.arrow")));
    let chain = ["writer", "mid", "<module>"];
    for (kind, of_file) in [("vfs", true), ("probe", false)] {
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| r.kind == kind && (!of_file || r.path.as_deref() == Some(&out)))
            .collect();
        let hit = mine
            .iter()
            .filter(|r| r.py.starts_with(&chain.map(String::from)))
            .count();
        let share = hit as f64 / mine.len().max(1) as f64;
        eprintln!(
            "{python}: {kind} rows with {chain:?}: {share:.3} of {}",
            mine.len()
        );
        assert!(mine.len() >= 100, "{kind}: {} rows:\n{stderr}", mine.len());
        assert!(
            share >= 0.9,
            "{kind}: {chain:?} in {share:.3} of rows; a miss: {:?}\n{stderr}",
            mine.iter()
                .find(|r| !r.py.starts_with(&chain.map(String::from)))
                .map(|r| &r.py)
        );
    }
}
