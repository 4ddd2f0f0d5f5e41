//! The recording loop: load and attach BPF, hand targets to the kernel, drain the ring buffer,
//! normalize user frames, and write batches (at least once a second) until told to stop.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use libbpf_rs::RingBufferBuilder;
use stacks_stream::{OutputStream, open_output_with, raw_schema};

use crate::cli::{Args, Target};
use crate::convert::{Converter, KernelNames};
use crate::host;
use crate::kernel::event::RawEvent;
use crate::kernel::globals::Global;
use crate::kernel::load::{self as bpf, AggTables, LoadOptions};
use crate::kinds::{self, KindData, Life, Runs, Setup};
use crate::output::rows::RowBuilder;
use crate::process::cgroups;
use crate::process::kallsyms::KernelSymbol;
use crate::process::kallsyms::KernelSymbols;
use crate::spec::EventSpec;

mod aggregate;
mod control;
mod drops;
mod stats;
mod targets;

use aggregate::Aggregation;
use drops::Drops;

use targets::{Targets, describe, running_pids, target_pids};

/// Take events from the ring buffer at least this often: bounds how long a sample waits before
/// its addresses are normalized (short-lived processes), at a few dozen wakeups a second.
const POLL_EVERY: Duration = Duration::from_millis(25);
/// Flush rows at least this often so a live pipeline sees data.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// ... or when this many rows are pending.
const FLUSH_ROWS: usize = 8192;

/// Ring buffer records copied out in the callback (one flat buffer, no allocation per event).
#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
    /// The buffers of the previous drain, emptied, kept for the next one (their memory is
    /// reused instead of freed and faulted in again).
    spare: Option<Buffers>,
}

/// A queue's record bytes and each record's (start, length).
type Buffers = (Vec<u8>, Vec<(usize, usize)>);

