//! End-to-end ground truth for `d` stacks (user stacks unwound with CFI): programs built
//! without frame pointers, with a known call chain burning CPU (C non-PIE, PIE, across a shared
//! library, through the C library's qsort, and Rust), must show the whole chain in ≥ 95 % of
//! their CPU samples with `d` and fail that with `u`; file, block, socket, memory and off-CPU
//! events of such a program reach `main`; a recursion deeper than the stack copy is
//! continued by frame pointers where it has them and marked truncated where it has not; and
//! the top stacks agree with `perf record --call-graph dwarf` on the same run within 3 points.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use stacks_tests::{
    ScratchDir, bpf_available, bpf_serial, check, scratch, sh, unreported_switches,
};

/// The fixtures built into a scratch directory (tests/fixtures/unwind/build.sh).
fn fixtures(test: &str) -> ScratchDir {
    let dir = scratch(test);
    let build = stacks_tests::crate_dir().join("fixtures/unwind/build.sh");
    let out = sh(&format!("{} {}/bin", build.display(), dir.display()));
    check(&out, "building the unwinding fixtures");
    dir
}

/// One recorded stack: how it was unwound, its sample count, its frames root first (a
/// fixture's own functions by name, other files' frames by file name: both tools agree on
/// those, whatever symbols the C library has here).
#[derive(Debug)]
struct Stack {
    unwind: Option<String>,
    truncated: Option<bool>,
    samples: i64,
    frames: Vec<String>,
}

/// The frame names of a symbolized stack (JSON, leaf first) root first, inlined frames left
/// out (perf's callchains have none).
fn names(stack: &Value, own: &str) -> Vec<String> {
    let mut v: Vec<String> = stack
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|f| f["inlined"] != Value::Bool(true) && f["kernel"] != Value::Bool(true))
        .map(|f| {
            let module = f["module"].as_str().unwrap_or("?");
            let file = module.rsplit('/').next().unwrap_or(module);
            match f["function"].as_str() {
                Some(func) if file == own => func.to_string(),
                _ => file.to_string(),
            }
        })
        .collect();
    v.reverse();
    v
}

/// Record `program args` with `-e EVENTS` (through symbolize and pack into DIR/NAME), its
/// profile stacks.
fn record(
    dir: &Path,
    name: &str,
    events: &str,
    program: &Path,
    args: &str,
) -> (Vec<Stack>, String) {
    let (store, stderr) = record_store(dir, name, events, program, args);
    (stacks_of(&store, program, "kind = 'profile'"), stderr)
}

/// Record `program args` with `-e EVENTS` through symbolize and pack into DIR/NAME: the store
/// and the recorder's messages.
fn record_store(
    dir: &Path,
    name: &str,
    events: &str,
    program: &Path,
    args: &str,
) -> (PathBuf, String) {
    record_store_in(dir, name, events, "", program, args)
}

