//! End-to-end ground truth for heap profiling (`-e alloc`, libstacks_alloc.so): a C program
//! with three malloc sites of known bytes — small blocks freed at once, 4 KiB blocks kept (a
//! leak), 1 MiB blocks freed at once — recorded at a 64 KiB interval: `alloc-space` gives each
//! site's bytes within ±10%, `heap-inuse` names the leaking site with its kept bytes within
//! ±10% and the other two near 0 (and `heap-growth` agrees, from the start and from the
//! middle of the leak), the same in Rust through tracing-stacks' `SampledAlloc` (stacks-workload
//! heap-sites), through a `--` command (the preload injected) and through
//! `-p` of a process started with the preload, and through OpenTelemetry's `otel_memory` probes
//! fired by a program's own sampler (as a command, under `-p`, and from a library the process
//! loads later). A process without the
//! preload under `-p` gets one clear warning, and its other events are recorded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use serde_json::Value;
use stacks_tests::{bin, bpf_available, bpf_serial, check, read_stream, scratch, sh};

/// The sites' block counts: 4M × 48 B, 24,576 × 4 KiB (96 MiB kept), 200 × 1 MiB. At 64 KiB
/// the leak gets ~1,500 samples (1/sqrt: 2.6%, so ±10% is ~4 standard deviations).
const SMALL: u64 = 4_000_000;
const LEAK: u64 = 24_576;
const BIG: u64 = 200;
const SITES: [&str; 3] = ["site_small", "site_leak", "site_big"];

/// tests/fixtures/heap/sites.c built with frame pointers into `dir`.
fn build_sites(dir: &Path) -> PathBuf {
    build_fixture(dir, "sites")
}

/// tests/fixtures/heap/NAME.c built with frame pointers into `dir`.
fn build_fixture(dir: &Path, name: &str) -> PathBuf {
    let src = stacks_tests::crate_dir().join(format!("fixtures/heap/{name}.c"));
    let exe = dir.join(name);
    let out = sh(&format!(
        "${{CC:-cc}} -O1 -g -fno-omit-frame-pointer -o {} {}",
        exe.display(),
        src.display()
    ));
    check(&out, &format!("building {name}.c"));
    exe
}

/// What the program reported: per site, (allocated, kept) bytes.
fn report(path: &Path) -> HashMap<String, (f64, f64)> {
    let v: Value = serde_json::from_slice(&std::fs::read(path).expect("report")).expect("json");
    SITES
        .iter()
        .map(|s| {
            let site = &v[*s];
            (
                s.to_string(),
                (
                    site["allocated"].as_f64().unwrap(),
                    site["kept"].as_f64().unwrap(),
                ),
            )
        })
        .collect()
}

/// Whether a frame's function is site `site`: the C function, or the Rust one
/// (`stacks_workload::heap::site_leak`).
fn is_site(function: &Value, site: &str) -> bool {
    function
        .as_str()
        .is_some_and(|f| f == site || f.ends_with(&format!("::{site}")))
}

/// Bytes per site of a bundled query's rows (`column`), a row counted for the site whose
/// function is in its stack.
fn by_site(store: &Path, comm: &str, query: &str, column: &str) -> HashMap<String, f64> {
    let q = sh(&format!(
        "stacks-query -d {} --format json {query} -p comm={comm}",
        store.display()
    ));
    check(&q, query);
    let rows: Vec<Value> = serde_json::from_slice(&q.stdout).expect("json");
    let mut out: HashMap<String, f64> = SITES.iter().map(|s| (s.to_string(), 0.0)).collect();
    for r in &rows {
        let frames = r["stack"].as_array().cloned().unwrap_or_default();
        let site = SITES
            .iter()
            .find(|s| frames.iter().any(|f| is_site(&f["function"], s)));
        if let Some(s) = site {
            *out.get_mut(*s).unwrap() += r[column].as_f64().unwrap();
        }
    }
    out
}