/// Entry point of the `stacks-record` binary.
pub fn run() -> Result<ExitCode> {
    let args = stacks_stream::cli::parse_args::<Args>("stacks-record");
    // From the start, so that a ^C while starting up (loading BPF, reading kernel symbols,
    // registering every process of -a) stops the recording cleanly instead of killing it with
    // nothing written. No SA_RESTART: the ring buffer poll wakes with EINTR.
    stacks_stream::sys::catch_signals(&[libc::SIGINT, libc::SIGTERM])
        .context("installing the SIGINT/SIGTERM handlers")?;
    let spec = args.spec()?;
    let target = args.target()?;
    let cgroups = match &target {
        Target::Cgroups(paths) => paths
            .iter()
            .map(|p| cgroups::resolve_target(p))
            .collect::<Result<Vec<_>>>()?,
        _ => Vec::new(),
    };

    kinds::check_kernel(&spec)?;
    // Each kind's part of the recording (its probes resolved, a missing file refused now).
    let mut data = KindData::default();
    let mut runs = Runs::new(&mut Setup {
        spec: &spec,
        target: &target,
        named: &target_pids(&target),
        spans: !args.no_spans,
        data: &mut data,
    })?;
    let offset_ns = host::boot_to_realtime_offset();
    let metadata = host::stream_metadata(&spec.normalized(), host::realtime_ns(), offset_ns);
    // Stack columns dictionary-encoded: each distinct captured stack is sent once.
    let rows = RowBuilder::new(Arc::new(raw_schema(metadata)))
        .context("building the raw stream schema")?;
    // Open the output before loading anything, so a terminal is refused at once.
    // Compressed when kept in a file: stack entries repeat module paths and build ids in every
    // frame. Not into a pipe, whose reader takes the bytes at once and only once: there zstd
    // cost the recorder 5% of its time and stacks-symbolize 2-3% of its own, beside pgbench.
    let compress = !stacks_stream::io::writes_to_pipe(args.output.as_deref());
    let mut out = open_output_with(args.output.as_deref(), rows.schema(), compress)?;

    let mut obj = MaybeUninit::uninit();
    let load = load_options(&args, &spec, &target, &cgroups);
    let mut skel = bpf::load(&mut obj, &load, |open| {
        kinds::configure(open, &spec)?;
        runs.configure(open)
    })?;
    runs.loaded(&mut skel)?;
    let agg = Aggregation::new(&mut skel);
    // The path generation of file records: the kernel sends a file's walked path once per
    // generation; user space starts a new one when it lets the paths it kept go (`FileNames`).
    let path_gen = Global::new(&mut skel, |b| &mut b.path_gen);
    let py_procs_any = Global::new(&mut skel, |b| &mut b.py_procs_any);
    let rings = describe_rings(&load);
    let tracepoints = bpf::attach_tracepoints(&mut skel)?;
    // A kind may hold the command after its exec, to change its new image before it runs
    // (a USDT probe's semaphore).
    let hold = runs.holds_exec();
    let mut targets = Targets::add(&skel, &target, hold, &runs.env())?;
    targets.cgroups = cgroups;
    let queue: Rc<RefCell<Queue>> = Rc::default();
    let rb = ring_buffer(&skel, &queue)?;

    // Ready to convert before the command runs (reading kernel symbols takes ~50 ms): a
    // short-lived command's memory map must be read while it lives (`d` stacks).
    let conv = converter(&args, &spec, data, offset_ns, &targets, py_procs_any)?;
    let running = running_pids(&target, &targets.cgroups);
    runs.started(&skel, &running)?;
    targets.go(&skel, &target, &running)?;
    let held = targets.child.as_mut().filter(|_| hold);
    let released = runs.released(&skel, held.as_ref().map(|c| c.pid));
    if let Some(c) = held {
        c.resume()?;
    }
    released?;
    eprintln!(
        "stacks-record: recording {} ({}){}; Ctrl-C stops",
        spec.normalized(),
        describe(&target),
        args.duration
            .map(|d| format!(" for {:.1}s", d.as_secs_f64()))
            .unwrap_or_default()
    );

    let control = args
        .control
        .as_deref()
        .map(control::Control::open)
        .transpose()?;
    let started = Instant::now();
    let mut rec = Recorder {
        skel: &skel,
        queue: &queue,
        rb: &rb,
        rows,
        conv,
        drops: Drops::default(),
        runs,
        started,
        agg,
        path_gen,
        rings,
        spec: spec.clone(),
        control,
        stats: args.stats.clone().map(|path| {
            let mut s = stats::Stats::new(path);
            s.maybe_write(true);
            s
        }),
        broken: None,
    };
    let mut child_status = rec.record(&mut out, &mut targets, &target, args.duration)?;

    // Let what is in flight land, stop every event source, have the kernel side hand over what it still holds (folded
    // short off-CPU intervals), then take everything still queued in the ring buffer.
    rec.runs.settle(rec.skel);
    rec.runs.stop()?;
    drop(tracepoints);
    let written = rec.drain_to_end(out)?;
    if let Some(path) = &args.output
        && let Some(owner) = stacks_stream::sys::SudoOwner::from_sudo("stacks-record")
    {
        owner.chown_path(path);
    }
    if let Some(c) = targets.child.as_mut()
        && child_status.is_none()
    {
        child_status = Some(c.terminate());
    }
    rec.summary(written);
    rec.runs.report();
    Ok(ExitCode::from(child_status.unwrap_or(0)))
}