/// [`record_store`] with environment variables `env` (`NAME=VALUE …`) for the recorder and
/// the program.
fn record_store_in(
    dir: &Path,
    name: &str,
    events: &str,
    env: &str,
    program: &Path,
    args: &str,
) -> (PathBuf, String) {
    let store = dir.join(name);
    let out = sh(&format!(
        "{env} stacks-record -e {events} -- {} {args} | stacks-symbolize | stacks-pack {}",
        program.display(),
        store.display()
    ));
    check(&out, &format!("recording {name}"));
    (store, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Of the stacks of `stacks-workload probes --forks`' fork hits: the hits, and those whose
/// stack reaches `fork_children` and `main`.
fn fork_hits(found: &[Stack]) -> (i64, i64) {
    let hits = found.iter().map(|s| s.samples).sum();
    let reach = found
        .iter()
        .filter(|s| {
            s.frames.iter().any(|f| f.ends_with("fork_children"))
                && s.frames.iter().any(|f| f.ends_with("::main"))
        })
        .map(|s| s.samples)
        .sum();
    (hits, reach)
}

/// The stacks of `program`'s rows in `store` that meet the SQL condition `rows`.
fn stacks_of(store: &Path, program: &Path, rows: &str) -> Vec<Stack> {
    let comm = program.file_name().unwrap().to_str().unwrap();
    let sql = format!(
        "with c as (select stack_id, ustack_unwind as u, ustack_truncated as t, count(*) as n \
         from samples where {rows} and comm = '{comm}' group by 1, 2, 3) \
         select c.u, c.t, c.n, k.stack from stack_table k join c on c.stack_id = k.stack_id"
    );
    let q = sh(&format!(
        "stacks-query -d {} --format json -c \"{sql}\"",
        store.display()
    ));
    check(&q, "stacks-query");
    let found: Vec<Value> = serde_json::from_slice(&q.stdout).expect("json");
    found
        .iter()
        .map(|r| Stack {
            unwind: r["u"].as_str().map(str::to_string),
            truncated: r["t"].as_bool(),
            samples: r["n"].as_i64().unwrap(),
            frames: names(&r["stack"], comm),
        })
        .collect()
}

/// Whether `chain` (root first) appears in `frames` in order, each next to the one before.
fn has_chain(frames: &[String], chain: &[&str]) -> bool {
    frames
        .windows(chain.len())
        .any(|w| w.iter().zip(chain).all(|(f, c)| f == c))
}

/// The share of samples whose stack holds `chain` (and the samples in all).
fn share(stacks: &[Stack], chain: &[&str]) -> (f64, i64) {
    let all: i64 = stacks.iter().map(|s| s.samples).sum();
    let with: i64 = stacks
        .iter()
        .filter(|s| has_chain(&s.frames, chain))
        .map(|s| s.samples)
        .sum();
    (with as f64 / all.max(1) as f64, all)
}

fn show(stacks: &[Stack]) -> String {
    let mut v: Vec<&Stack> = stacks.iter().collect();
    v.sort_by_key(|s| -s.samples);
    v.iter()
        .take(6)
        .map(|s| {
            format!(
                "{} {:?}/{:?}: {}",
                s.samples,
                s.unwind,
                s.truncated,
                s.frames.join(";")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const CHAIN: [&str; 5] = ["main", "a_fn", "b_fn", "c_fn", "leaf"];

/// With `d`, ≥ 95 % of the samples hold the chain (unwound by CFI to the root); with `u` on
/// the same program, fewer than half do.
fn chain_whole_with_d_only(dir: &Path, program: &str, chain: &[&str]) {
    let bin = dir.join("bin").join(program);
    let (d, stderr) = record(dir, &format!("{program}-d"), "profile:d:199", &bin, "2");
    let (got, all) = share(&d, chain);
    assert!(all >= 100, "{program}: {all} samples\n{stderr}");
    assert!(
        got >= 0.95,
        "{program} d: {:.1} % of {all} samples hold {chain:?}:\n{}\n{stderr}",
        got * 100.0,
        show(&d)
    );
    let dwarf: i64 = d
        .iter()
        .filter(|s| s.unwind.as_deref() == Some("dwarf") && s.truncated == Some(false))
        .map(|s| s.samples)
        .sum();
    assert!(
        dwarf as f64 >= 0.95 * all as f64,
        "{program} d: {dwarf} of {all} unwound by CFI to the root:\n{}",
        show(&d)
    );
    let (u, _) = record(dir, &format!("{program}-u"), "profile:u:199", &bin, "1");
    let (got_u, all_u) = share(&u, chain);
    assert!(
        got_u < 0.5,
        "{program} u: frame pointers alone gave the chain in {:.1} % of {all_u} samples: \
         the program has frame pointers, the test does not discriminate:\n{}",
        got_u * 100.0,
        show(&u)
    );
    assert!(
        u.iter().all(|s| s.unwind.as_deref() == Some("fp")),
        "u stacks are marked fp"
    );
}

#[test]
fn d_unwinds_c_and_rust_without_frame_pointers() {
    if !bpf_available("d_unwinds_c_and_rust_without_frame_pointers") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-chain");
    for program in ["chain-nofp", "chain-pie", "chain-split", "chain-rs"] {
        let chain: Vec<&str> = if program == "chain-split" {
            // b_fn, c_fn and leaf are the library's: named by its file.
            vec![
                "main",
                "a_fn",
                "libchainlib.so",
                "libchainlib.so",
                "libchainlib.so",
            ]
        } else if program == "chain-rs" {
            // The crate is named after its file, chain.rs.
            vec![
                "chain::main",
                "chain::a_fn",
                "chain::b_fn",
                "chain::c_fn",
                "chain::leaf",
            ]
        } else {
            CHAIN.to_vec()
        };
        chain_whole_with_d_only(&dir, program, &chain);
    }
}

#[test]
fn d_unwinds_through_the_c_library() {
    if !bpf_available("d_unwinds_through_the_c_library") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-libc");
    // qsort's frames are libc's (no frame pointers): cmp and burn are reached through them.
    let (d, stderr) = record(&dir, "sort-d", "profile:d:199", &dir.join("bin/sort"), "2");
    let through = |s: &Stack| {
        let f = &s.frames;
        let at = |name: &str| f.iter().position(|x| x == name);
        match (at("main"), at("sort_all"), at("cmp"), at("burn")) {
            (Some(m), Some(s), Some(c), Some(b)) => {
                m + 1 == s
                    && s < c
                    && c + 1 == b
                    && f[s + 1..c].iter().all(|x| x == "libc.so.6")
                    && c > s + 1
            }
            _ => false,
        }
    };
    let all: i64 = d.iter().map(|s| s.samples).sum();
    let good: i64 = d.iter().filter(|s| through(s)).map(|s| s.samples).sum();
    // Samples outside the comparator (filling the array, qsort's own moves) do not count.
    let in_cmp: i64 = d
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "cmp"))
        .map(|s| s.samples)
        .sum();
    assert!(
        in_cmp as f64 >= 0.8 * all as f64 && good as f64 >= 0.95 * in_cmp as f64,
        "sort d: {good} of {in_cmp} comparator samples ({all} in all) reach main through \
         qsort:\n{}\n{stderr}",
        show(&d)
    );
}

/// Of the io fixture's rows in `leaf` (named anywhere in the stack): those whose stack reaches
/// main through io_a and io_b, and those that do not.
fn whole_and_cut(stacks: &[Stack], leaf: &str) -> (i64, i64) {
    let chain = ["main", "io_a", "io_b", leaf];
    let sum = |whole: bool| {
        stacks
            .iter()
            .filter(|s| s.frames.iter().any(|f| f == leaf))
            .filter(|s| has_chain(&s.frames, &chain) == whole)
            .map(|s| s.samples)
            .sum()
    };
    (sum(true), sum(false))
}

#[test]
fn d_unwinds_file_block_net_rss_and_switch_events() {
    if !bpf_available("d_unwinds_file_block_net_rss_and_switch_events") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-io");
    let io = dir.join("bin/io");
    let rounds = 20;
    let args = format!("{} {rounds}", dir.display());
    let events = "vfs:d,block:dk,net:d,rss:d:1,switch:d";
    let (store, stderr) = record_store(&dir, "io", events, &io, &args);
    let calls = |kind: &str, leaf: &str| {
        // Off-CPU: the sleeps (a thread preempted in user mode has a frame-pointer stack).
        let rows = match kind {
            "switch" => "kind = 'switch' and state = 'sleeping'".to_string(),
            _ => format!("kind = '{kind}'"),
        };
        let stacks = stacks_of(&store, &io, &rows);
        let (whole, cut) = whole_and_cut(&stacks, leaf);
        (whole, cut, show(&stacks), &stderr)
    };
    // One write per round (and its fsync's block requests); a datagram sent and received per
    // round; fresh pages touched every round (as many rows as faults: fewer with huge pages);
    // a 20 ms sleep per round (its user stack taken at its return to user mode).
    let (vfs, cut, shown, err) = calls("vfs", "file_io");
    assert!(
        vfs == rounds && cut == 0,
        "vfs: {vfs} whole, {cut} cut:\n{shown}\n{err}"
    );
    let (block, cut, shown, err) = calls("block", "file_io");
    assert!(
        block >= rounds && cut == 0,
        "block: {block} whole, {cut} cut:\n{shown}\n{err}"
    );
    let (net, cut, shown, err) = calls("net", "udp_io");
    assert!(
        net == 2 * rounds && cut == 0,
        "net: {net} whole, {cut} cut:\n{shown}\n{err}"
    );
    // A nap whose return to user mode the recorder did not see (a switch the tracepoint did
    // not report: the kernel now and then runs no program at a switch under contention) keeps
    // its interval without a user stack; the summary counts those switches.
    let (naps, cut, shown, err) = calls("switch", "nap");
    let unseen = unreported_switches(err);
    assert!(
        cut == 0 && (naps == rounds || (naps < rounds && naps + unseen >= rounds)),
        "switch: {naps} whole, {cut} cut, {unseen} switches unreported:\n{shown}\n{err}"
    );
    let (rss, cut, shown, err) = calls("rss", "touch");
    assert!(
        rss >= rounds && cut == 0,
        "rss: {rss} whole, {cut} cut:\n{shown}\n{err}"
    );
}

/// A thread that has not registered rseq with the kernel (glibc's tunable off here; Go's
/// runtime and musl never register it) returns to user mode without the tracepoint where a
/// kept interval's user stack is taken late (`on_user_return`): its `d` stacks wait for the
/// system call's return instead (`on_sys_exit`, loaded with `d`), as whole as the others'.
/// Taken at the switch-out they would go by frame pointers (no copy of the stack there), and
/// stop in the C library; left for a return to user mode that never fires, at the thread's
/// next switch-out, in the next round's file IO, they would not reach `nap`.
#[test]
fn switch_d_stacks_of_threads_without_rseq_wait_for_the_calls_return() {
    if !bpf_available("switch_d_stacks_of_threads_without_rseq_wait_for_the_calls_return") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-no-rseq");
    let io = dir.join("bin/io");
    let rounds = 20;
    let args = format!("{} {rounds}", dir.display());
    let env = "GLIBC_TUNABLES=glibc.pthread.rseq=0";
    let (store, err) = record_store_in(&dir, "io", "switch:d", env, &io, &args);
    let stacks = stacks_of(&store, &io, "kind = 'switch' and state = 'sleeping'");
    let (naps, cut) = whole_and_cut(&stacks, "nap");
    let unseen = unreported_switches(&err);
    assert!(
        cut == 0 && (naps == rounds || (naps < rounds && naps + unseen >= rounds)),
        "switch: {naps} whole, {cut} cut, {unseen} switches unreported:\n{}\n{err}",
        show(&stacks)
    );
}

#[test]
fn deep_stacks_are_continued_by_frame_pointers_or_marked_truncated() {
    if !bpf_available("deep_stacks_are_continued_by_frame_pointers_or_marked_truncated") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-deep");
    // 50 frames of 1 KiB: deeper than the 16 KiB copy.
    let mut chain = vec!["main"];
    chain.extend(std::iter::repeat_n("level", 50));
    chain.push("leaf");
    let (fp, stderr) = record(
        &dir,
        "deep-fp",
        "profile:d:199",
        &dir.join("bin/deep-fp"),
        "2",
    );
    let (got, all) = share(&fp, &chain);
    let spliced: i64 = fp
        .iter()
        .filter(|s| s.unwind.as_deref() == Some("dwarf+fp"))
        .map(|s| s.samples)
        .sum();
    assert!(
        got >= 0.95 && spliced as f64 >= 0.95 * all as f64,
        "deep-fp: {:.1} % whole, {spliced} of {all} continued by frame pointers:\n{}\n{stderr}",
        got * 100.0,
        show(&fp)
    );
    // `u` stacks of 100 levels: the frame-pointer walk follows the chain in its one copy of the
    // stack's top 2 KiB, then frame by frame (1 KiB apart), and its frames written reach into
    // where the copy was (past 94 frames) without losing the chain. `leaf` calls nothing and
    // clang gives it no frame, so a walk from inside it skips its caller (as any frame-pointer
    // walk does): 99 levels.
    let mut chain100 = vec!["main"];
    chain100.extend(std::iter::repeat_n("level", 99));
    chain100.push("leaf");
    let (u, stderr) = record(
        &dir,
        "deep-fp-u",
        "profile:u:199",
        &dir.join("bin/deep-fp"),
        "2 100",
    );
    let (got, _) = share(&u, &chain100);
    assert!(
        got >= 0.95,
        "deep-fp, u: {:.1} % whole:\n{}\n{stderr}",
        got * 100.0,
        show(&u)
    );
    let (nofp, stderr) = record(
        &dir,
        "deep-nofp",
        "profile:d:199",
        &dir.join("bin/deep-nofp"),
        "2",
    );
    // Never silently short: every stack in the recursion without main says it is truncated.
    // (A sample before main or after it returned, in ld.so or exit, rightly has no main.)
    let short: Vec<&Stack> = nofp
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "level") && !s.frames.iter().any(|f| f == "main"))
        .collect();
    let short_n: i64 = short.iter().map(|s| s.samples).sum();
    let all: i64 = nofp.iter().map(|s| s.samples).sum();
    assert!(
        short_n as f64 >= 0.95 * all as f64,
        "deep-nofp: the copy holds the whole stack? {short_n} of {all} short:\n{}",
        show(&nofp)
    );
    assert!(
        short.iter().all(|s| s.truncated == Some(true)),
        "deep-nofp: short stacks not marked truncated:\n{}\n{stderr}",
        show(&nofp)
    );
    // With a copy large enough for the whole stack, CFI alone reaches main.
    let (big, _) = record(
        &dir,
        "deep-nofp-big",
        "profile:d:199 --ustack-bytes 24K",
        &dir.join("bin/deep-nofp"),
        "2 15",
    );
    let mut chain15 = vec!["main"];
    chain15.extend(std::iter::repeat_n("level", 15));
    chain15.push("leaf");
    let (got, all) = share(&big, &chain15);
    assert!(
        got >= 0.95,
        "deep-nofp 15 levels in 24K: {:.1} % of {all}:\n{}",
        got * 100.0,
        show(&big)
    );
}

/// `perf script -F ip,sym,dso --no-inline` callchains of `perf.data` in `dir`, folded as [`names`] folds
/// ours (user frames only), with their sample counts.
fn perf_stacks(dir: &Path, own: &str) -> HashMap<Vec<String>, i64> {
    let out = sh(&format!(
        "cd {} && perf script -F ip,sym,dso --no-inline 2>/dev/null",
        dir.display()
    ));
    check(&out, "perf script");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stacks: HashMap<Vec<String>, i64> = HashMap::new();
    for sample in text.split("\n\n") {
        let mut frames: Vec<String> = sample
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let (rest, dso) = l.rsplit_once(" (")?;
                let dso = dso.trim_end_matches(')');
                if dso == "inlined" {
                    return None; // perf's inlined frames (ours are left out too)
                }
                if dso.contains("kernel") || dso.starts_with('[') {
                    return None;
                }
                let file = dso.rsplit('/').next().unwrap_or(dso);
                let sym = rest.split_once(' ').map(|(_, s)| s).unwrap_or("");
                let sym = sym.split('+').next().unwrap_or(sym);
                Some(if file == own && !sym.is_empty() && sym != "[unknown]" {
                    sym.to_string()
                } else {
                    file.to_string()
                })
            })
            .collect();
        if frames.is_empty() {
            continue;
        }
        frames.reverse();
        *stacks.entry(frames).or_default() += 1;
    }
    stacks
}