/// `heap-growth`: over the whole recording, each site's growth is its `heap-inuse` bytes (the
/// leak's within ±10% of what it kept); from the middle sample of the leak's loop, the leak
/// was live by half its bytes at the start (40–60%: its blocks are alike, allocated in one
/// loop) and grew by the rest, end − start exactly.
fn check_growth(store: &Path, comm: &str, truth: &HashMap<String, (f64, f64)>) {
    let inuse = by_site(store, comm, "heap-inuse", "inuse_bytes");
    let growth = by_site(store, comm, "heap-growth", "growth_bytes");
    for s in SITES {
        assert!(
            (growth[s] - inuse[s]).abs() <= 0.001 * truth["site_leak"].1,
            "{s}: heap-growth over the recording {} bytes, heap-inuse {}",
            growth[s],
            inuse[s]
        );
    }
    let kept = truth["site_leak"].1;
    assert!(
        (growth["site_leak"] - kept).abs() <= 0.10 * kept,
        "site_leak grew {} bytes, the program kept {kept}",
        growth["site_leak"]
    );
    let times = sh(&format!(
        "stacks-query -d {} --format csv -c \"SELECT s.time FROM samples s \
         JOIN stack_table t ON t.stack_id = s.stack_id WHERE s.kind = 'alloc' \
         AND s.op = 'alloc' AND stack_fold(t.stack) LIKE '%site_leak%' ORDER BY s.time\"",
        store.display()
    ));
    check(&times, "the leak's sample times");
    let times: Vec<String> = String::from_utf8_lossy(&times.stdout)
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    assert!(times.len() > 100, "{} leak samples", times.len());
    let middle = &times[times.len() / 2];
    // Summed over the leak's stacks (one function can have several: frames recorded before
    // and after the recorder read the process's map are told apart).
    let from_middle = format!("heap-growth -p from={middle}");
    let (start, end, grew) = (
        by_site(store, comm, &from_middle, "start_bytes")["site_leak"],
        by_site(store, comm, &from_middle, "end_bytes")["site_leak"],
        by_site(store, comm, &from_middle, "growth_bytes")["site_leak"],
    );
    eprintln!("site_leak from {middle}: start {start}, end {end}, growth {grew} bytes");
    assert!(
        start >= 0.4 * end && start <= 0.6 * end && (grew - (end - start)).abs() < 1.0,
        "site_leak from the middle of its loop: start {start}, end {end}, growth {grew} bytes"
    );
}

