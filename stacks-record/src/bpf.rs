//! Loading the BPF skeleton, attaching programs, and the perf events that drive CPU samples.

pub mod skel {
    #![allow(clippy::all, missing_docs, non_camel_case_types, unused)]
    include!(concat!(env!("OUT_DIR"), "/stacks.skel.rs"));
}

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use skel::types::rss_state;
use skel::{StacksSkel, StacksSkelBuilder};

use crate::spec::{EventSpec, SWITCH_DWARF};

/// What the BPF side needs to know before load.
pub struct LoadOptions<'a> {
    pub spec: &'a EventSpec,
    pub all: bool,
    pub include_idle: bool,
    pub follow_forks: bool,
    pub ringbuf_bytes: u32,
    /// Read the `tracing` span of events (processes in `span_procs`).
    pub spans: bool,
    /// Bytes of user stack copied for `d` stacks.
    pub ustack_bytes: u32,
}

/// How a BPF program is started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// A tracepoint: by [`attach_tracepoints`].
    Tracepoint,
    /// The CPU sampler, per CPU ([`open_cpu_clock`]) by the recording loop.
    PerCpu,
    /// The end-of-recording task iterator: by [`flush_pending`].
    AtEnd,
    /// The thread-state task iterator, run HZ times a second by [`StateSampler`].
    Sampler,
    /// Attached once per probe of `-e` by [`crate::probes::attach::attach`].
    Probe,
    /// Attached to each traced executable with tracing-stacks' USDT probes by
    /// [`crate::spans::Spans::register`].
    Span,
}

/// Every BPF program of the skeleton's `progs` (open or loaded), through its typed field: the
/// `-e` event it serves (`None`: always loaded, process lifecycle) and how it starts. Gives
/// `&mut` to each field, as `set_autoload` needs.
macro_rules! programs {
    ($progs:expr) => {
        [
            (None, Start::Tracepoint, &mut $progs.on_exec),
            (None, Start::Tracepoint, &mut $progs.on_fork),
            (None, Start::Tracepoint, &mut $progs.on_exit),
            (Some("profile"), Start::PerCpu, &mut $progs.on_cpu_sample),
            (Some("switch"), Start::Tracepoint, &mut $progs.on_switch),
            (Some("switch"), Start::Tracepoint, &mut $progs.on_wakeup),
            (Some("switch"), Start::AtEnd, &mut $progs.flush_tasks),
            (
                Some(SWITCH_DWARF),
                Start::Tracepoint,
                &mut $progs.switch_sys_exit,
            ),
            (Some("rss"), Start::Tracepoint, &mut $progs.on_rss_stat),
            (Some("block"), Start::Tracepoint, &mut $progs.on_block_start),
            (Some("block"), Start::Tracepoint, &mut $progs.on_block_issue),
            (
                Some("block"),
                Start::Tracepoint,
                &mut $progs.on_block_complete,
            ),
            (Some("vfs"), Start::Tracepoint, &mut $progs.vfs_enter),
            (Some("vfs"), Start::Tracepoint, &mut $progs.vfs_exit),
            (Some("net"), Start::Tracepoint, &mut $progs.on_sock_send),
            (Some("net"), Start::Tracepoint, &mut $progs.on_sock_recv),
            (
                Some("state"),
                Start::Tracepoint,
                &mut $progs.state_sys_enter,
            ),
            (Some("state"), Start::Tracepoint, &mut $progs.state_sys_exit),
            (Some("state"), Start::Sampler, &mut $progs.sample_states),
            (Some("tp"), Start::Probe, &mut $progs.on_probe_tp),
            (Some("uprobe"), Start::Probe, &mut $progs.on_probe_uprobe),
            (
                Some("uretprobe"),
                Start::Probe,
                &mut $progs.on_probe_uretprobe,
            ),
            (Some("usdt"), Start::Probe, &mut $progs.on_probe_usdt),
            (Some("span"), Start::Span, &mut $progs.on_span_enter),
            (Some("span"), Start::Span, &mut $progs.on_span_exit),
        ]
    };
}

