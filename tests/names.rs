//! Every frame named: frames outside ordinary files get their functions' names, measured
//! against perf on the same program. The vDSO: a C loop calling `clock_gettime` spends its
//! time in the kernel's vDSO, whose image the recorder keeps in the stream (`stacks.vdso`),
//! so stacks-symbolize names it offline, after the process is gone.

use std::path::Path;

use stacks_tests::{bpf_available, bpf_serial, check, scratch, sh};

/// Share of the folded stacks' samples (`root;…;leaf N` lines) that `names` finds in.
fn share(folded: &str, names: impl Fn(&str) -> bool) -> (f64, u64) {
    let (mut hit, mut all) = (0u64, 0u64);
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        all += n;
        if stack.split(';').any(&names) {
            hit += n;
        }
    }
    (hit as f64 / all.max(1) as f64, all)
}

/// perf's share of samples whose call chain has a frame named `symbol` (`perf script`: one
/// block of frames per sample).
fn perf_share(script: &str, symbol: &str) -> (f64, u64) {
    let (mut hit, mut all) = (0u64, 0u64);
    for block in script.split("\n\n").filter(|b| !b.trim().is_empty()) {
        all += 1;
        if block
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(symbol))
        {
            hit += 1;
        }
    }
    (hit as f64 / all.max(1) as f64, all)
}

#[test]
fn vdso_frames_are_named_as_perf_names_them() {
    if !bpf_available("vdso_frames_are_named_as_perf_names_them") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("names-vdso");
    let d = dir.display();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/names/vdso.c");
    let build = sh(&format!(
        "${{CC:-clang}} -O2 -fno-omit-frame-pointer -o {d}/vdso {}",
        src.display()
    ));
    check(&build, "building the vdso fixture");
    // Ours: recorded to a file, symbolized after the process exited.
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -o {d}/raw.arrow -- {d}/vdso 3 && \
         stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
    ));
    check(&rec, "recording and symbolizing the vdso fixture");
    let folded = String::from_utf8_lossy(&rec.stdout);
    let (ours, n) = share(&folded, |f| {
        f == "clock_gettime" || f == "__vdso_clock_gettime"
    });
    assert!(
        !folded.contains("[[vdso]"),
        "doubled brackets in an unresolved name:\n{folded}"
    );
    // perf on the same program.
    let perf = sh(&format!(
        "perf record -q -e cpu-clock -F 99 -g -o {d}/perf.data -- {d}/vdso 3 > /dev/null && \
         perf script -i {d}/perf.data -F ip,sym 2>/dev/null"
    ));
    check(&perf, "perf record of the vdso fixture");
    let (theirs, pn) = perf_share(
        &String::from_utf8_lossy(&perf.stdout),
        "__vdso_clock_gettime",
    );
    eprintln!(
        "samples naming the vDSO's clock_gettime: stacks {ours:.2} of {n}, perf {theirs:.2} \
         of {pn}"
    );
    assert!(
        n > 0 && pn > 100,
        "too few samples: {n} ns of ours, {pn} of perf's"
    );
    assert!(
        ours >= theirs - 0.05,
        "stacks names the vDSO in {ours:.2} of samples, perf in {theirs:.2}:\n{folded}"
    );
}
