//! `span`: each stay of a thread in a `tracing` span, from tracing-stacks' USDT probes
//! (bpf/kinds/span.bpf.h, attached by [`crate::process::spans`]). Enter and exit records are
//! the edges of an interval, paired into one row by the converter (`convert/intervals.rs`), so
//! none decodes alone. Its part in a recording is the span labels of every event (read unless
//! `--no-spans`; [`Spans`]), which find the executables whose probes `-e span` attaches to.

use anyhow::Result;
use stacks_stream::kind;

use super::{Context, Decoded, Edge, Effects, EventKind, Run, Setup, Taken};
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{rodata, stacks_span_event, stacks_span_op};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::kernel::globals::Global;
use crate::output::rows::Extra;
use crate::process::spans::Spans;
use crate::spec::KindArgs;

info_members!(stacks_span_event);

pub(crate) struct Span;

impl EventKind for Span {
    fn name(&self) -> &'static str {
        kind::SPAN
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_span_enter", "on_span_exit"]
    }

    fn kstack_cached(&self) -> bool {
        false
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.span_stacks = on.map_or(0, |s| s.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[]
    }

    /// Enters and exits, each a part of a row (none decodes alone).
    fn parts(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_SPAN]
    }

    /// Its enter and exit records are paired into rows by the converter.
    fn effects(&self, record: RecordKind) -> Effects {
        Effects {
            taken: match record {
                RecordKind::STACKS_EV_SPAN => Taken::Interval,
                _ => Taken::Row,
            },
            ..Effects::default()
        }
    }

    fn decode(&self, _: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        None
    }

    /// An enter opens the span's interval, an exit closes it (by the span's id).
    fn edge(&self, e: &RawEvent<'_>) -> Option<Edge> {
        let ev: stacks_span_event = e.info();
        let id = e.h.span.span_id;
        match ev.op {
            stacks_span_op::STACKS_SPAN_ENTER => Some(Edge::Open(id)),
            stacks_span_op::STACKS_SPAN_EXIT => Some(Edge::Close(id)),
            _ => None,
        }
    }

    /// A stay lasting `ns` (`None`: not left).
    fn interval(&self, ns: Option<u64>) -> Option<Decoded> {
        Some(Decoded {
            kind: kind::SPAN,
            value: ns.unwrap_or(0) as i64,
            extra: Extra {
                duration: ns.map(|n| n as i64),
                ..Extra::default()
            },
        })
    }

    /// The span labels, unless `--no-spans` (with the probes of `-e span`).
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup
            .spans
            .then(|| Box::new(Spans::new(setup.spec)) as Box<dyn Run>))
    }
}

/// The span labels' steps: each process is looked at when the recording starts and at its
/// exec, and the kernel side's verdicts on their canaries are read at every poll.
impl Run for Spans {
    fn loaded(&mut self, skel: &mut StacksSkel<'_>) -> Result<()> {
        self.tell_kernel(Global::new(skel, |b| &mut b.span_procs_any));
        Ok(())
    }

    fn started(&mut self, skel: &StacksSkel<'_>, running: &[u32]) -> Result<()> {
        for &pid in running {
            self.register(skel, pid);
        }
        Ok(())
    }

    fn exec(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        self.register(skel, pid);
    }

    fn poll(&mut self, skel: &StacksSkel<'_>) {
        self.check(skel);
    }

    fn stop(&mut self) -> Result<()> {
        self.detach();
        Ok(())
    }

    fn report(&self) {
        Spans::report(self);
    }
}
