//! Turns decoded kernel records into raw rows: user frames normalized, kernel frames named,
//! kind-specific fields (state, op, addresses, paths…) decoded, per-kind counts kept.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::kernel::event::SAME_STACKS;
use crate::kernel::event::{Header, RawEvent, c_bytes, cstr};
use crate::kinds::{self, Context, Decoded, KindData, Life, Notes, Remainder, Taken};
use crate::output::rows::{Row, RowBuilder};
use crate::output::stack_table::StackRef;
use crate::process::cgroups::CgroupNames;
use crate::process::exit_maps::ExitMaps;
use crate::process::fdnames::{FileNames, SockAddrs};
use crate::process::kallsyms::KernelSymbol;
use crate::process::modules::ModuleIndex;
use crate::process::normalize::UserNormalizer;
use crate::process::spans::SpanLabels;
use crate::process::unwind::Unwinders;

mod exit_wait;
mod held;
mod intervals;
mod pids;
mod restart;
mod stacks;
pub(crate) use intervals::OpenIntervals;

/// Block requests' user stacks kept at most (then the memory starts over): more than are ever
/// in flight.
const APART_KEPT: usize = 1 << 16;

/// Distinct user stacks remembered by their bytes at most (then the memory starts over).
const USER_STACKS_CACHED: usize = 1 << 16;

/// A row's stack keys, its kernel and user stack capture errors, and how its user stack was
/// unwound.
#[derive(Clone, Copy, Default)]
pub(crate) struct RowStacks {
    key: StackRef,
    kstack_error: Option<i32>,
    ustack_error: Option<i32>,
    unwind: UserUnwind,
    /// The asyncio task the thread ran (its address and `task_name` pointer), named when the
    /// row is written.
    task: Option<(u64, u64)>,
}

/// How a row's user stack was unwound (`ustack_unwind`, `ustack_truncated`).
#[derive(Clone, Copy, Default)]
pub(crate) struct UserUnwind {
    method: Option<&'static str>,
    truncated: Option<bool>,
}

/// The command's process while it waits to exec (see [`Converter::hold_until_exec`]).
struct Gate {
    pid: u32,
    comm: [u8; 16],
}

/// Resolves kernel addresses to symbols at record time.
pub(crate) trait KernelNames {
    fn name(&self, addr: u64) -> Option<KernelSymbol>;
}

/// What the summary line reports.
#[derive(Default)]
pub(crate) struct Counts {
    pub by_kind: BTreeMap<&'static str, u64>,
    pub lost: u64,
    pub kstack_errors: u64,
    pub ustack_errors: u64,
    pub malformed: u64,
    /// Rows labelled with a `tracing` span.
    pub span_rows: u64,
    /// `state` rows whose thread had not run since its previous row: its stacks repeated,
    /// not captured again.
    pub repeated_stacks: u64,
    /// Hits of the kinds whose rows may stand for many (a probe's counting row), by kind
    /// (see `kinds::Effects::hits`).
    pub hits: BTreeMap<&'static str, u64>,
    /// What the kinds counted besides their rows (`kinds::Context::notes`).
    pub notes: Notes,
    pub pids: pids::PidSet,
}

/// How long a process's address caches outlive its exit record: records of its other ring
/// buffers read after the exit still find its map (the recorder reads every ring at each
/// poll, 25 ms apart).
const EXITED_KEPT: std::time::Duration = std::time::Duration::from_secs(1);

