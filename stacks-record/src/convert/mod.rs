//! Turns decoded kernel records into raw rows: user frames normalized, kernel frames named,
//! kind-specific fields (state, op, addresses, paths…) decoded, per-kind counts kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use stacks_stream::kind;

use crate::bpf::skel::types::{
    rss_state, stacks_exec, stacks_exit, stacks_probe, stacks_state_sample, stacks_vfs,
};
use crate::cgroups::CgroupNames;
use crate::event::SAME_STACKS;
use crate::event::{Header, KernelUserFrame, Kind, RawEvent, c_bytes, cstr};
use crate::fdnames::{FileNames, SockAddrs, file_name, socket_ends};
use crate::modules::{ModuleIndex, build_id_hex};
use crate::normalize::{UserFrame, UserNormalizer};
use crate::probes::ProbeRows;
use crate::probes::counts::COUNTED;
use crate::rows::{Extra, KernelSymbol, Row, RowBuilder};
use crate::spans::SpanLabels;
use crate::stacks::{Captured, NewStack, StackRef};

mod kinds;
mod span_rows;
use kinds::{
    Decoded, VFS_CALLS, block, folded, fork, lifecycle, net, off_cpu, profile, rss, rss_counter,
    state_name, tracing_frames,
};
pub use span_rows::OpenSpans;

/// Distinct user stacks remembered by their bytes at most (then the memory starts over).
const USER_STACKS_CACHED: usize = 1 << 16;

/// A row's stack keys and its kernel and user stack capture errors.
type RowStacks = (StackRef, Option<i32>, Option<i32>);

/// Resolves kernel addresses to symbols at record time.
pub trait KernelNames {
    fn name(&self, addr: u64) -> Option<KernelSymbol>;
}

/// What the summary line reports.
#[derive(Default)]
pub struct Counts {
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
    /// Probe hits (a counting row stands for many).
    pub probe_hits: u64,
    pub pids: HashSet<u32, ahash::RandomState>,
}

/// Per-recording conversion state.
pub struct Converter {
    pub norm: UserNormalizer,
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
    /// The probes of `-e`, by index.
    pub probes: ProbeRows,
    /// Paths of the rows' cgroup ids.
    cgroups: CgroupNames,
    /// Decoded span labels.
    spans: SpanLabels,
    /// Spans entered and not left yet, per thread (`-e span`).
    open_spans: OpenSpans,
    /// Each thread's stacks in its latest `state` row, for the rows that repeat them.
    state_stacks: HashMap<u32, RowStacks, ahash::RandomState>,
    offset_ns: i64,
}

impl Converter {
    pub fn new(offset_ns: i64, ksyms: Option<Box<dyn KernelNames>>) -> Self {
        Self {
            norm: UserNormalizer::default(),
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
            probes: ProbeRows::default(),
            state_stacks: HashMap::default(),
            cgroups: CgroupNames::new(),
            spans: SpanLabels::default(),
            open_spans: OpenSpans::default(),
            offset_ns,
        }
    }

    /// Convert one record, appending at most one row (a span's enter appends none: its row is
    /// appended at its exit, see [`Converter::span_transition`]).
    pub fn push(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) {
        let h = &e.h;
        if h.kind == Kind::STACKS_EV_SPAN {
            self.counts.pids.insert(h.pid);
            self.span_transition(e, rows);
            return;
        }
        let Some(Decoded { kind, value, extra }) = self.decode(e) else {
            self.counts.malformed += 1;
            return;
        };
        if h.kind == Kind::STACKS_EV_PROBE {
            self.counts.probe_hits += u64::from(h.count);
        }
        self.counts.pids.insert(h.pid);

        let stacks = match self.repeated_stacks(h) {
            Some(repeated) => repeated,
            None => self.stacks(e, rows),
        };
        if h.kind == Kind::STACKS_EV_STATE {
            self.state_stacks.insert(h.tid, stacks);
        }
        if h.kind == Kind::STACKS_EV_EXIT {
            // Its last samples are already converted: drop the address cache, and its spans
            // still entered end here.
            self.norm.forget(h.pid);
            self.end_spans(Some(h.pid), rows);
        }
        self.push_row(h, Decoded { kind, value, extra }, stacks, rows);
    }

