//! Records made in user space from the kernel's summing tables (counting probes' hits, IO
//! events aggregated while their ring buffer was backed up): entries taken out of a hash
//! table, the stacks their keys name looked up in stack tables, and the record assembled as
//! the ring buffer would have carried it, so it is converted like any record.

use libbpf_rs::{MapCore, MapFlags};

use crate::kernel::event::{
    HEADER_SIZE, Header, INFO_OFFSET, InfoMember, NOT_REQUESTED, UFRAME_SIZE,
};

/// `-ENOENT`: the stack's id was no longer in its table.
const STACK_GONE: i32 = -2;

/// A plain-integer struct shared with the BPF side (generated from bpf/stacks.h).
///
/// # Safety
/// Every bit pattern of the type's size must be a valid value.
pub(crate) unsafe trait Plain: Copy {}

/// `bytes` as `T`, when they have its size.
pub(crate) fn read<T: Plain>(bytes: &[u8]) -> Option<T> {
    // SAFETY: the length is T's size, and T is valid for every bit pattern (Plain).
    (bytes.len() == size_of::<T>())
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Take every entry out of `table` (each atomically: an update after this starts a new
/// entry), as (key, value) of the given types; entries of another size are skipped.
pub(crate) fn take<K: Plain, V: Plain>(table: &impl MapCore) -> Vec<(K, V)> {
    let keys: Vec<Vec<u8>> = table.keys().collect();
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        if let Ok(Some(v)) = table.lookup_and_delete(&k)
            && let (Some(key), Some(value)) = (read::<K>(&k), read::<V>(&v))
        {
            out.push((key, value));
        }
    }
    out
}

/// Delete every entry of `table` (a stack table whose ids are no longer referenced).
pub(crate) fn clear(table: &impl MapCore) {
    let keys: Vec<Vec<u8>> = table.keys().collect();
    for k in keys {
        let _ = table.delete(&k);
    }
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

/// Kernel stack `id` of a kernel stack table: its addresses and length (see [`stack`]).
pub(crate) fn kernel_stack(table: &impl MapCore, id: i32) -> (Vec<u8>, i32) {
    stack(table, id, 8, |f| f.iter().any(|&b| b != 0))
}

/// User stack `id` of a build-id stack table: its frames and length (see [`stack`]).
pub(crate) fn user_stack(table: &impl MapCore, id: i32) -> (Vec<u8>, i32) {
    // A frame's status (its first 4 bytes) is 0 past the end of the stack.
    stack(table, id, UFRAME_SIZE, |f| f[..4] != [0; 4])
}

/// Write a record into `out`: header `h` (its stack lengths those of the frames given), the
/// kind's union member `info`, the kernel frames, then the user frames.
pub(crate) fn assemble<T: InfoMember>(
    out: &mut Vec<u8>,
    h: Header,
    info: T,
    kframes: &[u8],
    uframes: &[u8],
) {
    const { assert!(INFO_OFFSET + size_of::<T>() <= HEADER_SIZE) };
    out.clear();
    out.resize(HEADER_SIZE, 0);
    // SAFETY: `out` holds HEADER_SIZE bytes: room for the header at 0 and the union member
    // at INFO_OFFSET (checked above and in event.rs).
    unsafe {
        std::ptr::write_unaligned(out.as_mut_ptr().cast::<Header>(), h);
        std::ptr::write_unaligned(out.as_mut_ptr().add(INFO_OFFSET).cast::<T>(), info);
    }
    out.extend_from_slice(kframes);
    out.extend_from_slice(uframes);
}