/// Per-recording conversion state.
pub(crate) struct Converter {
    /// Processes that exited, and when their exit was converted: their address caches are
    /// dropped [`EXITED_KEPT`] later, since records of other ring buffers (IO, probes) made
    /// before the exit may be read after it.
    exited: std::collections::VecDeque<(u32, std::time::Instant)>,
    pub norm: UserNormalizer,
    /// CPython processes' Python frames.
    pub python: crate::process::python::Python,
    /// Records of processes waiting for their perf map.
    pub held: held::Held,
    /// `d` stacks' unwinding (per-process modules, files' CFI).
    pub unwinders: Unwinders,
    /// The exit snapshots of processes whose exit was converted.
    pub exit_maps: ExitMaps,
    /// `d` records of processes gone before their map was read, waiting for their exit record.
    pub exit_waits: exit_wait::ExitWaits,
    pub counts: Counts,
    files: FileNames,
    modules: ModuleIndex,
    /// Kernel-reported build ids already turned into (hex, file).
    build_ids: HashMap<[u8; 20], (String, Option<String>), ahash::RandomState>,
    /// Frame ids of kernel-resolved frames (build id, offset) whose file is known.
    resolved: HashMap<([u8; 20], u64), u32, ahash::RandomState>,
    /// Frame ids of whole user stacks by their captured bytes, for stacks whose every frame
    /// the kernel resolved to a known file (so they mean the same in any process): stacks
    /// repeat, and turning each frame into an id was a tenth of the recorder's CPU on `net`.
    user_stacks: HashMap<Box<[u8]>, Rc<[u32]>, ahash::RandomState>,
    ksyms: Option<Box<dyn KernelNames>>,
    ksym_cache: HashMap<u64, Option<KernelSymbol>, ahash::RandomState>,
    /// `addr:port` text of each socket address seen (formatting it per row was ~10% of the
    /// recorder's CPU on `net`).
    sockaddrs: SockAddrs,
    /// What the kinds keep for decoding their records (`kinds::Setup::data`).
    pub data: KindData,
    /// Paths of the rows' cgroup ids.
    cgroups: CgroupNames,
    /// Decoded span labels.
    spans: SpanLabels,
    /// Intervals opened and not closed yet, per thread (`-e span`'s spans).
    open: OpenIntervals,
    /// Block requests' `d` user stacks, sent at submission, by request.
    apart: HashMap<u64, (Rc<[u32]>, UserUnwind), ahash::RandomState>,
    /// Each thread's stacks in its latest row of a kind that keeps them (`state`:
    /// `kinds::Effects::latest_stacks`), for the rows that repeat them, and
    /// whether the thread was seen since the stack dictionaries last started over (see
    /// [`restart`]).
    latest_stacks: HashMap<u32, (RowStacks, bool), ahash::RandomState>,
    /// The command the recorder starts, until its exec: see [`Converter::hold_until_exec`].
    gate: Option<Gate>,
    offset_ns: i64,
}

impl Converter {
    pub(crate) fn new(offset_ns: i64, ksyms: Option<Box<dyn KernelNames>>) -> Self {
        Self {
            norm: UserNormalizer::default(),
            python: crate::process::python::Python::new(true),
            unwinders: Unwinders::default(),
            exit_maps: ExitMaps::default(),
            exit_waits: exit_wait::ExitWaits::default(),
            counts: Counts::default(),
            files: FileNames::default(),
            modules: {
                let mut m = ModuleIndex::default();
                // Libraries the recorder maps itself (libc, ld.so) are usually the ones the
                // traced programs map too.
                m.learn_process(std::process::id());
                m
            },
            build_ids: HashMap::default(),
            resolved: HashMap::default(),
            user_stacks: HashMap::default(),
            ksyms,
            ksym_cache: HashMap::default(),
            sockaddrs: SockAddrs::default(),
            data: KindData::default(),
            latest_stacks: HashMap::default(),
            apart: HashMap::default(),
            cgroups: CgroupNames::new(),
            spans: SpanLabels::default(),
            open: OpenIntervals::default(),
            gate: None,
            exited: Default::default(),
            held: held::Held::default(),
            offset_ns,
        }
    }

    /// Process `pid` is the recorder's own child held at the gate of `-- COMMAND`, named
    /// `comm` (the kernel's 16-byte form) until it execs the command: its records before its
    /// exec are the recorder's, not the target's, and make no rows.
    pub(crate) fn hold_until_exec(&mut self, pid: u32, comm: [u8; 16]) {
        self.gate = Some(Gate { pid, comm });
    }