/// A positive count from environment variable `name` (the tests' settings of the kernel
/// side), or `default`.
fn env_count(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// How the BPF object is loaded for `spec` on `target`.
fn load_options(
    args: &Args,
    spec: &EventSpec,
    target: &Target,
    cgroups: &[cgroups::CgroupTarget],
) -> LoadOptions {
    LoadOptions {
        all: matches!(target, Target::All { .. }),
        include_idle: matches!(target, Target::All { idle: true }),
        cgroups: cgroups.iter().map(|c| (c.id, c.level)).collect(),
        follow_forks: !args.no_children,
        ringbuf_bytes: args.ringbuf_mb << 20,
        rings: kinds::rings_used(spec),
        agg: kinds::aggregated_stacks(spec).map(|want| AggTables {
            entries: AGG_ENTRIES,
            stacks: AGG_STACKS,
            want,
        }),
        spans: !args.no_spans,
        ustack_bytes: args.ustack_bytes,
        kstack_cache: !args.kernel_stacks_unwound,
        // One served kernel stack in this many is unwound again and compared; 1: every use
        // compared and none served (the tests' ground truth for the cache of kernel stacks).
        // A re-check is a whole unwind by the kernel (~14 µs beside pgbench, ~20 frames of
        // ORC): at 1 in 64 they were a tenth of `on_switch`'s time there (docs/cost.md).
        kstack_recheck: env_count("STACKS_KSTACK_RECHECK", 1024),
        // Fewer slots for `block:n` requests in flight send requests whose slot is held to
        // the in-flight table (the tests).
        block_slots: env_count("STACKS_BLOCK_SLOTS", 1024),
    }
}

/// The converter of the recording: kernel names when kernel stacks are asked for, what the
/// kinds keep for decoding, the command's records held until its exec, Python frames (told to
/// the kernel side through `py_procs_any`).
fn converter(
    args: &Args,
    spec: &EventSpec,
    data: KindData,
    offset_ns: i64,
    targets: &Targets,
    py_procs_any: Option<Global>,
) -> Result<Converter> {
    let mut conv = Converter::new(
        offset_ns,
        spec.wants_kernel_stacks().then(kernel_names).flatten(),
    );
    conv.data = data;
    if let Some(child) = &targets.child {
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", child.pid))
            .with_context(|| format!("reading the name of the command's process {}", child.pid))?;
        conv.hold_until_exec(child.pid, bpf::comm_key(comm.trim_end_matches('\n')));
    }
    conv.python = crate::process::python::Python::new(!args.no_python);
    conv.python.tell_kernel(py_procs_any);
    Ok(conv)
}

/// The ring buffers in use and their sizes: `samples 16 MiB, io 16 MiB`.
fn describe_rings(load: &LoadOptions) -> String {
    let used: Vec<String> = bpf::RING_NAMES
        .iter()
        .zip(load.rings)
        .filter(|(_, used)| *used)
        .map(|(name, _)| format!("{name} {} MiB", load.ringbuf_bytes >> 20))
        .collect();
    used.join(", ")
}

/// The ring buffer reader, copying each record into `queue`.
fn ring_buffer<'a>(
    skel: &'a crate::kernel::abi::StacksSkel<'_>,
    queue: &Rc<RefCell<Queue>>,
) -> Result<libbpf_rs::RingBuffer<'a>> {
    let mut rbb = RingBufferBuilder::new();
    let m = &skel.maps;
    for (map, name) in [&m.events_samples, &m.events_io, &m.events_probes]
        .into_iter()
        .zip(bpf::RING_NAMES)
    {
        let queue = queue.clone();
        rbb.add(map, move |data: &[u8]| {
            let mut q = queue.borrow_mut();
            let start = q.bytes.len();
            q.bytes.extend_from_slice(data);
            q.spans.push((start, data.len()));
            0
        })
        .with_context(|| format!("setting up the {name} ring buffer"))?;
    }
    rbb.build().context("setting up the ring buffers")
}

/// The reading side of a recording: ring buffer → rows → output.
struct Recorder<'a, 'obj> {
    skel: &'a crate::kernel::abi::StacksSkel<'obj>,
    queue: &'a RefCell<Queue>,
    rb: &'a libbpf_rs::RingBuffer<'a>,
    rows: RowBuilder,
    conv: Converter,
    drops: Drops,
    /// The kinds' parts of the recording.
    runs: Runs,
    started: Instant,
    agg: Option<Aggregation>,
    path_gen: Option<Global>,
    /// The ring buffers in use, for the summary.
    rings: String,
    /// The `-e` recorded now (changed in place by `--control`).
    spec: EventSpec,
    control: Option<control::Control>,
    /// `--stats`: the rows that left the recorder.
    stats: Option<stats::Stats>,
    /// With `--stats`, the output's reader went away: the recording stops as if told to, what
    /// it holds still produced and counted (it dies with the stage after it, and the
    /// supervisor counts it lost), then the recorder ends quietly with this error.
    broken: Option<anyhow::Error>,
}