#[test]
fn top_stacks_agree_with_perf_dwarf() {
    if !bpf_available("top_stacks_agree_with_perf_dwarf") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-perf");
    let sort = dir.join("bin/sort");
    // One run of the program, both tools attached to it at once: the same work, sampled by
    // each at 999 Hz (enough samples that a 3-point difference is not sampling noise).
    let out = sh(&format!(
        "cd {d}; {sort} 5 & pid=$!; \
         stacks-record -e profile:d:999 -p $pid -o {d}/rec.arrow 2> {d}/rec.log & rec=$!; \
         perf record -q --call-graph dwarf,16384 -e cpu-clock -F 999 -p $pid -o {d}/perf.data \
           2> {d}/perf.log & perf=$!; \
         wait $pid; sleep 0.3; kill -INT $rec $perf; wait $rec; wait $perf; \
         stacks-symbolize < {d}/rec.arrow | stacks-pack {d}/store",
        d = dir.display(),
        sort = sort.display()
    ));
    check(&out, "recording with stacks-record and perf");
    let perf = perf_stacks(&dir, "sort");
    let q = sh(&format!(
        "stacks-query -d {}/store --format json cpu -p comm=sort",
        dir.display()
    ));
    check(&q, "stacks-query cpu");
    let rows: Vec<Value> = serde_json::from_slice(&q.stdout).unwrap();
    let mut ours: HashMap<Vec<String>, i64> = HashMap::new();
    for r in &rows {
        *ours.entry(names(&r["stack"], "sort")).or_default() += r["samples"].as_i64().unwrap();
    }
    let total = |m: &HashMap<Vec<String>, i64>| m.values().sum::<i64>() as f64;
    let (pt, ot) = (total(&perf), total(&ours));
    assert!(
        pt >= 2000.0 && ot >= 2000.0,
        "samples: perf {pt}, stacks-record {ot}"
    );
    let mut top: Vec<(&Vec<String>, &i64)> = perf.iter().collect();
    top.sort_by_key(|(_, n)| -**n);
    let mut report = Vec::new();
    let mut worst = 0.0f64;
    for (stack, n) in top.iter().take(10) {
        let p = **n as f64 / pt * 100.0;
        let o = *ours.get(*stack).unwrap_or(&0) as f64 / ot * 100.0;
        worst = worst.max((p - o).abs());
        report.push(format!(
            "perf {p:5.1} % ours {o:5.1} %  {}",
            stack.join(";")
        ));
    }
    eprintln!(
        "top-10 stacks of perf ({pt} samples) and stacks-record ({ot}):\n{}",
        report.join("\n")
    );
    assert!(
        worst <= 3.0,
        "top-10 stacks differ by up to {worst:.1} points:\n{}",
        report.join("\n")
    );
}

