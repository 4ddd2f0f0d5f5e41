//! libstacks_alloc.so: an `LD_PRELOAD` library that samples the allocations of a C/C++ (or any
//! glibc malloc) program by bytes, and fires a USDT probe for each sampled allocation and for
//! the free of each sampled pointer, for `stacks-record -e alloc` (docs/heap.md).
//!
//! The sampling itself, the table of sampled pointers and the probes are stacks-alloc-sampler's
//! (shared with tracing-stacks' `SampledAlloc` for Rust programs).

#![warn(unreachable_pub)]
// The unit tests leave the exported hooks out (the test binary would interpose its own malloc),
// and with them the callers of `real`.
#![cfg_attr(test, allow(dead_code))]

mod real;

#[cfg(not(test))]
pub mod hooks;

/// USDT provider of the probes (`stacks:alloc` (ptr, size, weight, tracked: 1 when its free will
/// be reported), `stacks:free` (ptr, size)): stacks-alloc-sampler's.
pub use stacks_alloc_sampler::PROVIDER;
