//! End-to-end: record the bundled CPU workload through the whole pipeline (record → symbolize →
//! pack → query → pprof) and check the profile against what the workload measured itself.

use std::collections::HashMap;
use std::process::Command;

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use stacks_tests::{
    bpf_available, bpf_serial, check, read_stream, scratch, sh, spawn_workload, stack_functions,
};

/// The tolerance, ±5 points. Sampling at 999 Hz for ~6 s (6,000 samples) makes the
/// binomial error about 0.6 points, so the bound is ~9 standard errors away: a failure is a
/// bug, not chance (at 99 Hz it was under 3 and failed about once in 200 runs).
const SPLIT_TOLERANCE: f64 = 0.05;

fn cumulative(profile: &stacks_pprof::proto::Profile, idx: usize) -> HashMap<String, i64> {
    stacks_pprof::cumulative_function_totals(profile, idx)
}

fn find<'a>(totals: &'a HashMap<String, i64>, suffix: &str) -> (&'a str, i64) {
    totals
        .iter()
        .find(|(k, _)| k.ends_with(suffix))
        .map(|(k, v)| (k.as_str(), *v))
        .unwrap_or_else(|| {
            panic!(
                "no function ending in {suffix} in {:?}",
                totals.keys().collect::<Vec<_>>()
            )
        })
}

