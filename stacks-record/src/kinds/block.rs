//! `block`: block requests from submission to completion: bytes, latency, operation, device,
//! the submitter's stacks (bpf/kinds/block.bpf.h). A `d` user stack taken at submission
//! arrives apart, in a `STACKS_EV_UWINDOW` record the converter pairs with the request.

use std::collections::HashMap;

use anyhow::Result;
use stacks_stream::{kind, lost};

use super::run::{Run, Setup};
use super::{Context, Decoded, Effects, EventKind, Taken};
use crate::host;
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{rodata, stacks_block};
use crate::kernel::load as bpf;
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

    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup
            .on(self)
            .map(|_| Box::new(Unseen::default()) as Box<dyn Run>))
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

    fn apart_request(&self, e: &RawEvent<'_>) -> Option<u64> {
        Some(e.info::<stacks_block>().request)
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

/// Completions the kernel never reported whose request structure was not used again before
/// the end (bpf/kinds/block.bpf.h counts the others when the structure starts its next
/// request): at the end, the issued requests still held beyond what their disk had in flight
/// are counted as `completion_unseen:block`.
#[derive(Default)]
struct Unseen {
    /// Taken just before the event sources are detached: the boot clock then, and each
    /// disk's requests in flight (disks whose count is unknown left out).
    before_detach: Option<(u64, DisksInFlight)>,
}

/// Requests in flight by disk (major, minor).
type DisksInFlight = HashMap<(u32, u32), u64>;

impl Run for Unseen {
    fn stop(&mut self) -> Result<()> {
        self.before_detach = Some((host::boot_ns(), disks_in_flight()));
        Ok(())
    }

    /// A request issued before the disks were read and still held once the programs are
    /// detached was either in flight then (in its disk's count) or ended unseen: a disk's
    /// held requests beyond its count ended unseen. Requests that completed between the two
    /// reads only make the count smaller, never larger.
    fn lost(&mut self, skel: &StacksSkel<'_>) -> Vec<(String, u64)> {
        let Some((read_at, in_flight)) = self.before_detach.take() else {
            return Vec::new();
        };
        let mut held: HashMap<(u32, u32), u64> = HashMap::new();
        for (issued, major, minor) in bpf::held_block_requests(skel) {
            if issued < read_at {
                *held.entry((major, minor)).or_default() += 1;
            }
        }
        let unseen: u64 = held
            .iter()
            .filter_map(|(disk, n)| in_flight.get(disk).map(|f| n.saturating_sub(*f)))
            .sum();
        vec![(lost::COMPLETION_UNSEEN_BLOCK.to_string(), unseen)]
    }
}

/// Each disk's requests in flight (`/sys/block/*/inflight`, reads plus writes) by its
/// major:minor; a disk without I/O statistics (`queue/iostats` 0) counts none and is left out.
fn disks_in_flight() -> HashMap<(u32, u32), u64> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return HashMap::new();
    };
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    dir.flatten()
        .filter_map(|d| {
            let p = d.path();
            if read(p.join("queue/iostats"))?.trim() != "1" {
                return None;
            }
            let dev = read(p.join("dev"))?;
            let (major, minor) = dev.trim().split_once(':')?;
            let n = read(p.join("inflight"))?
                .split_whitespace()
                .map(|x| x.parse::<u64>().ok())
                .sum::<Option<u64>>()?;
            Some(((major.parse().ok()?, minor.parse().ok()?), n))
        })
        .collect()
}
