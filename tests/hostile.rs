//! A hostile target cannot crash, hang or bloat the recorder (#64 item 2, docs/threat-model.md).
//! Each case records `stacks-workload hostile --case CASE` (run as `nobody`: it attacks through
//! what the recorder reads of it) together with a well-behaved `stacks-workload cpu`, and
//! checks: the recording ends (no hang: a FIFO as perf map), without a panic; the recorder's
//! peak RSS (its `ru_maxrss`, from `wait4`) stays under [`RSS_BOUND_KIB`]; the well-behaved
//! target is recorded as it ran (its CPU time in `burn_heavy` and `burn_light`, by its own
//! clock); what the hostile target offered is used only as far as it is valid (its good perf
//! map line names its code) and what was refused is counted by cause in the summary; nothing
//! outside the target's own view is read (a perf map linked to a root-only file names
//! nothing from it).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use arrow_array::Array;
use arrow_array::cast::AsArray;
use serde_json::Value;
use stacks_tests::{bin, bpf_available, bpf_serial, check, folded_share, read_stream, scratch, sh};

/// The recorder's peak resident memory, whatever the target does: its idle peak here is
/// about 55 MiB; the perf-map budgets (1 Mi entries, 64 MiB of names over all maps) add at
/// most about 110 MiB.
const RSS_BOUND_KIB: u64 = 200 << 10;
/// A recording of a few seconds that has not ended by then hangs.
const HANG: Duration = Duration::from_secs(180);
/// How long each workload runs.
const SECONDS: &str = "4";
/// What is recorded: CPU samples often enough that the well-behaved target, on CPU a tenth of
/// the time on this shared machine, gets a few hundred; `d` stacks, so the targets' CFI is
/// read.
const KINDS: &str = "profile:d:499";

/// What one recording gave.
struct Run {
    stderr: String,
    folded: String,
    maxrss_kib: u64,
    cpu: Value,
    /// The hostile workload's report.
    hostile: Value,
    /// The recording, in its scratch directory (kept while the run is).
    raw: std::path::PathBuf,
    _dir: stacks_tests::ScratchDir,
}

/// Record `hostile --case CASE ARGS` (as nobody) and `cpu` side by side, then symbolize and
/// fold the recording.
fn record(name: &str, case: &str, args: &str) -> Run {
    record_as(
        name,
        case,
        args,
        "setpriv --reuid=65534 --regid=65534 --clear-groups",
    )
}