/// Kernel tracepoints each event needs. Every program attaches as `tp_btf`, by name through
/// the kernel's BTF: nothing needs tracefs (not mounted on a fresh boot nor in most
/// containers). `None`: always loaded (process lifecycle).
const BTF_TRACEPOINTS: &[(Option<&str>, &str)] = &[
    (None, "sched_process_exec"),
    (None, "sched_process_fork"),
    (None, "sched_process_exit"),
    (Some("switch"), "sched_switch"),
    (Some("switch"), "sched_wakeup"),
    (Some(SWITCH_DWARF), "sys_exit"),
    (Some("rss"), "rss_stat"),
    (Some("block"), "block_io_start"),
    (Some("block"), "block_rq_issue"),
    (Some("block"), "block_rq_complete"),
    (Some("vfs"), "sys_enter"),
    (Some("vfs"), "sys_exit"),
    (Some("net"), "sock_send_length"),
    (Some("net"), "sock_recv_length"),
    (Some("state"), "sys_enter"),
    (Some("state"), "sys_exit"),
];

/// Refuse events the running kernel cannot record, naming what is missing.
pub fn check_kernel(spec: &EventSpec) -> Result<()> {
    let wanted = spec.names();
    let btf = libbpf_rs::btf::Btf::from_vmlinux()
        .context("reading the kernel's BTF (/sys/kernel/btf/vmlinux): stacks-record needs a kernel built with BTF")?;
    let mut missing = Vec::new();
    for (event, tp) in BTF_TRACEPOINTS {
        if event.is_none_or(|e| wanted.contains(&e))
            && btf
                .type_by_name::<libbpf_rs::btf::BtfType<'_>>(&format!("btf_trace_{tp}"))
                .is_none()
        {
            let what = event.unwrap_or("process lifecycle");
            missing.push(format!(
                "{what} (the kernel's BTF has no tracepoint {tp}: no btf_trace_{tp})"
            ));
        }
    }
    if !missing.is_empty() {
        bail!(
            "this kernel ({}) cannot record: {}",
            crate::host::kernel_release(),
            missing.join(", ")
        );
    }
    Ok(())
}

/// Open, configure and load the BPF object.
pub fn load<'obj>(
    obj: &'obj mut MaybeUninit<OpenObject>,
    opts: &LoadOptions<'_>,
) -> Result<StacksSkel<'obj>> {
    let spec = opts.spec;
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
    rodata.read_spans = opts.spans;
    rodata.ustack_window = opts.ustack_bytes;
    rodata.ringbuf_half = u64::from(opts.ringbuf_bytes / 2);
    rodata.profile_stacks = spec.profile.map_or(0, |p| p.stacks.mask());
    rodata.switch_stacks = spec.switch.map_or(0, |s| s.stacks.mask());
    rodata.switch_min_ns = spec.switch.map_or(0, |s| s.min_ns);
    rodata.rss_stacks = spec.rss.map_or(0, |r| r.stacks.mask());
    rodata.rss_every = spec.rss.map_or(1, |r| r.every);
    rodata.block_stacks = spec.block.map_or(0, |p| p.stacks.mask());
    rodata.vfs_stacks = spec.vfs.map_or(0, |p| p.stacks.mask());
    rodata.net_stacks = spec.net.map_or(0, |p| p.stacks.mask());
    rodata.state_stacks = spec.state.map_or(0, |s| s.stacks.mask());
    rodata.state_period_ns = spec.state.map_or(0, |s| s.period_ns());
    rodata.span_stacks = spec.span.map_or(0, |s| s.stacks.mask());
    rodata.wakeup_bytes = u64::from(opts.ringbuf_bytes / 8);
    crate::probes::configure(&mut open, &spec.probes)?;
    open.maps
        .events
        .set_max_entries(opts.ringbuf_bytes)
        .context("sizing the ring buffer")?;
    let wanted = spec.names();
    let listed = programs!(open.progs).len();
    for (event, _, prog) in programs!(open.progs) {
        prog.set_autoload(event.is_none_or(|e| wanted.contains(&e)));
    }
    let in_object = open.open_object().progs().count();
    if in_object != listed {
        bail!(
            "the BPF object has {in_object} programs but stacks-record knows {listed}: a program of bpf/stacks.bpf.c is missing from programs! in stacks-record/src/bpf.rs"
        );
    }
    open.load().context(
        "loading BPF programs (stacks-record needs root, or CAP_BPF + CAP_PERFMON, and a kernel with BTF)",
    )
}

