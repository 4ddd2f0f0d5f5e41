//! Facts about the recording machine for the stream metadata, and the clock conversion from
//! BPF's boot-time nanoseconds to wall-clock time.

use std::collections::HashMap;

use stacks_stream::meta;

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Wall-clock minus CLOCK_BOOTTIME, measured once: add to `bpf_ktime_get_boot_ns()`.
/// Takes the tightest of a few bracketing reads.
pub(crate) fn boot_to_realtime_offset() -> i64 {
    let mut best = (i64::MAX, 0i64);
    for _ in 0..16 {
        let b1 = clock_ns(libc::CLOCK_BOOTTIME);
        let r = clock_ns(libc::CLOCK_REALTIME);
        let b2 = clock_ns(libc::CLOCK_BOOTTIME);
        let width = b2 - b1;
        if width < best.0 {
            best = (width, r - (b1 + width / 2));
        }
    }
    best.1
}

/// Now on the boot clock, as `bpf_ktime_get_boot_ns()` reads it.
pub(crate) fn boot_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME) as u64
}

pub(crate) fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

pub(crate) fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The stream metadata of a recording.
pub(crate) fn stream_metadata(
    events: &str,
    start_ns: i64,
    offset_ns: i64,
) -> HashMap<String, String> {
    let mut m = HashMap::new();
    m.insert(meta::HOST.into(), stacks_stream::sys::hostname());
    m.insert(meta::KERNEL_RELEASE.into(), kernel_release());
    m.insert(meta::BOOT_ID.into(), stacks_stream::sys::boot_id());
    m.insert(meta::EVENTS.into(), events.into());
    m.insert(
        meta::TOOL_VERSION.into(),
        format!("stacks-record {}", env!("CARGO_PKG_VERSION")),
    );
    m.insert(
        meta::CLOCK.into(),
        format!(
            "realtime: bpf_ktime_get_boot_ns() + {offset_ns} ns (CLOCK_REALTIME - CLOCK_BOOTTIME at start)"
        ),
    );
    m.insert(meta::START_NS.into(), start_ns.to_string());
    if let Some(v) = crate::process::vdso::own() {
        m.insert(meta::VDSO.into(), stacks_stream::hex::encode(&v.image));
    }
    stacks_stream::stamp(
        &mut m,
        "stacks-record",
        env!("CARGO_PKG_VERSION"),
        stacks_stream::stage::RAW,
    );
    m
}