impl Recorder<'_, '_> {
    /// The event loop: convert and write until stopped, the time is up, or the targets are
    /// gone. Returns the command's exit status when it exited.
    fn record(
        &mut self,
        out: &mut OutputStream,
        targets: &mut Targets,
        target: &Target,
        duration: Option<Duration>,
    ) -> Result<Option<u8>> {
        let deadline = duration.map(|d| self.started + d);
        let mut last_flush = Instant::now();
        loop {
            // The kernel wakes us only when the buffer fills up (see wakeup_bytes in the BPF
            // code); otherwise the timeout comes first and we take what is there.
            let waiting = !self.queue.borrow().spans.is_empty();
            let rc = self
                .rb
                .poll_raw(if waiting { Duration::ZERO } else { POLL_EVERY });
            let rc = if rc >= 0 { self.rb.consume_raw() } else { rc };
            if rc < 0 && rc != -libc::EINTR {
                bail!(
                    "polling the ring buffer: {}",
                    std::io::Error::from_raw_os_error(-rc)
                );
            }
            drain(
                self.queue,
                &mut self.rows,
                &mut self.conv,
                &mut self.runs,
                self.rb,
                self.skel,
            );
            self.conv.exit_waits_drained(&mut self.rows);
            if let Some(agg) = &mut self.agg {
                let (conv, rows) = (&mut self.conv, &mut self.rows);
                agg.poll(self.skel, |r| push_record(conv, rows, r));
            }
            if let Some(g) = &self.path_gen {
                g.set(self.conv.path_generation());
            }
            // At every poll, not only at a flush (once a second): a process that exits first
            // takes what the kernel side said of it (a span label's check) with it.
            self.runs.poll(self.skel);
            self.take_control()?;
            arm_wanted(self.skel, &mut self.conv);
            if self.rows.len() >= FLUSH_ROWS || last_flush.elapsed() >= FLUSH_EVERY {
                self.write(out)?;
                last_flush = Instant::now();
                self.runs.flushed(self.skel);
            }
            if stacks_stream::sys::signal_caught()
                || self.broken.is_some()
                || deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Ok(None);
            }
            if let Some(status) = targets.ended(target) {
                return Ok(status);
            }
        }
    }

    /// The `-e` lines `--control` sent since the last poll, taken in place in order.
    fn take_control(&mut self) -> Result<()> {
        let Some(ctl) = &self.control else {
            return Ok(());
        };
        for line in ctl.take() {
            match control::in_place(&self.spec, &line) {
                Ok(new) => {
                    self.runs.retune(&new)?;
                    self.spec = new;
                    eprintln!(
                        "stacks-record: control: recording {} from now on (in place)",
                        self.spec.normalized()
                    );
                }
                Err(why) => eprintln!(
                    "stacks-record: warning: control: `{line}` refused: {why}; recording {} as before",
                    self.spec.normalized()
                ),
            }
        }
        Ok(())
    }

    /// Append the rows of the kinds' tables (counting probes) and the lost-event rows, and
    /// write what is pending.
    fn write(&mut self, out: &mut OutputStream) -> Result<()> {
        self.runs.poll(self.skel);
        self.conv.forget_exited();
        stacks_stream::mounts::forget_idle();
        if let Some(agg) = &mut self.agg {
            agg.flip();
        }
        kind_tables(self.skel, &mut self.runs, &mut self.conv, &mut self.rows);
        self.drops
            .push_rows(self.skel, &mut self.rows, &mut self.conv.counts)?;
        if !self.rows.is_empty() {
            let batch = self
                .conv
                .finish_batch(&mut self.rows)
                .context("building a batch of the raw stream")?;
            if let Some(s) = &mut self.stats {
                s.count(&batch);
            }
            if self.broken.is_none()
                && let Err(e) = out.write(&batch)
            {
                let e = anyhow::Error::from(e);
                match &mut self.stats {
                    Some(s) if stacks_stream::cli::is_broken_pipe(&e) => {
                        s.maybe_write(true);
                        self.broken = Some(e);
                    }
                    Some(s) => {
                        s.maybe_write(true);
                        return Err(e);
                    }
                    None => return Err(e),
                }
            }
        }
        if let Some(s) = &mut self.stats {
            s.maybe_write(false);
        }
        Ok(())
    }

    /// After the event sources are detached: take what the kernel side still holds and what
    /// waits in the ring buffer, write it, and end the stream. Returns the rows written.
    fn drain_to_end(&mut self, mut out: OutputStream) -> Result<u64> {
        bpf::flush_pending(self.skel)?;
        let rc = self.rb.consume_raw();
        if rc < 0 && rc != -libc::EINTR {
            bail!(
                "draining the ring buffer: {}",
                std::io::Error::from_raw_os_error(-rc)
            );
        }
        while !self.queue.borrow().spans.is_empty() {
            drain(
                self.queue,
                &mut self.rows,
                &mut self.conv,
                &mut self.runs,
                self.rb,
                self.skel,
            );
        }
        if let Some(agg) = &mut self.agg {
            let (conv, rows) = (&mut self.conv, &mut self.rows);
            agg.finish(self.skel, |r| push_record(conv, rows, r));
        }
        // Records held for perf maps still to come: converted with what the maps say now.
        self.conv.release_all(&mut self.rows);
        // Intervals still open (spans entered): a row each, with no duration.
        self.conv.end_intervals(None, &mut self.rows);
        for (cause, n) in self.runs.lost(self.skel) {
            self.drops
                .push_found(&cause, n, &mut self.rows, &mut self.conv.counts);
        }
        let now = host::realtime_ns();
        for rest in kinds::remainders(self.skel) {
            self.conv.push_remainder(&mut self.rows, now, rest);
        }
        self.write(&mut out)?;
        if let Some(e) = self.broken.take() {
            if let Some(s) = &mut self.stats {
                s.ended();
            }
            return Err(e);
        }
        let finished = out.finish();
        if let Some(s) = &mut self.stats {
            s.ended();
        }
        Ok(finished?)
    }

    /// The summary line.
    fn summary(&self, written: u64) {
        let stats = bpf::prog_stats(self.skel);
        let skipped: Vec<String> = stats
            .iter()
            .filter(|p| p.skipped > 0)
            .map(|p| format!("{} {}", p.name, p.skipped))
            .collect();
        if !skipped.is_empty() {
            eprintln!(
                "stacks-record: warning: the kernel skipped BPF program runs (already running on that CPU): {}",
                skipped.join(", ")
            );
        }
        if bpf::run_stats_enabled() {
            // The recorder's cost in the traced threads, which its own CPU time does not show.
            let runs: Vec<String> = stats
                .iter()
                .filter(|p| p.runs > 0)
                .map(|p| format!("{} {} runs, {} ns each", p.name, p.runs, p.run_ns / p.runs))
                .collect();
            eprintln!(
                "stacks-record: BPF program runs (kernel.bpf_stats_enabled): {}",
                runs.join("; ")
            );
        }
        let counts = &self.conv.counts;
        eprintln!(
            "stacks-record: {} rows: {} samples from {} processes in {:.1}s, {} distinct stacks; {}; events: {}; stack capture errors: {} kernel, {} user; {} user frames not normalized{}",
            written,
            kinds::samples(&counts.by_kind),
            counts.pids.len(),
            self.started.elapsed().as_secs_f64(),
            self.rows.distinct_stacks(),
            self.drops.describe(),
            self.conv.describe_counts(),
            counts.kstack_errors,
            counts.ustack_errors,
            self.conv.norm.failed_frames,
            [
                (
                    counts.repeated_stacks,
                    "state rows repeating stacks of threads that had not run"
                ),
                (counts.malformed, "malformed records"),
                (counts.span_rows, "rows in `tracing` spans"),
                (
                    self.conv.unknown_paths(),
                    "rows whose file path was sent before and not kept",
                ),
            ]
            .into_iter()
            .chain(counts.notes.iter().map(|(what, n)| (*n, *what)))
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("; {n} {what}"))
            .collect::<String>()
        );
        eprintln!(
            "stacks-record: ring buffers: {}{}",
            self.rings,
            self.agg
                .as_ref()
                .filter(|a| a.entries > 0)
                .map(|a| format!("; {} rows of IO events aggregated in the kernel", a.entries))
                .unwrap_or_default()
        );
        let n = &self.conv.norm;
        if n.map_reads + n.fresh_map_reads > 0 {
            eprintln!(
                "stacks-record: memory maps read: {} for the kernel side, {} for addresses outside the map read before",
                n.map_reads, n.fresh_map_reads
            );
        }
        let skipped = n.perf_maps.skipped.describe();
        if n.perf_maps.maps_found > 0 || n.perf_maps.bad_lines > 0 || !skipped.is_empty() {
            eprintln!(
                "stacks-record: perf maps: {} read, {} JIT frames named, {} bad lines skipped{}{}",
                n.perf_maps.maps_found,
                n.jit_frames,
                n.perf_maps.bad_lines,
                if skipped.is_empty() {
                    String::new()
                } else {
                    format!("; {skipped}")
                },
                match (self.conv.held.held, self.conv.held.given_up) {
                    (0, _) => String::new(),
                    (h, 0) => format!("; {h} records held until their map was written"),
                    (h, g) => format!(
                        "; {h} records held until their map was written, {g} processes' maps waited for too long"
                    ),
                }
            );
        }
        self.conv.python.report();
        let u = &self.conv.unwinders.counts;
        if u.stacks > 0 {
            let w = &self.conv.exit_waits;
            eprintln!(
                "stacks-record: d stacks: {} unwound, {} by CFI to the root, {} continued by frame pointers, {} by frame pointers only, {} truncated{}",
                u.stacks,
                u.complete,
                u.spliced,
                u.fp_only,
                u.truncated,
                [
                    (
                        u.no_map,
                        "of processes that exited before their map was read".to_string()
                    ),
                    (
                        u.from_snapshot,
                        format!(
                            "processes unwound from their exit snapshot ({} records waited for their exit)",
                            w.held
                        )
                    ),
                    (
                        u.snapshot_files_gone,
                        "files of exit snapshots deleted or replaced before they were read"
                            .to_string()
                    ),
                    (
                        u.cfi_over_budget,
                        "files whose CFI was too large to read, alone or beside the CFI held (unwound by frame pointers)"
                            .to_string()
                    ),
                    (
                        u.cfi_evicted,
                        "times the CFI of a file no process held was dropped for another's"
                            .to_string()
                    ),
                    (
                        w.given_up_procs,
                        "processes whose exit record was waited for in vain".to_string()
                    ),
                ]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!(", {n} {what}"))
                .collect::<String>()
            );
        }
    }
}

