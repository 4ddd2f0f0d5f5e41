//! Every frame named: frames outside ordinary files get their functions' names, measured
//! against perf on the same program. The vDSO: a C loop calling `clock_gettime` spends its
//! time in the kernel's vDSO, whose image the recorder keeps in the stream (`stacks.vdso`),
//! so stacks-symbolize names it offline, after the process is gone. JIT code: named from the
//! process's perf map, read by the recorder while the process lives (a C program that writes
//! its own code and map, in a container of its own; V8 under node).

use stacks_tests::{bpf_available, bpf_serial, check, perf_share, perf_share_by, scratch, sh};

/// Share of the folded stacks' samples that `names` finds a frame in.
fn share(folded: &str, names: impl Fn(&str) -> bool) -> (f64, u64) {
    stacks_tests::folded_share(folded, |stack| stack.split(';').any(&names))
}

#[test]
fn vdso_frames_are_named_as_perf_names_them() {
    if !bpf_available("vdso_frames_are_named_as_perf_names_them") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("names-vdso");
    let d = dir.display();
    let src = stacks_tests::crate_dir().join("fixtures/names/vdso.c");
    let build = sh(&format!(
        "${{CC:-clang}} -O2 -fno-omit-frame-pointer -o {d}/vdso {}",
        src.display()
    ));
    check(&build, "building the vdso fixture");
    // Ours and perf's of the same run (perf follows the recorder's child, the fixture): the
    // fixture's share of time in the vDSO moves from run to run (separate runs gave perf 0.94
    // to 0.98 and stacks 0.92 to 0.97), so two runs could differ by more than the tolerance.
    // Ours is symbolized after the process exited.
    let rec = sh(&format!(
        "perf record -q -e cpu-clock -F 99 -g -o {d}/perf.data -- \
           stacks-record -e profile:u:99 -o {d}/raw.arrow -- {d}/vdso 3 > /dev/null && \
         stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
    ));
    check(
        &rec,
        "recording (with perf beside) and symbolizing the vdso fixture",
    );
    let folded = String::from_utf8_lossy(&rec.stdout);
    let (ours, n) = share(&folded, |f| {
        f == "clock_gettime" || f == "__vdso_clock_gettime"
    });
    assert!(
        !folded.contains("[[vdso]"),
        "doubled brackets in an unresolved name:\n{folded}"
    );
    let perf = sh(&format!(
        "perf script -i {d}/perf.data --comms vdso -F ip,sym 2>/dev/null"
    ));
    check(&perf, "perf script of the vdso fixture");
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

/// A tiny JIT (tests/fixtures/names/jit.c) in a mount and pid namespace of its own (run from a
/// descriptor opened before a tmpfs hid the /tmp its binary is in), with its
/// own /tmp: its code is named from the perf map it wrote there (as pid 1), read through its
/// root; the map's malformed lines are skipped and counted; the names are in the stream, so
/// symbolizing it after the process removed its map and exited still names them.
#[test]
fn jit_code_is_named_from_a_perf_map_in_the_process_own_tmp() {
    if !bpf_available("jit_code_is_named_from_a_perf_map_in_the_process_own_tmp") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("names-jit");
    let d = dir.display();
    let src = stacks_tests::crate_dir().join("fixtures/names/jit.c");
    let build = sh(&format!(
        "${{CC:-clang}} -O2 -fno-omit-frame-pointer -o {d}/jit {}",
        src.display()
    ));
    check(&build, "building the jit fixture");
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -o {d}/raw.arrow -- unshare -m -p -f --mount-proc \
           --propagation private sh -c 'exec 3< {d}/jit; mount -t tmpfs jit /tmp && \
           exec /proc/self/fd/3 3' && \
         stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
    ));
    check(&rec, "recording and symbolizing the jit fixture");
    let folded = String::from_utf8_lossy(&rec.stdout);
    let stderr = String::from_utf8_lossy(&rec.stderr);
    let (named, n) = share(&folded, |f| f == "jit_spin");
    eprintln!("samples naming jit_spin: {named:.2} of {n}");
    assert!(
        n > 1_000_000_000,
        "under a second of CPU samples: {n} ns\n{stderr}"
    );
    assert!(
        named >= 0.95,
        "jit_spin named in {named:.2} of samples:\n{folded}\n{stderr}"
    );
    assert!(
        stderr.contains("perf maps: 1 read") && stderr.contains("3 bad lines skipped"),
        "the summary counts the map and its bad lines:\n{stderr}"
    );
}

/// Whether a V8 code name (`JS:*hot /path/hot.js:3:13`: a tier mark, then the function) is
/// of function `f`.
fn is_v8_function(name: &str, f: &str) -> bool {
    name.split_whitespace()
        .next()
        .and_then(|head| head.rsplit(':').next())
        .is_some_and(|n| n.trim_start_matches(['*', '~', '^', '+']) == f)
}

