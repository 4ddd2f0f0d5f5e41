//! Native Perfetto traces (`--format perfetto`): the same rows as the JSON trace, written as a
//! stream of `TracePacket`s on one packet sequence, each packet as soon as its row is read.
//! Memory holds one batch, per-thread state and the interning tables ([`intern`]), never the
//! rows.
//!
//! What each row becomes (docs/format.md, "stacks-trace"):
//! * a track per process and per thread (`TrackDescriptor`s with pids, tids and names; a
//!   second host's pids and tids are offset by 2^22 each, its name as a process label);
//! * `switch`: an off-CPU slice on the thread's track named after its state, with its
//!   switch-out stack (`callstack_iid`) and waker, and the on-CPU slice between two of them;
//!   folded short intervals an instant;
//! * `wake`: a flow from an instant `wakeup` on the waker's track to an instant `woken` on the
//!   woken thread's track, at the wakeup (wakers that are no task share one track);
//! * `state`: a `GenericKernelTaskStateEvent` per row (trace_processor takes each as a change
//!   of state, so a sampled state lasts until the thread's next sample), and runs of samples in
//!   one state, system call and file as slices on the thread's `state` lane;
//! * `block`, `vfs`, `net` (and any kind drawn on the IO or async lanes): slices on the
//!   thread's `block` or `io` lanes (another lane while one is busy) with bytes, path, fd,
//!   addresses, errno and stack; a row standing for several calls an instant;
//! * `span`: nested slices on the thread's `spans` lane; `rss`: a counter per process;
//! * `profile`: a `PerfSample` with its stack; `probe` hits and `alloc` rows: instants with
//!   their stack weighted by hits or bytes (`callstack_weight`);
//! * `lost`: a `PerfSample` with `kernel_records_lost` (the trace counts it as data loss) and
//!   an instant on the global `lost events` track.

mod intern;
pub mod protos;
mod tracks;

use std::collections::HashMap;
use std::io::Write;

use arrow_array::{Array, RecordBatch};
use arrow_schema::Schema;
use prost::Message;
use stacks_stream::dict::EntryCache;
use stacks_stream::frames::{SHORT_OFFCPU, StackFrames};
use stacks_stream::kinds::{self, Lane};
use stacks_stream::{col, kind, meta};

use crate::Error;
use crate::Options;
use crate::columns::{Columns, Layout};
use crate::trace::state_lane::{Key, Run, Sample, StateRuns};
use crate::window::{Resolved, Window};
use intern::Interner;
use protos::*;
use tracks::Tracks;

/// The track of wakers that are no task (pid and tid 0).
const NO_TASK: &str = "[irq, softirq, timer]";
/// The one packet sequence of the trace.
const SEQUENCE: u32 = 1;
/// A second host's pids and tids are offset by this times its index (pids stay below 2^22).
const HOST_STRIDE: i64 = 1 << 22;

#[derive(Debug, Default)]
struct Thread {
    pid: i64,
    /// When it came back on CPU after its last recorded off-CPU interval.
    back_on_cpu: Option<i64>,
    /// The latest time of any of its rows.
    last_seen: i64,
}

/// A wakeup whose woken thread has no track yet: its end is written when the thread's first
/// row names its process, or at the end.
struct PendingWake {
    wakee: i64,
    time: i64,
    flow: u64,
    annotations: Vec<DebugAnnotation>,
}

/// Writes a Perfetto trace: create with [`Writer::new`], feed with [`Writer::push`], end with
/// [`Writer::finish`].
pub(crate) struct Writer<W: Write> {
    out: W,
    output: String,
    input: String,
    layout: Layout,
    window: Window,
    resolved: Option<Resolved>,
    started: bool,
    buf: Vec<u8>,
    packets: u64,
    interner: Interner,
    tracks: Tracks,
    descriptors: Vec<TrackDescriptor>,
    /// Per stack of a dictionary-encoded `stack` column: its callstack iid.
    entry_ids: EntryCache<Option<u64>>,
    threads: HashMap<i64, Thread>,
    /// The hosts seen, in order of appearance (a handful).
    host_names: Vec<String>,
    next_flow: u64,
    pending_wakes: Vec<PendingWake>,
    state_runs: StateRuns,
    /// The recording's start, for the clock snapshot.
    start: Option<i64>,
    /// The stream's host (`stacks.host`), for rows without a `host`.
    host: Option<String>,
}

