//! `block`: block requests from submission to completion: bytes, latency, operation, device,
//! the submitter's stacks (bpf/kinds/block.bpf.h). A `d` user stack taken at submission
//! arrives apart, in a `STACKS_EV_UWINDOW` record the converter pairs with the request.

use stacks_stream::kind;

use super::{Context, Decoded, Effects, EventKind, Taken};
use crate::kernel::abi::types::{rodata, stacks_block};
use crate::kernel::event::{BlockOp, Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::spec::KindArgs;

info_members!(stacks_block, stacks_uwindow);

pub(crate) struct Block;

impl EventKind for Block {
    fn name(&self) -> &'static str {
        kind::BLOCK
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_block_start", "on_block_issue", "on_block_complete"]
    }

    /// Its kernel stacks are taken in tracepoint programs: served from the cache of unwinds.
    fn kstack_cached(&self) -> bool {
        true
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.block_stacks = on.map_or(0, |b| b.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_BLOCK]
    }

    fn parts(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_UWINDOW]
    }

    /// A `d` user stack taken at submission is kept for its request's record.
    fn effects(&self, record: RecordKind) -> Effects {
        Effects {
            taken: match record {
                RecordKind::STACKS_EV_UWINDOW => Taken::StackApart,
                _ => Taken::Row,
            },
            ..Effects::default()
        }
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        let b: stacks_block = e.info();
        let has_dev = b.dev_major != 0 || b.dev_minor != 0;
        Some(Decoded {
            kind: kind::BLOCK,
            value: b.bytes as i64,
            extra: Extra {
                duration: Some(b.latency_ns as i64),
                count: Some(1),
                op: Some(block_op(b.op)),
                dev: has_dev.then(|| format!("{}:{}", b.dev_major, b.dev_minor)),
                errno: (b.error != 0).then_some(b.error),
                submitter: (b.submitter != 0).then_some(b.submitter as i32),
                ..Extra::default()
            },
        })
    }
}

fn block_op(op: BlockOp) -> &'static str {
    match op {
        BlockOp::STACKS_BLOCK_READ => "read",
        BlockOp::STACKS_BLOCK_WRITE => "write",
        BlockOp::STACKS_BLOCK_FLUSH => "flush",
        BlockOp::STACKS_BLOCK_DISCARD => "discard",
        _ => "other",
    }
}