/// Attach every loaded tracepoint program (lifecycle and the requested events). CPU samples
/// are attached per CPU with [`open_cpu_clock`]; the end-of-recording flush runs separately.
pub fn attach_tracepoints(skel: &mut StacksSkel<'_>) -> Result<Vec<Link>> {
    let mut links = Vec::new();
    for (_, start, prog) in programs!(skel.progs) {
        if !prog.autoload() || start != Start::Tracepoint {
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
pub struct ProgStats {
    pub name: String,
    /// Runs and their total time: counted only while `kernel.bpf_stats_enabled` is 1.
    pub runs: u64,
    pub run_ns: u64,
    /// Runs the kernel skipped (its recursion and concurrency guard: the program was already
    /// running on that CPU).
    pub skipped: u64,
}

/// The counters of every loaded program.
pub fn prog_stats(skel: &StacksSkel<'_>) -> Vec<ProgStats> {
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
pub fn run_stats_enabled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() == "1")
}

/// End of a recording: emit what the kernel side still holds (folded short off-CPU intervals
/// of every thread) into the ring buffer. Call after detaching the event programs.
pub fn flush_pending(skel: &StacksSkel<'_>) -> Result<()> {
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

/// The `state` event's driver: a thread running the thread-state task iterator HZ times a
/// second (each run is one pass over every task; the BPF side stamps its rows with the pass's
/// start) until [`StateSampler::stop`].
pub struct StateSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    /// The iterator's link: outlives the thread (stopped first, see Drop).
    _link: Link,
}

impl StateSampler {
    /// Start sampling when the `state` event was asked for.
    pub fn start(skel: &StacksSkel<'_>, spec: &EventSpec) -> Result<Option<Self>> {
        let Some(state) = spec.state else {
            return Ok(None);
        };
        let link = skel
            .progs
            .sample_states
            .attach_iter_with_opts(libbpf_rs::IterOpts::None)
            .context("attaching the thread-state task iterator")?;
        let link_fd = link.as_fd().as_raw_fd();
        let period = Duration::from_nanos(state.period_ns());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("state-sampler".into())
            .spawn(move || sample_passes(link_fd, period, &flag))
            .context("starting the thread-state sampler thread")?;
        Ok(Some(Self {
            stop,
            thread: Some(thread),
            _link: link,
        }))
    }

    /// Stop after the pass in progress; an error of the sampling thread is returned.
    pub fn stop(mut self) -> Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the thread-state sampler thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for StateSampler {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// Run the iterator of link `link_fd` every `period` until `stop`; late passes are skipped,
/// not run in a burst.
fn sample_passes(link_fd: i32, period: Duration, stop: &AtomicBool) -> Result<()> {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: link_fd is the iterator link's fd, kept open by StateSampler until this
        // thread has ended.
        let fd = unsafe { libbpf_rs::libbpf_sys::bpf_iter_create(link_fd) };
        if fd < 0 {
            bail!(
                "starting a thread-state pass: {}",
                std::io::Error::from_raw_os_error(-fd)
            );
        }
        // SAFETY: the kernel just returned this fd to us.
        let mut pass = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        std::io::copy(&mut pass, &mut std::io::sink()).context("running a thread-state pass")?;
        next += period;
        let now = Instant::now();
        if next <= now {
            let behind = (now - next).as_nanos() / period.as_nanos().max(1) + 1;
            next += period * u32::try_from(behind).unwrap_or(u32::MAX);
        }
        std::thread::sleep(next - now);
    }
    Ok(())
}

/// Per-process RSS growth not yet emitted (tgid and its `struct rss_state`), taken out of the
/// map.
pub fn take_rss_remainders(skel: &StacksSkel<'_>) -> Vec<(u32, rss_state)> {
    let map = &skel.maps.rss_store;
    let keys: Vec<Vec<u8>> = map.keys().collect();
    let mut out = Vec::new();
    for k in keys {
        if let Ok(Some(v)) = map.lookup(&k, MapFlags::ANY)
            && let Ok(key) = <[u8; 4]>::try_from(k.as_slice())
            && v.len() == size_of::<rss_state>()
        {
            // SAFETY: the value has exactly rss_state's size, and rss_state (generated from
            // the C struct) is plain integers: every bit pattern is a valid value.
            let state = unsafe { std::ptr::read_unaligned(v.as_ptr().cast::<rss_state>()) };
            if state.events > 0 {
                out.push((u32::from_ne_bytes(key), state));
            }
        }
        let _ = map.delete(&k);
    }
    out
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

/// Per-CPU counts of undelivered events, indexed by `enum stacks_drop` (cpu, then cause).
pub fn drops_per_cpu(skel: &StacksSkel<'_>) -> Result<Vec<Vec<u64>>> {
    let map = &skel.maps.drops;
    let causes = skel::types::stacks_drop::STACKS_DROP_COUNT.0;
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
