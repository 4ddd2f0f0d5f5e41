//! Loading the BPF skeleton, attaching programs, and the perf events that drive CPU samples.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, Result, bail};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use super::abi;
use super::abi::types::rss_thread;
use super::abi::{OpenStacksSkel, StacksSkel, StacksSkelBuilder};

/// What the BPF side needs to know before load.
pub(crate) struct LoadOptions {
    pub all: bool,
    pub include_idle: bool,
    /// `--cgroup`: (id, depth) of each cgroup whose tasks (and its descendants') are traced.
    pub cgroups: Vec<(u64, u32)>,
    pub follow_forks: bool,
    /// Size of each ring buffer in use.
    pub ringbuf_bytes: u32,
    /// Which ring buffers a recorded kind uses (by `enum stacks_ring`); the others get a page.
    pub rings: [bool; RINGS],
    /// The aggregation tables (IO events summed in the kernel while the IO ring is backed
    /// up); `None`: no aggregation.
    pub agg: Option<AggTables>,
    /// Read the `tracing` span of events (processes in `span_procs`).
    pub spans: bool,
    /// Bytes of user stack copied for `d` stacks.
    pub ustack_bytes: u32,
    /// Serve kernel stacks from the cache of checked unwinds (bpf/kstack.bpf.h).
    pub kstack_cache: bool,
    /// One served kernel stack in this many is unwound again and compared; 1: every use is
    /// compared and none served (the tests' ground truth).
    pub kstack_recheck: u32,
    /// Slots for `block:n` requests in flight (a power of two up to 1,024; the tests set
    /// fewer to send requests to the table).
    pub block_slots: u32,
}

/// Sizes of the aggregation tables of each generation.
pub(crate) struct AggTables {
    /// Entries of the sums table.
    pub entries: u32,
    /// Entries of each stack table that `want` asks for.
    pub stacks: u32,
    /// The stacks the aggregated kinds want (`STACKS_WANT_*`).
    pub want: u32,
}

/// Open, configure and load the BPF object.
/// `configure` sets what the loader does not know of: each event kind's tunables and
/// programs, the probes' settings and tables.
pub(crate) fn load<'obj>(
    obj: &'obj mut MaybeUninit<OpenObject>,
    opts: &LoadOptions,
    configure: impl FnOnce(&mut OpenStacksSkel<'obj>) -> Result<()>,
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
    rodata.cgroup_count = opts.cgroups.len() as u32;
    for (slot, &(id, level)) in rodata.target_cgroups.iter_mut().zip(&opts.cgroups) {
        slot.id = id;
        slot.level = level;
    }
    rodata.include_idle = opts.include_idle;
    rodata.follow_forks = opts.follow_forks;
    rodata.read_spans = opts.spans;
    rodata.ustack_window = opts.ustack_bytes;
    rodata.kstack_cache_on = opts.kstack_cache;
    rodata.kstack_recheck = opts.kstack_recheck;
    rodata.block_slot_mask = opts.block_slots.clamp(1, 1024).next_power_of_two() - 1;
    let bytes = u64::from(opts.ringbuf_bytes);
    rodata.ring_half = [bytes / 2; RINGS + 1];
    rodata.wakeup_bytes = [bytes / 8; RINGS + 1];
    if opts.agg.is_some() {
        rodata.agg_on_bytes = bytes / 4;
        rodata.agg_off_bytes = bytes / 32;
    }
    configure(&mut open)?;
    let maps = &mut open.maps;
    for (ring, map) in [
        &mut maps.events_samples,
        &mut maps.events_io,
        &mut maps.events_probes,
    ]
    .into_iter()
    .enumerate()
    {
        let size = if opts.rings[ring] {
            opts.ringbuf_bytes
        } else {
            PAGE
        };
        map.set_max_entries(size)
            .with_context(|| format!("sizing the {} ring buffer", RING_NAMES[ring]))?;
    }
    if let Some(agg) = &opts.agg {
        let kernel = if agg.want & WANT_KERNEL != 0 {
            agg.stacks
        } else {
            1
        };
        let user = if agg.want & WANT_USER != 0 {
            agg.stacks
        } else {
            1
        };
        for (map, size) in [
            (&mut maps.agg_events0, agg.entries),
            (&mut maps.agg_events1, agg.entries),
            (&mut maps.agg_kstacks0, kernel),
            (&mut maps.agg_kstacks1, kernel),
            (&mut maps.agg_ustacks0, user),
            (&mut maps.agg_ustacks1, user),
        ] {
            map.set_max_entries(size)
                .context("sizing the aggregation tables")?;
        }
    }
    open.load().context(
        "loading BPF programs (stacks-record needs root, or CAP_BPF + CAP_PERFMON, and a kernel with BTF)",
    )
}

/// The ring buffers (`enum stacks_ring`).
pub(crate) const RINGS: usize = abi::types::stacks_ring::STACKS_RING_COUNT.0 as usize;

/// Their names in messages, by `enum stacks_ring`.
pub(crate) const RING_NAMES: [&str; RINGS] = ["samples", "io", "probes"];