/// Convert what was taken from the ring buffer. Converting is slower than copying out of the
/// kernel, so during a burst the ring buffer is emptied into our queue between chunks (up to
/// [`QUEUE_MAX_BYTES`]): the kernel side drops events only when both are full.
fn drain(
    queue: &RefCell<Queue>,
    rows: &mut RowBuilder,
    conv: &mut Converter,
    runs: &mut Runs,
    rb: &libbpf_rs::RingBuffer<'_>,
    skel: &crate::kernel::abi::StacksSkel<'_>,
) {
    let q = {
        let mut cur = queue.borrow_mut();
        let (bytes, spans) = cur.spare.take().unwrap_or_default();
        Queue {
            bytes: std::mem::replace(&mut cur.bytes, bytes),
            spans: std::mem::replace(&mut cur.spans, spans),
            spare: None,
        }
    };
    for (i, &(start, len)) in q.spans.iter().enumerate() {
        match RawEvent::from_bytes(&q.bytes[start..start + len]) {
            Ok(e) => {
                // What the record says of its process's life (`kinds::Life`).
                let life = kinds::effects(e.h.kind).life;
                if life == Life::Exits {
                    // Records made from the kinds' tables (counted probe hits) are converted
                    // while the process's address maps are still known: before its exit drops
                    // them. (Not before an exec: the hits counted by then may be of the new
                    // image, whose files the exec record makes known.)
                    kind_tables(skel, runs, conv, rows);
                }
                if life == Life::Execs {
                    // A new image: the kinds look at it (its span labels, if it has a thread
                    // context).
                    runs.exec(skel, e.h.pid);
                    conv.python.forget(skel, e.h.pid);
                    conv.python.look(skel, e.h.pid);
                } else if e.h.ustack_len >= 0 && life != Life::Exits {
                    // Any event with a user stack: a process running before the recording
                    // (or whose exec was not seen) is found at its first stacks.
                    conv.python.look(skel, e.h.pid);
                    if conv
                        .norm
                        .should_arm(e.h.pid, e.ustack_resolved(), e.h.uwindow > 0)
                        && arm_maps(skel, e.h.pid)
                    {
                        conv.norm.read_map(e.h.pid);
                        // A `d` stack's unwinding needs the map too: once it is read, the
                        // process's exit need not carry its exit snapshot.
                        if e.h.uwindow > 0 && conv.unwinders.read_now(e.h.pid) {
                            no_exit_snapshot(skel, e.h.pid);
                        }
                    }
                } else if life == Life::Exits {
                    // Its samples came before, through the same ring: its Python state goes.
                    conv.python.forget(skel, e.h.pid);
                }
                if !conv.hold(&e, &q.bytes[start..start + len], rows) {
                    conv.push(&e, rows)
                }
            }
            Err(_) => conv.counts.malformed += 1,
        }
        if i % 256 == 255 && queue.borrow().bytes.len() < QUEUE_MAX_BYTES {
            let _ = rb.consume_raw();
        }
    }
    // Kept for the next drain unless a burst made them large.
    let Queue {
        mut bytes,
        mut spans,
        ..
    } = q;
    if bytes.capacity() <= SPARE_MAX_BYTES {
        bytes.clear();
        spans.clear();
        queue.borrow_mut().spare = Some((bytes, spans));
    }
}

