//! Whether tests that need BPF or root can run here, and serializing the BPF tests. A test that
//! cannot run is skipped visibly, or fails when `STACKS_REQUIRE_BPF` is set (CI).

use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Skip `test` visibly for `why`, or panic with `required` when `STACKS_REQUIRE_BPF` is set.
fn skip(test: &str, required: &str, why: &str) -> bool {
    if std::env::var_os("STACKS_REQUIRE_BPF").is_some() {
        panic!("{test}: {required} (STACKS_REQUIRE_BPF is set){why}");
    }
    false
}

/// Print the skip line on the stderr handle directly: the harness captures `eprintln!`, and a
/// skip must be visible (scripts/test counts these lines).
fn report_skip(line: String) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether BPF tests can run. When they cannot: panic if `STACKS_REQUIRE_BPF` is set (CI),
/// otherwise print the reason and return false so the test is skipped visibly.
pub fn bpf_available(test: &str) -> bool {
    let reason = if !is_root() {
        "not running as root"
    } else if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        "kernel has no BTF (/sys/kernel/btf/vmlinux)"
    } else {
        return true;
    };
    skip(test, "BPF is required", &format!(" but {reason}"));
    report_skip(format!("SKIPPED {test}: BPF unavailable: {reason}"));
    false
}

/// Whether a test that needs root (mounts) can run; like [`bpf_available`], a skip is printed
/// (and is a failure when `STACKS_REQUIRE_BPF` is set, as in CI, which runs as root).
pub fn root_available(test: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(test, "root is required", "");
    report_skip(format!("SKIPPED {test}: needs root (mount)"));
    false
}

/// BPF tests run one at a time: they measure CPU time, and two cores are easily saturated.
pub fn bpf_serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The directory of the crate whose tests run: cargo's `CARGO_MANIFEST_DIR` at run time, else
/// `compiled` (pass `env!("CARGO_MANIFEST_DIR")`). The compiled-in path alone goes stale when the
/// same target directory builds clones at different paths: cargo does not rebuild a test
/// binary because its sources moved.
pub fn crate_dir(compiled: &'static str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| compiled.into())
}