/// `STACKS_WANT_USER`, `STACKS_WANT_KERNEL`.
const WANT_USER: u32 = 1;
const WANT_KERNEL: u32 = 2;

/// The smallest ring buffer: one page (of a ring no recorded kind uses).
const PAGE: u32 = 4096;

/// Attach every loaded program whose section is `tp_btf/NAME` (lifecycle and the requested
/// events). CPU samples are attached per CPU with [`open_cpu_clock`], probes and spans per
/// target, the task iterators are run.
pub(crate) fn attach_tracepoints(skel: &mut StacksSkel<'_>) -> Result<Vec<Link>> {
    use libbpf_rs::skel::Skel;
    let mut links = Vec::new();
    for prog in skel.object().progs_mut() {
        if !prog.autoload() || !prog.section().to_string_lossy().starts_with("tp_btf/") {
            continue;
        }
        let link = prog.attach().with_context(|| {
            format!(
                "attaching BPF program {} to {}",
                prog.name().to_string_lossy(),
                prog.section().to_string_lossy()
            )
        })?;
        links.push(link);
    }
    Ok(links)
}

/// The kernel's counters of one loaded program.
pub(crate) struct ProgStats {
    pub name: String,
    /// Runs and their total time: counted only while `kernel.bpf_stats_enabled` is 1.
    pub runs: u64,
    pub run_ns: u64,
    /// Runs the kernel skipped (its recursion and concurrency guard: the program was already
    /// running on that CPU).
    pub skipped: u64,
}

/// The counters of every loaded program.
pub(crate) fn prog_stats(skel: &StacksSkel<'_>) -> Vec<ProgStats> {
    use libbpf_rs::skel::Skel;
    let mut out = Vec::new();
    for prog in skel.object().progs() {
        if !prog.autoload() {
            continue;
        }
        // SAFETY: bpf_prog_info is plain old data; zero is a valid request.
        let mut info: libbpf_rs::libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libbpf_rs::libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: the fd is the loaded program's; info and len describe a buffer we own.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
                prog.as_fd().as_raw_fd(),
                &mut info,
                &mut len,
            )
        };
        if rc == 0 {
            out.push(ProgStats {
                name: prog.name().to_string_lossy().into_owned(),
                runs: info.run_cnt,
                run_ns: info.run_time_ns,
                skipped: info.recursion_misses,
            });
        }
    }
    out
}

/// Whether the kernel counts BPF programs' runs and run time (`kernel.bpf_stats_enabled`).
pub(crate) fn run_stats_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() == "1")
}

/// End of a recording: emit what the kernel side still holds (folded short off-CPU intervals
/// of every thread) into the ring buffer. Call after detaching the event programs.
pub(crate) fn flush_pending(skel: &StacksSkel<'_>) -> Result<()> {
    let prog = &skel.progs.flush_tasks;
    if !prog.autoload() {
        return Ok(());
    }
    let link = prog
        .attach_iter_with_opts(libbpf_rs::IterOpts::None)
        .context("attaching the end-of-recording task iterator")?;
    let mut iter = libbpf_rs::Iter::new(&link).context("starting the task iterator")?;
    std::io::copy(&mut iter, &mut std::io::sink()).context("running the task iterator")?;
    Ok(())
}

/// Per-thread RSS growth not yet emitted (tid and its `struct rss_thread`), taken out of the
/// map.
pub(crate) fn take_rss_remainders(skel: &StacksSkel<'_>) -> Vec<(u32, rss_thread)> {
    let map = &skel.maps.rss_threads;
    let keys: Vec<Vec<u8>> = map.keys().collect();
    let mut out = Vec::new();
    for k in keys {
        if let Ok(Some(v)) = map.lookup(&k, MapFlags::ANY)
            && let Ok(key) = <[u8; 4]>::try_from(k.as_slice())
            && v.len() == size_of::<rss_thread>()
        {
            // SAFETY: the value has exactly rss_thread's size, and rss_thread (generated from
            // the C struct) is plain integers: every bit pattern is a valid value.
            let state = unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<rss_thread>()) };
            out.push((u32::from_ne_bytes(key), state));
        }
        let _ = map.delete(&k);
    }
    out
}

/// Each value of `map` read as a `T` (values of another size are skipped).
fn map_values<T: Copy>(map: &impl MapCore, keys: impl Iterator<Item = Vec<u8>>) -> Vec<T> {
    keys.filter_map(|k| map.lookup(&k, MapFlags::ANY).ok().flatten())
        .filter(|v| v.len() == size_of::<T>())
        // SAFETY: the value has exactly T's size, and the T read here (generated from the C
        // structs) are plain integers and arrays of them: every bit pattern is a valid value.
        .map(|v| unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<T>()) })
        .collect()
}