/// `d` for probes: a tracepoint hit inside libc's fork (Debian's libc has no frame pointers,
/// so a frame-pointer walk stops in it) reaches the program's `fork_children` and `main` with
/// `tp:…:d`, on every hit. `u` is recorded too, for comparison (printed).
#[test]
fn d_stacks_of_a_tracepoint_reach_main_through_libc() {
    if !bpf_available("d_stacks_of_a_tracepoint_reach_main_through_libc") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("probe-d");
    let work = stacks_tests::bin("stacks-workload");
    let mut shares = Vec::new();
    for (name, stacks) in [("d", "d"), ("u", "u")] {
        let (store, stderr) = record_store(
            &dir,
            name,
            &format!("tp:sched:sched_process_fork:{stacks}"),
            &work,
            "probes --calls 0 --usdt 0 --forks 20",
        );
        let found = stacks_of(&store, &work, "kind = 'probe'");
        let (hits, reach) = fork_hits(&found);
        assert_eq!(hits, 20, "{name}: one row per fork: {found:?}\n{stderr}");
        shares.push((name, reach, found));
    }
    eprintln!(
        "hits whose stack reaches fork_children and main: d {} of 20, u {} of 20",
        shares[0].1, shares[1].1
    );
    assert_eq!(
        shares[0].1, 20,
        "tp:…:d stacks that stop short: {:?}",
        shares[0].2
    );
}

