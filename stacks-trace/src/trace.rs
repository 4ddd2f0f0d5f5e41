//! Rows in, trace events out: each row is written as soon as it is read (memory holds one
//! batch, per-thread state and the stack frame table), and the `stackFrames` table, which needs
//! every stack, goes after `traceEvents` at the end.
//!
//! Tracks (Chrome Trace Event Format, as Perfetto UI and speedscope read it):
//! * each thread (`pid`, `tid`, named by the `thread` column; processes by `comm`) holds
//!   alternating on-CPU and off-CPU complete (`X`) slices from `switch` rows, CPU samples and
//!   process events (`exec`, `fork`, `exit`) as instants (`i`);
//! * each thread's IO lane (tid + [`IO_LANE`], named `THREAD io`) holds its `vfs` calls (`X`)
//!   and `net` sends/receives, which may straddle the thread's on/off-CPU slices;
//! * `block` requests are async slices (`b`/`e`, category `block`): several may be in flight;
//!   one starts at submission (`time`) and lasts `duration` (driver issue → completion; the
//!   wait between submission and issue is not in the row, so the slice ends that much early);
//!   `uring` requests too (category `uring`, on the submitter's track, with their `mode`; an
//!   io-wq worker's `block` requests name their `submitter`); a row of `uring` requests
//!   folded under MIN (`count` > 1) is an instant `uring OP ×N` with `requests`, `total_ns`;
//! * `vfs` calls start at `time` (the system call's entry) and last `duration`; a row the
//!   kernel summed (`count` > 1) is an instant `SYSCALL ×N` with its `calls` and `total_ns`;
//! * `wake` rows are instants `wakeup` on the waker's track, naming the woken thread;
//! * `rss` is a counter (`C`) per process;
//! * `alloc` rows are instants `alloc` and `free` with the block's address and size (and an
//!   allocation's weight), in category `alloc` ([`alloc`]);
//! * each thread's state lane (tid + [`STATE_LANE`], named `THREAD state`) holds its `state`
//!   samples as slices, one per run of samples in the same state, system call and file
//!   ([`state_lane`]);
//! * each thread's span lane (tid + [`SPAN_LANE`], named `THREAD spans`) holds its `span` rows
//!   (`-e span`): a slice per stay in a `tracing` span, nested as the spans were; every other
//!   event names the span it happened in in its args.

mod alloc;
pub(crate) mod state_lane;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch};
use arrow_schema::Schema;
use stacks_stream::dict::EntryCache;
use stacks_stream::frames::{SHORT_OFFCPU, StackFrames};
use stacks_stream::kinds::{self, Lane};
use stacks_stream::time::rfc3339;
use stacks_stream::{col, kind, meta};

use crate::Error;
use crate::columns::{Columns, Layout};
use crate::json::Obj;
use crate::stack_frames::FrameTable;
use crate::window::{Resolved, Window};

/// Added to a tid to make the tid of its IO lane (real tids stay below 2^22).
pub const IO_LANE: i64 = 1 << 30;
/// Added to a tid to make the tid of its span lane.
pub(crate) const SPAN_LANE: i64 = 3 << 30;
pub use state_lane::STATE_LANE;

/// What to convert, and into what.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub window: Window,
    pub format: Format,
}

/// The trace format written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Chrome Trace Event JSON (Perfetto UI, chrome://tracing, speedscope).
    #[default]
    Json,
    /// A native Perfetto protobuf trace (Perfetto UI, trace_processor): interned stacks,
    /// thread states, wakeup flows, weighted samples.
    Perfetto,
}

#[derive(Debug, Default)]
struct Thread {
    pid: i64,
    /// When the thread came back on CPU after its last recorded off-CPU interval.
    back_on_cpu: Option<i64>,
    /// The latest time of any of its rows.
    last_seen: i64,
}

/// Writes a trace: create with [`Tracer::new`], feed with [`Tracer::push`], end with
/// [`Tracer::finish`].
pub(crate) struct Tracer<W: Write> {
    out: W,
    output: String,
    input: String,
    layout: Layout,
    window: Window,
    /// Timestamps are written relative to this (the recording start, else the first row), so
    /// viewers holding them in doubles keep nanoseconds.
    origin: Option<i64>,
    resolved: Option<Resolved>,
    buf: String,
    events: u64,
    frames: FrameTable,
    /// Per stack of a dictionary-encoded `stack` column, once per stream: its leaf node in
    /// `frames`, and its frame names.
    entry_ids: EntryCache<Option<u64>>,
    entry_names: EntryCache<Option<Arc<[String]>>>,
    process_names: HashMap<i64, String>,
    thread_names: HashMap<i64, String>,
    threads: HashMap<i64, Thread>,
    next_async_id: u64,
    state_runs: state_lane::StateRuns,
    /// Lane tracks already named (tid + lane offset).
    lanes_named: HashSet<i64>,
}