/// An annotation's value: an integer, or a string (interned).
#[derive(Clone, Copy)]
enum Value<'a> {
    Int(i64),
    Str(&'a str),
}

impl<W: Write> Writer<W> {
    /// Check `schema`; nothing is written before the first row (`output` names the output in
    /// errors).
    pub(crate) fn new(
        schema: &Schema,
        input: &str,
        out: W,
        output: &str,
        options: &Options,
    ) -> Result<Self, Error> {
        let layout = Layout::new(schema, input)?;
        let start = schema
            .metadata()
            .get(meta::START_NS)
            .and_then(|s| s.trim().parse::<i64>().ok());
        Ok(Self {
            out,
            output: output.into(),
            input: input.into(),
            layout,
            window: options.window,
            resolved: start.map(|s| options.window.resolve(s)),
            started: false,
            buf: Vec::with_capacity(1 << 17),
            packets: 0,
            interner: Interner::default(),
            tracks: Tracks::default(),
            descriptors: Vec::new(),
            entry_ids: EntryCache::default(),
            threads: HashMap::new(),
            host_names: Vec::new(),
            next_flow: 1,
            pending_wakes: Vec::new(),
            state_runs: StateRuns::default(),
            start,
            host: schema.metadata().get(meta::HOST).cloned(),
        })
    }

