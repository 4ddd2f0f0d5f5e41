//! Taking out what the kernel aggregated (bpf/aggregate.bpf.h): IO events summed per thread,
//! stacks, operation, file or connection and latency bucket while the IO ring buffer was backed
//! up. Once a second the generation the programs write is flipped; once the old one is quiet
//! its entries become records (header count = the events summed), converted like any record,
//! and its stack tables are cleared for its next turn.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::MapCore;

use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{stacks_agg, stacks_agg_key};
use crate::kernel::event::{HEADER_SIZE, Header, Kind, UFRAME_SIZE};
use crate::kernel::tables::{self, Plain};
use crate::kinds;

// SAFETY: plain integers and byte arrays (bpf/stacks.h).
unsafe impl Plain for stacks_agg_key {}
// SAFETY: as above.
unsafe impl Plain for stacks_agg {}

/// How long after a flip the old generation is taken: programs that read the generation
/// before the flip have long finished (a tracepoint's program runs without being preempted).
const QUIET: Duration = Duration::from_millis(20);

/// The generations of the aggregation tables, as user space drives them.
pub(crate) struct Aggregation {
    /// `agg_gen` in the BPF object's .bss (memory-mapped): the generation programs write.
    generation: *const AtomicU32,
    /// When the generation was last flipped, while the old one waits to be taken.
    flipped: Option<Instant>,
    /// Entries taken (rows made).
    pub(crate) entries: u64,
}

impl Aggregation {
    /// The driver of `skel`'s tables; `None` when they are not in use (no kind of the IO ring
    /// recorded). The skeleton must outlive it.
    pub(crate) fn new(skel: &mut StacksSkel<'_>) -> Option<Self> {
        if skel.maps.agg_events0.max_entries() <= 1 {
            return None;
        }
        let bss = skel.maps.bss_data.as_deref_mut()?;
        let generation = (&raw mut bss.agg_gen).cast::<AtomicU32>().cast_const();
        Some(Self {
            generation,
            flipped: None,
            entries: 0,
        })
    }

    fn generation(&self) -> &AtomicU32 {
        // SAFETY: the pointer is into the skeleton's mapped .bss, which outlives `self` (see
        // `new`); the BPF side reads it, user space alone writes it, atomically.
        unsafe { &*self.generation }
    }

    /// Once a second: programs go on in the other generation (unless the last flip's old
    /// generation is still to be taken).
    pub(crate) fn flip(&mut self) {
        if self.flipped.is_none() {
            self.generation().fetch_xor(1, Ordering::SeqCst);
            self.flipped = Some(Instant::now());
        }
    }

    /// At every poll: once the old generation is quiet, its entries as records to `each`.
    pub(crate) fn poll(&mut self, skel: &StacksSkel<'_>, each: impl FnMut(&[u8])) {
        if self.flipped.is_some_and(|t| t.elapsed() >= QUIET) {
            let old = self.generation().load(Ordering::SeqCst) ^ 1;
            self.take(skel, old, each);
            self.flipped = None;
        }
    }

    /// At the end, with the programs detached: both generations.
    pub(crate) fn finish(&mut self, skel: &StacksSkel<'_>, mut each: impl FnMut(&[u8])) {
        self.take(skel, 0, &mut each);
        self.take(skel, 1, &mut each);
        self.flipped = None;
    }

    fn take(&mut self, skel: &StacksSkel<'_>, generation: u32, mut each: impl FnMut(&[u8])) {
        let m = &skel.maps;
        let (events, kstacks, ustacks) = if generation & 1 == 0 {
            (&m.agg_events0, &m.agg_kstacks0, &m.agg_ustacks0)
        } else {
            (&m.agg_events1, &m.agg_kstacks1, &m.agg_ustacks1)
        };
        let entries = tables::take::<stacks_agg_key, stacks_agg>(events);
        let mut record = Vec::with_capacity(HEADER_SIZE + 127 * (8 + UFRAME_SIZE));
        for (key, sums) in &entries {
            let Some(kind) = kinds::for_record(Kind(key.kind)) else {
                continue;
            };
            let (kframes, kstack_len) = tables::kernel_stack(kstacks, key.kstack);
            let (uframes, ustack_len) = tables::user_stack(ustacks, key.ustack);
            let h = Header {
                ts: sums.first_ts,
                kind: Kind(key.kind),
                pid: key.pid,
                tid: key.tid,
                cpu: sums.cpu,
                kstack_len,
                ustack_len,
                count: u32::try_from(sums.count).unwrap_or(u32::MAX),
                comm: sums.comm,
                thread: sums.thread,
                cgroup: sums.cgroup,
                ..Header::default()
            };
            if kind.aggregated(key, sums, h, [&kframes, &uframes], &mut record) {
                each(&record);
                self.entries += 1;
            }
        }
        if !entries.is_empty() {
            tables::clear(kstacks);
            tables::clear(ustacks);
        }
    }
}