#[test]
fn cpu_profile_matches_ground_truth() {
    if !bpf_available("cpu_profile_matches_ground_truth") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("cpu");
    let out = dir.join("out");
    let report = dir.join("report.json");
    let pb = dir.join("cpu.pb.gz");

    let rec = sh(&format!(
        "stacks-record -e profile:u:999 -- stacks-workload --report {report} cpu --seconds 6 \
         | stacks-symbolize | stacks-pack {out}",
        report = report.display(),
        out = out.display()
    ));
    check(&rec, "record | symbolize | pack");
    let stderr = String::from_utf8_lossy(&rec.stderr);
    assert!(
        stderr.contains("lost 0 events"),
        "events were lost:\n{stderr}"
    );

    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let heavy_truth = truth["heavy_fraction"].as_f64().unwrap();
    let cpu_truth = truth["cpu_ns"].as_f64().unwrap();

    let q = sh(&format!(
        "stacks-query -d {out} cpu --format arrow | stacks-pprof -o {pb}",
        out = out.display(),
        pb = pb.display()
    ));
    check(&q, "query | pprof");

    let profile = stacks_pprof::decode(&std::fs::read(&pb).unwrap()).unwrap();
    let st = |i: usize| -> (String, String) {
        let vt = &profile.sample_type[i];
        (
            profile.string_table[vt.r#type as usize].clone(),
            profile.string_table[vt.unit as usize].clone(),
        )
    };
    assert_eq!(st(0), ("samples".into(), "count".into()));
    assert_eq!(st(1), ("cpu".into(), "nanoseconds".into()));

    let samples = cumulative(&profile, 0);
    let (heavy_name, heavy) = find(&samples, "burn_heavy");
    let (_, light) = find(&samples, "burn_light");
    assert!(heavy_name.contains("stacks_workload::cpu"), "{heavy_name}");
    let heavy_measured = heavy as f64 / (heavy + light) as f64;
    assert!(
        (heavy_measured - heavy_truth).abs() <= SPLIT_TOLERANCE,
        "burn_heavy share {heavy_measured:.3} vs workload's own {heavy_truth:.3} (±{SPLIT_TOLERANCE})"
    );
    // Nearly all of the loop's samples are in one of the two functions. A sample at the first
    // instruction of a function they call (or at a `ret`) has rbp still on the caller's frame;
    // without the leaf's return address taken from the top of the stack, those samples (5% of
    // this debug build's) went to `run` directly and left the two functions.
    let (_, run) = find(&samples, "cpu::run");
    let outside = (run - heavy - light) as f64 / run as f64;
    assert!(
        outside <= 0.01,
        "{:.1}% of cpu::run's samples are in neither burn function",
        outside * 100.0
    );

    // The recorded CPU time (samples × period) matches the CPU time the kernel charged the
    // workload, within 10% (sampling granularity plus process start/exit).
    let total_samples: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    let cpu_recorded: i64 = profile.sample.iter().map(|s| s.value[1]).sum();
    assert!(
        (cpu_recorded as f64 - cpu_truth).abs() <= 0.10 * cpu_truth,
        "recorded {cpu_recorded} ns of CPU, workload used {cpu_truth} ns"
    );

    // The rows themselves (not an aggregate) convert to the same profile: stacks-pprof reads
    // a row stream's `value` in its kind's unit and skips rows of other kinds.
    let direct = dir.join("direct.pb.gz");
    let rows = sh(&format!(
        "stacks-query -d {out} -c 'SELECT * FROM stacks' | stacks-pprof -o {direct}",
        out = out.display(),
        direct = direct.display()
    ));
    check(&rows, "query rows | pprof");
    let direct = stacks_pprof::decode(&std::fs::read(&direct).unwrap()).unwrap();
    let direct_totals: (i64, i64) = direct
        .sample
        .iter()
        .fold((0, 0), |(a, b), s| (a + s.value[0], b + s.value[1]));
    assert_eq!(direct_totals, (total_samples, cpu_recorded));

    // Source files and lines made it through.
    let files: Vec<&String> = profile
        .function
        .iter()
        .map(|f| &profile.string_table[f.filename as usize])
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("stacks-workload/src/cpu.rs")),
        "no cpu.rs among {files:?}"
    );
    assert!(
        profile.mapping.iter().any(|m| m.build_id != 0),
        "mappings carry build ids"
    );

    // Each resolved frame keeps the symbol as the binary names it: mangled for Rust.
    let syms = sh(&format!(
        "stacks-query -d {out} --format csv -c \"SELECT DISTINCT f['symbol'] AS symbol \
         FROM (SELECT unnest(stack) AS f FROM stacks) \
         WHERE f['function'] = 'stacks_workload::cpu::burn_heavy' AND NOT f['inlined']\"",
        out = out.display()
    ));
    check(&syms, "query symbols");
    let syms = String::from_utf8_lossy(&syms.stdout);
    let syms: Vec<&str> = syms.lines().skip(1).collect();
    assert_eq!(syms.len(), 1, "one symbol for burn_heavy: {syms:?}");
    assert!(
        (syms[0].starts_with("_ZN") || syms[0].starts_with("_R")) && syms[0].contains("burn_heavy"),
        "burn_heavy's symbol is mangled: {syms:?}"
    );

    // go tool pprof, a real client, parses the profile and agrees on the split.
    let top = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-top",
            "-symbolize=none",
            "-sample_index=samples",
        ])
        .arg(&pb)
        .output()
        .expect("go tool pprof (apt-get install golang-go)");
    check(&top, "go tool pprof -top");
    let text = String::from_utf8_lossy(&top.stdout);
    let cum_of = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.trim_end().ends_with(name))
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} not in go tool pprof -top output:\n{text}"))
    };
    let g_heavy = cum_of("stacks_workload::cpu::burn_heavy");
    let g_light = cum_of("stacks_workload::cpu::burn_light");
    assert_eq!(g_heavy as i64, heavy, "go pprof cum for burn_heavy");
    assert_eq!(g_light as i64, light, "go pprof cum for burn_light");

    // pyarrow reads the directory's samples files and sees every sample and the stream
    // metadata.
    let py = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, glob, pyarrow.dataset as ds, pyarrow.parquet as pq\n\
             files = sorted(glob.glob(sys.argv[1] + '/*.samples.parquet'))\n\
             t = ds.dataset(files).to_table()\n\
             md = pq.ParquetFile(files[0]).schema_arrow.metadata\n\
             print(t.num_rows, (t.column('kind').to_pylist().count('profile')), md[b'stacks.events'].decode())",
        )
        .arg(&out)
        .output()
        .expect("python3");
    check(&py, "pyarrow");
    let line = String::from_utf8_lossy(&py.stdout);
    let parts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        parts[1].parse::<i64>().unwrap(),
        total_samples,
        "pyarrow: {line}"
    );
    assert_eq!(parts[2], "profile:u:999");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kernel_stacks_resolve_from_kallsyms() {
    if !bpf_available("kernel_stacks_resolve_from_kallsyms") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("kernel");
    let sym = dir.join("sym.arrow");
    let rec = sh(&format!(
        "stacks-record -e profile:uk:99 -- stacks-workload kernel --seconds 3 | stacks-symbolize > {}",
        sym.display()
    ));
    check(&rec, "record | symbolize");
    let stacks = stack_functions(&read_stream(&sym));
    assert!(
        stacks.len() >= 100,
        "only {} samples in 3 s at 99 Hz",
        stacks.len()
    );
    // The workload lives in read(2) on /dev/zero: most samples are in the kernel's read path,
    // under the user function that loops over it.
    let in_read = stacks
        .iter()
        .filter(|s| {
            s.iter()
                .any(|(f, k)| *k && f.as_deref().is_some_and(|f| f.contains("read")))
                && s.iter()
                    .any(|(f, k)| !*k && f.as_deref().is_some_and(|f| f.ends_with("read_zero")))
        })
        .count();
    assert!(
        in_read as f64 >= 0.6 * stacks.len() as f64,
        "{in_read} of {} samples in the kernel read path under read_zero",
        stacks.len()
    );
    let kernel_frames: Vec<&(Option<String>, bool)> =
        stacks.iter().flatten().filter(|(_, k)| *k).collect();
    let resolved = kernel_frames.iter().filter(|(f, _)| f.is_some()).count();
    assert!(!kernel_frames.is_empty());
    assert!(
        resolved as f64 >= 0.95 * kernel_frames.len() as f64,
        "{resolved} of {} kernel frames resolved",
        kernel_frames.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Assert every row belongs to process `pid` and there are at least `min` of them.
fn only_pid(batches: &[RecordBatch], pid: u32, min: usize, what: &str) {
    let pids: Vec<i32> = batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("pid")
                .unwrap()
                .as_primitive::<Int32Type>()
                .values()
                .to_vec()
        })
        .collect();
    assert!(pids.len() >= min, "{} samples of {what}", pids.len());
    assert!(
        pids.iter().all(|&p| p == pid as i32),
        "rows of other processes: {pids:?}"
    );
}