impl<W: Write> Tracer<W> {
    /// Check `schema` and write the trace header to `out` (`output` names it in errors).
    pub(crate) fn new(
        schema: &Schema,
        input: &str,
        out: W,
        output: &str,
        options: &Options,
    ) -> Result<Self, Error> {
        let layout = Layout::new(schema, input)?;
        let md = schema.metadata();
        let origin = md
            .get(meta::START_NS)
            .and_then(|s| s.trim().parse::<i64>().ok());
        let mut t = Self {
            out,
            output: output.into(),
            input: input.into(),
            layout,
            window: options.window,
            origin,
            resolved: origin.map(|o| options.window.resolve(o)),
            buf: String::with_capacity(1 << 16),
            events: 0,
            frames: FrameTable::default(),
            entry_ids: EntryCache::default(),
            entry_names: EntryCache::default(),
            process_names: HashMap::new(),
            thread_names: HashMap::new(),
            threads: HashMap::new(),
            next_async_id: 1,
            state_runs: state_lane::StateRuns::default(),
            lanes_named: HashSet::new(),
        };
        t.buf.push_str("{\"displayTimeUnit\":\"ns\",\"otherData\":");
        let mut o = Obj::new(&mut t.buf);
        for &(name, key) in meta::SHOWN {
            if let Some(v) = md.get(key) {
                o.str(name, v);
            }
        }
        if let Some(start) = origin {
            o.str("start", &rfc3339(start))
                .str("start_ns", &start.to_string());
        }
        o.str(
            "timestamps",
            "ts and dur are microseconds since start (the recording start, else the first row)",
        );
        o.end();
        t.buf.push_str(",\"traceEvents\":[\n");
        t.flush_buf()?;
        Ok(t)
    }

    fn flush_buf(&mut self) -> Result<(), Error> {
        self.out
            .write_all(self.buf.as_bytes())
            .map_err(|source| Error::Write {
                path: self.output.clone(),
                source,
            })?;
        self.buf.clear();
        Ok(())
    }