/// Convert the records the kinds make from their kernel tables (`Run::records`: the counting
/// probes' table).
fn kind_tables(
    skel: &crate::kernel::abi::StacksSkel<'_>,
    runs: &mut Runs,
    conv: &mut Converter,
    rows: &mut RowBuilder,
) {
    runs.records(skel, &mut |record| push_record(conv, rows, record));
}

/// Tell the kernel side that `pid`'s memory map is read (before it is: no mapping made in
/// between is missed): its user frames come as plain addresses from now on.
/// False when it is gone (or the map is full): nothing to read.
fn arm_maps(skel: &crate::kernel::abi::StacksSkel<'_>, pid: u32) -> bool {
    use libbpf_rs::MapCore;
    crate::process::target::is_alive(pid)
        && skel
            .maps
            .maps_read
            .update(&pid.to_ne_bytes(), &[1], libbpf_rs::MapFlags::ANY)
            .is_ok()
}

/// Read the memory maps the kernel side asked for (`maps_wanted`): processes whose user stacks
/// it resolved itself, in records that may never come (folded switches), are armed as if one
/// had.
fn arm_wanted(skel: &crate::kernel::abi::StacksSkel<'_>, conv: &mut Converter) {
    use libbpf_rs::MapCore;
    let wanted: Vec<Vec<u8>> = skel.maps.maps_wanted.keys().collect();
    for key in wanted {
        let _ = skel.maps.maps_wanted.delete(&key);
        let Ok(pid) = <[u8; 4]>::try_from(key.as_slice()).map(u32::from_ne_bytes) else {
            continue;
        };
        if conv.norm.should_arm(pid, true, false) && arm_maps(skel, pid) {
            conv.norm.read_map(pid);
        }
    }
}