/// A recorder that lags its ring buffers by more than its command's life (the test above, under
/// CPU contention), made certain: it is stopped (SIGSTOP) from before the command forks until
/// the command has exited, so the command's memory map is gone when its `d` stacks are
/// converted. Its exit record carries its executable mappings (the exit snapshot), and every
/// stack is unwound with them through libc to `main`.
#[test]
fn d_stacks_of_a_process_gone_before_its_map_was_read() {
    if !bpf_available("d_stacks_of_a_process_gone_before_its_map_was_read") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("probe-d-gone");
    let work = stacks_tests::bin("stacks-workload");
    let (start, raw, err) = (dir.join("start"), dir.join("raw"), dir.join("stderr"));
    let mut rec = Command::new(stacks_tests::bin("stacks-record"))
        .args(["-e", "tp:sched:sched_process_fork:d", "--"])
        .arg(&work)
        .args(["probes", "--calls", "0", "--usdt", "0", "--forks", "20"])
        .arg("--start-file")
        .arg(&start)
        .stdout(File::create(&raw).expect("raw stream file"))
        .stderr(File::create(&err).expect("stderr file"))
        .spawn()
        .expect("starting stacks-record");
    let messages = || std::fs::read_to_string(&err).unwrap_or_default();
    wait_for(
        || messages().contains("recording"),
        "the recorder to start",
        &messages,
    );
    // Its command, exec'd and waiting for the start file.
    let mut command = None;
    wait_for(
        || {
            command = child_named(rec.id(), "stacks-workload");
            command.is_some()
        },
        "the command to run",
        &messages,
    );
    let command = command.expect("found");
    // SAFETY: signals to our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGSTOP) };
    std::fs::write(&start, b"").expect("start file");
    // It forks, exits, and stays a zombie: its parent, the recorder, cannot reap it.
    wait_for(
        || process_state(command) == Some('Z'),
        "the command to exit",
        &messages,
    );
    // SAFETY: as above.
    unsafe { libc::kill(rec.id() as i32, libc::SIGCONT) };
    let mut status = None;
    wait_for(
        || {
            status = rec.try_wait().expect("waiting for stacks-record");
            status.is_some()
        },
        "the recording to end",
        &messages,
    );
    let status = status.expect("ended");
    assert!(status.success(), "stacks-record: {status}\n{}", messages());
    let store = dir.join("store");
    let out = sh(&format!(
        "stacks-symbolize < {} | stacks-pack {}",
        raw.display(),
        store.display()
    ));
    check(&out, "symbolizing and packing");
    let stderr = messages();
    let found = stacks_of(&store, &work, "kind = 'probe'");
    let (hits, reach) = fork_hits(&found);
    assert_eq!(hits, 20, "one row per fork: {found:?}\n{stderr}");
    assert_eq!(reach, 20, "stacks that stop short: {found:?}\n{stderr}");
    assert!(
        stderr.contains(", 1 processes unwound from their exit snapshot")
            && !stderr.contains("exited before their map was read"),
        "{stderr}"
    );
}

