//! `span`: each stay of a thread in a `tracing` span, from tracing-stacks' USDT probes
//! (bpf/kinds/span.bpf.h, attached by [`crate::process::spans`]). Enter and exit records are
//! paired into one row by the converter (`convert/span_rows.rs`), so none decodes alone.

use stacks_stream::kind;

use super::{Context, Decoded, Effects, EventKind, Taken};
use crate::kernel::abi::types::rodata;
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
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

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.span_stacks = on.map_or(0, |s| s.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[]
    }

    fn ring(&self) -> super::Ring {
        super::Ring::STACKS_RING_PROBES
    }

    /// Its enter and exit records are paired into rows by the converter (none is in
    /// [`EventKind::records`]: none decodes alone).
    fn effects(&self, record: RecordKind) -> Effects {
        Effects {
            taken: match record {
                RecordKind::STACKS_EV_SPAN => Taken::SpanTransition,
                _ => Taken::Row,
            },
            ..Effects::default()
        }
    }

    fn decode(&self, _: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        None
    }
}