/// [`record`], the hostile workload run under `runner` (a command prefix).
fn record_as(name: &str, case: &str, args: &str, runner: &str) -> Run {
    let dir = scratch(&format!("hostile-{name}"));
    let d = dir.display();
    let workload = bin("stacks-workload");
    let w = workload.display();
    let script = format!(
        "{runner} {w} hostile --case {case} \
           --seconds {SECONDS} {args} > {d}/hostile.json & \
         {w} --report {d}/cpu.json cpu --seconds {SECONDS} > /dev/null; wait"
    );
    let stderr_path = dir.join("record.err");
    // Waited for by `wait_with_rusage` (wait4, for its peak RSS), not by `Child::wait`.
    #[expect(clippy::zombie_processes)]
    let child = Command::new(bin("stacks-record"))
        .args(["-e", KINDS, "-o"])
        .arg(dir.join("raw.arrow"))
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("start stacks-record");
    let (status, maxrss_kib) = wait_with_rusage(child.id() as libc::pid_t, HANG);
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        status == Some(0),
        "{name}: stacks-record ended with {status:?} (None: still running after {HANG:?}, \
         killed):\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{name}: a panic:\n{stderr}");
    let out = sh(&format!(
        "stacks-symbolize {d}/raw.arrow | stacks-pprof -f folded"
    ));
    check(&out, &format!("{name}: symbolizing and folding"));
    let cpu = serde_json::from_str(&std::fs::read_to_string(dir.join("cpu.json")).unwrap())
        .expect("cpu report");
    let hostile = std::fs::read_to_string(dir.join("hostile.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    eprintln!("{name}: recorder peak RSS {} MiB", maxrss_kib >> 10);
    Run {
        stderr,
        folded: String::from_utf8_lossy(&out.stdout).into_owned(),
        maxrss_kib,
        cpu,
        hostile,
        raw: dir.join("raw.arrow"),
        _dir: dir,
    }
}

/// Wait for `pid` (a child) at most `timeout`: its exit code (None: killed as hung, or killed
/// by a signal) and its peak RSS in KiB.
fn wait_with_rusage(pid: libc::pid_t, timeout: Duration) -> (Option<i32>, u64) {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: plain out-parameters for our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if got == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return (code, usage.ru_maxrss as u64);
        }
        if start.elapsed() > timeout {
            // SAFETY: our own child, still unwaited.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return (None, 0);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The checks every case shares: memory bound, the well-behaved target recorded as it ran.
fn check_common(name: &str, run: &Run) {
    assert!(
        run.maxrss_kib <= RSS_BOUND_KIB,
        "{name}: the recorder peaked at {} MiB, over the {} MiB bound:\n{}",
        run.maxrss_kib >> 10,
        RSS_BOUND_KIB >> 10,
        run.stderr
    );
    // Rust frames are named with their path (`stacks_workload::cpu::burn_heavy`).
    let burned = |f: &str| f.ends_with("burn_heavy") || f.ends_with("burn_light");
    let (_, all) = folded_share(&run.folded, |_| true);
    let (share, _) = folded_share(&run.folded, |s| s.split(';').any(burned));
    let recorded_ns = share * all as f64;
    let ran_ns = run.cpu["heavy_ns"].as_f64().unwrap() + run.cpu["light_ns"].as_f64().unwrap();
    let (heavy, _) = folded_share(&run.folded, |s| {
        s.split(';').any(|f| f.ends_with("burn_heavy"))
    });
    let heavy_of_burn = heavy / share.max(f64::MIN_POSITIVE);
    let truth = run.cpu["heavy_fraction"].as_f64().unwrap();
    eprintln!(
        "{name}: well-behaved target: {:.2} s recorded of {:.2} s burned; burn_heavy {heavy_of_burn:.3} \
         of it (its clock: {truth:.3})",
        recorded_ns / 1e9,
        ran_ns / 1e9
    );
    // 499 Hz samples of ~4 s on a shared machine: within 25% of its own clock.
    assert!(
        (recorded_ns - ran_ns).abs() <= 0.25 * ran_ns,
        "{name}: the well-behaved target's CPU time: {recorded_ns} ns recorded, {ran_ns} ns \
         by its clock\n{}",
        run.stderr
    );
    assert!(
        (heavy_of_burn - truth).abs() <= 0.1,
        "{name}: burn_heavy's share {heavy_of_burn:.3}, by its clock {truth:.3}"
    );
}

/// Share of the hostile target's samples (those in its spin loop's code: named, or the
/// unnamed anonymous frame at its address) that name `hostile_spin`.
fn hostile_named(run: &Run) -> (f64, u64) {
    let spin = |s: &str| s.split(';').any(|f| f == "hostile_spin");
    let jit = |s: &str| spin(s) || s.contains("7e5700000");
    let (jit_share, all) = folded_share(&run.folded, jit);
    let (named_share, _) = folded_share(&run.folded, spin);
    (
        named_share / jit_share.max(f64::MIN_POSITIVE),
        (jit_share * all as f64) as u64,
    )
}

fn bpf(name: &str) -> bool {
    bpf_available(name) && Path::new("/usr/bin/setpriv").exists()
}

/// A well-behaved perf map: the baseline the other cases are compared with.
#[test]
fn a_good_perf_map_names_the_code() {
    if !bpf("a_good_perf_map_names_the_code") {
        return;
    }
    let _serial = bpf_serial();
    let run = record("good", "perfmap-good", "");
    check_common("good", &run);
    let (named, n) = hostile_named(&run);
    assert!(
        n > 0 && named >= 0.95,
        "hostile_spin named in {named:.2} of {n} ns"
    );
}

/// Perf maps too large or too many-lined to hold, binary junk, names of 64 KiB: the recorder
/// reads them within its bounds (bytes read, line length, entries and name bytes), the good
/// line still names the code, and the skips are counted by cause.
#[test]
fn oversized_and_junk_perf_maps_are_read_within_bounds() {
    if !bpf("oversized_and_junk_perf_maps_are_read_within_bounds") {
        return;
    }
    let _serial = bpf_serial();
    for (case, counted) in [
        ("perfmap-huge", "maps read up to 128 MiB only"),
        ("perfmap-lines", "maps read up to the names budget only"),
        ("perfmap-junk", "bad lines skipped"),
        ("perfmap-long", "lines over 8 KiB skipped"),
    ] {
        let run = record(case, case, "");
        check_common(case, &run);
        let (named, n) = hostile_named(&run);
        assert!(
            n > 0 && named >= 0.95,
            "{case}: hostile_spin named in {named:.2} of {n} ns\n{}",
            run.stderr
        );
        assert!(
            run.stderr.contains(counted),
            "{case}: the summary says '{counted}':\n{}",
            run.stderr
        );
    }
}

/// A perf map that is a symbolic link to a root-only file (the target runs as nobody): not
/// followed, so no name of that file's reaches the recording, and counted as refused.
#[test]
fn a_perf_map_linked_out_of_the_target_view_is_not_read() {
    if !bpf("a_perf_map_linked_out_of_the_target_view_is_not_read") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("hostile-secret");
    let secret = dir.join("secret.map");
    std::fs::write(&secret, "7e5700000100 a SECRET_ROOT_ONLY_NAME\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    for (name, target) in [
        ("symlink-secret", secret.display().to_string()),
        ("symlink-shadow", "/etc/shadow".to_string()),
    ] {
        let run = record(name, "perfmap-symlink", &format!("--link-to {target}"));
        check_common(name, &run);
        assert!(
            !run.folded.contains("SECRET_ROOT_ONLY_NAME") && !run.folded.contains("root:"),
            "{name}: a name from the linked file:\n{}",
            run.folded
        );
        assert!(
            run.stderr.contains("1 maps refused as symbolic links"),
            "{name}: the refusal is counted:\n{}",
            run.stderr
        );
    }
}

/// A FIFO as perf map, which nobody writes: opening it must not block the recorder.
#[test]
fn a_fifo_perf_map_does_not_hang_the_recorder() {
    if !bpf("a_fifo_perf_map_does_not_hang_the_recorder") {
        return;
    }
    let _serial = bpf_serial();
    let run = record("fifo", "perfmap-fifo", "");
    check_common("fifo", &run);
    assert!(
        run.stderr.contains("1 maps refused as not regular files"),
        "the refusal is counted:\n{}",
        run.stderr
    );
}

/// An executable with corrupt section headers and notes (`.eh_frame` wrapping around the
/// address space, a junk `.gopclntab`, `.strtab` of 4 GiB in a sparse file, notes with sizes
/// past their section), run by the target: its CFI is not used (its `d` stacks still end), its
/// tables are not read (no gigabytes read), stacks-symbolize refuses the file (its frames stay
/// unresolved, by address), its JIT code is still named. (Before: the unwinder panicked on
/// the `.eh_frame` range.)
#[test]
fn a_corrupt_executable_is_refused_not_read() {
    if !bpf("a_corrupt_executable_is_refused_not_read") {
        return;
    }
    let _serial = bpf_serial();
    let run = record("elf", "elf-corrupt", "");
    let file = format!("/tmp/hostile-elf-{}", run.hostile["pid"]);
    let _ = std::fs::remove_file(&file);
    check_common("elf", &run);
    let (named, n) = hostile_named(&run);
    assert!(
        n > 0 && named >= 0.95,
        "hostile_spin named in {named:.2} of {n} ns\n{}",
        run.stderr
    );
    let (unresolved, _) = folded_share(&run.folded, |s| s.contains("[hostile-elf-"));
    assert!(
        unresolved > 0.0,
        "no unresolved frame of the corrupt file:\n{}",
        run.folded
    );
    assert!(
        run.stderr.contains("d stacks:"),
        "the d stacks are reported:\n{}",
        run.stderr
    );
}

/// A target that truncates a file it maps executable and runs code from (a copy of its own
/// executable), to nothing and back every 10 ms, while its samples are unwound by that file's
/// CFI: the recorder reads the CFI with `pread` into memory, never through a mapping the
/// truncation would fault (before: the recorder died of `SIGBUS` within a second), so it
/// ends, within its memory bound, with the well-behaved target recorded as it ran; the code
/// run from the copy is recorded and named (stacks-symbolize reads the copy, writable by
/// another user, from a sealed copy in memory).
#[test]
fn a_file_truncated_while_mapped_does_not_crash_the_recorder() {
    if !bpf("a_file_truncated_while_mapped_does_not_crash_the_recorder") {
        return;
    }
    let _serial = bpf_serial();
    let run = record("truncate", "mapped-truncate", "");
    let file = format!("/tmp/hostile-mapped-{}", run.hostile["pid"]);
    let _ = std::fs::remove_file(&file);
    check_common("truncate", &run);
    let truncations = run.hostile["truncations"].as_u64().unwrap_or(0);
    assert!(
        truncations >= 100,
        "the copy was truncated {truncations} times: {}",
        run.hostile
    );
    let (spin, _) = folded_share(&run.folded, |s| {
        s.split(';').any(|f| f.ends_with("hostile_native_spin"))
    });
    eprintln!(
        "truncate: {truncations} truncations; {:.3} of the samples in the copy's code",
        spin
    );
    assert!(
        spin > 0.0,
        "no sample of the code run from the truncated copy:\n{}",
        run.folded
    );
    assert!(
        run.stderr.contains("d stacks:"),
        "the d stacks are reported:\n{}",
        run.stderr
    );
}

/// A target mapping 12 files whose `.eh_frame` claims 24 MiB each (288 MiB of CFI, zeros in
/// sparse files) while its samples are unwound by CFI: the recorder holds at most 64 MiB of
/// CFI over all files (what it held was 256 MiB before, past its memory bound), refuses the
/// files that do not fit beside what the processes hold, counts them, and ends within its
/// bound with the well-behaved target recorded as it ran.
#[test]
fn a_target_mapping_more_cfi_than_the_bound_does_not_bloat_the_recorder() {
    if !bpf("a_target_mapping_more_cfi_than_the_bound_does_not_bloat_the_recorder") {
        return;
    }
    let _serial = bpf_serial();
    let run = record("cfi", "cfi-many", "");
    check_common("cfi", &run);
    let claimed = run.hostile["cfi_claimed_bytes"].as_u64().unwrap_or(0);
    assert!(claimed >= 256 << 20, "{}", run.hostile);
    let refused = run
        .stderr
        .lines()
        .find(|l| l.contains("d stacks:"))
        .and_then(|l| {
            let at = l.find(" files whose CFI was too large")?;
            l[..at].rsplit(' ').next()?.parse::<u64>().ok()
        });
    eprintln!(
        "cfi: {} MiB of CFI claimed by {} files; {refused:?} refused; peak RSS {} MiB",
        claimed >> 20,
        run.hostile["cfi_files"],
        run.maxrss_kib >> 10
    );
    // 64 MiB hold two of the 24 MiB files beside the targets' own: ten or more refused.
    assert!(
        refused.is_some_and(|n| n >= 10),
        "the files refused are counted:\n{}",
        run.stderr
    );
}

/// Span records made to hurt (65,535 attribute bytes announced and a name past the record,
/// with invalid UTF-8; a record at the end of its mapped page; a kernel address; a span id
/// changing while read): each sample carries what could be read of the record (the name's
/// valid prefix, the record at the page's end read whole), or no span, never more.
#[test]
fn hostile_span_records_are_read_within_the_record() {
    if !bpf("hostile_span_records_are_read_within_the_record") {
        return;
    }
    let _serial = bpf_serial();
    let run = record("spans", "span-records", "");
    check_common("spans", &run);
    let pid = run.hostile["pid"]
        .as_u64()
        .expect("the hostile target's pid") as i64;
    let mut names = std::collections::BTreeMap::<String, u64>::new();
    for b in read_stream(&run.raw) {
        let pids = b.column_by_name("pid").unwrap();
        let pids = arrow_cast::cast(pids, &arrow_schema::DataType::Int64).unwrap();
        let pids = pids.as_primitive::<arrow_array::types::Int64Type>();
        let span = b.column_by_name("span_name").unwrap().as_string::<i32>();
        let kind = b.column_by_name("kind").unwrap();
        let kind = arrow_cast::cast(kind, &arrow_schema::DataType::Utf8).unwrap();
        let kind = kind.as_string::<i32>();
        for i in 0..b.num_rows() {
            if pids.value(i) == pid && kind.value(i) == "profile" {
                let name = if span.is_null(i) {
                    "(none)".to_string()
                } else {
                    span.value(i).to_string()
                };
                *names.entry(name).or_default() += 1;
            }
        }
    }
    eprintln!("spans: the hostile target's CPU samples by span name: {names:?}");
    let allowed = ["(none)", "n", "chang", &"e".repeat(38)];
    assert!(
        names.keys().all(|n| allowed.contains(&n.as_str())),
        "a span name no record holds: {names:?}"
    );
    for n in ["n", "chang", &"e".repeat(38)] {
        assert!(names.contains_key(n), "no sample in span {n:?}: {names:?}");
    }
}

/// CPython 3.14 from scripts/setup-pythons' prefix, and its `PYTHONHOME`.
fn python_3_14() -> (String, String) {
    let root = std::env::var("STACKS_PYTHONS").unwrap_or_else(|_| {
        format!(
            "{}/.cache/stacks-pythons",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    (
        format!("{root}/3.14/usr/bin/python3.14"),
        format!("{root}/3.14/usr"),
    )
}

/// A CPython thread whose frame chain is rewritten while it runs (a loop, a kernel address,
/// an unmapped page, flipping between good and bad, a garbage code object): the samples of
/// those moments carry counted failures (stacks truncated, interpreter memory unreadable,
/// code objects unreadable) as error frames or a truncation frame, the good moments the
/// thread's `spin` frame, and the recorder stays within its bounds.
#[test]
fn a_rewritten_python_frame_chain_is_read_within_bounds() {
    if !bpf("a_rewritten_python_frame_chain_is_read_within_bounds") {
        return;
    }
    let (python, home) = python_3_14();
    assert!(
        Path::new(&python).exists(),
        "{python} missing: scripts/setup-pythons installs it"
    );
    let _serial = bpf_serial();
    let run = record_as(
        "python",
        "python-frames",
        &format!("--python {python}"),
        &format!("env PYTHONHOME={home}"),
    );
    check_common("python", &run);
    assert_eq!(
        run.hostile["phases"].as_array().map(Vec::len),
        Some(6),
        "the script ran every phase: {}",
        run.hostile
    );
    let line = run
        .stderr
        .lines()
        .find(|l| l.contains("Python frames:"))
        .unwrap_or_else(|| panic!("no Python summary:\n{}", run.stderr));
    let count = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what} in {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a count before {what} in {line}"))
    };
    let (unreadable, truncated) = (
        count("interpreter memory unreadable"),
        count("stacks truncated"),
    );
    let code = line
        .split("frames whose code object was unreadable ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(0);
    eprintln!("python: {line}");
    assert!(
        unreadable > 0 && truncated > 0 && code > 0,
        "each corruption counted: {line}"
    );
    let (spin, _) = folded_share(&run.folded, |s| s.split(';').any(|f| f == "spin"));
    let (cut, _) = folded_share(&run.folded, |s| s.contains("[more Python frames]"));
    assert!(spin > 0.0 && cut > 0.0, "spin {spin}, truncated {cut}");
}