    /// Whether a record (its header `h`, saying `life` of its process) is of the command's
    /// process before its exec (its exec ends that).
    fn before_exec(&mut self, h: &Header, life: Life) -> bool {
        let Some(gate) = &self.gate else {
            return false;
        };
        if gate.pid != h.pid {
            return false;
        }
        if life == Life::Execs {
            self.gate = None;
            return false;
        }
        // A thread-state pass may see the new image before its exec record is in.
        c_bytes(&h.comm) == gate.comm
    }

    /// Convert one record, appending at most one row (an interval's open appends none: its row
    /// is appended at its close, see [`Converter::interval_edge`]). What its kind says of it
    /// besides its row (`kinds::Effects`) is done on the way, each at its step.
    pub(crate) fn push(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) {
        let h = &e.h;
        let fx = kinds::effects(h.kind);
        if self.before_exec(h, fx.life) {
            return;
        }
        match fx.taken {
            Taken::Row => {}
            Taken::Interval => {
                self.counts.pids.insert(h.pid);
                if !self.interval_edge(e, rows) {
                    self.counts.malformed += 1;
                }
                return;
            }
            Taken::StackApart => {
                self.user_stack_apart(e);
                return;
            }
        }
        let Some(Decoded { kind, value, extra }) = self.decode(e) else {
            self.counts.malformed += 1;
            return;
        };
        if fx.hits {
            *self.counts.hits.entry(kind).or_default() += u64::from(h.count);
        }
        self.counts.pids.insert(h.pid);

        if fx.life != Life::Runs {
            // A runtime may write its perf map as it exits (HotSpot's DumpPerfMapAtExit): its
            // held records are converted now, named by the map read once more.
            self.norm.perf_maps.exited(h.pid);
            self.release(h.pid, rows, fx.life == Life::Exits);
            // Stacks that waited for the exit snapshot (decoded above) are unwound with it (at
            // an exec, with what can be read then).
            self.release_exit_wait(h.pid, rows);
        }
        let stacks = match self.repeated_stacks(h) {
            Some(repeated) => repeated,
            None => self.stacks(e, rows),
        };
        if std::mem::take(&mut self.norm.unnamed_jit)
            && crate::process::perfmap::writes_map_at_exit(h.pid)
        {
            self.wait_for_perf_map(h.pid);
        }
        if fx.latest_stacks {
            self.latest_stacks.insert(h.tid, (stacks, true));
        }
        if fx.life == Life::Exits {
            // Its intervals still open (spans entered) end here; its address caches go a
            // little later (forget_exited): the exit came through the samples ring, and its
            // last IO or probe records may still wait in theirs.
            self.exited.push_back((h.pid, std::time::Instant::now()));
            self.end_intervals(Some(h.pid), rows);
        }
        self.push_row(h, Decoded { kind, value, extra }, stacks, rows);
    }

    /// Drop the address caches of processes that exited at least [`EXITED_KEPT`] ago.
    /// The path generation of `vfs` records the kernel is to use (see `FileNames`).
    pub(crate) fn path_generation(&self) -> u32 {
        self.files.generation
    }

    /// Records whose path was not walked again and not found among the paths kept.
    pub(crate) fn unknown_paths(&self) -> u64 {
        self.files.unknown_paths
    }

    pub(crate) fn forget_exited(&mut self) {
        while let Some(&(pid, at)) = self.exited.front() {
            if at.elapsed() < EXITED_KEPT {
                break;
            }
            self.exited.pop_front();
            self.held.forget(pid);
            self.norm.forget(pid);
            self.unwinders.forget(pid);
            self.exit_maps.forget(pid);
            self.forget_exit_wait(pid);
        }
    }

