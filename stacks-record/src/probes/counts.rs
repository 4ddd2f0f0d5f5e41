//! The counting probes' table turned into records: each (probe, thread, stacks) entry taken
//! out of `probe_counts` becomes a `STACKS_EV_PROBE` record whose header count is its hits,
//! its stacks copied from the stack tables, so it is converted like any record.

use libbpf_rs::MapCore;

use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{stacks_probe, stacks_probe_count, stacks_probe_key};
use crate::kernel::event::{HEADER_SIZE, Header, Kind, UFRAME_SIZE};
use crate::kernel::tables::{self, Plain};

// SAFETY: plain integers and byte arrays (bpf/stacks.h).
unsafe impl Plain for stacks_probe_key {}
// SAFETY: as above.
unsafe impl Plain for stacks_probe_count {}

/// `nargs` of a counting-table record: it stands for many hits and carries no arguments.
pub(crate) const COUNTED: u32 = u32::MAX;

/// Set in a user stack id from the second user stack table (`STACKS_PROBE_USTACK2`).
const USTACK2: i32 = 1 << 30;

/// Take every entry out of the counting table and hand each, as record bytes, to `each`.
/// Returns how many entries were taken.
pub(crate) fn drain(skel: &StacksSkel<'_>, mut each: impl FnMut(&[u8])) -> usize {
    let map = &skel.maps.probe_counts;
    if map.max_entries() <= 1 {
        return 0;
    }
    let entries = tables::take::<stacks_probe_key, stacks_probe_count>(map);
    let mut record = Vec::with_capacity(HEADER_SIZE + 127 * (8 + UFRAME_SIZE));
    for (key, count) in &entries {
        build(skel, key, count, &mut record);
        each(&record);
    }
    entries.len()
}

/// Write the record of one counting-table entry into `out`.
fn build(
    skel: &StacksSkel<'_>,
    key: &stacks_probe_key,
    count: &stacks_probe_count,
    out: &mut Vec<u8>,
) {
    let (kframes, kstack_len) = tables::kernel_stack(&skel.maps.probe_kstacks, key.kstack);
    let (utable, uid) = if key.ustack >= 0 && key.ustack & USTACK2 != 0 {
        (&skel.maps.probe_ustacks2, key.ustack & !USTACK2)
    } else {
        (&skel.maps.probe_ustacks, key.ustack)
    };
    let (uframes, ustack_len) = tables::user_stack(utable, uid);
    let h = Header {
        ts: count.first_ts,
        kind: Kind::STACKS_EV_PROBE,
        pid: key.pid,
        tid: key.tid,
        cpu: count.cpu,
        kstack_len,
        ustack_len,
        count: u32::try_from(count.hits).unwrap_or(u32::MAX),
        comm: count.comm,
        thread: count.thread,
        cgroup: count.cgroup,
        ..Header::default()
    };
    let info = stacks_probe {
        probe: key.probe,
        nargs: COUNTED,
        ..stacks_probe::default()
    };
    tables::assemble(out, h, info, &kframes, &uframes);
}
