//! The counting probes' table turned into records: each (probe, thread, stacks) entry taken
//! out of `probe_counts` becomes a `STACKS_EV_PROBE` record whose header count is its hits,
//! its stacks copied from the stack tables, so it is converted like any record.

use libbpf_rs::{MapCore, MapFlags};

use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{stacks_probe, stacks_probe_count, stacks_probe_key};
use crate::kernel::event::{HEADER_SIZE, Header, INFO_OFFSET, Kind, NOT_REQUESTED, UFRAME_SIZE};

/// `nargs` of a counting-table record: it stands for many hits and carries no arguments.
pub(crate) const COUNTED: u32 = u32::MAX;

/// Set in a user stack id from the second user stack table (`STACKS_PROBE_USTACK2`).
const USTACK2: i32 = 1 << 30;

/// `-ENOENT`: the stack's id was no longer in its table.
const STACK_GONE: i32 = -2;

/// Take every entry out of the counting table and hand each, as record bytes, to `each`.
/// Returns how many entries were taken.
pub(crate) fn drain(skel: &StacksSkel<'_>, mut each: impl FnMut(&[u8])) -> usize {
    let map = &skel.maps.probe_counts;
    if map.max_entries() <= 1 {
        return 0;
    }
    let keys: Vec<Vec<u8>> = map.keys().collect();
    let mut record = Vec::with_capacity(HEADER_SIZE + 127 * (8 + UFRAME_SIZE));
    let mut taken = 0;
    for k in keys {
        // Taken out atomically: a hit after this starts a new entry.
        let Ok(Some(v)) = map.lookup_and_delete(&k) else {
            continue;
        };
        if k.len() != size_of::<stacks_probe_key>() || v.len() != size_of::<stacks_probe_count>() {
            continue;
        }
        // SAFETY: both have their struct's size and are plain integers (any bits are valid).
        let (key, count) = unsafe {
            (
                std::ptr::read_unaligned(k.as_ptr().cast::<stacks_probe_key>()),
                std::ptr::read_unaligned(v.as_ptr().cast::<stacks_probe_count>()),
            )
        };
        build(skel, &key, &count, &mut record);
        each(&record);
        taken += 1;
    }
    taken
}

/// Write the record of one counting-table entry into `out`.
fn build(
    skel: &StacksSkel<'_>,
    key: &stacks_probe_key,
    count: &stacks_probe_count,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.resize(HEADER_SIZE, 0);
    let (kframes, kstack_len) = stack(&skel.maps.probe_kstacks, key.kstack, 8, |f| {
        f.iter().any(|&b| b != 0)
    });
    let (utable, uid) = if key.ustack >= 0 && key.ustack & USTACK2 != 0 {
        (&skel.maps.probe_ustacks2, key.ustack & !USTACK2)
    } else {
        (&skel.maps.probe_ustacks, key.ustack)
    };
    let (uframes, ustack_len) = stack(utable, uid, UFRAME_SIZE, |f| {
        // A frame's status (its first 4 bytes) is 0 past the end of the stack.
        f[..4] != [0; 4]
    });
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
    // SAFETY: `out` holds HEADER_SIZE bytes: room for the header at 0 and the union member
    // at INFO_OFFSET (event.rs checks the layout).
    unsafe {
        std::ptr::write_unaligned(out.as_mut_ptr().cast::<Header>(), h);
        std::ptr::write_unaligned(
            out.as_mut_ptr().add(INFO_OFFSET).cast::<stacks_probe>(),
            info,
        );
    }
    out.extend_from_slice(&kframes);
    out.extend_from_slice(&uframes);
}

/// The frames of stack `id` in `table` (frames of `size` bytes, `used` telling a frame from
/// the zeroed rest) and the stack length for the header: frames, the capture's -errno, or
/// NOT_REQUESTED.
fn stack(
    table: &impl MapCore,
    id: i32,
    size: usize,
    used: impl Fn(&[u8]) -> bool,
) -> (Vec<u8>, i32) {
    if id == NOT_REQUESTED || id < 0 {
        return (Vec::new(), id);
    }
    match table.lookup(&id.to_ne_bytes(), MapFlags::ANY) {
        Ok(Some(mut bytes)) => {
            let n = bytes.chunks_exact(size).take_while(|f| used(f)).count();
            bytes.truncate(n * size);
            (bytes, n as i32)
        }
        _ => (Vec::new(), STACK_GONE),
    }
}