/// node with `--perf-basic-prof`: V8 writes each compiled function's name to its perf map as
/// it goes; stacks names the hot JavaScript function in as many samples as perf does (both
/// read the same map), and keeps the names after the map is deleted.
#[test]
fn node_jit_frames_are_named_as_perf_names_them() {
    if !bpf_available("node_jit_frames_are_named_as_perf_names_them") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("names-node");
    let d = dir.display();
    let js = stacks_tests::crate_dir().join("fixtures/names/hot.js");
    let js = js.display();
    // In the scratch directory (V8 writes its isolate logs there); the pid written first, so
    // the test removes that process's map (and only it).
    let node = format!(
        "sh -c 'cd {d}; echo $$ > pid; exec node --perf-basic-prof --no-turbo-inlining {js} 4'"
    );
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -o {d}/raw.arrow -- {node} > /dev/null && \
         rm /tmp/perf-$(cat {d}/pid).map && \
         stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
    ));
    check(
        &rec,
        "recording node and symbolizing after its map was removed",
    );
    let folded = String::from_utf8_lossy(&rec.stdout);
    let (ours, n) = share(&folded, |f| is_v8_function(f, "hot"));
    let perf = sh(&format!(
        "perf record -q -e cpu-clock -F 99 -g -o {d}/perf.data -- {node} > /dev/null && \
         perf script -i {d}/perf.data -F ip,sym 2>/dev/null; rm -f /tmp/perf-$(cat {d}/pid).map"
    ));
    check(&perf, "perf record of node");
    let (theirs, pn) = perf_share_by(&String::from_utf8_lossy(&perf.stdout), |name| {
        is_v8_function(name, "hot")
    });
    eprintln!(
        "samples naming the JavaScript function hot: stacks {ours:.2} of {n}, perf {theirs:.2} \
         of {pn}"
    );
    assert!(
        n > 1_000_000_000 && pn > 100,
        "too few samples: {n} ns of ours, {pn} of perf's"
    );
    assert!(
        ours >= theirs - 0.05,
        "stacks names hot in {ours:.2} of samples, perf in {theirs:.2}:\n{folded}\n{}",
        String::from_utf8_lossy(&rec.stderr)
    );
}

/// HotSpot with `-XX:+DumpPerfMapAtExit`: the JVM writes its perf map only as it exits, after
/// every sample was taken; the recorder holds that process's records until then, so stacks
/// names the hot Java method in as many samples as perf (which reads the map afterwards) does,
/// and the JVM's own library (dlopen'ed) by its symbols.
#[test]
fn java_jit_frames_are_named_from_the_map_written_at_exit() {
    if !bpf_available("java_jit_frames_are_named_from_the_map_written_at_exit") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("names-java");
    let d = dir.display();
    let src = stacks_tests::crate_dir().join("fixtures/names/Hot.java");
    check(
        &sh(&format!("javac -d {d} {}", src.display())),
        "compiling the Java fixture",
    );
    let java = format!(
        "sh -c 'cd {d}; echo $$ > pid; exec java -XX:+PreserveFramePointer \
         -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit -XX:CompileCommand=quiet \
         -XX:CompileCommand=dontinline,Hot::hot -cp {d} Hot 4'"
    );
    let rec = sh(&format!(
        "stacks-record -e profile:u:99 -o {d}/raw.arrow -- {java} > /dev/null && \
         rm /tmp/perf-$(cat {d}/pid).map && \
         stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
    ));
    check(
        &rec,
        "recording java and symbolizing after its map was removed",
    );
    let folded = String::from_utf8_lossy(&rec.stdout);
    let stderr = String::from_utf8_lossy(&rec.stderr);
    let is_hot = |f: &str| f == "int Hot.hot(int)";
    let (ours, n) = share(&folded, is_hot);
    let perf = sh(&format!(
        "perf record -q -e cpu-clock -F 99 -g -o {d}/perf.data -- {java} > /dev/null && \
         perf script -i {d}/perf.data -F ip,sym 2>/dev/null; rm -f /tmp/perf-$(cat {d}/pid).map"
    ));
    check(&perf, "perf record of java");
    let (theirs, pn) = perf_share_by(&String::from_utf8_lossy(&perf.stdout), is_hot);
    eprintln!(
        "samples naming the Java method Hot.hot: stacks {ours:.2} of {n}, perf {theirs:.2} of {pn}"
    );
    assert!(
        n > 1_000_000_000 && pn > 100,
        "too few samples: {n} ns of ours, {pn} of perf's"
    );
    // libjvm.so, loaded by the launcher after the exec, is named too (its build id learned
    // from a second read of the process's mappings): the interpreter's entry to Java code.
    let (jvm, _) = share(&folded, |f| f.starts_with("JavaCalls::call_helper"));
    assert!(
        jvm >= 0.9,
        "libjvm frames named in {jvm:.2} of samples:\n{folded}"
    );
    assert!(
        stderr.contains("records held until their map was written"),
        "the summary says records waited for the map:\n{stderr}"
    );
    assert!(
        ours >= theirs - 0.05,
        "stacks names Hot.hot in {ours:.2} of samples, perf in {theirs:.2}:\n{folded}\n{stderr}"
    );
}
