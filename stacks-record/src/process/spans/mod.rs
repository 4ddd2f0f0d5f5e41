//! Span labels: finds tracing-stacks' thread context in each traced process's executable
//! ([`find`]) and hands its offsets from the thread pointer to the kernel side
//! (`span_procs`), which reads the span of every event through them; attaches the span USDT
//! probes of `-e span`; decodes the span part of a record into columns ([`labels`]).

mod find;
mod labels;

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use libbpf_rs::MapCore;
use libbpf_rs::MapFlags;

use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::stacks_span_proc;
use crate::kernel::globals::Global;
use crate::spec::EventSpec;
use find::{PROVIDER, TlsOffsets, find};
pub(crate) use labels::{SpanLabel, SpanLabels};

/// The span labels of a recording: which processes have their spans read, and what was found.
pub(crate) struct Spans {
    /// Told once a process is in `span_procs`: until then no event looks there.
    any: Option<Global>,
    /// `-e span`: attach the enter and exit probes of each executable with them.
    timeline: bool,
    /// The probes attached, by executable.
    links: Vec<libbpf_rs::Link>,
    /// Executables whose probes were attached.
    attached: usize,
    /// Executables whose probes could not be attached (reported at the end).
    pub unattached: Vec<String>,
    /// Offsets by executable (device, inode).
    by_file: HashMap<(u64, u64), Option<TlsOffsets>>,
    /// Processes handed to the kernel side whose canary has not been reported on.
    pending: HashSet<u32>,
    /// Added to the canary's offset (`STACKS_TEST_SPAN_SKEW`: tests make the check fail).
    skew: i64,
    /// Processes whose spans are read.
    pub labelled: HashSet<u32>,
    /// Processes whose canary was not where expected (their spans are not read).
    pub failed: Vec<(u32, String)>,
}

impl Spans {
    /// The span labels of a recording, with the probes of `-e span` when `spec` has it.
    pub(crate) fn new(spec: &EventSpec) -> Spans {
        Spans {
            any: None,
            timeline: spec.get(stacks_stream::kind::SPAN).is_some(),
            links: Vec::new(),
            attached: 0,
            unattached: Vec::new(),
            by_file: HashMap::new(),
            pending: HashSet::new(),
            skew: std::env::var("STACKS_TEST_SPAN_SKEW")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            labelled: HashSet::new(),
            failed: Vec::new(),
        }
    }

    /// `any`: the kernel side's `span_procs_any`, set at the first process handed to it.
    pub(crate) fn tell_kernel(&mut self, any: Option<Global>) {
        self.any = any;
    }

    /// Look for the thread context in process `pid`'s executable and hand it to the kernel
    /// side. A process without one (or gone) is left alone, silently.
    pub(crate) fn register(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        let exe = format!("/proc/{pid}/exe");
        let Ok(meta) = std::fs::metadata(&exe) else {
            return;
        };
        let key = (meta.dev(), meta.ino());
        let new = !self.by_file.contains_key(&key);
        let offsets = *self
            .by_file
            .entry(key)
            .or_insert_with(|| find(Path::new(&exe)).ok().flatten());
        let Some(o) = offsets else { return };
        if new && self.timeline && o.probes {
            self.attach(skel, &exe);
        }
        let value = stacks_span_proc {
            ctx_off: o.context,
            canary_off: o.canary + self.skew,
            checked: 0,
            failed: 0,
            unset_reads: 0,
            _pad: 0,
        };
        // SAFETY: a plain #[repr(C)] struct of integers, viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&raw const value).cast::<u8>(),
                size_of::<stacks_span_proc>(),
            )
        };
        if skel
            .maps
            .span_procs
            .update(&pid.to_ne_bytes(), bytes, MapFlags::ANY)
            .is_ok()
        {
            if let Some(any) = &self.any {
                any.set(1);
            }
            self.pending.insert(pid);
            self.labelled.insert(pid);
        }
    }

    /// Attach the span enter and exit programs to the executable at `exe` (for every process
    /// running it: the programs keep to the targets).
    fn attach(&mut self, skel: &StacksSkel<'_>, exe: &str) {
        // libbpf's own messages about a failure are replaced by ours.
        let previous = libbpf_rs::set_print(None);
        let mut links = Vec::new();
        for (prog, name) in [
            (&skel.progs.on_span_enter, "enter"),
            (&skel.progs.on_span_exit, "exit"),
        ] {
            match prog.attach_usdt(-1, exe, PROVIDER, name) {
                Ok(l) => links.push(l),
                Err(e) => {
                    let file =
                        std::fs::read_link(exe).map_or(exe.into(), |p| p.display().to_string());
                    self.unattached.push(format!("{file}: {e}"));
                    links.clear();
                    break;
                }
            }
        }
        libbpf_rs::set_print(previous);
        self.attached += usize::from(!links.is_empty());
        self.links.extend(links);
    }

    /// Warnings for the summary: `-e span` with no executable to attach to, or that failed.
    pub(crate) fn report(&self) {
        for u in &self.unattached {
            eprintln!("stacks-record: warning: span probes not attached: {u}");
        }
        if self.timeline && self.attached == 0 && self.unattached.is_empty() {
            eprintln!(
                "stacks-record: warning: -e span: no traced executable has tracing-stacks' USDT probes (stacks_tracing:enter/exit), so there are no span rows"
            );
        }
    }

    /// Detach the span probes (the end of the recording).
    pub(crate) fn detach(&mut self) {
        self.links.clear();
    }

    /// Report processes whose canary check failed since the last call (once each), and stop
    /// asking about those whose check passed or that are gone.
    pub(crate) fn check(&mut self, skel: &StacksSkel<'_>) {
        let mut done = Vec::new();
        for &pid in &self.pending {
            let Ok(Some(v)) = skel
                .maps
                .span_procs
                .lookup(&pid.to_ne_bytes(), MapFlags::ANY)
            else {
                done.push(pid);
                continue;
            };
            if v.len() < size_of::<stacks_span_proc>() {
                continue;
            }
            // SAFETY: the map's value is a stacks_span_proc (length checked), all integers.
            let p: stacks_span_proc = unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
            if p.failed != 0 {
                let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                eprintln!(
                    "stacks-record: span labels off for pid {pid} ({exe}): its thread context's TLS offset did not check out"
                );
                self.labelled.remove(&pid);
                self.failed.push((pid, exe));
                done.push(pid);
            } else if p.checked != 0 {
                done.push(pid);
            }
        }
        for pid in done {
            self.pending.remove(&pid);
        }
    }
}