/// The block requests the kernel side still holds as issued (their completion not seen):
/// (issue time on the boot clock, disk major, disk minor) of each.
pub(crate) fn held_block_requests(skel: &StacksSkel<'_>) -> Vec<(u64, u32, u32)> {
    use abi::types::{block_request, block_request_bare, block_slot, block_stack_slot};
    let maps = &skel.maps;
    let slots = (0..maps.block_slots.max_entries()).map(|i| i.to_ne_bytes().to_vec());
    let mut out: Vec<(u64, u32, u32)> = map_values::<block_slot>(&maps.block_slots, slots)
        .into_iter()
        .filter(|s| s.key != 0)
        .map(|s| (s.r.issue_ts, s.r.block.dev_major, s.r.block.dev_minor))
        .collect();
    let stack_slots = &maps.block_stack_slots;
    let slots = (0..stack_slots.max_entries()).map(|i| i.to_ne_bytes().to_vec());
    out.extend(
        map_values::<block_stack_slot>(stack_slots, slots)
            .into_iter()
            .filter(|s| s.key != 0)
            .map(|s| {
                // SAFETY: the slots hold block records, whose info is the block member.
                let b = unsafe { s.r.ev.info.block };
                (s.r.issue_ts, b.dev_major, b.dev_minor)
            }),
    );
    let bare = &maps.block_inflight_bare;
    out.extend(
        map_values::<block_request_bare>(bare, bare.keys())
            .into_iter()
            .map(|r| (r.issue_ts, r.block.dev_major, r.block.dev_minor)),
    );
    let full = &maps.block_inflight;
    out.extend(
        map_values::<block_request>(full, full.keys())
            .into_iter()
            .map(|r| {
                // SAFETY: the table holds block records, whose info is the block member.
                let b = unsafe { r.ev.info.block };
                (r.issue_ts, b.dev_major, b.dev_minor)
            }),
    );
    out.retain(|(issued, _, _)| *issued != 0);
    out
}

/// `PERF_FLAG_FD_CLOEXEC` from linux/perf_event.h.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// Open a cpu-clock sampling perf event on `cpu` for all tasks, every `period_ns`.
pub(crate) fn open_cpu_clock(cpu: u32, period_ns: u64) -> Result<OwnedFd> {
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

/// Change the sampling period of perf event `fd` ([`open_cpu_clock`]'s) to `period_ns`, from
/// its next sample on (`PERF_EVENT_IOC_PERIOD`).
pub(crate) fn set_period(fd: &OwnedFd, period_ns: u64) -> Result<()> {
    use std::os::fd::AsRawFd;
    // _IOW('$', 4, __u64)
    const PERF_EVENT_IOC_PERIOD: libc::c_ulong = 0x4008_2404;
    let period = period_ns;
    // SAFETY: the ioctl reads one u64 through the pointer, which we own.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PERF_EVENT_IOC_PERIOD as _,
            &period as *const u64,
        )
    };
    if rc < 0 {
        bail!(
            "PERF_EVENT_IOC_PERIOD({period_ns} ns): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// CPUs that are online now (from /sys/devices/system/cpu/online, e.g. `0-3,6`).
pub(crate) fn online_cpus() -> Result<Vec<u32>> {
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
pub(crate) fn add_target(skel: &StacksSkel<'_>, tgid: u32) -> Result<()> {
    skel.maps
        .targets
        .update(&tgid.to_ne_bytes(), &[1u8], MapFlags::ANY)
        .with_context(|| format!("adding pid {tgid} to the BPF target map"))
}

/// Trace processes named `name` when they exec (names are matched on their first 15 bytes,
/// as the kernel keeps them).
pub(crate) fn add_target_comm(skel: &StacksSkel<'_>, name: &str) -> Result<()> {
    skel.maps
        .target_comms
        .update(&comm_key(name), &[1u8], MapFlags::ANY)
        .with_context(|| format!("adding process name {name:?} to the BPF name map"))
}

/// The kernel's 16-byte, NUL-padded form of a process name.
pub(crate) fn comm_key(name: &str) -> [u8; 16] {
    let mut key = [0u8; 16];
    let bytes = name.as_bytes();
    let n = bytes.len().min(15);
    key[..n].copy_from_slice(&bytes[..n]);
    key
}

/// Per-CPU counts of undelivered events, indexed by `enum stacks_drop` (cpu, then cause).
pub(crate) fn drops_per_cpu(skel: &StacksSkel<'_>) -> Result<Vec<Vec<u64>>> {
    let map = &skel.maps.drops;
    let causes = abi::types::stacks_drop::STACKS_DROP_COUNT.0;
    let mut by_cpu: Vec<Vec<u64>> = Vec::new();
    for cause in 0..causes {
        let values = map
            .lookup_percpu(&cause.to_ne_bytes(), MapFlags::ANY)
            .context("reading the dropped-event counters")?
            .unwrap_or_default();
        by_cpu.resize(values.len(), vec![0; causes as usize]);
        for (cpu, v) in values.iter().enumerate() {
            let mut b = [0u8; 8];
            let n = v.len().min(8);
            b[..n].copy_from_slice(&v[..n]);
            by_cpu[cpu][cause as usize] = u64::from_ne_bytes(b);
        }
    }
    Ok(by_cpu)
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
