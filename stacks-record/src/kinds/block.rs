//! `block`: block requests from submission to completion: bytes, latency, operation, device,
//! the submitter's stacks (bpf/kinds/block.bpf.h). A `d` user stack taken at submission
//! arrives apart, in a `STACKS_EV_UWINDOW` record the converter pairs with the request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use stacks_stream::{kind, lost};

use super::run::{Run, Setup};
use super::{Context, Decoded, Effects, EventKind, Taken};
use crate::host;
use crate::kernel::abi::{OpenStacksMaps, StacksSkel};
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

    /// The in-flight slots of records with stacks (`block_stack_slots`: 1,024 records, 5.6 MiB
    /// preallocated) only when `block` takes stacks; one otherwise.
    fn size_maps(&self, maps: &mut OpenStacksMaps<'_>, on: Option<&KindArgs>) -> Result<()> {
        if on.is_none_or(|b| b.stacks.mask() == 0) {
            maps.block_stack_slots
                .set_max_entries(1)
                .context("sizing block's in-flight slots")?;
        }
        Ok(())
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
/// request): at the end, the issued requests still held beyond what their disk has in flight,
/// once nothing more completes, are counted as `completion_unseen:block`.
#[derive(Default)]
struct Unseen {
    /// Found while the programs still ran ([`Run::settle`]).
    unseen: u64,
}

/// Requests in flight by disk (major, minor).
type DisksInFlight = HashMap<(u32, u32), u64>;

/// How often the tables are read while settling, how long the count must stay the same, and
/// the longest the end waits.
const SETTLE_POLL: Duration = Duration::from_millis(10);
const SETTLE_QUIET: Duration = Duration::from_millis(100);
const SETTLE_MOST: Duration = Duration::from_secs(1);

impl Unseen {
    /// Requests issued before `before` (boot clock) still held beyond their disk's count in
    /// flight. The disks are read first: a request completing between the two reads only
    /// makes the count smaller. A request the disk has marked complete whose completion has
    /// not run yet (a deferred softirq) makes it larger, which is why [`Run::settle`] waits
    /// for the count to stay the same.
    fn held_beyond_in_flight(skel: &StacksSkel<'_>, before: u64) -> (u64, u64) {
        let in_flight: DisksInFlight = disks_in_flight();
        let mut held: DisksInFlight = HashMap::new();
        for (issued, major, minor) in bpf::held_block_requests(skel) {
            if issued < before {
                *held.entry((major, minor)).or_default() += 1;
            }
        }
        let unseen = held
            .iter()
            .filter_map(|(disk, n)| in_flight.get(disk).map(|f| n.saturating_sub(*f)))
            .sum();
        (unseen, held.values().sum())
    }
}

impl Run for Unseen {
    /// With the programs still attached, the requests issued before the end are read until
    /// neither they nor the count beyond the disks' changed for [`SETTLE_QUIET`] (at most
    /// [`SETTLE_MOST`]): completions still on their way then run in our programs, not after
    /// the detach, where they would look unseen.
    fn settle(&mut self, skel: &StacksSkel<'_>) {
        let (start, before) = (Instant::now(), host::boot_ns());
        let mut last = Self::held_beyond_in_flight(skel, before);
        let mut quiet_since = Instant::now();
        while last.0 > 0 && start.elapsed() < SETTLE_MOST && quiet_since.elapsed() < SETTLE_QUIET {
            std::thread::sleep(SETTLE_POLL);
            let now = Self::held_beyond_in_flight(skel, before);
            if now != last {
                (last, quiet_since) = (now, Instant::now());
            }
        }
        self.unseen = last.0;
    }

    fn lost(&mut self, _skel: &StacksSkel<'_>) -> Vec<(String, u64)> {
        vec![(lost::COMPLETION_UNSEEN_BLOCK.to_string(), self.unseen)]
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