    /// Start an event object: `{"ph":…,"pid":…,"tid":…,"ts":…` (ts relative to the origin).
    fn event(&mut self, ph: &str, pid: i64, tid: i64, ts: i64) -> Obj<'_> {
        if self.events > 0 {
            self.buf.push_str(",\n");
        }
        self.events += 1;
        let origin = self.origin.unwrap_or(0);
        let mut o = Obj::new(&mut self.buf);
        o.str("ph", ph)
            .int("pid", pid)
            .int("tid", tid)
            .micros("ts", ts.saturating_sub(origin));
        o
    }

    fn name_event(&mut self, what: &str, pid: i64, tid: i64, name: &str) {
        let mut o = self.event("M", pid, tid, self.origin.unwrap_or(0));
        o.str("name", what);
        o.obj("args").str("name", name).end();
        o.end();
    }

    /// Process and thread names, written when first seen and again when they change.
    fn names(&mut self, c: &Columns, row: usize, pid: i64, tid: i64) {
        if let Some(comm) = c.str(col::COMM, row)
            && self.process_names.get(&pid).map(String::as_str) != Some(comm)
        {
            self.process_names.insert(pid, comm.to_string());
            self.name_event("process_name", pid, 0, comm);
        }
        if let Some(thread) = c.str(col::THREAD, row)
            && self.thread_names.get(&tid).map(String::as_str) != Some(thread)
        {
            self.thread_names.insert(tid, thread.to_string());
            self.name_event("thread_name", pid, tid, thread);
        }
    }

    /// The IO lane of `tid`, named on first use.
    fn io_lane(&mut self, pid: i64, tid: i64) -> i64 {
        self.lane(pid, tid, IO_LANE, "io")
    }

    /// The lane of `tid` at `offset` (its track id: tid + offset), named `THREAD what` on
    /// first use.
    fn lane(&mut self, pid: i64, tid: i64, offset: i64, what: &str) -> i64 {
        let lane = tid.saturating_add(offset);
        if self.lanes_named.insert(lane) {
            let base = self
                .thread_names
                .get(&tid)
                .cloned()
                .unwrap_or_else(|| tid.to_string());
            self.name_event("thread_name", pid, lane, &format!("{base} {what}"));
        }
        lane
    }

    /// A thread's stay in a `tracing` span: a slice on its span lane, named after the span
    /// (spans nest as they were entered); one not left when the recording ended lasts to the
    /// thread's last row seen so far, and says so.
    fn span(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64, d: Option<i64>) {
        let last = self.threads.get(&tid).map_or(t, |th| th.last_seen);
        let dur = d.unwrap_or(last.saturating_sub(t)).max(0);
        if !self.visible(t, dur) {
            return;
        }
        let lane = self.lane(pid, tid, SPAN_LANE, "spans");
        let name = c.str(col::SPAN_NAME, row).unwrap_or("span").to_string();
        let sf = self.stack_id(c, row);
        let stack = self.stack_names(c, row);
        let mut o = self.event("X", pid, lane, t);
        o.micros("dur", dur).str("name", &name).str("cat", "span");
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        if d.is_none() {
            a.str("left", "not during the recording");
        }
        if let Some(stack) = &stack {
            a.strs("entered_at", stack.iter().map(String::as_str));
        }
        a.end();
        o.end();
    }

    fn visible(&self, start: i64, dur: i64) -> bool {
        self.resolved.is_none_or(|w| w.overlaps(start, dur))
    }

    /// Write the events of one batch.
    pub(crate) fn push(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let c = Columns::new(batch, &self.layout, &self.input)?;
        if let Some(entries) = c.stack.as_ref().and_then(StackFrames::entries) {
            self.entry_ids.prepare(entries);
            self.entry_names.prepare(entries);
        }
        for row in 0..batch.num_rows() {
            self.row(&c, row);
            if self.buf.len() > 1 << 16 {
                self.flush_buf()?;
            }
        }
        self.flush_buf()?;
        self.out.flush().map_err(|source| Error::Write {
            path: self.output.clone(),
            source,
        })
    }

    fn row(&mut self, c: &Columns, row: usize) {
        let (Some(t), true, true) = (c.time(row), c.pid.is_valid(row), c.tid.is_valid(row)) else {
            return;
        };
        let Some(k) = c.str(col::KIND, row) else {
            return;
        };
        let (pid, tid) = (c.pid.value(row), c.tid.value(row));
        if self.origin.is_none() {
            self.origin = Some(t);
            self.resolved = Some(self.window.resolve(t));
        }
        self.names(c, row, pid, tid);
        let thread = self.threads.entry(tid).or_default();
        thread.pid = pid;
        thread.last_seen = thread.last_seen.max(t);

        // Kinds of a newer recorder: nothing known to draw.
        let Some(lane) = kinds::get(k).map(|registered| registered.lane) else {
            return;
        };
        let duration = c.int(col::DURATION, row);
        match lane {
            Lane::CpuSample => self.cpu_sample(c, row, pid, tid, t),
            Lane::Sched if k == kind::WAKE => self.wakeup(c, row, pid, tid, t),
            Lane::Sched => match duration {
                Some(d) => self.off_cpu(c, row, pid, tid, t, d),
                None => self.folded_off_cpu(c, row, pid, tid, t),
            },
            Lane::Counter => self.counter(c, row, pid, tid, t),
            Lane::Async => self.request(c, row, k, pid, tid, t, duration.unwrap_or(0)),
            Lane::Io => self.io(c, row, k, pid, tid, t, duration),
            Lane::Process => self.process_event(c, row, k, pid, tid, t),
            Lane::Lost => self.lost(c, row, pid, tid, t),
            Lane::State => self.state_sample(c, row, pid, tid, t),
            Lane::Probe if k == kind::ALLOC => self.alloc_event(c, row, pid, tid, t),
            Lane::Probe => self.probe_hit(c, row, pid, tid, t),
            Lane::Span => self.span(c, row, pid, tid, t, duration),
        }
    }

    /// A probe's hit (or a counting row's hits): an instant named after the probe, with its
    /// stack.
    fn probe_hit(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let sf = self.stack_id(c, row);
        let name = c.str(col::PROBE, row).unwrap_or("probe").to_string();
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "t").str("name", &name).str("cat", "probe");
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "hits", c.int(col::VALUE, row));
        a.end();
        o.end();
    }

    fn cpu_sample(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let sf = self.stack_id(c, row);
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "t").str("name", "cpu sample").str("cat", "cpu");
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "period_ns", c.int(col::VALUE, row));
        opt_int(&mut a, "cpu", c.int(col::CPU, row));
        a.end();
        o.end();
    }

    /// A `wake` row: an instant `wakeup` on the waker's track with the woken thread, the time
    /// it had waited and the waker's stack (not an off-CPU interval of the waker).
    fn wakeup(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let sf = self.stack_id(c, row);
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "t").str("name", "wakeup").str("cat", "sched");
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "wakee", c.int(col::WAKEE, row));
        // A row of wakeups sampled 1 in N holds N times the one taken.
        let n = c.int(col::COUNT, row).unwrap_or(1).max(1);
        opt_int(
            &mut a,
            "waited_ns",
            c.int(col::DURATION, row).map(|d| d / n),
        );
        if n > 1 {
            a.int("wakeups", n);
        }
        a.end();
        o.end();
    }

    /// A row folding short off-CPU intervals: an instant where the first of them began.
    fn folded_off_cpu(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "t")
            .str("name", SHORT_OFFCPU)
            .str("cat", "sched");
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "count", c.int(col::COUNT, row));
        opt_int(&mut a, "total_ns", c.int(col::VALUE, row));
        opt_str(&mut a, "state", c.str(col::STATE, row));
        a.end();
        o.end();
    }

    /// The process's resident bytes after an `rss` row, as a counter.
    fn counter(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if let Some(rss) = c.int(col::RSS, row)
            && self.visible(t, 0)
        {
            let mut o = self.event("C", pid, tid, t);
            o.str("name", "rss");
            o.obj("args").int("rss_bytes", rss).end();
            o.end();
        }
    }

    fn process_event(&mut self, c: &Columns, row: usize, k: &str, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "t").str("name", k).str("cat", "process");
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_str(&mut a, "path", c.str(col::PATH, row));
        opt_int(&mut a, "child", c.int(col::CHILD, row));
        opt_int(&mut a, "exit_code", c.int(col::EXIT_CODE, row));
        a.end();
        o.end();
    }

    fn lost(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "g")
            .str("name", "lost events")
            .str("cat", "lost");
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "count", c.int(col::VALUE, row));
        opt_int(&mut a, "cpu", c.int(col::CPU, row));
        a.end();
        o.end();
    }

    /// The `stackFrames` node of `row`'s stack (once per stack of a dictionary).
    fn stack_id(&mut self, c: &Columns, row: usize) -> Option<u64> {
        let s = c.stack.as_ref()?;
        let entry = s.entry(row)?;
        let frames = &mut self.frames;
        let mut intern = || frames.intern(s, s.entry_frames(entry));
        if s.is_dictionary() {
            *self.entry_ids.get_or_insert_with(entry, intern)
        } else {
            intern()
        }
    }

    /// The stack of `row`, leaf first, as frame names (once per stack of a dictionary).
    fn stack_names(&mut self, c: &Columns, row: usize) -> Option<Arc<[String]>> {
        let s = c.stack.as_ref()?;
        let entry = s.entry(row)?;
        let names = || {
            let names: Arc<[String]> = s
                .entry_frames(entry)
                .filter_map(|i| s.frame(i))
                .map(|f| f.name().into_owned())
                .collect();
            (!names.is_empty()).then_some(names)
        };
        if s.is_dictionary() {
            self.entry_names.get_or_insert_with(entry, names).clone()
        } else {
            names()
        }
    }

    fn on_cpu(&mut self, pid: i64, tid: i64, from: i64, to: i64) {
        let dur = to.saturating_sub(from);
        if dur > 0 && self.visible(from, dur) {
            let mut o = self.event("X", pid, tid, from);
            o.micros("dur", dur)
                .str("name", "on-CPU")
                .str("cat", "sched");
            o.end();
        }
    }

    fn off_cpu(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64, d: i64) {
        let d = d.max(0);
        let back = self.threads.get(&tid).and_then(|th| th.back_on_cpu);
        // Rows of a thread arrive in order; an earlier one (reordered input) makes no slice.
        if let Some(back) = back {
            self.on_cpu(pid, tid, back, t);
        }
        let end = t.saturating_add(d);
        if let Some(th) = self.threads.get_mut(&tid) {
            th.back_on_cpu = Some(back.map_or(end, |b| b.max(end)));
            th.last_seen = th.last_seen.max(end);
        }
        if !self.visible(t, d) {
            return;
        }
        let sf = self.stack_id(c, row);
        let stack = self.stack_names(c, row);
        let state = c.str(col::STATE, row);
        let waker = c.int(col::WAKER, row);
        let name = format!("off-CPU ({})", state.unwrap_or("unknown"));
        let mut o = self.event("X", pid, tid, t);
        o.micros("dur", d).str("name", &name).str("cat", "sched");
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_str(&mut a, "state", state);
        opt_int(&mut a, "waker", waker);
        if let Some(stack) = &stack {
            a.strs("stack", stack.iter().map(String::as_str));
        }
        a.end();
        o.end();
    }

    /// A `block` or `uring` request: an async slice of category `k`, named `KIND OP`.
    #[allow(clippy::too_many_arguments)]
    fn request(&mut self, c: &Columns, row: usize, k: &str, pid: i64, tid: i64, t: i64, d: i64) {
        let d = d.max(0);
        // `uring` requests shorter than MIN, summed in the kernel: an instant `KIND OP ×N` at
        // the first one (its `requests`, `total_ns`), not a slice as long as their summed time.
        let requests = c.int(col::COUNT, row).unwrap_or(1);
        if requests > 1 {
            if !self.visible(t, 0) {
                return;
            }
            let op = c.str(col::OP, row).unwrap_or("io");
            let name = format!("{k} {op} ×{requests}");
            let mut o = self.event("i", pid, tid, t);
            o.str("s", "t").str("name", &name).str("cat", k);
            let mut a = o.obj("args");
            opt_int(&mut a, "bytes", c.int(col::VALUE, row));
            opt_str(&mut a, "path", c.str(col::PATH, row));
            opt_int(&mut a, "fd", c.int(col::FD, row));
            opt_str(&mut a, "mode", c.str(col::MODE, row));
            opt_int(&mut a, "errno", c.int(col::ERRNO, row));
            a.int("requests", requests);
            a.int("total_ns", d);
            a.end();
            o.end();
            return;
        }
        if !self.visible(t, d) {
            return;
        }
        let id = format!("{:#x}", self.next_async_id);
        self.next_async_id += 1;
        let op = c.str(col::OP, row).unwrap_or("io");
        let name = format!("{k} {op}");
        let sf = self.stack_id(c, row);
        let stack = self.stack_names(c, row);
        let mut o = self.event("b", pid, tid, t);
        o.str("name", &name).str("cat", k).str("id", &id);
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "bytes", c.int(col::VALUE, row));
        opt_str(&mut a, "dev", c.str(col::DEV, row));
        opt_str(&mut a, "op", c.str(col::OP, row));
        opt_str(&mut a, "path", c.str(col::PATH, row));
        opt_int(&mut a, "fd", c.int(col::FD, row));
        opt_str(&mut a, "mode", c.str(col::MODE, row));
        opt_int(&mut a, "submitter", c.int(col::SUBMITTER, row));
        opt_int(&mut a, "errno", c.int(col::ERRNO, row));
        if let Some(stack) = &stack {
            a.strs("stack", stack.iter().map(String::as_str));
        }
        a.end();
        o.end();
        let mut o = self.event("e", pid, tid, t.saturating_add(d));
        o.str("name", &name).str("cat", k).str("id", &id);
        o.end();
    }

    #[allow(clippy::too_many_arguments)]
    fn io(
        &mut self,
        c: &Columns,
        row: usize,
        k: &str,
        pid: i64,
        tid: i64,
        t: i64,
        duration: Option<i64>,
    ) {
        let d = duration.unwrap_or(0).max(0);
        if !self.visible(t, d) {
            return;
        }
        let lane = self.io_lane(pid, tid);
        let op = c.str(col::OP, row).unwrap_or("io");
        let name = match (k, c.str(col::SYSCALL, row), c.str(col::PROTOCOL, row)) {
            (kind::VFS, Some(syscall), _) => syscall.to_string(),
            (kind::NET, _, Some(protocol)) => format!("{protocol} {op}"),
            _ => format!("{k} {op}"),
        };
        // A row the kernel summed while the IO ring was backed up stands for `count` calls:
        // an instant at the first one, not a slice as long as their summed time.
        let calls = c.int(col::COUNT, row).unwrap_or(1);
        let name = if calls > 1 {
            format!("{name} ×{calls}")
        } else {
            name
        };
        let sf = self.stack_id(c, row);
        let stack = self.stack_names(c, row);
        let mut o = match duration {
            Some(_) if calls <= 1 => {
                let mut o = self.event("X", pid, lane, t);
                o.micros("dur", d);
                o
            }
            _ => {
                let mut o = self.event("i", pid, lane, t);
                o.str("s", "t");
                o
            }
        };
        o.str("name", &name).str("cat", k);
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        opt_int(&mut a, "bytes", c.int(col::VALUE, row));
        opt_str(&mut a, "op", c.str(col::OP, row));
        opt_str(&mut a, "path", c.str(col::PATH, row));
        opt_int(&mut a, "fd", c.int(col::FD, row));
        opt_str(&mut a, "local", c.str(col::LOCAL, row));
        opt_str(&mut a, "remote", c.str(col::REMOTE, row));
        opt_int(&mut a, "errno", c.int(col::ERRNO, row));
        if calls > 1 {
            a.int("calls", calls);
            opt_int(&mut a, "total_ns", duration);
        }
        if let Some(stack) = &stack {
            a.strs("stack", stack.iter().map(String::as_str));
        }
        a.end();
        o.end();
    }

    /// Close the last on-CPU slices (up to each thread's last row), write the stack frame
    /// table and end the document. Returns the number of trace events written.
    pub(crate) fn finish(mut self) -> Result<u64, Error> {
        let mut tails: Vec<(i64, i64, i64, i64)> = self
            .threads
            .iter()
            .filter_map(|(&tid, th)| {
                th.back_on_cpu
                    .filter(|&b| th.last_seen > b)
                    .map(|b| (tid, th.pid, b, th.last_seen))
            })
            .collect();
        tails.sort_unstable();
        for (tid, pid, from, to) in tails {
            self.on_cpu(pid, tid, from, to);
        }
        for run in self.state_runs.finish() {
            self.state_run(&run);
        }
        self.buf.push_str("\n],\n\"stackFrames\":{");
        for i in 0..self.frames.len() {
            self.buf.push_str(if i == 0 { "\n" } else { ",\n" });
            self.frames.push_node(&mut self.buf, i);
            if self.buf.len() > 1 << 16 {
                self.flush_buf()?;
            }
        }
        self.buf.push_str("\n}}\n");
        self.flush_buf()?;
        self.out.flush().map_err(|source| Error::Write {
            path: self.output.clone(),
            source,
        })?;
        Ok(self.events)
    }
}