    /// Append one packet (as `Trace.packet`), with the sequence, the definitions it needs
    /// and the track descriptors made for it written first.
    fn packet(&mut self, timestamp: Option<i64>, mut p: TracePacket) {
        if !self.started {
            self.started = true;
            self.first_packet(timestamp);
        }
        for d in std::mem::take(&mut self.descriptors) {
            let mut dp = TracePacket {
                track_descriptor: Some(d),
                ..Default::default()
            };
            dp.trusted_packet_sequence_id = Some(SEQUENCE);
            self.append(&dp);
        }
        p.timestamp = timestamp.map(|t| t.max(0) as u64);
        p.trusted_packet_sequence_id = Some(SEQUENCE);
        // A slice's end refers to nothing interned.
        let end = p
            .track_event
            .as_ref()
            .is_some_and(|e| e.r#type == Some(TYPE_SLICE_END));
        p.sequence_flags = (!end).then_some(SEQ_NEEDS_INCREMENTAL_STATE);
        p.interned_data = self.interner.take();
        self.append(&p);
    }

    /// The sequence's first packet: clears its incremental state, and says the timestamps are
    /// wall-clock time (a snapshot pairing the trace clock with the real-time clock).
    fn first_packet(&mut self, first: Option<i64>) {
        let at = self.start.or(first).unwrap_or(0).max(0) as u64;
        let p = TracePacket {
            trusted_packet_sequence_id: Some(SEQUENCE),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: Some(true),
            timestamp: Some(at),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    Clock {
                        clock_id: Some(CLOCK_BOOTTIME),
                        timestamp: Some(at),
                    },
                    Clock {
                        clock_id: Some(CLOCK_REALTIME),
                        timestamp: Some(at),
                    },
                ],
                primary_trace_clock: Some(CLOCK_BOOTTIME as i32),
            }),
            ..Default::default()
        };
        self.append(&p);
    }

    fn append(&mut self, p: &TracePacket) {
        prost::encoding::encode_key(
            TRACE_PACKET_FIELD,
            prost::encoding::WireType::LengthDelimited,
            &mut self.buf,
        );
        // Encoding into a Vec cannot fail.
        let _ = p.encode_length_delimited(&mut self.buf);
        self.packets += 1;
    }

    fn flush_buf(&mut self) -> Result<(), Error> {
        self.out
            .write_all(&self.buf)
            .map_err(|source| Error::Write {
                path: self.output.clone(),
                source,
            })?;
        self.buf.clear();
        Ok(())
    }

    fn visible(&self, start: i64, dur: i64) -> bool {
        self.resolved.is_none_or(|w| w.overlaps(start, dur))
    }

    /// Write the packets of one batch.
    pub(crate) fn push(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let c = Columns::new(batch, &self.layout, &self.input)?;
        if let Some(entries) = c.stack.as_ref().and_then(StackFrames::entries) {
            self.entry_ids.prepare(entries);
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

    /// The index of a row's host (`host`, else the stream's), in order of appearance.
    fn host_index(&mut self, host: Option<&str>) -> usize {
        let Some(host) = host.or(self.host.as_deref()) else {
            return 0;
        };
        if let Some(i) = self.host_names.iter().position(|h| h == host) {
            return i;
        }
        self.host_names.push(host.to_string());
        self.host_names.len() - 1
    }

    fn row(&mut self, c: &Columns, row: usize) {
        let (Some(t), true, true) = (c.time(row), c.pid.is_valid(row), c.tid.is_valid(row)) else {
            return;
        };
        let Some(k) = c.str(col::KIND, row) else {
            return;
        };
        if self.resolved.is_none() {
            self.resolved = Some(self.window.resolve(t));
        }
        // Kinds of a newer recorder: nothing known to draw.
        let Some((lane, kind_name)) =
            kinds::get(k).map(|registered| (registered.lane, registered.name))
        else {
            return;
        };
        if lane == Lane::Lost {
            self.lost(c, row, t);
            return;
        }
        let host = self.host_index(c.str(col::HOST, row));
        let pid = host_id(host, c.pid.value(row));
        let tid = host_id(host, c.tid.value(row));
        self.thread_track(c, row, host, pid, tid);
        let thread = self.threads.entry(tid).or_default();
        thread.pid = pid;
        thread.last_seen = thread.last_seen.max(t);
        let duration = c.int(col::DURATION, row);
        match lane {
            Lane::CpuSample => self.cpu_sample(c, row, pid, tid, t),
            Lane::Sched if k == kind::WAKE => self.wake(c, row, host, tid, t),
            Lane::Sched => match duration {
                Some(d) => self.off_cpu(c, row, tid, t, d),
                None => self.folded_off_cpu(c, row, tid, t),
            },
            Lane::Counter => self.counter(c, row, pid, t),
            Lane::Async => self.operation(c, row, k, tid, t, duration, kind_name),
            Lane::Io => self.operation(c, row, k, tid, t, duration, "io"),
            Lane::Process => self.process_event(c, row, k, tid, t),
            Lane::State => self.state_sample(c, row, pid, tid, t),
            Lane::Probe => self.weighted_instant(c, row, k, tid, t),
            Lane::Span => self.span(c, row, tid, t, duration),
            Lane::Lost => {}
        }
    }

    /// The tracks of the row's process and thread, (re)named from `comm` and `thread`.
    fn thread_track(&mut self, c: &Columns, row: usize, host: usize, pid: i64, tid: i64) {
        let host = self.host_names.get(host).map(String::as_str);
        // The wakers that are no task (`[irq]`, `[softirq]`, `[timer]`) share tid 0: one track,
        // each wakeup naming its waker.
        let (comm, name) = if pid == 0 && tid == 0 {
            (Some("[kernel]"), Some(NO_TASK))
        } else {
            let comm = c.str(col::COMM, row);
            (comm, c.str(col::THREAD, row).or(comm))
        };
        let known = self.tracks.thread_uuid(tid).is_some();
        self.tracks.process(pid, comm, host, &mut self.descriptors);
        self.tracks.thread(pid, tid, name, &mut self.descriptors);
        if !known && self.pending_wakes.iter().any(|w| w.wakee == tid) {
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_wakes)
                .into_iter()
                .partition(|w| w.wakee == tid);
            self.pending_wakes = later;
            for w in now {
                self.woken(w);
            }
        }
    }

    /// The callstack iid of `row`'s stack (once per stack of a dictionary).
    fn callstack(&mut self, c: &Columns, row: usize) -> Option<u64> {
        let s = c.stack.as_ref()?;
        let entry = s.entry(row)?;
        let interner = &mut self.interner;
        let mut intern = || interner.callstack(s, s.entry_frames(entry));
        if s.is_dictionary() {
            *self.entry_ids.get_or_insert_with(entry, intern)
        } else {
            intern()
        }
    }

    /// Debug annotations, their names and string values interned.
    fn annotations<'a>(
        &mut self,
        values: impl IntoIterator<Item = (&'a str, Option<Value<'a>>)>,
    ) -> Vec<DebugAnnotation> {
        values
            .into_iter()
            .filter_map(|(name, v)| {
                let v = v?;
                let mut a = DebugAnnotation {
                    name_iid: Some(self.interner.annotation_name(name)),
                    ..Default::default()
                };
                match v {
                    Value::Int(i) => a.int_value = Some(i),
                    Value::Str(s) => a.string_value_iid = Some(self.interner.annotation_value(s)),
                }
                Some(a)
            })
            .collect()
    }

    /// The `tracing` span a row happened in (tracing-stacks), as annotations.
    fn span_annotations<'a>(c: &'a Columns, row: usize) -> [(&'a str, Option<Value<'a>>); 4] {
        [
            ("span", c.str(col::SPAN_NAME, row).map(Value::Str)),
            ("span_id", c.int(col::SPAN_ID, row).map(Value::Int)),
            (
                "parent_span_id",
                c.int(col::PARENT_SPAN_ID, row).map(Value::Int),
            ),
            ("trace_id", c.str(col::TRACE_ID, row).map(Value::Str)),
        ]
    }

    fn event(&mut self, t: i64, e: TrackEvent) {
        self.packet(Some(t), TrackEvent::into_packet(e));
    }

    /// A slice `[start, start + dur]` on `track`: its begin (carrying the name, stack,
    /// annotations and flows) and its end.
    fn slice(&mut self, track: u64, start: i64, dur: i64, name: &str, mut begin: TrackEvent) {
        begin.r#type = Some(TYPE_SLICE_BEGIN);
        begin.track_uuid = Some(track);
        begin.name_iid = Some(self.interner.event_name(name));
        self.event(start, begin);
        self.event(
            start.saturating_add(dur.max(0)),
            TrackEvent {
                r#type: Some(TYPE_SLICE_END),
                track_uuid: Some(track),
                ..Default::default()
            },
        );
    }

    fn instant(&mut self, track: u64, t: i64, name: &str, mut e: TrackEvent) {
        e.r#type = Some(TYPE_INSTANT);
        e.track_uuid = Some(track);
        e.name_iid = Some(self.interner.event_name(name));
        self.event(t, e);
    }

    /// The track of `tid` (made by its row before this is called).
    fn track_of(&self, tid: i64) -> u64 {
        self.tracks.thread_uuid(tid).unwrap_or_default()
    }

    fn cpu_sample(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let callstack_iid = self.callstack(c, row);
        let leaf_kernel = c.stack.as_ref().and_then(|s| {
            let entry = s.entry(row)?;
            s.frame(s.entry_frames(entry).start).map(|f| f.kernel)
        });
        let sample = PerfSample {
            cpu: c.int(col::CPU, row).and_then(|v| u32::try_from(v).ok()),
            pid: u32::try_from(pid).ok(),
            tid: u32::try_from(tid).ok(),
            callstack_iid,
            cpu_mode: leaf_kernel.map(|k| if k { MODE_KERNEL } else { MODE_USER }),
            timebase_count: c.int(col::VALUE, row).and_then(|v| u64::try_from(v).ok()),
            kernel_records_lost: None,
        };
        self.packet(
            Some(t),
            TracePacket {
                perf_sample: Some(sample),
                ..Default::default()
            },
        );
    }

    fn on_cpu(&mut self, tid: i64, from: i64, to: i64) {
        let dur = to.saturating_sub(from);
        if dur > 0 && self.visible(from, dur) {
            let track = self.track_of(tid);
            self.slice(track, from, dur, "on-CPU", TrackEvent::default());
        }
    }

    fn off_cpu(&mut self, c: &Columns, row: usize, tid: i64, t: i64, d: i64) {
        let d = d.max(0);
        let back = self.threads.get(&tid).and_then(|th| th.back_on_cpu);
        // Rows of a thread arrive in order; an earlier one (reordered input) makes no slice.
        if let Some(back) = back {
            self.on_cpu(tid, back, t);
        }
        let end = t.saturating_add(d);
        if let Some(th) = self.threads.get_mut(&tid) {
            th.back_on_cpu = Some(back.map_or(end, |b| b.max(end)));
            th.last_seen = th.last_seen.max(end);
        }
        if !self.visible(t, d) {
            return;
        }
        let state = c.str(col::STATE, row);
        let name = format!("off-CPU ({})", state.unwrap_or("unknown"));
        let mut values = vec![
            ("state", state.map(Value::Str)),
            ("waker", c.int(col::WAKER, row).map(Value::Int)),
        ];
        values.extend(Self::span_annotations(c, row));
        let e = TrackEvent {
            callstack_iid: self.callstack(c, row),
            debug_annotations: self.annotations(values),
            ..Default::default()
        };
        let track = self.track_of(tid);
        self.slice(track, t, d, &name, e);
    }

    /// A row folding short off-CPU intervals: an instant where the first of them began.
    fn folded_off_cpu(&mut self, c: &Columns, row: usize, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let e = TrackEvent {
            debug_annotations: self.annotations([
                ("count", c.int(col::COUNT, row).map(Value::Int)),
                ("total_ns", c.int(col::VALUE, row).map(Value::Int)),
                ("state", c.str(col::STATE, row).map(Value::Str)),
            ]),
            ..Default::default()
        };
        let track = self.track_of(tid);
        self.instant(track, t, SHORT_OFFCPU, e);
    }

    /// A `wake` row: a flow from the waker's instant to the woken thread's, at the wakeup.
    fn wake(&mut self, c: &Columns, row: usize, host: usize, tid: i64, t: i64) {
        let Some(wakee) = c.int(col::WAKEE, row) else {
            return;
        };
        if !self.visible(t, 0) {
            return;
        }
        let wakee = host_id(host, wakee);
        let flow = self.next_flow;
        self.next_flow += 1;
        // A row of wakeups sampled 1 in N holds N times the one taken.
        let n = c.int(col::COUNT, row).unwrap_or(1).max(1);
        let waited = c.int(col::DURATION, row).map(|d| Value::Int(d / n));
        let e = TrackEvent {
            flow_ids: vec![flow],
            callstack_iid: self.callstack(c, row),
            debug_annotations: self.annotations([
                ("wakee", Some(Value::Int(wakee))),
                ("waited_ns", waited),
                (
                    "waker",
                    c.str(col::COMM, row).filter(|_| tid == 0).map(Value::Str),
                ),
            ]),
            ..Default::default()
        };
        let track = self.track_of(tid);
        self.instant(track, t, "wakeup", e);
        let annotations = self.annotations([("waker", Some(Value::Int(tid)))]);
        let w = PendingWake {
            wakee,
            time: t,
            flow,
            annotations,
        };
        if self.tracks.thread_uuid(wakee).is_some() {
            self.woken(w);
        } else {
            self.pending_wakes.push(w);
        }
    }

    /// The end of a wakeup's flow, on the woken thread's track.
    fn woken(&mut self, w: PendingWake) {
        let track = match self.tracks.thread_uuid(w.wakee) {
            Some(track) => track,
            // Never seen: a track of its own, its process unknown.
            None => self.tracks.thread(0, w.wakee, None, &mut self.descriptors),
        };
        let e = TrackEvent {
            terminating_flow_ids: vec![w.flow],
            debug_annotations: w.annotations,
            ..Default::default()
        };
        self.instant(track, w.time, "woken", e);
    }

    /// The process's resident bytes after an `rss` row, as a counter.
    fn counter(&mut self, c: &Columns, row: usize, pid: i64, t: i64) {
        if let Some(rss) = c.int(col::RSS, row)
            && self.visible(t, 0)
        {
            let track = self
                .tracks
                .counter(pid, "rss", UNIT_SIZE_BYTES, &mut self.descriptors);
            self.event(
                t,
                TrackEvent {
                    r#type: Some(TYPE_COUNTER),
                    track_uuid: Some(track),
                    counter_value: Some(rss),
                    ..Default::default()
                },
            );
        }
    }

    /// A block or io_uring request, file or socket call: a slice on the thread's `lane` lanes (or an
    /// instant, for a row standing for several calls or without a duration).
    #[allow(clippy::too_many_arguments)]
    fn operation(
        &mut self,
        c: &Columns,
        row: usize,
        k: &str,
        tid: i64,
        t: i64,
        duration: Option<i64>,
        lane: &'static str,
    ) {
        let d = duration.unwrap_or(0).max(0);
        if !self.visible(t, d) {
            return;
        }
        let op = c.str(col::OP, row).unwrap_or("io");
        let name = match (k, c.str(col::SYSCALL, row), c.str(col::PROTOCOL, row)) {
            (kind::VFS, Some(syscall), _) => syscall.to_string(),
            (kind::NET, _, Some(protocol)) => format!("{protocol} {op}"),
            _ => format!("{k} {op}"),
        };
        let calls = c.int(col::COUNT, row).unwrap_or(1);
        let slice = duration.is_some() && calls <= 1;
        let name = if calls > 1 {
            format!("{name} ×{calls}")
        } else {
            name
        };
        let mut values = vec![
            ("bytes", c.int(col::VALUE, row).map(Value::Int)),
            ("op", c.str(col::OP, row).map(Value::Str)),
            ("path", c.str(col::PATH, row).map(Value::Str)),
            ("fd", c.int(col::FD, row).map(Value::Int)),
            ("dev", c.str(col::DEV, row).map(Value::Str)),
            ("local", c.str(col::LOCAL, row).map(Value::Str)),
            ("remote", c.str(col::REMOTE, row).map(Value::Str)),
            ("errno", c.int(col::ERRNO, row).map(Value::Int)),
            ("mode", c.str(col::MODE, row).map(Value::Str)),
            ("submitter", c.int(col::SUBMITTER, row).map(Value::Int)),
        ];
        if calls > 1 {
            values.push(("calls", Some(Value::Int(calls))));
            values.push(("total_ns", duration.map(Value::Int)));
        }
        values.extend(Self::span_annotations(c, row));
        let e = TrackEvent {
            callstack_iid: self.callstack(c, row),
            debug_annotations: self.annotations(values),
            ..Default::default()
        };
        let end = if slice { t.saturating_add(d) } else { t };
        let track = self
            .tracks
            .lane(tid, lane, t, end, false, &mut self.descriptors);
        if slice {
            self.slice(track, t, d, &name, e);
        } else {
            self.instant(track, t, &name, e);
        }
    }

    fn process_event(&mut self, c: &Columns, row: usize, k: &str, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let e = TrackEvent {
            debug_annotations: self.annotations([
                ("path", c.str(col::PATH, row).map(Value::Str)),
                ("child", c.int(col::CHILD, row).map(Value::Int)),
                ("exit_code", c.int(col::EXIT_CODE, row).map(Value::Int)),
            ]),
            ..Default::default()
        };
        let track = self.track_of(tid);
        self.instant(track, t, k, e);
    }

    /// A probe's hits or a sampled allocation (or free): an instant with its stack weighted
    /// by the hits or the bytes it stands for.
    fn weighted_instant(&mut self, c: &Columns, row: usize, k: &str, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let value = c.int(col::VALUE, row);
        let (name, mut values) = if k == kind::ALLOC {
            let free = c.str(col::OP, row) == Some("free");
            let size = c.arg(row, 1).filter(|&s| !free || s > 0);
            (
                if free { "free" } else { "alloc" }.to_string(),
                vec![
                    ("address", c.arg(row, 0).map(Value::Int)),
                    ("size", size.map(Value::Int)),
                    ("weight", value.filter(|_| !free).map(Value::Int)),
                ],
            )
        } else {
            (
                c.str(col::PROBE, row).unwrap_or("probe").to_string(),
                vec![("hits", value.map(Value::Int))],
            )
        };
        values.extend(Self::span_annotations(c, row));
        let callstack_iid = self.callstack(c, row);
        let e = TrackEvent {
            callstack_iid,
            callstack_weight: callstack_iid
                .and(value)
                .filter(|&v| v > 0)
                .map(|v| v as f64),
            debug_annotations: self.annotations(values),
            ..Default::default()
        };
        let track = self.track_of(tid);
        self.instant(track, t, &name, e);
    }

    /// A thread's stay in a `tracing` span: a slice on its `spans` lane, where spans nest as
    /// they were entered; one not left when the recording ended lasts to the thread's last row
    /// seen so far.
    fn span(&mut self, c: &Columns, row: usize, tid: i64, t: i64, d: Option<i64>) {
        let last = self.threads.get(&tid).map_or(t, |th| th.last_seen);
        let dur = d.unwrap_or(last.saturating_sub(t)).max(0);
        if !self.visible(t, dur) {
            return;
        }
        let name = c.str(col::SPAN_NAME, row).unwrap_or("span").to_string();
        let mut values = Self::span_annotations(c, row).to_vec();
        if d.is_none() {
            values.push(("left", Some(Value::Str("not during the recording"))));
        }
        let e = TrackEvent {
            callstack_iid: self.callstack(c, row),
            debug_annotations: self.annotations(values),
            ..Default::default()
        };
        let track = self
            .tracks
            .lane(tid, "spans", t, t + dur, true, &mut self.descriptors);
        self.slice(track, t, dur, &name, e);
    }

    /// A `state` row: a task-state event, and the thread's run of samples extended or closed.
    fn state_sample(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        let Some(state) = c.str(col::STATE, row) else {
            return;
        };
        if let Some(task_state) = task_state(state).filter(|_| self.visible(t, 0)) {
            // trace_processor names the thread from every event's `comm`.
            let comm = c.str(col::THREAD, row).or(c.str(col::COMM, row));
            let event = GenericKernelTaskStateEvent {
                cpu: c.int(col::CPU, row).and_then(|v| i32::try_from(v).ok()),
                comm: comm.map(Into::into),
                tid: Some(tid),
                state: Some(task_state),
            };
            self.packet(
                Some(t),
                TracePacket {
                    generic_kernel_task_state_event: Some(event),
                    ..Default::default()
                },
            );
        }
        let owned = |name| c.str(name, row).map(str::to_string);
        let s = Sample {
            pid,
            tid,
            time: t,
            period: c.int(col::VALUE, row).unwrap_or(0),
            key: Key {
                state: state.to_string(),
                syscall: owned(col::SYSCALL),
                path: owned(col::PATH),
                local: owned(col::LOCAL),
                remote: owned(col::REMOTE),
            },
            duration: c.int(col::DURATION, row),
        };
        let stack = if self.state_runs.continues(&s) {
            None
        } else {
            self.callstack(c, row)
        };
        if let Some(closed) = self.state_runs.push(s, (stack, None)) {
            self.state_run(&closed);
        }
    }

    /// One run of state samples as a slice on the thread's `state` lane, named after the state
    /// and the system call when in one (`sleeping: read`), with the first sample's stack.
    fn state_run(&mut self, r: &Run) {
        let dur = r.end.saturating_sub(r.start);
        if !self.visible(r.start, dur) {
            return;
        }
        let name = match &r.key.syscall {
            Some(call) => format!("{}: {call}", r.key.state),
            None => r.key.state.clone(),
        };
        let e = TrackEvent {
            callstack_iid: r.sf,
            debug_annotations: self.annotations([
                ("samples", Some(Value::Int(r.samples))),
                ("longest_in_syscall_ns", r.longest_ns.map(Value::Int)),
                ("path", r.key.path.as_deref().map(Value::Str)),
                ("local", r.key.local.as_deref().map(Value::Str)),
                ("remote", r.key.remote.as_deref().map(Value::Str)),
            ]),
            ..Default::default()
        };
        let track = self
            .tracks
            .lane(r.tid, "state", r.start, r.end, false, &mut self.descriptors);
        self.slice(track, r.start, dur, &name, e);
    }

    /// Events the recorder lost: a `PerfSample` counting them (Perfetto's own marker of
    /// kernel records lost) and an instant on the global `lost events` track.
    fn lost(&mut self, c: &Columns, row: usize, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let count = c.int(col::VALUE, row);
        let cpu = c.int(col::CPU, row);
        self.packet(
            Some(t),
            TracePacket {
                perf_sample: Some(PerfSample {
                    cpu: cpu.and_then(|v| u32::try_from(v).ok()),
                    kernel_records_lost: count.and_then(|v| u64::try_from(v).ok()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        let e = TrackEvent {
            debug_annotations: self.annotations([
                ("count", count.map(Value::Int)),
                ("cpu", cpu.map(Value::Int)),
                ("cause", c.str(col::CAUSE, row).map(Value::Str)),
            ]),
            ..Default::default()
        };
        let track = self.tracks.global("lost events", &mut self.descriptors);
        self.instant(track, t, "lost events", e);
    }

    /// Close the last on-CPU slices (up to each thread's last row), the open state runs and
    /// the wakeups of threads never seen, and flush. Returns the number of packets written.
    pub(crate) fn finish(mut self) -> Result<u64, Error> {
        let mut tails: Vec<(i64, i64, i64)> = self
            .threads
            .iter()
            .filter_map(|(&tid, th)| {
                th.back_on_cpu
                    .filter(|&b| th.last_seen > b)
                    .map(|b| (tid, b, th.last_seen))
            })
            .collect();
        tails.sort_unstable();
        for (tid, from, to) in tails {
            self.on_cpu(tid, from, to);
        }
        for run in self.state_runs.finish() {
            self.state_run(&run);
        }
        for w in std::mem::take(&mut self.pending_wakes) {
            self.woken(w);
        }
        if !self.started {
            // No row: a trace with only its first packet.
            self.started = true;
            self.first_packet(None);
        }
        self.flush_buf()?;
        self.out.flush().map_err(|source| Error::Write {
            path: self.output.clone(),
            source,
        })?;
        Ok(self.packets)
    }
}

/// `pid` or `tid` of a row of host `index`: offset for any host but the first.
fn host_id(index: usize, id: i64) -> i64 {
    id.saturating_add((index as i64).saturating_mul(HOST_STRIDE))
}

impl TrackEvent {
    fn into_packet(self) -> TracePacket {
        TracePacket {
            track_event: Some(self),
            ..Default::default()
        }
    }
}

/// Perfetto's task state of a `state` value (docs/format.md): `idle` (TASK_IDLE, a sleep that
/// does not count as load) is an interruptible sleep.
/// `None` for `other` (trace_processor counts an unknown state as invalid): such a sample is
/// only on the state lane.
fn task_state(state: &str) -> Option<i32> {
    Some(match state {
        "running" => TASK_STATE_RUNNING,
        "runnable" => TASK_STATE_RUNNABLE,
        "sleeping" | "idle" => TASK_STATE_INTERRUPTIBLE_SLEEP,
        "uninterruptible" => TASK_STATE_UNINTERRUPTIBLE_SLEEP,
        "stopped" => TASK_STATE_STOPPED,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stacks_testkit::events::{events_stream_encoded, every_kind};

    #[test]
    fn each_stack_interned_once_and_every_packet_framed() {
        let bytes = events_stream_encoded(&every_kind());
        let mut input =
            stacks_stream::InputStream::new("test", Box::new(std::io::Cursor::new(bytes)))
                .expect("stream");
        let schema = input.schema();
        let mut out = Vec::new();
        let mut w =
            Writer::new(&schema, "test", &mut out, "out", &Options::default()).expect("writer");
        while let Some(b) = input.next_batch().expect("batch") {
            w.push(&b).expect("push");
        }
        // Distinct stacks drawn (rss rows are counters, drawn without their stack): syscall
        // and busy (samples), off-CPU, block, vfs, net and the probe's.
        assert_eq!(w.entry_ids.len(), 7);
        assert_eq!(w.interner.callstacks(), 7);
        let packets = w.finish().expect("finish");
        let trace = Trace::decode(out.as_slice()).expect("a Trace");
        assert_eq!(trace.packet.len() as u64, packets);
        assert!(
            trace
                .packet
                .iter()
                .all(|p| p.trusted_packet_sequence_id == Some(SEQUENCE))
        );
        assert_eq!(
            trace.packet[0].sequence_flags,
            Some(SEQ_INCREMENTAL_STATE_CLEARED)
        );
    }
}
