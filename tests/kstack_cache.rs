//! The cache of kernel stacks (bpf/kstack.bpf.h) against the kernel's own unwinder: kernel
//! stacks of tracepoint events (in task context and in interrupts) are served from earlier
//! unwinds when the stack holds the same return addresses in the same slots.
//! - Ground truth: with `STACKS_KSTACK_RECHECK=1` no stack is served and every use the cache
//!   would have served is unwound by the kernel and compared; a varied workload (CPU, sleeps,
//!   buffered writes and fsync, page faults, loopback TCP, pipe ping-pongs — one on a single
//!   CPU, whose switches in a pipe read and on the way back to user mode put ctx at the same
//!   place — and direct reads) must give thousands of agreeing checks and no disagreement.
//! - As users run it: most kernel stacks of a direct-read loop come from the cache, none found
//!   different, and the stacks recorded are those of `--kernel-stacks-unwound`.

use std::collections::HashMap;

use arrow_array::types::Int32Type;
use arrow_array::{Array, DictionaryArray, ListArray, StringArray, UInt64Array};
use stacks_tests::{bpf_available, bpf_serial, check, read_stream, scratch, sh};

/// (served, agreed, different) from the summary's "N kernel stacks from the cache of checked
/// unwinds, re-checks: A agreed, D found different".
fn cache_counts(summary: &str) -> Option<(u64, u64, u64)> {
    let (before, after) =
        summary.split_once(" kernel stacks from the cache of checked unwinds, re-checks: ")?;
    let served = before.rsplit(' ').next()?.parse().ok()?;
    let mut w = after.split_whitespace();
    let agreed = w.next()?.parse().ok()?;
    let different = w.nth(1)?.trim_end_matches(';').parse().ok()?;
    Some((served, agreed, different))
}

/// (from the cache, unwound without the scheduler's frames, checked) from the summary's
/// "kernel stacks of kept off-CPU intervals at their switch-in: S from the cache, U unwound
/// without the scheduler's frames, C checked against the switch-out's unwind"; zeros when
/// absent.
fn late_counts(summary: &str) -> (u64, u64, u64) {
    let Some((_, after)) =
        summary.split_once("kernel stacks of kept off-CPU intervals at their switch-in: ")
    else {
        return (0, 0, 0);
    };
    let mut n = after.split(", ").take(3).map(|p| {
        p.split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    });
    (
        n.next().unwrap_or(0),
        n.next().unwrap_or(0),
        n.next().unwrap_or(0),
    )
}