#[test]
fn pid_and_name_targets() {
    if !bpf_available("pid_and_name_targets") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("targets");

    // -p PID: only that process, and the recording ends when it exits.
    let mut w = spawn_workload(&["cpu", "--seconds", "2"]);
    let by_pid = dir.join("pid.arrow");
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -p {} -o {}",
        w.id(),
        by_pid.display()
    ));
    check(&rec, "record -p");
    assert!(String::from_utf8_lossy(&rec.stderr).contains("every traced pid has exited"));
    w.wait().unwrap();
    only_pid(&read_stream(&by_pid), w.id(), 100, "2 s of a busy process");

    // NAME: a process already running when recording starts is found by the /proc scan.
    let mut w = spawn_workload(&["cpu", "--seconds", "3"]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let by_name = dir.join("name.arrow");
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -d 1.5s stacks-workload > {}",
        by_name.display()
    ));
    check(&rec, "record NAME");
    w.wait().unwrap();
    only_pid(
        &read_stream(&by_name),
        w.id(),
        75,
        "1.5 s of a busy process",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn live_batches_then_sigint_stops_cleanly_keeping_every_row() {
    if !bpf_available("live_batches_then_sigint_stops_cleanly_keeping_every_row") {
        return;
    }
    let _serial = bpf_serial();
    let mut w = spawn_workload(&["cpu", "--seconds", "8"]);
    let mut rec = Command::new(stacks_tests::bin("stacks-record"))
        .args(["-e", "profile:u:99", "-p", &w.id().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut stream =
        stacks_stream::InputStream::new("recorder", Box::new(rec.stdout.take().unwrap())).unwrap();
    // A live pipeline sees data while recording goes on: batches come at least once a second.
    let first = stream.next_batch().unwrap().expect("a first batch");
    let first_after = started.elapsed();
    assert!(first.num_rows() > 0);
    assert!(
        first_after < std::time::Duration::from_millis(2500),
        "first batch after {first_after:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // SAFETY: signalling the recorder we started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let signalled = std::time::Instant::now();
    // The rest of the stream arrives and ends properly (a missing end marker is an error).
    let mut rows = first.num_rows();
    while let Some(b) = stream.next_batch().unwrap() {
        rows += b.num_rows();
    }
    let out = rec.wait_with_output().unwrap();
    let stopped_in = signalled.elapsed();
    let _ = w.kill();
    let _ = w.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(
        stopped_in < std::time::Duration::from_secs(2),
        "took {stopped_in:?} to stop"
    );
    assert!(rows >= 100, "{rows} rows from 2 s of a busy process");
    assert!(
        stderr.contains(&format!("stacks-record: {rows} rows")),
        "{stderr}"
    );
}

#[test]
fn names_match_at_exec_and_commands_bring_their_children() {
    if !bpf_available("names_match_at_exec_and_commands_bring_their_children") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("exec");
    let workload = stacks_tests::bin("stacks-workload");

    // A process named on the command line but started after the recorder: matched at exec.
    let by_name = dir.join("name.arrow");
    let rec = Command::new(stacks_tests::bin("stacks-record"))
        .args(["-e", "profile:u:99", "-d", "3s", "-o"])
        .arg(&by_name)
        .arg("stacks-workload")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let mut w = spawn_workload(&["cpu", "--seconds", "1.5"]);
    w.wait().unwrap();
    assert!(rec.wait_with_output().unwrap().status.success());
    only_pid(
        &read_stream(&by_name),
        w.id(),
        75,
        "1.5 s of a busy process",
    );

    // `-- COMMAND`: a shell that starts two workloads; both children are traced.
    let cmd = dir.join("cmd.arrow");
    let script = format!(
        "{w} cpu --seconds 1 >/dev/null & {w} cpu --seconds 1 >/dev/null; wait",
        w = workload.display()
    );
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -o {} -- sh -c '{script}'",
        cmd.display()
    ));
    check(&rec, "record -- sh -c …");
    let batches = read_stream(&cmd);
    let mut by_pid: HashMap<i32, usize> = HashMap::new();
    for b in &batches {
        let comm = b.column_by_name("comm").unwrap().as_string::<i32>();
        let pid = b.column_by_name("pid").unwrap().as_primitive::<Int32Type>();
        let kind = b.column_by_name("kind").unwrap().as_string::<i32>();
        for row in 0..b.num_rows() {
            if comm.value(row) == "stacks-workload" && kind.value(row) == "profile" {
                *by_pid.entry(pid.value(row)).or_default() += 1;
            }
        }
    }
    assert_eq!(by_pid.len(), 2, "two traced children: {by_pid:?}");
    // Each ran 1 s of wall time; on a loaded 2-core machine it may get well under a core.
    assert!(
        by_pid.values().all(|&n| n >= 10),
        "up to 1 s of samples each: {by_pid:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