    /// Append the row of a record with header `h`.
    fn push_row(&mut self, h: &Header, d: Decoded, stacks: RowStacks, rows: &mut RowBuilder) {
        let Decoded {
            kind,
            value,
            mut extra,
        } = d;
        *self.counts.by_kind.entry(kind).or_default() += 1;
        let (comm, thread) = (c_bytes(&h.comm), c_bytes(&h.thread));
        let (comm, thread) = (cstr(&comm), cstr(&thread));
        let cgroup = self.cgroups.name(h.cgroup);
        extra.span = self.spans.label(&h.span);
        self.counts.span_rows += u64::from(extra.span.is_some());
        let (stacks, kstack_error, ustack_error) = stacks;
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
            extra,
        });
    }

    /// The stacks of a `state` record that says they are its thread's previous ones
    /// (`STACKS_SAME_STACKS`: the thread has not run since); `None` for other records.
    fn repeated_stacks(&mut self, h: &Header) -> Option<RowStacks> {
        if h.kstack_len != SAME_STACKS && h.ustack_len != SAME_STACKS {
            return None;
        }
        self.counts.repeated_stacks += 1;
        Some(self.state_stacks.get(&h.tid).copied().unwrap_or_else(|| {
            // Only if that row was not converted: the kernel side resends lost ones.
            self.counts.ustack_errors += 1;
            (
                StackRef::default(),
                Some(-libc::ENOENT),
                Some(-libc::ENOENT),
            )
        }))
    }

    /// The keys of a record's captured stacks (added to the dictionaries when new) and their
    /// capture errors.
    fn stacks(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) -> RowStacks {
        let h = &e.h;
        let kstack = e.kstack();
        if matches!(kstack, Some(Err(_))) {
            self.counts.kstack_errors += 1;
        }
        let ustack = match e.ustack_bytes().and_then(|b| self.user_stacks.get(b)) {
            Some(ids) => Some(Ok(Rc::clone(ids))),
            None => match e.ustack() {
                None => None,
                Some(Err(errno)) => {
                    self.counts.ustack_errors += 1;
                    Some(Err(errno))
                }
                Some(Ok(frames)) => Some(Ok(self.user_stack(e, h.pid, &frames))),
            },
        };
        let kview = kstack
            .as_ref()
            .map(|r| r.as_ref().map(Vec::as_slice).map_err(|e| *e));
        let uview = ustack
            .as_ref()
            .map(|r| r.as_ref().map(|ids| &ids[..]).map_err(|e| *e));
        let stacks = rows
            .stacks()
            .key(kview, uview, || self.new_stack(kview, uview));
        (
            stacks,
            kview.and_then(Result::err),
            uview.and_then(Result::err),
        )
    }

    /// The entries of a captured stack seen for the first time: kernel frames named and the
    /// tracing machinery's dropped, user frames by id.
    fn new_stack(&mut self, kstack: Captured<'_, u64>, ustack: Captured<'_, u32>) -> NewStack {
        let (kstack, kstack_symbols) = match kstack {
            None => (None, None),
            Some(Err(_)) => (Some(Vec::new()), None),
            Some(Ok(addrs)) => {
                let (addrs, syms) = self.kernel_stack(addrs);
                (Some(addrs), syms)
            }
        };
        let ustack = match ustack {
            None => None,
            Some(Err(_)) => Some(Vec::new()),
            Some(Ok(ids)) => Some(ids.iter().map(|&i| self.norm.frame(i).clone()).collect()),
        };
        NewStack {
            kstack,
            ustack,
            kstack_symbols,
        }
    }

    /// The row's kind, value and kind-specific columns, from the record's per-kind fields;
    /// `None` for a kind this recorder does not know.
    fn decode(&mut self, e: &RawEvent<'_>) -> Option<Decoded> {
        let h = &e.h;
        Some(match h.kind {
            Kind::STACKS_EV_PROFILE => profile(e.info()),
            Kind::STACKS_EV_SWITCH => off_cpu(e.info()),
            Kind::STACKS_EV_SWITCH_FOLDED => folded(h, e.info()),
            Kind::STACKS_EV_RSS => rss(h, e.info()),
            Kind::STACKS_EV_BLOCK => block(e.info()),
            Kind::STACKS_EV_VFS => self.vfs(h, e.info()),
            Kind::STACKS_EV_NET => net(e.info(), &mut self.sockaddrs),
            Kind::STACKS_EV_STATE => self.thread_state(h, e.info()),
            Kind::STACKS_EV_EXEC => self.exec(h, e.info()),
            Kind::STACKS_EV_FORK => fork(h, e.info()),
            Kind::STACKS_EV_EXIT => self.exit(h, e.info()),
            Kind::STACKS_EV_PROBE => self.probe(h, e.info())?,
            _ => return None,
        })
    }

    /// A file read or write.
    fn vfs(&mut self, h: &Header, v: stacks_vfs) -> Decoded {
        let (syscall, op) = VFS_CALLS
            .get(v.syscall.0 as usize)
            .copied()
            .unwrap_or(("?", "read"));
        let path = file_name(&mut self.files, h.pid, v.fd, &v.file);
        Decoded {
            kind: kind::VFS,
            value: v.bytes as i64,
            extra: Extra {
                duration: Some(v.latency_ns as i64),
                count: Some(1),
                syscall: Some(syscall),
                op: Some(op),
                fd: Some(v.fd),
                errno: (v.error != 0).then_some(v.error),
                path,
                ..Extra::default()
            },
        }
    }

    /// A thread's state at a sampling pass: stands for the sampling period. A call on a
    /// descriptor names its file, or its socket and addresses.
    fn thread_state(&mut self, h: &Header, s: stacks_state_sample) -> Decoded {
        let syscall = usize::try_from(s.syscall)
            .ok()
            .and_then(syscalls::Sysno::new)
            .map(|nr| nr.name());
        let has_fd = syscall.is_some() && s.fd >= 0;
        let path = (has_fd && s.file.inode != 0)
            .then(|| file_name(&mut self.files, h.pid, s.fd, &s.file))
            .flatten();
        let (protocol, local, remote) = if has_fd && s.family.0 != 0 {
            socket_ends(s.family, s.protocol, &s.addrs, &mut self.sockaddrs)
        } else {
            (None, None, None)
        };
        Decoded {
            kind: kind::STATE,
            value: s.period_ns as i64,
            extra: Extra {
                count: Some(1),
                state: Some(state_name(s.state)),
                syscall,
                duration: (syscall.is_some() && s.syscall_ns > 0).then_some(s.syscall_ns as i64),
                fd: has_fd.then_some(s.fd),
                path,
                protocol,
                local,
                remote,
                ..Extra::default()
            },
        }
    }

    /// An exec: the process's caches start over with its new image.
    fn exec(&mut self, h: &Header, x: stacks_exec) -> Decoded {
        self.norm.forget(h.pid);
        self.files.forget(h.pid);
        self.modules.forget(h.pid);
        self.modules.learn_process(h.pid);
        let filename = c_bytes(&x.filename);
        let p = cstr(&filename);
        self.modules.learn_file(&p);
        lifecycle(
            kind::EXEC,
            h,
            Extra {
                path: (!p.is_empty()).then(|| p.into_owned()),
                ..Extra::default()
            },
        )
    }

    /// A probe hit, or a counting-table entry (many hits, no arguments).
    fn probe(&self, h: &Header, p: stacks_probe) -> Option<Decoded> {
        let args = (p.nargs != COUNTED).then(|| &p.args[..(p.nargs as usize).min(p.args.len())]);
        let (value, extra) = self.probes.row(p.probe, h.count, args)?;
        Some(Decoded {
            kind: kind::PROBE,
            value,
            extra,
        })
    }

    /// An exit: the process's files and modules are forgotten.
    fn exit(&mut self, h: &Header, x: stacks_exit) -> Decoded {
        self.files.forget(h.pid);
        self.modules.forget(h.pid);
        lifecycle(
            kind::EXIT,
            h,
            Extra {
                exit_code: Some(x.exit_code),
                ..Extra::default()
            },
        )
    }

    /// The kernel stack without the tracing machinery's frames, and its symbols when kallsyms
    /// is readable.
    fn kernel_stack(&mut self, addrs: &[u64]) -> (Vec<u64>, Option<Vec<Option<KernelSymbol>>>) {
        let mut addrs = addrs.to_vec();
        let Some(names) = &self.ksyms else {
            return (addrs, None);
        };
        // Every frame but the first is a return address: name the call (address − 1), so a
        // call that ends a function is not named after the next one.
        let mut syms: Vec<Option<KernelSymbol>> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let probe = if i == 0 { *a } else { a.saturating_sub(1) };
                let mut sym = self
                    .ksym_cache
                    .entry(probe)
                    .or_insert_with(|| names.name(probe))
                    .clone();
                if let Some(k) = sym.as_mut()
                    && i > 0
                {
                    k.offset += 1;
                }
                sym
            })
            .collect();
        let skip = tracing_frames(&syms);
        addrs.drain(..skip);
        syms.drain(..skip);
        (addrs, Some(syms))
    }

    /// The frame ids of a captured user stack, remembered by its bytes when they mean the same
    /// in every process (every frame resolved by the kernel to a known file).
    fn user_stack(&mut self, e: &RawEvent<'_>, pid: u32, frames: &[KernelUserFrame]) -> Rc<[u32]> {
        let ids: Rc<[u32]> = self.user_frames(pid, frames).into();
        let portable = frames.iter().all(|f| match f {
            KernelUserFrame::Resolved { build_id, offset } => {
                self.resolved.contains_key(&(*build_id, *offset))
            }
            KernelUserFrame::Ip(_) => false,
        });
        if let (true, Some(bytes)) = (portable, e.ustack_bytes()) {
            if self.user_stacks.len() >= USER_STACKS_CACHED {
                self.user_stacks.clear();
            }
            self.user_stacks.insert(bytes.into(), Rc::clone(&ids));
        }
        ids
    }

    /// Name the files of kernel-resolved frames; normalize the rest (addresses only) with the
    /// live process's memory map. Returns the frames' ids in the normalizer's table.
    fn user_frames(&mut self, pid: u32, frames: &[KernelUserFrame]) -> Vec<u32> {
        self.modules.learn_process(pid);
        let ips: Vec<u64> = frames
            .iter()
            .filter_map(|f| match f {
                KernelUserFrame::Ip(ip) => Some(*ip),
                KernelUserFrame::Resolved { .. } => None,
            })
            .collect();
        // Frames first seen in this call get ids from `known` up: their files are learned.
        let known = self.norm.table.len();
        let mut normalized = if ips.is_empty() {
            Vec::new()
        } else {
            self.norm.normalize(pid, &ips)
        }
        .into_iter();
        frames
            .iter()
            .map(|f| match f {
                KernelUserFrame::Resolved { build_id, offset } => {
                    if let Some(&id) = self.resolved.get(&(*build_id, *offset)) {
                        return id;
                    }
                    let (id, module) = match self.build_ids.get(build_id) {
                        Some(known) => known.clone(),
                        None => {
                            let id = build_id_hex(build_id);
                            let module = self.modules.path(&id).map(str::to_string);
                            // Only named files are remembered: a later exec may name it.
                            if module.is_some() {
                                self.build_ids
                                    .insert(*build_id, (id.clone(), module.clone()));
                            }
                            (id, module)
                        }
                    };
                    let named = module.is_some();
                    let frame = self.norm.table.intern(UserFrame {
                        addr: 0,
                        module,
                        build_id: Some(id),
                        offset: Some(*offset),
                        error: None,
                    });
                    if named {
                        self.resolved.insert((*build_id, *offset), frame);
                    }
                    frame
                }
                KernelUserFrame::Ip(ip) => match normalized.next() {
                    Some(id) => {
                        let f = self.norm.frame(id);
                        if let (true, Some(m), Some(b)) =
                            (id as usize >= known, &f.module, &f.build_id)
                        {
                            self.modules.learn(b, m);
                        }
                        id
                    }
                    None => self.norm.table.intern(UserFrame {
                        addr: *ip,
                        module: None,
                        build_id: None,
                        offset: None,
                        error: Some("not normalized".into()),
                    }),
                },
            })
            .collect()
    }

    /// A row for RSS growth the kernel side still held at the end (no stacks).
    pub fn push_rss_remainder(
        &mut self,
        rows: &mut RowBuilder,
        time_ns: i64,
        (tgid, rest): (u32, rss_state),
    ) {
        let comm = std::fs::read_to_string(format!("/proc/{tgid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        *self.counts.by_kind.entry(kind::RSS).or_default() += 1;
        rows.push(&Row {
            time_ns,
            kind: kind::RSS,
            pid: tgid as i32,
            tid: tgid as i32,
            comm: &comm,
            thread: &comm,
            cgroup: None,
            cpu: -1,
            value: rest.growth as i64,
            stacks: Default::default(),
            kstack_error: None,
            ustack_error: None,
            extra: Extra {
                count: Some(i64::from(rest.events)),
                op: Some(rss_counter(rest.member)),
                ..Extra::default()
            },
        });
    }

    /// The `events: …` part of the summary line.
    pub fn describe_counts(&self) -> String {
        self.counts
            .by_kind
            .iter()
            .map(|(k, n)| match *k {
                kind::PROBE if self.counts.probe_hits != *n => {
                    format!("{k} {n} ({} hits)", self.counts.probe_hits)
                }
                _ => format!("{k} {n}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}