/// Events with a kernel stack by kind, in the summary's "events: block 5225, …".
fn events(summary: &str, kind: &str) -> u64 {
    summary
        .split("events: ")
        .nth(1)
        .and_then(|rest| {
            rest.split(", ")
                .find_map(|p| p.strip_prefix(&format!("{kind} ")))
                .and_then(|n| n.split(';').next())
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn the_cache_agrees_with_the_kernels_unwinds_of_a_varied_workload() {
    if !bpf_available("the_cache_agrees_with_the_kernels_unwinds_of_a_varied_workload") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("kstack-truth");
    let d = dir.display();
    let out = sh(&format!(
        "STACKS_KSTACK_RECHECK=1 stacks-record -e switch:k:0,wake:k,vfs:k,block:k,net:k,rss:k \
           -o /dev/null -- sh -c 'stacks-workload mixed --dir {d} --seconds 2 > /dev/null && \
             stacks-workload contention --seconds 1 --dir {d} > /dev/null && \
             taskset -c 0 perf bench sched pipe -l 20000 > /dev/null && \
             stacks-workload direct-read --mib 8 --path {d}/r.dat > /dev/null'"
    ));
    check(&out, "record the workload with every cached use re-checked");
    let summary = String::from_utf8_lossy(&out.stderr);
    let Some((served, agreed, different)) = cache_counts(&summary) else {
        panic!("no count of the kernel stack cache in the summary: {summary}");
    };
    assert_eq!(
        served, 0,
        "STACKS_KSTACK_RECHECK=1 serves nothing: {summary}"
    );
    assert_eq!(
        different, 0,
        "cached kernel stacks differed from the kernel's: {summary}"
    );
    // Each kind's stacks were checked: the workload makes thousands of each of these.
    for kind in ["switch", "vfs", "block", "wake"] {
        assert!(events(&summary, kind) > 500, "few {kind} events: {summary}");
    }
    assert!(agreed > 10_000, "only {agreed} re-checks agreed: {summary}");
    // Every kept interval's switch-in checked the entry it would have served (taking the
    // stack at the switch-in instead of the switch-out) against the switch-out's unwind.
    let (late, unwound, checked) = late_counts(&summary);
    assert_eq!(
        (late, unwound),
        (0, 0),
        "STACKS_KSTACK_RECHECK=1 serves nothing at switch-ins: {summary}"
    );
    assert!(
        checked > 500,
        "only {checked} switch-ins checked against the unwind: {summary}"
    );
}

/// Count of each kernel stack (as its addresses) of kind `kind` in an Arrow IPC file, leaving
/// out preemptions (switches of a runnable thread): how many there are depends on what else
/// the machine runs, not on the reads (their share of a run's switches was 8% once, 13% next).
fn kstacks(path: &std::path::Path, kind: &str) -> HashMap<Vec<u64>, u64> {
    let mut counts = HashMap::new();
    for batch in read_stream(path) {
        let states = batch
            .column_by_name("state")
            .map(|c| arrow_cast::cast(c, &arrow_schema::DataType::Utf8).expect("state as text"));
        let states = states
            .as_ref()
            .and_then(|c| c.as_any().downcast_ref::<StringArray>());
        let kinds = batch
            .column_by_name("kind")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
        let stacks = batch.column_by_name("kstack").and_then(|c| {
            c.as_any()
                .downcast_ref::<DictionaryArray<Int32Type>>()
                .cloned()
        });
        let (Some(kinds), Some(stacks)) = (kinds, stacks) else {
            panic!("{}: no kind or dictionary kstack column", path.display());
        };
        let lists = stacks
            .values()
            .as_any()
            .downcast_ref::<ListArray>()
            .expect("kstack: a dictionary of lists");
        for i in 0..batch.num_rows() {
            if kinds.value(i) != kind || stacks.is_null(i) {
                continue;
            }
            if states.is_some_and(|s| s.is_valid(i) && s.value(i) == "runnable") {
                continue;
            }
            let frames = lists.value(stacks.keys().value(i) as usize);
            let frames = frames
                .as_any()
                .downcast_ref::<UInt64Array>()
                .expect("u64 frames");
            *counts.entry(frames.values().to_vec()).or_default() += 1;
        }
    }
    counts
}

#[test]
fn served_kernel_stacks_are_the_unwound_ones() {
    if !bpf_available("served_kernel_stacks_are_the_unwound_ones") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("kstack-served");
    let d = dir.display();
    check(
        &sh(&format!(
            "stacks-workload direct-read --mib 16 --path {d}/r.dat > /dev/null"
        )),
        "prepare the file",
    );
    let record = |flags: &str, name: &str| {
        let out = sh(&format!(
            "stacks-record {flags} -e block:k,vfs:k,switch:k:0 -o {d}/{name}.arrow -- \
               stacks-workload direct-read --mib 16 --chunk-kib 4 --path {d}/r.dat"
        ));
        check(&out, &format!("record the reads ({name})"));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cached = record("", "cached");
    let unwound = record("--kernel-stacks-unwound", "unwound");
    let Some((served, _, different)) = cache_counts(&cached) else {
        panic!("no count of the kernel stack cache in the summary: {cached}");
    };
    assert_eq!(different, 0, "{cached}");
    assert!(
        cache_counts(&unwound).is_none(),
        "--kernel-stacks-unwound served from the cache: {unwound}"
    );
    // 4,096 reads of 4 KiB: a vfs and a block event each, and a switch while the disk works.
    let stacked = events(&cached, "block") + events(&cached, "vfs") + events(&cached, "switch");
    assert!(
        served * 10 >= stacked * 8,
        "{served} of {stacked} kernel stacks from the cache: {cached}"
    );
    // Each kind's reads have one stack (the pread64 path): the same one both ways, as the
    // greater part of its events (of switch: of its waits, preemptions left out).
    for kind in ["block", "vfs", "switch"] {
        same_top_stack(&dir, kind);
    }
}

/// The most common kernel stack of kind `kind` in `DIR/cached.arrow` is `DIR/unwound.arrow`'s,
/// with more than 80% of its events there and a share within 5 points of the other's.
fn same_top_stack(dir: &std::path::Path, kind: &str) {
    let top = |path: &std::path::Path| {
        let counts = kstacks(path, kind);
        let total: u64 = counts.values().sum();
        let (stack, n) = counts.into_iter().max_by_key(|(_, n)| *n).expect("stacks");
        (stack, n as f64 / total as f64)
    };
    let (a, share_a) = top(&dir.join("cached.arrow"));
    let (b, share_b) = top(&dir.join("unwound.arrow"));
    assert_eq!(a, b, "{kind}: the most common kernel stack differs");
    assert!(
        share_a > 0.8 && (share_a - share_b).abs() < 0.05,
        "{kind}: its share is {share_a:.3} cached, {share_b:.3} unwound"
    );
}

#[test]
fn the_summary_counts_are_read() {
    let s = "stacks-record: 9 rows; lost 0 events; 120 kernel stacks from the cache of checked \
             unwinds, re-checks: 3 agreed, 0 found different; events: block 12, vfs 7";
    assert_eq!(cache_counts(s), Some((120, 3, 0)));
    assert_eq!(events(s, "block"), 12);
    assert_eq!(events(s, "vfs"), 7);
    assert_eq!(events(s, "net"), 0);
}

/// Kernel stacks of kept off-CPU intervals (`switch:k`, MIN at its default) are taken at the
/// switch-in from the cache: the sleeper's stack is the one `--kernel-stacks-unwound` takes at
/// its switch-out, scheduler's frames and all, and few switch-ins fall back to the kernel's
/// unwind of the sleeping thread.
#[test]
fn kept_intervals_take_their_kernel_stacks_at_the_switch_in() {
    if !bpf_available("kept_intervals_take_their_kernel_stacks_at_the_switch_in") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("kstack-late");
    let d = dir.display();
    let record = |flags: &str, name: &str| {
        let out = sh(&format!(
            "stacks-record {flags} -e switch:k -o {d}/{name}.arrow -- \
               stacks-workload sleep --count 800 --ms 2"
        ));
        check(&out, &format!("record the sleeps ({name})"));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cached = record("", "cached");
    let unwound = record("--kernel-stacks-unwound", "unwound");
    let (late, fell_back, _) = late_counts(&cached);
    assert_eq!(
        late_counts(&unwound),
        (0, 0, 0),
        "--kernel-stacks-unwound took stacks at switch-ins: {unwound}"
    );
    // 800 sleeps of 2 ms: each a kept interval. The first at each of a system call's random
    // stack offsets are taken at the switch-out (they teach the cache); most of the rest at
    // the switch-in, from the cache.
    assert!(
        late >= 400,
        "{late} kernel stacks from the cache at switch-ins: {cached}"
    );
    assert!(
        fell_back * 20 <= late,
        "{fell_back} switch-ins unwound without the scheduler's frames, {late} from the cache: {cached}"
    );
    same_top_stack(&dir, "switch");
}
