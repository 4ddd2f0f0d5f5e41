//! Loading the BPF skeleton, attaching programs, and the perf events that drive CPU samples.

pub mod skel {
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    include!(concat!(env!("OUT_DIR"), "/stacks.skel.rs"));
}

use std::mem::MaybeUninit;
use std::os::fd::{FromRawFd, OwnedFd};

use anyhow::{Context, Result, bail};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use skel::{StacksSkel, StacksSkelBuilder};

use crate::spec::EventSpec;

/// What the BPF side needs to know before load.
pub struct LoadOptions<'a> {
    pub spec: &'a EventSpec,
    pub all: bool,
    pub include_idle: bool,
    pub follow_forks: bool,
    pub ringbuf_bytes: u32,
}

/// Open, configure and load the BPF object.
pub fn load<'obj>(
    obj: &'obj mut MaybeUninit<OpenObject>,
    opts: &LoadOptions<'_>,
) -> Result<StacksSkel<'obj>> {
    let builder = StacksSkelBuilder::default();
    let mut open = builder
        .open(obj)
        .context("opening the BPF object (is this kernel built with BTF?)")?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("BPF object has no read-only data section")?;
    rodata.trace_all = opts.all;
    rodata.include_idle = opts.include_idle;
    rodata.follow_forks = opts.follow_forks;
    rodata.profile_stacks = opts.spec.profile.map_or(0, |p| p.stacks.mask());
    rodata.wakeup_bytes = u64::from(opts.ringbuf_bytes / 8);
    open.maps
        .events
        .set_max_entries(opts.ringbuf_bytes)
        .context("sizing the ring buffer")?;
    if opts.spec.profile.is_none() {
        open.progs.on_cpu_sample.set_autoload(false);
    }
    open.load().context(
        "loading BPF programs (stacks-record needs root, or CAP_BPF + CAP_PERFMON, and a kernel with BTF)",
    )
}

/// Attach the lifecycle tracepoints (exec, fork, exit).
pub fn attach_lifecycle(skel: &StacksSkel<'_>) -> Result<Vec<Link>> {
    let mut links = Vec::new();
    for (name, prog) in [
        ("sched_process_exec", &skel.progs.on_exec),
        ("sched_process_fork", &skel.progs.on_fork),
        ("sched_process_exit", &skel.progs.on_exit),
    ] {
        links.push(
            prog.attach()
                .with_context(|| format!("attaching to tracepoint sched:{name}"))?,
        );
    }
    Ok(links)
}

/// `PERF_FLAG_FD_CLOEXEC` from linux/perf_event.h.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// Open a cpu-clock sampling perf event on `cpu` for all tasks, every `period_ns`.
pub fn open_cpu_clock(cpu: u32, period_ns: u64) -> Result<OwnedFd> {
    use libbpf_rs::libbpf_sys as sys;
    // SAFETY: perf_event_attr is plain old data; zero is its documented default.
    let mut attr: sys::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = sys::PERF_TYPE_SOFTWARE;
    attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
    attr.config = u64::from(sys::PERF_COUNT_SW_CPU_CLOCK);
    attr.__bindgen_anon_1.sample_period = period_ns;
    // SAFETY: attr is initialized; pid -1 + cpu N = every task on that CPU.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const sys::perf_event_attr,
            -1i32,
            cpu as i32,
            -1i32,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        bail!("perf_event_open(cpu-clock, cpu {cpu}): {err}");
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// CPUs that are online now (from /sys/devices/system/cpu/online, e.g. `0-3,6`).
pub fn online_cpus() -> Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .context("reading /sys/devices/system/cpu/online")?;
    parse_cpu_list(text.trim())
        .with_context(|| format!("parsing the online CPU list {:?}", text.trim()))
}

fn parse_cpu_list(text: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>()?..=b.parse::<u32>()?),
            None => cpus.push(part.parse()?),
        }
    }
    Ok(cpus)
}

/// Start tracing process `tgid`.
pub fn add_target(skel: &StacksSkel<'_>, tgid: u32) -> Result<()> {
    skel.maps
        .targets
        .update(&tgid.to_ne_bytes(), &[1u8], MapFlags::ANY)
        .with_context(|| format!("adding pid {tgid} to the BPF target map"))
}

/// Trace processes named `name` when they exec (names are matched on their first 15 bytes,
/// as the kernel keeps them).
pub fn add_target_comm(skel: &StacksSkel<'_>, name: &str) -> Result<()> {
    skel.maps
        .target_comms
        .update(&comm_key(name), &[1u8], MapFlags::ANY)
        .with_context(|| format!("adding process name {name:?} to the BPF name map"))
}

/// The kernel's 16-byte, NUL-padded form of a process name.
pub fn comm_key(name: &str) -> [u8; 16] {
    let mut key = [0u8; 16];
    let bytes = name.as_bytes();
    let n = bytes.len().min(15);
    key[..n].copy_from_slice(&bytes[..n]);
    key
}

/// Per-CPU totals of events lost because the ring buffer was full.
pub fn lost_per_cpu(skel: &StacksSkel<'_>) -> Result<Vec<u64>> {
    let values = skel
        .maps
        .lost
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .context("reading the lost-event counters")?
        .unwrap_or_default();
    Ok(values
        .iter()
        .map(|v| {
            let mut b = [0u8; 8];
            let n = v.len().min(8);
            b[..n].copy_from_slice(&v[..n]);
            u64::from_ne_bytes(b)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert!(parse_cpu_list("x").is_err());
    }

    #[test]
    fn comm_keys_truncate_to_15() {
        let k = comm_key("a-very-long-process-name");
        assert_eq!(&k[..15], b"a-very-long-pro");
        assert_eq!(k[15], 0);
        assert_eq!(&comm_key("ab")[..3], b"ab\0");
    }
}