/// `alloc-space` within ±10% of each site's bytes; `heap-inuse`: the leak within ±10% and
/// first, the sites that free near 0; both through stacks-pprof.
fn check_store(store: &Path, comm: &str, truth: &HashMap<String, (f64, f64)>) {
    let space = by_site(store, comm, "alloc-space", "alloc_bytes");
    let inuse = by_site(store, comm, "heap-inuse", "inuse_bytes");
    for s in SITES {
        let (allocated, kept) = truth[s];
        let err = (space[s] - allocated).abs() / allocated;
        assert!(
            err <= 0.10,
            "{s}: alloc-space {} bytes, the program allocated {allocated} ({:.1}% off); all: {space:?}",
            space[s],
            err * 100.0
        );
        if kept > 0.0 {
            let err = (inuse[s] - kept).abs() / kept;
            assert!(
                err <= 0.10,
                "{s}: heap-inuse {} bytes, the program kept {kept} ({:.1}% off); all: {inuse:?}",
                inuse[s],
                err * 100.0
            );
        } else {
            assert!(
                inuse[s] <= 0.01 * truth["site_leak"].1,
                "{s} freed everything, heap-inuse says {} bytes: {inuse:?}",
                inuse[s]
            );
        }
    }
    check_growth(store, comm, truth);

    // The leak view names the leak first.
    let q = sh(&format!(
        "stacks-query -d {} --format json heap-inuse -p comm={comm}",
        store.display()
    ));
    check(&q, "heap-inuse");
    let rows: Vec<Value> = serde_json::from_slice(&q.stdout).unwrap();
    let top = rows[0]["stack"].to_string();
    assert!(top.contains("site_leak"), "heap-inuse's first row: {top}");
    // pprof-ready: its default value is the live bytes, by stack, in bytes.
    let folded = sh(&format!(
        "stacks-query -d {} heap-inuse -p comm={comm} | stacks-pprof -f folded",
        store.display()
    ));
    check(&folded, "heap-inuse | stacks-pprof -f folded");
    let leak: f64 = String::from_utf8_lossy(&folded.stdout)
        .lines()
        .filter(|l| l.contains("site_leak"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        (leak - truth["site_leak"].1).abs() / truth["site_leak"].1 <= 0.10,
        "folded heap-inuse gives the leak {leak} bytes"
    );
}

#[test]
fn a_rust_program_samples_through_its_global_allocator() {
    let test = "a_rust_program_samples_through_its_global_allocator";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("heap-rust");
    let (rep, store) = (dir.join("report.json"), dir.join("store"));
    // stacks-workload's global allocator is tracing-stacks' SampledAlloc: the recorder finds
    // its probes in the executable and preloads nothing.
    let out = sh(&format!(
        "stacks-record -e alloc:u:64K -- stacks-workload --report {} heap-sites \
         --small {SMALL} --leak {LEAK} --big {BIG} | stacks-symbolize | stacks-pack {}",
        rep.display(),
        store.display()
    ));
    check(&out, "recording stacks-workload heap-sites");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lost 0 events"), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    check_store(&store, "stacks-workload", &report(&rep));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn alloc_space_and_heap_inuse_match_the_sites_of_a_command() {
    let test = "alloc_space_and_heap_inuse_match_the_sites_of_a_command";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("heap-command");
    let exe = build_sites(&dir);
    let (rep, store) = (dir.join("report.json"), dir.join("store"));
    let out = sh(&format!(
        "stacks-record -e alloc:u:64K -- {} {} {SMALL} {LEAK} {BIG} | stacks-symbolize | stacks-pack {}",
        exe.display(),
        rep.display(),
        store.display()
    ));
    check(&out, "recording sites");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    check_store(&store, "sites", &report(&rep));
}

#[test]
fn a_process_started_with_the_preload_is_recorded_with_p() {
    let test = "a_process_started_with_the_preload_is_recorded_with_p";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("heap-pid");
    let exe = build_sites(&dir);
    let lib = bin("libstacks_alloc.so");
    let env = [
        ("LD_PRELOAD", lib.to_str().unwrap()),
        ("STACKS_ALLOC_INTERVAL", "64K"),
    ];
    let (rep, store) = record_with_p(&dir, &exe, &env);
    check_store(&store, "sites", &report(&rep));
}

/// OpenTelemetry's memory-profiling contract: a program whose own sampler fires
/// `otel_memory:alloc` (ptr, size, weight) and `otel_memory:free` (ptr), guarded by semaphores
/// (tests/fixtures/heap/otel_sites.c), is recorded through them, as a command (nothing
/// preloaded: the sites would be counted twice) and under `-p`. Its sampler fires only when the
/// semaphores are set, and then its weights are each site's bytes to within 64 KiB.
#[test]
fn a_program_with_the_otel_memory_probes_is_recorded_through_them() {
    let test = "a_program_with_the_otel_memory_probes_is_recorded_through_them";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("heap-otel");
    let exe = build_fixture(&dir, "otel_sites");
    let (rep, store) = (dir.join("report.json"), dir.join("store"));
    let out = sh(&format!(
        "stacks-record -e alloc:u -- {} {} {SMALL} {LEAK} {BIG} | stacks-symbolize | stacks-pack {}",
        exe.display(),
        rep.display(),
        store.display()
    ));
    check(&out, "recording otel_sites");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(fired(&rep) > 1000, "the semaphores were set: {stderr}");
    check_store(&store, "otel_sites", &report(&rep));

    let pid_dir = dir.join("pid");
    std::fs::create_dir_all(&pid_dir).unwrap();
    let (rep, store) = record_with_p(&pid_dir, &exe, &[]);
    assert!(fired(&rep) > 1000, "-p: the semaphores were set");
    check_store(&store, "otel_sites", &report(&rep));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The samples otel_sites fired (0 when its semaphores were not set).
fn fired(report: &Path) -> u64 {
    let v: Value = serde_json::from_slice(&std::fs::read(report).expect("report")).expect("json");
    v["fired"].as_u64().unwrap_or(0)
}

/// Start `exe` (a sites program) with `env`, waiting for a start file; record it with
/// `stacks-record -e alloc -p PID` until it exits (without a warning); symbolize and pack. Its
/// report and store.
fn record_with_p(dir: &Path, exe: &Path, env: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let (rep, start) = (dir.join("report.json"), dir.join("start"));
    let mut program = std::process::Command::new(exe);
    program
        .args([
            rep.to_str().unwrap(),
            &SMALL.to_string(),
            &LEAK.to_string(),
            &BIG.to_string(),
            start.to_str().unwrap(),
        ])
        .envs(env.iter().copied());
    let (said, store) = record_p(dir, program, &start);
    assert!(!said.contains("warning"), "{said}");
    (rep, store)
}

/// Start `program`, which waits for file `start`; record it with `stacks-record -e alloc -p
/// PID`, create `start` once the recorder says it records, and record until the program
/// exits; symbolize and pack into `dir`/store. What the recorder said, and the store.
fn record_p(dir: &Path, mut program: std::process::Command, start: &Path) -> (String, PathBuf) {
    let (raw, store) = (dir.join("raw.arrow"), dir.join("store"));
    let mut child = program.spawn().expect("start the sites");
    let mut recorder = std::process::Command::new(bin("stacks-record"))
        .args(["-e", "alloc", "-p", &child.id().to_string(), "-o"])
        .arg(&raw)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start stacks-record");
    // Let the program allocate once the recorder says it records.
    let stderr = recorder.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut said = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let go = l.contains("Ctrl-C stops");
        said.push(l);
        if go {
            break;
        }
    }
    std::fs::write(start, b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the sites did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The recorder ends once its pid has exited.
    said.extend(lines.map_while(Result::ok));
    let status = recorder.wait().unwrap();
    let said = said.join("\n");
    assert!(exited.success(), "the sites: {exited}\n{said}");
    assert!(status.success(), "stacks-record -p: {status}\n{said}");
    let out = sh(&format!(
        "stacks-symbolize < {} | stacks-pack {}",
        raw.display(),
        store.display()
    ));
    check(&out, "symbolize and pack");
    (said, store)
}

/// A sampler in a library the process loads after the recording started (dlopen, as a Python
/// extension or a plugin is): the recorder finds its `otel_memory` probes when the process maps
/// it, says so, and the sites are recorded through them (tests/fixtures/heap/otel_dlopen.c
/// waits for the semaphore a tracer sets before it allocates, so every sample is seen).
#[test]
fn a_sampler_in_a_library_loaded_later_is_attached_to() {
    let test = "a_sampler_in_a_library_loaded_later_is_attached_to";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("heap-dlopen");
    let src = stacks_tests::crate_dir().join("fixtures/heap/otel_sites.c");
    let lib = dir.join("libotel_sites.so");
    let out = sh(&format!(
        "${{CC:-cc}} -O1 -g -fno-omit-frame-pointer -shared -fPIC -Dmain=otel_sites_main -o {} {}",
        lib.display(),
        src.display()
    ));
    check(&out, "building otel_sites.c as a library");
    let exe = build_fixture(&dir, "otel_dlopen");
    let (rep, start) = (dir.join("report.json"), dir.join("start"));
    let mut program = std::process::Command::new(&exe);
    program.arg(&lib).arg(&start).arg(&rep).args([
        SMALL.to_string(),
        LEAK.to_string(),
        BIG.to_string(),
    ]);
    let (said, store) = record_p(&dir, program, &start);
    let attached: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("attached to the allocation probes of"))
        .collect();
    assert_eq!(attached.len(), 1, "{said}");
    assert!(
        attached[0].contains("libotel_sites.so") && attached[0].contains("otel_dlopen"),
        "{said}"
    );
    assert!(fired(&rep) > 1000, "the semaphores were set: {said}");
    check_store(&store, "otel_dlopen", &report(&rep));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_without_the_preload_gets_one_warning_and_its_other_events() {
    let test = "a_process_without_the_preload_gets_one_warning_and_its_other_events";
    if !bpf_available(test) {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("heap-nopreload");
    let raw = dir.join("raw.arrow");
    let mut child = std::process::Command::new("sh")
        .args(["-c", "i=0; while [ $i -lt 100000000 ]; do i=$((i+1)); done"])
        .spawn()
        .expect("start a busy shell");
    let pid = child.id();
    let out = sh(&format!(
        "stacks-record -e alloc,profile:u:199 -p {pid} -d 2s -o {}",
        raw.display()
    ));
    let _ = child.kill();
    let _ = child.wait();
    check(&out, "recording a process without the preload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "one warning: {stderr}");
    let w = warnings[0];
    for needle in [
        "-e alloc",
        &format!("pid {pid}"),
        "libstacks_alloc.so",
        "LD_PRELOAD",
    ] {
        assert!(w.contains(needle), "the warning names {needle}: {w}");
    }
    let mut kinds: HashMap<String, usize> = HashMap::new();
    for b in read_stream(&raw) {
        let kind = b.column_by_name("kind").unwrap().as_string::<i32>();
        for k in kind.iter().flatten() {
            *kinds.entry(k.to_string()).or_default() += 1;
        }
    }
    assert!(
        kinds.get("profile").copied().unwrap_or(0) >= 100,
        "2 s of a busy process at 199 Hz: {kinds:?}"
    );
    assert_eq!(kinds.get("alloc"), None, "{kinds:?}");
}
