//! `alloc`: allocations sampled by bytes inside the traced processes (libstacks_alloc.so,
//! docs/heap.md) and the frees of the sampled pointers, from the library's USDT probes
//! (bpf/kinds/alloc.bpf.h, attached by [`crate::probes::alloc`]).

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
use crate::kernel::abi::types::{rodata, stacks_alloc, stacks_alloc_op};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::spec::KindArgs;

info_members!(stacks_alloc);

pub(crate) struct Alloc;

impl EventKind for Alloc {
    fn name(&self) -> &'static str {
        kind::ALLOC
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_alloc", "on_alloc_free", "alloc_new_mapping"]
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.alloc_stacks = on.map_or(0, |s| s.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_ALLOC]
    }

    /// Samples are rare by design, but a program allocating gigabytes a second at a small
    /// interval can flood: never the samples ring.
    fn ring(&self) -> super::Ring {
        super::Ring::STACKS_RING_PROBES
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let a: stacks_alloc = e.info();
        if a.op == stacks_alloc_op::STACKS_ALLOC_ALLOC && a.untracked != 0 {
            *cx.untracked_allocs += 1;
        }
        let (op, value) = match a.op {
            stacks_alloc_op::STACKS_ALLOC_ALLOC => ("alloc", i64::try_from(a.weight).ok()?),
            stacks_alloc_op::STACKS_ALLOC_FREE => ("free", 0),
            _ => return None,
        };
        Some(Decoded {
            kind: kind::ALLOC,
            value,
            extra: Extra {
                count: Some(1),
                op: Some(op),
                args: Some(vec![a.ptr as i64, a.size as i64]),
                ..Default::default()
            },
        })
    }
}