    /// Append the row of a record with header `h`.
    fn push_row(&mut self, h: &Header, d: Decoded, stacks: RowStacks, rows: &mut RowBuilder) {
        let Decoded {
            kind,
            value,
            mut extra,
        } = d;
        *self.counts.by_kind.entry(kind).or_default() += 1;
        // A time a record carries besides its header's, on the recording's clock as `time`.
        if let Some(t) = extra.offcpu_since.as_mut() {
            *t += self.offset_ns;
        }
        let (comm, thread) = (c_bytes(&h.comm), c_bytes(&h.thread));
        let (comm, thread) = (cstr(&comm), cstr(&thread));
        let cgroup = self.cgroups.name(h.cgroup);
        extra.span = self.spans.label(&h.span);
        self.counts.span_rows += u64::from(extra.span.is_some());
        let RowStacks {
            key: stacks,
            kstack_error,
            ustack_error,
            unwind,
            task,
        } = stacks;
        extra.task = task.and_then(|(t, n)| self.python.task(h.pid, t, n));
        rows.push(&Row {
            time_ns: h.ts as i64 + self.offset_ns,
            kind,
            pid: h.pid as i32,
            tid: h.tid as i32,
            comm: &comm,
            thread: &thread,
            cgroup: cgroup.as_deref(),
            cpu: h.cpu as i32,
            value,
            stacks,
            kstack_error,
            ustack_error,
            ustack_unwind: unwind.method,
            ustack_truncated: unwind.truncated,
            extra,
        });
    }

    /// The stacks of a record that says they are its thread's previous ones
    /// (`STACKS_SAME_STACKS`: the thread has not run since); `None` for other records.
    fn repeated_stacks(&mut self, h: &Header) -> Option<RowStacks> {
        if h.kstack_len != SAME_STACKS && h.ustack_len != SAME_STACKS {
            return None;
        }
        self.counts.repeated_stacks += 1;
        let latest = self.latest_stacks.get_mut(&h.tid).map(|(s, fresh)| {
            *fresh = true;
            *s
        });
        Some(latest.unwrap_or_else(|| {
            // Only if that row was not converted: the kernel side resends lost ones.
            self.counts.ustack_errors += 1;
            RowStacks {
                kstack_error: Some(-libc::ENOENT),
                ustack_error: Some(-libc::ENOENT),
                ..RowStacks::default()
            }
        }))
    }

    /// The row's kind, value and kind-specific columns, from the record's per-kind fields
    /// (by the record's kind in [`crate::kinds`]); `None` for a record this recorder does not
    /// know.
    fn decode(&mut self, e: &RawEvent<'_>) -> Option<Decoded> {
        let mut cx = Context {
            files: &mut self.files,
            sockaddrs: &mut self.sockaddrs,
            modules: &mut self.modules,
            norm: &mut self.norm,
            unwinders: &mut self.unwinders,
            exit_maps: &mut self.exit_maps,
            data: &self.data,
            notes: &mut self.counts.notes,
        };
        kinds::for_record(e.h.kind)?.decode(e, &mut cx)
    }

    /// A row of what the kernel side of a kind still held at the end for a thread (no stacks;
    /// `kinds::remainders`).
    pub(crate) fn push_remainder(&mut self, rows: &mut RowBuilder, time_ns: i64, rest: Remainder) {
        let Remainder { pid, tid, row } = rest;
        let comm = |path: String| {
            std::fs::read_to_string(path)
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default()
        };
        let process = comm(format!("/proc/{pid}/comm"));
        let thread = comm(format!("/proc/{pid}/task/{tid}/comm"));
        *self.counts.by_kind.entry(row.kind).or_default() += 1;
        rows.push(&Row {
            time_ns,
            kind: row.kind,
            pid: pid as i32,
            tid: tid as i32,
            comm: &process,
            thread: &thread,
            cgroup: None,
            cpu: -1,
            value: row.value,
            stacks: Default::default(),
            kstack_error: None,
            ustack_error: None,
            ustack_unwind: None,
            ustack_truncated: None,
            extra: row.extra,
        });
    }

    /// The `events: …` part of the summary line.
    pub(crate) fn describe_counts(&self) -> String {
        self.counts
            .by_kind
            .iter()
            .map(|(k, n)| match self.counts.hits.get(k) {
                Some(hits) if hits != n => format!("{k} {n} ({hits} hits)"),
                _ => format!("{k} {n}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