/// Wait up to 20 s for `done`, failing with `what` and the recorder's `messages`.
fn wait_for(mut done: impl FnMut() -> bool, what: &str, messages: &dyn Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "waited 20 s for {what}:\n{}",
            messages()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The state letter of process `pid` (`R`, `S`, `Z`…), while it exists.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A child of process `parent` whose name is `comm`.
fn child_named(parent: u32, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|d| {
        let pid: u32 = d.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(d.path().join("stat")).ok()?;
        let (head, rest) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent && name == comm).then_some(pid)
    })
}

/// What `d` cannot do is refused, naming the alternative: a counting probe counts by the
/// kernel's frame-pointer stack ids.
#[test]
fn d_is_refused_for_counting_probes() {
    let out = sh("stacks-record -e tp:sched:sched_process_fork:d:count -- true");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("counts by frame-pointer stacks"),
        "{err}"
    );
    let out = sh("stacks-record --ustack-bytes 100K -e profile:d -- true");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ustack-bytes"),
        "bad --ustack-bytes is named"
    );
}

/// A burst degrades `d` stacks before it loses events: 200,000 one-byte writes as fast as they
/// go, each a `vfs` row with a 16 KiB stack copy, into a 1 MiB ring buffer. Past a quarter of
/// it the kernel sums the writes with frame-pointer stacks (past half, single rows take
/// frame-pointer stacks too); nothing is lost and every write is counted.
#[test]
fn a_burst_degrades_d_stacks_before_losing_events() {
    if !bpf_available("a_burst_degrades_d_stacks_before_losing_events") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("unwind-burst");
    let store = dir.join("store");
    let out = sh(&format!(
        "stacks-record --ringbuf-mb 1 -e vfs:d -- stacks-workload span-bench --layer none \
         --pairs 0 --writes 200000 | stacks-symbolize | stacks-pack {}",
        store.display()
    ));
    check(&out, "recording the burst");
    let err = String::from_utf8_lossy(&out.stderr);
    let number = |suffix: &str| -> i64 {
        err.split("; ")
            .find_map(|p| p.strip_suffix(suffix))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let fallback = number(" d stacks taken by frame pointers (ring buffer over half full)");
    let summed = number(" vfs events aggregated in the kernel (ring buffer backed up)");
    // `d` stacks the unwinder could only take by frame pointers (a map not read in time).
    let fp_only: i64 = err
        .split(", ")
        .find_map(|p| p.strip_suffix(" by frame pointers only"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(err.contains("lost 0 events"), "{err}");
    let q = sh(&format!(
        "stacks-query -d {} --format json -c \"select ustack_unwind as u, \
         sum(coalesce(count, 1)) as n, count(*) as r from samples where kind = 'vfs' \
         and thread = 'stacks-workload' and path = '/dev/null' group by 1\"",
        store.display()
    ));
    check(&q, "stacks-query");
    let rows: Vec<Value> = serde_json::from_slice(&q.stdout).unwrap();
    let by = |u: &str, key: &str| {
        rows.iter()
            .find(|r| r["u"].as_str() == Some(u))
            .map_or(0, |r| r[key].as_i64().unwrap())
    };
    assert!(
        summed + fallback > 0 && by("fp", "n") > 0 && by("dwarf", "n") > 0,
        "both kinds of stacks: {rows:?}\n{err}"
    );
    // Writes summed in the kernel and single rows past half the ring have frame-pointer
    // stacks; the others were unwound by CFI.
    // The summed count covers the thread's other calls too (its report to stdout).
    let q = sh(&format!(
        "stacks-query -d {} --format json -c \"select sum(coalesce(count, 1)) as n from \
         samples where kind = 'vfs' and thread = 'stacks-workload' and path <> '/dev/null'\"",
        store.display()
    ));
    check(&q, "stacks-query");
    let other = serde_json::from_slice::<Vec<Value>>(&q.stdout).unwrap()[0]["n"]
        .as_i64()
        .unwrap_or(0);
    assert!(
        by("fp", "n") >= summed - other && by("fp", "n") <= summed + fallback + fp_only,
        "fp writes {} against {summed} summed ({other} calls elsewhere), {fallback} fallbacks \
         and {fp_only} frame-pointer-only unwinds:\n{err}",
        by("fp", "n")
    );
    // Every write to /dev/null is counted, once.
    assert_eq!(by("fp", "n") + by("dwarf", "n"), 200_000, "{rows:?}\n{err}");
}

#[test]
fn d_unwinds_threads_sampled_off_cpu() {
    if !bpf_available("d_unwinds_threads_sampled_off_cpu") {
        return;
    }
    let _serial = bpf_serial();
    let dir = fixtures("unwind-state");
    let io = dir.join("bin/io");
    let args = format!("{} 20", dir.display());
    // The thread-state sampler copies the stack of each thread off CPU (another thread's: with
    // bpf_copy_from_user_task); the io rounds' 20 ms naps are in clock_nanosleep.
    let naps = "kind = 'state' and state = 'sleeping' and syscall = 'clock_nanosleep'";
    let chain = ["main", "io_a", "io_b", "nap"];
    let (d_store, stderr) = record_store(&dir, "state-d", "state:d:100", &io, &args);
    let d = stacks_of(&d_store, &io, naps);
    let (whole, all) = share(&d, &chain);
    assert!(
        all >= 10 && whole >= 0.95,
        "state:d: {:.1} % of {all} nap samples reach main:\n{}\n{stderr}",
        whole * 100.0,
        show(&d)
    );
    let (u_store, _) = record_store(&dir, "state-u", "state:u:100", &io, &args);
    let (whole_u, all_u) = share(&stacks_of(&u_store, &io, naps), &chain);
    assert!(
        all_u >= 10 && whole_u < 0.5,
        "state:u reached main in {:.1} % of {all_u}: the test does not discriminate",
        whole_u * 100.0
    );
}
