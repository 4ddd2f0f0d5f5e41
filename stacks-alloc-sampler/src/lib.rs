//! The allocation sampler of `-e alloc`, shared by the producers (libstacks_alloc.so for glibc
//! malloc, tracing-stacks' `SampledAlloc` for Rust's global allocator): whether an allocation
//! is sampled ([`sampler`]), the sampled pointers still allocated ([`live`]), and the USDT probes
//! `stacks:alloc` (ptr, size, weight, tracked: 1 when its free will be reported) and
//! `stacks:free` (ptr, size) stacks-record attaches to. Nothing here allocates, so it can run
//! inside an allocator.
//!
//! Sampling is a Poisson process over allocated bytes, as in tcmalloc, jemalloc, heapprofd and
//! Go's MemProfileRate: each thread counts down an exponentially distributed number of bytes
//! (mean `STACKS_ALLOC_INTERVAL`, default 512 KiB); the allocation that crosses zero is sampled
//! and the countdown drawn again. The fast path is a thread-local subtract and compare. A
//! sampled allocation of `s` bytes stands for `s / (1 - exp(-s / I))` bytes (its weight), so
//! summed weights estimate bytes allocated without bias, whatever the sizes.

#![warn(unreachable_pub)]

use std::ffi::c_void;

pub mod live;
pub mod sampler;

/// USDT provider of the probes.
pub const PROVIDER: &str = "stacks";

/// After an allocation of `size` bytes returned `p`: when its bytes are sampled, keep the
/// pointer and fire `stacks:alloc`. Returns `p`.
#[inline(always)]
pub fn after_alloc(p: *mut c_void, size: usize) -> *mut c_void {
    if !p.is_null()
        && let Some(w) = sampler::sample(size)
    {
        sampled(p, size, w);
    }
    p
}

/// After a sampled allocation (its weight from [`sampler::due`]) of `size` bytes returned `p`:
/// keep the pointer and fire `stacks:alloc`, unless the allocation failed. Returns `p`.
#[inline(always)]
pub fn report_alloc(p: *mut c_void, size: usize, weight: u64) -> *mut c_void {
    if !p.is_null() {
        sampled(p, size, weight);
    }
    p
}

/// Before `p` goes back to the allocator: when it is a kept sampled pointer, forget it and
/// fire `stacks:free` (before the block can be reused by another thread).
#[inline(always)]
pub fn before_free(p: *mut c_void) {
    if live::maybe(p as usize) {
        freed(p);
    }
}

/// A sampled allocation: keep its pointer and fire the probe. Its own function, never inlined,
/// so the probe's stack is this frame, the allocating function's, then its caller's.
#[cold]
#[inline(never)]
fn sampled(p: *mut c_void, size: usize, weight: u64) {
    // Whether its free will be reported: not when the table of sampled pointers is full.
    let tracked = live::insert(p as usize, size);
    probe::probe!(
        stacks,
        alloc,
        p as isize,
        size as isize,
        weight as isize,
        isize::from(tracked)
    );
}

/// Whether `p` may be a kept sampled pointer (almost always false: one load): if so, the
/// caller calls [`report_free`] before giving it back.
#[inline(always)]
pub fn maybe_sampled(p: *mut c_void) -> bool {
    live::maybe(p as usize)
}

/// When `p` is a kept sampled pointer: forget it and fire `stacks:free`.
#[cold]
#[inline(never)]
pub fn report_free(p: *mut c_void) {
    freed(p);
}

#[cold]
#[inline(never)]
fn freed(p: *mut c_void) {
    if let Some(size) = live::remove(p as usize) {
        probe::probe!(stacks, free, p as isize, size as isize);
    }
}