/// The row's `tracing` span (tracing-stacks), when it has one.
fn span_args(a: &mut Obj<'_>, c: &Columns, row: usize) {
    opt_str(a, "span", c.str(col::SPAN_NAME, row));
    opt_int(a, "span_id", c.int(col::SPAN_ID, row));
    opt_int(a, "parent_span_id", c.int(col::PARENT_SPAN_ID, row));
    opt_str(a, "trace_id", c.str(col::TRACE_ID, row));
}

fn opt_int(o: &mut Obj<'_>, key: &str, v: Option<i64>) {
    if let Some(v) = v {
        o.int(key, v);
    }
}

fn opt_str(o: &mut Obj<'_>, key: &str, v: Option<&str>) {
    if let Some(v) = v {
        o.str(key, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stacks_testkit::events::{events_stream_encoded, every_kind};

    #[test]
    fn each_dictionary_stack_converted_once() {
        let bytes = events_stream_encoded(&every_kind());
        let mut input =
            stacks_stream::InputStream::new("test", Box::new(std::io::Cursor::new(bytes)))
                .expect("stream");
        let schema = input.schema();
        let mut t =
            Tracer::new(&schema, "test", Vec::new(), "out", &Options::default()).expect("tracer");
        let mut rows = 0;
        while let Some(b) = input.next_batch().expect("batch") {
            rows += b.num_rows();
            t.push(&b).expect("push");
        }
        // Distinct stacks drawn (rss rows are counters, drawn without their stack): syscall
        // and busy (samples), off-CPU, block, vfs and net, the last four with their names,
        // and the probe's.
        let distinct = 7;
        assert!(rows > distinct, "{rows} rows");
        assert_eq!(t.entry_ids.len(), distinct);
        assert_eq!(t.entry_names.len(), 4);
    }
}