/// Tell the kernel side that `pid`'s map is read for its `d` stacks: its exit record need not
/// carry an exit snapshot (`exit_snapshot`, bpf/common.bpf.h).
fn no_exit_snapshot(skel: &crate::kernel::abi::StacksSkel<'_>, pid: u32) {
    use libbpf_rs::MapCore;
    // Not there (another record took it out, or the process has not been marked): nothing to do.
    let _ = skel.maps.exit_snapshot.delete(&pid.to_ne_bytes());
}

/// Convert one record made in user space (from a counting or aggregation table).
fn push_record(conv: &mut Converter, rows: &mut RowBuilder, record: &[u8]) {
    match RawEvent::from_bytes(record) {
        Ok(e) => conv.push(&e, rows),
        Err(_) => conv.counts.malformed += 1,
    }
}

/// Entries of each generation's aggregation table: distinct (thread, stacks, file or
/// connection, latency bucket) keys a second (~400 bytes each, preallocated: 6.5 MB).
const AGG_ENTRIES: u32 = 16384;
/// Entries of each generation's stack tables: distinct stacks a second (a user stack takes
/// 4 KiB: 16 MiB a generation; a stack whose slot is taken is summed without it).
const AGG_STACKS: u32 = 4096;

/// Largest record buffer kept between drains.
const SPARE_MAX_BYTES: usize = 64 << 20;

/// Most bytes of records held in user space waiting for conversion: past it a burst waits in
/// the ring buffers, where the kernel sums IO events instead of user space holding them.
const QUEUE_MAX_BYTES: usize = 64 << 20;

/// Kernel symbols for naming kernel frames at record time, when kallsyms is readable.
fn kernel_names() -> Option<Box<dyn KernelNames>> {
    match KernelSymbols::load() {
        Ok(k) => Some(Box::new(k)),
        Err(e) => {
            eprintln!("stacks-record: warning: kernel frames stay unnamed: {e}");
            None
        }
    }
}

impl KernelNames for KernelSymbols {
    fn name(&self, addr: u64) -> Option<KernelSymbol> {
        self.resolve(addr)
            .map(|(symbol, offset, module)| KernelSymbol {
                symbol: symbol.to_string(),
                offset,
                module: module.map(str::to_string),
            })
    }
}
