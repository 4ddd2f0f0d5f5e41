//! A guard on what recording costs inside the traced threads: an IO loop (16 MiB of 4 KiB
//! O_DIRECT reads, ~4,000 block requests and as many switches) recorded with `-e
//! vfs:uk,block:uk,switch:uk` with `kernel.bpf_stats_enabled` on, and every program's mean run
//! time checked against four times its target (docs/cost.md, "What recording costs").
//! Loose on purpose: it catches a return to the ~10-30 µs programs of before (user frames
//! resolved to build ids in the kernel, frame-pointer walks through garbage, path walks, the
//! kernel's unwinder at every event: a block submission's `k` stack alone was near 6 µs
//! before the cache of kernel stacks), not noise: each program is judged by its fastest of up
//! to three recordings.

use stacks_tests::{bin, bpf_available, bpf_serial, check, scratch, sh};

/// Sets `kernel.bpf_stats_enabled` for its life, then puts back what it was.
struct BpfStats(String);

impl BpfStats {
    const PATH: &str = "/proc/sys/kernel/bpf_stats_enabled";

    fn on() -> Self {
        let before = std::fs::read_to_string(Self::PATH).expect("read bpf_stats_enabled");
        std::fs::write(Self::PATH, "1").expect("enable bpf_stats_enabled");
        Self(before.trim().to_string())
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

/// (program, target ns per run): with stacks 2,500 ns, without 1,000 ns.
const TARGETS: &[(&str, f64)] = &[
    ("vfs_enter", 1_000.0),
    ("vfs_exit", 2_500.0),
    ("on_block_start", 2_500.0),
    ("on_block_issue", 1_000.0),
    ("on_block_complete", 1_000.0),
    ("on_switch", 2_500.0),
    ("on_wakeup", 1_000.0),
];

/// (runs, ns per run) of each program in the recorder's summary.
fn runs(summary: &str) -> Vec<(String, u64, f64)> {
    let Some(line) = summary.lines().find(|l| l.contains("BPF program runs")) else {
        return Vec::new();
    };
    line.split_once("): ")
        .map_or("", |(_, rest)| rest)
        .split("; ")
        .filter_map(|part| {
            let mut w = part.split_whitespace();
            let name = w.next()?.to_string();
            let runs = w.next()?.parse().ok()?;
            let ns = w.nth(1)?.parse().ok()?;
            Some((name, runs, ns))
        })
        .collect()
}

/// How many recordings a program gets to come in under its limit. A program's mean run time
/// is inflated by whatever else shares the two CPUs: while builds ran, one recording's
/// `on_block_complete` (no stacks, 0.66 µs quietly) took 3.7-4.6 µs and `on_block_start`
/// 9.8 µs, with the release recorder as with the debug one, and the next recording was back
/// to 2.4 µs. Noise only adds time, so the fastest of three recordings is the guard; a program
/// that is slow again is slow in every one of them.
const TRIES: usize = 3;

#[test]
fn io_programs_stay_within_four_times_their_targets() {
    if !bpf_available("io_programs_stay_within_four_times_their_targets") {
        return;
    }
    let _serial = bpf_serial();
    let _stats = BpfStats::on();
    let dir = scratch("bpf-cost");
    let d = dir.display();
    check(
        &sh(&format!(
            "stacks-workload direct-read --mib 16 --chunk-kib 4 --path {d}/read.dat > /dev/null"
        )),
        "prepare the file",
    );
    // The fastest mean seen for each program, with its run count.
    let mut fastest: Vec<(&str, u64, f64)> = Vec::new();
    for attempt in 1..=TRIES {
        let out = sh(&format!(
            "stacks-record -e vfs:uk,block:uk,switch:uk -o {d}/rec.arrow -- \
               stacks-workload direct-read --mib 16 --chunk-kib 4 --path {d}/read.dat"
        ));
        check(&out, "record the IO loop");
        let summary = String::from_utf8_lossy(&out.stderr);
        let measured = runs(&summary);
        eprintln!("recording {attempt}: {measured:?}");
        fastest = TARGETS
            .iter()
            .map(|&(prog, _)| {
                let Some(&(_, n, ns)) = measured.iter().find(|(name, _, _)| name == prog) else {
                    panic!("{prog}: no run time in the summary: {summary}");
                };
                assert!(n > 0, "{prog} never ran: {summary}");
                match fastest.iter().find(|(name, _, _)| *name == prog) {
                    Some(&(_, n0, ns0)) if ns0 <= ns => (prog, n0, ns0),
                    _ => (prog, n, ns),
                }
            })
            .collect();
        let over = |&(prog, _, ns): &(&str, u64, f64)| {
            TARGETS
                .iter()
                .any(|&(p, target)| p == prog && ns > 4.0 * target)
        };
        if !fastest.iter().any(over) {
            return;
        }
    }
    for &(prog, target) in TARGETS {
        let &(_, n, ns) = fastest.iter().find(|(name, _, _)| *name == prog).unwrap();
        assert!(
            ns <= 4.0 * target,
            "{prog}: {ns} ns per run over {n} runs at best of {TRIES} recordings, \
             above 4 × its {target} ns target"
        );
    }
}

/// A process whose switches are all folded (intervals shorter than MIN send no record, so no
/// user stack reaches the recorder) has its memory map read all the same (`maps_wanted`):
/// otherwise the kernel resolved every user stack it took to build ids itself, 7.3-7.8 µs of
/// `on_switch` a switch in a pipe ping-pong on one CPU under the default `switch:u`, against
/// ~0.7 µs once the map is read. Judged as the IO loop is, by the fastest of three recordings.
#[test]
fn folded_switches_have_their_user_stacks_walked_not_resolved() {
    if !bpf_available("folded_switches_have_their_user_stacks_walked_not_resolved") {
        return;
    }
    let _serial = bpf_serial();
    let _stats = BpfStats::on();
    let mut fastest = f64::MAX;
    for attempt in 1..=TRIES {
        let out = sh("stacks-record -e switch:u -o /dev/null -- \
               taskset -c 0 perf bench sched pipe -l 50000");
        check(&out, "record a pipe ping-pong");
        let summary = String::from_utf8_lossy(&out.stderr);
        let measured = runs(&summary);
        eprintln!("recording {attempt}: {measured:?}");
        let Some(&(_, n, ns)) = measured.iter().find(|(name, _, _)| name == "on_switch") else {
            panic!("on_switch: no run time in the summary: {summary}");
        };
        assert!(n >= 100_000, "{n} switches recorded: {summary}");
        fastest = fastest.min(ns);
        if fastest < 2_500.0 {
            return;
        }
    }
    panic!("on_switch: {fastest} ns per run at best of {TRIES} recordings, above 2,500 ns");
}

/// (for the kernel side, for addresses outside the map read before) in the summary's
/// "memory maps read: K for the kernel side, F for addresses outside the map read before".
fn map_reads(summary: &str) -> Option<(u64, u64)> {
    let rest = summary.split("memory maps read: ").nth(1)?;
    let (kernel, rest) = rest.split_once(" for the kernel side, ")?;
    let fresh = rest.split_whitespace().next()?;
    Some((kernel.parse().ok()?, fresh.parse().ok()?))
}

/// A process that keeps mapping anonymous read-write memory (an allocator's large chunks,
/// each an mmap of its own) has its memory map read once or twice, not again after each
/// mapping: no frame can be in memory that cannot run, so such a mapping leaves the process in
/// `maps_read` (bpf/kinds/lifecycle.bpf.h). Before, each took it out, its next stack was
/// resolved in the kernel and its map read again, every 20 ms: 222 reads in 5 s of this
/// workload, the recorder's largest cost beside pgbench (docs/cost.md).
#[test]
fn anonymous_mappings_do_not_make_the_map_read_again() {
    if !bpf_available("anonymous_mappings_do_not_make_the_map_read_again") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("anon-maps");
    let report_path = dir.join("report.json");
    let out = sh(&format!(
        "stacks-record -e profile:u:99,switch:u -o /dev/null -- \
           stacks-workload --report {} anon-maps --seconds 3",
        report_path.display()
    ));
    check(&out, "record a process mapping anonymous memory in a loop");
    let summary = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).expect("the workload's report"))
            .expect("the workload's JSON report");
    let maps = report["maps"].as_u64().expect("maps in the report");
    assert!(maps >= 1_000, "only {maps} mappings made: {report}");
    assert!(
        summary.contains("profile ") && summary.contains("switch "),
        "no CPU samples or switches recorded: {summary}"
    );
    let (kernel, fresh) = map_reads(&summary).expect("the summary's memory map reads");
    // The first stack after the exec, and maybe one after the libraries loaded at its start.
    assert!(
        kernel <= 4 && fresh <= 4,
        "{kernel} reads for the kernel side, {fresh} fresh ones over {maps} anonymous mappings: {summary}"
    );
}

