//! End-to-end: record the bundled CPU workload through the whole pipeline (record → symbolize →
//! pack → query → pprof) and check the profile against what the workload measured itself.

use std::collections::HashMap;
use std::process::Command;

use stacks_tests::{bpf_available, check, scratch, sh};

/// Sampling error at 99 Hz over ~6 s is about 1.7 points (binomial, 600 samples): ±5 points
/// is the tolerance.
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
    let dir = scratch("cpu");
    let out = dir.join("out");
    let report = dir.join("report.json");
    let pb = dir.join("cpu.pb.gz");

    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -- stacks-workload --report {report} cpu --seconds 6 \
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

    // The recorded CPU time (samples × period) matches the CPU time the kernel charged the
    // workload, within 10% (sampling granularity plus process start/exit).
    let total_samples: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    let cpu_recorded: i64 = profile.sample.iter().map(|s| s.value[1]).sum();
    assert!(
        (cpu_recorded as f64 - cpu_truth).abs() <= 0.10 * cpu_truth,
        "recorded {cpu_recorded} ns of CPU, workload used {cpu_truth} ns"
    );

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

    // pyarrow reads the Parquet directory and sees every sample and the stream metadata.
    let py = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, pyarrow.parquet as pq\n\
             t = pq.read_table(sys.argv[1])\n\
             md = pq.ParquetFile(next(iter(__import__('glob').glob(sys.argv[1] + '/*.parquet')))).schema_arrow.metadata\n\
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
    assert_eq!(parts[2], "profile:u:99");
    let _ = std::fs::remove_dir_all(&dir);
}
