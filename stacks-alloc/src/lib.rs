//! libstacks_alloc.so: an `LD_PRELOAD` library that samples the allocations of a C/C++ (or any
//! glibc malloc) program by bytes, and fires a USDT probe for each sampled allocation and for
//! the free of each sampled pointer, for `stacks-record -e alloc` (docs/heap.md).
//!
//! Sampling is a Poisson process over allocated bytes, as in tcmalloc, jemalloc, heapprofd and
//! Go's MemProfileRate: each thread counts down an exponentially distributed number of bytes
//! (mean `STACKS_ALLOC_INTERVAL`, default 512 KiB); the allocation that crosses zero is sampled
//! and the countdown drawn again. The fast path is a thread-local subtract and compare. A
//! sampled allocation of `s` bytes stands for `s / (1 - exp(-s / I))` bytes (its weight), so
//! summed weights estimate bytes allocated without bias, whatever the sizes.

#![warn(unreachable_pub)]
// The unit tests leave the exported hooks out (the test binary would interpose its own malloc),
// and with them the callers of `real`.
#![cfg_attr(test, allow(dead_code))]

mod live;
mod real;
mod sampler;

#[cfg(not(test))]
pub mod hooks;

/// USDT provider of the probes (`stacks:alloc` (ptr, size, weight, tracked: 1 when its free will
/// be reported), `stacks:free` (ptr, size)).
pub const PROVIDER: &str = "stacks";