/// IRQ work interrupts taken so far on every CPU (x86's `IWI` row of /proc/interrupts), or
/// None where the kernel does not count them apart.
fn irq_work_interrupts() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/interrupts").ok()?;
    let line = text.lines().find(|l| l.contains("IRQ work interrupts"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map_while(|w| w.parse::<u64>().ok())
            .sum(),
    )
}

/// A reader that lags is woken once, not at every record. Every record sent while more than
/// `wakeup_bytes` waited asked for a forced wakeup (bpf/common.bpf.h, `wakeup_flags`): an
/// irq_work and a self-IPI each, on a VM an exit to the hypervisor. With the reader stopped for
/// a second under a flood of `vfs` records that was 4,855 interrupts, one per record until the
/// kernel began to aggregate. Now a ring asks at most once a millisecond (8-13 counted in the
/// same second).
#[test]
fn a_lagging_reader_is_woken_at_most_once_a_millisecond() {
    if !bpf_available("a_lagging_reader_is_woken_at_most_once_a_millisecond") {
        return;
    }
    if irq_work_interrupts().is_none() {
        eprintln!("skipped: /proc/interrupts does not count IRQ work interrupts here");
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("bpf-wakeups");
    let file = dir.join("f.dat");
    std::fs::write(&file, vec![0u8; 64 << 20]).expect("write the file to read");
    // 64-byte reads of a file in the page cache: ~10^5 vfs records a second.
    let err = std::fs::File::create(dir.join("rec.err")).expect("create rec.err");
    let mut rec = std::process::Command::new(bin("stacks-record"))
        .args(["-e", "vfs:n", "-o", "/dev/null", "--", "dd"])
        .arg(format!("if={}", file.display()))
        .args(["of=/dev/null", "bs=64", "count=1000000"])
        .stderr(err)
        .spawn()
        .expect("start stacks-record");
    let pid = rec.id();
    let started = sh(&format!(
        "for i in $(seq 100); do pgrep -P {pid} -x dd > /dev/null && exit 0; sleep 0.1; done; exit 1"
    ));
    check(&started, "the recorder starts dd");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = irq_work_interrupts().unwrap();
    check(&sh(&format!("kill -STOP {pid}")), "stop the recorder");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let during = irq_work_interrupts().unwrap() - before;
    check(&sh(&format!("kill -CONT {pid}")), "continue the recorder");
    let _ = sh(&format!("pkill -P {pid} -x dd"));
    rec.wait().expect("wait for stacks-record");
    let summary = std::fs::read_to_string(dir.join("rec.err")).unwrap_or_default();
    // The reader did lag: the kernel aggregated what did not fit.
    assert!(
        summary.contains("aggregated in the kernel"),
        "the ring never backed up while the recorder was stopped: {summary}"
    );
    assert!(
        during < 1_500,
        "{during} IRQ work interrupts in the second the reader was stopped: {summary}"
    );
}

#[test]
fn the_map_reads_are_read() {
    let s = "stacks-record: ring buffers: samples 16 MiB\nstacks-record: memory maps read: 222 \
             for the kernel side, 3 for addresses outside the map read before\n";
    assert_eq!(map_reads(s), Some((222, 3)));
    assert_eq!(map_reads("stacks-record: 9 rows"), None);
}

#[test]
fn the_summary_line_is_read() {
    let line = "stacks-record: BPF program runs (kernel.bpf_stats_enabled): vfs_exit 63773 \
                runs, 17809 ns each; on_block_start 42000 runs, 29887 ns each";
    assert_eq!(
        runs(line),
        vec![
            ("vfs_exit".to_string(), 63773, 17809.0),
            ("on_block_start".to_string(), 42000, 29887.0)
        ]
    );
}
