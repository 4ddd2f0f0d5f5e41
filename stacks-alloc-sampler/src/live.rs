//! The sampled pointers still allocated, so that `free` fires its probe only for them: a
//! counting filter every `free` reads (one relaxed load of an L1/L2-resident counter: almost
//! always 0, and then nothing else is done) in front of sharded, spin-locked open-addressing
//! tables (linear probing, backward-shift deletion) holding each pointer and its size.
//! Fixed-size and static: nothing here allocates, so it can run inside malloc.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};

const SHARDS: usize = 64;
const SLOTS: usize = 2048;
/// A shard takes no more than this many pointers (75% full): past it a sampled allocation is
/// reported but its free is not (counted in [`UNTRACKED`]).
const MAX_FILL: usize = SLOTS * 3 / 4;
const FILTER_BITS: u32 = 14;
const FILTER: usize = 1 << FILTER_BITS;

/// The filter's hash: the bucket of pointer `p` is `((p >> 4) * HASH_MUL) >> BUCKET_SHIFT`
/// (public for libstacks_alloc.so's `free`, which computes it in assembly).
pub const HASH_MUL: u64 = 0x9e37_79b9_7f4a_7c15;
/// See [`HASH_MUL`].
pub const BUCKET_SHIFT: u32 = 64 - FILTER_BITS;

/// Sampled allocations whose pointer could not be kept (their shard was full).
pub(crate) static UNTRACKED: AtomicU64 = AtomicU64::new(0);

struct Shard {
    lock: AtomicBool,
    table: UnsafeCell<Table>,
}

struct Table {
    len: usize,
    /// (pointer, size); pointer 0: empty.
    slots: [(usize, usize); SLOTS],
}

// SAFETY: `table` is only touched with `lock` held.
unsafe impl Sync for Shard {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SHARD: Shard = Shard {
    lock: AtomicBool::new(false),
    table: UnsafeCell::new(Table {
        len: 0,
        slots: [(0, 0); SLOTS],
    }),
};

static SHARD: [Shard; SHARDS] = [EMPTY_SHARD; SHARDS];
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU16 = AtomicU16::new(0);
/// How many kept pointers hash to each filter bucket (public for libstacks_alloc.so's `free`,
/// which reads it in assembly: anything else goes through [`maybe`], [`insert`], [`remove`] and
/// [`pin`]).
#[doc(hidden)]
pub static COUNTS: [AtomicU16; FILTER] = [ZERO; FILTER];

fn hash(p: usize) -> u64 {
    ((p as u64) >> 4).wrapping_mul(HASH_MUL)
}

fn bucket(h: u64) -> usize {
    (h >> BUCKET_SHIFT) as usize
}

fn shard(h: u64) -> &'static Shard {
    &SHARD[((h >> 32) as usize) % SHARDS]
}

fn home(h: u64) -> usize {
    (h as usize >> 7) % SLOTS
}

impl Shard {
    fn lock(&self) {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }

    fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }

    fn with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        self.lock();
        // SAFETY: the lock is held: no other reference to the table exists.
        let r = f(unsafe { &mut *self.table.get() });
        self.unlock();
        r
    }
}

/// Around `fork`: every shard is locked in the forking thread before, and unlocked in both
/// processes after, so the child never inherits a shard locked by a thread it does not have.
pub fn at_fork() {
    extern "C" fn prepare() {
        SHARD.iter().for_each(Shard::lock);
    }
    extern "C" fn after() {
        SHARD.iter().for_each(Shard::unlock);
    }
    // SAFETY: three valid handlers of no arguments, registered once (from `real::init`).
    unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
}

/// Keep sampled pointer `p` of `size` bytes. False when its shard is full.
pub fn insert(p: usize, size: usize) -> bool {
    let h = hash(p);
    let added = shard(h).with(|t| {
        let mut i = home(h);
        loop {
            match t.slots[i].0 {
                0 => break,
                // Freed without our free (a path of the C library that does not call free):
                // the new allocation takes its place.
                q if q == p => {
                    t.slots[i].1 = size;
                    return Some(false);
                }
                _ => i = (i + 1) % SLOTS,
            }
        }
        if t.len >= MAX_FILL {
            return None;
        }
        t.slots[i] = (p, size);
        t.len += 1;
        Some(true)
    });
    match added {
        Some(true) => {
            COUNTS[bucket(h)].fetch_add(1, Ordering::Release);
            true
        }
        Some(false) => true,
        None => {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// Make every [`maybe`] of `p` true for good, without keeping it: for a block whose free must
/// take the caller's slow path, which recognizes it (libstacks_alloc.so's bootstrap arena).
/// Never undone ([`remove`] does not find `p`, so leaves its count).
pub fn pin(p: usize) {
    COUNTS[bucket(hash(p))].fetch_add(1, Ordering::Release);
}

/// Whether `p` may be a kept pointer: the fast path of every free.
#[inline(always)]
pub fn maybe(p: usize) -> bool {
    COUNTS[bucket(hash(p))].load(Ordering::Acquire) != 0
}

/// Forget `p`; its size when it was kept.
pub fn remove(p: usize) -> Option<usize> {
    let h = hash(p);
    let size = shard(h).with(|t| {
        let mut i = home(h);
        loop {
            match t.slots[i].0 {
                0 => return None,
                q if q == p => break,
                _ => i = (i + 1) % SLOTS,
            }
        }
        let size = t.slots[i].1;
        // Backward-shift deletion: move later entries of the cluster whose home is not
        // between the hole and them into the hole, so every lookup still finds them.
        let mut hole = i;
        let mut j = (i + 1) % SLOTS;
        while t.slots[j].0 != 0 {
            let want = home(hash(t.slots[j].0));
            let dist_j = (j + SLOTS - want) % SLOTS;
            let dist_hole = (j + SLOTS - hole) % SLOTS;
            if dist_j >= dist_hole {
                t.slots[hole] = t.slots[j];
                hole = j;
            }
            j = (j + 1) % SLOTS;
        }
        t.slots[hole] = (0, 0);
        t.len -= 1;
        Some(size)
    })?;
    COUNTS[bucket(h)].fetch_sub(1, Ordering::Release);
    Some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many pointers, many of them colliding in one shard's probe sequences, are all found
    /// once and only once, in any order of removal.
    #[test]
    fn kept_pointers_are_found_until_removed() {
        let base = 0x7f00_0000_0000usize;
        let ptrs: Vec<usize> = (0..20_000).map(|i| base + i * 4096).collect();
        for (n, &p) in ptrs.iter().enumerate() {
            assert!(insert(p, n + 1), "{n}");
        }
        for &p in &ptrs {
            assert!(maybe(p));
        }
        // Remove every third first, then the rest in reverse.
        for (n, &p) in ptrs.iter().enumerate().filter(|(n, _)| n % 3 == 0) {
            assert_eq!(remove(p), Some(n + 1));
        }
        for (n, &p) in ptrs.iter().enumerate().rev().filter(|(n, _)| n % 3 != 0) {
            assert_eq!(remove(p), Some(n + 1), "{n}");
        }
        for &p in &ptrs {
            assert_eq!(remove(p), None);
            assert!(!maybe(p));
        }
        assert_eq!(UNTRACKED.load(Ordering::Relaxed), 0);

        // A pinned pointer is always maybe kept, whatever is removed (after the checks above:
        // it may share a bucket with one of theirs).
        let pinned = base - 4096;
        pin(pinned);
        assert!(maybe(pinned));
        assert_eq!(remove(pinned), None);
        assert!(maybe(pinned));
    }
}
