//! `SampledAlloc`: a Rust global allocator wrapper that samples allocations by bytes and fires
//! the USDT probes of `stacks-record -e alloc` (stacks-alloc-sampler), for Rust programs, which
//! do not go through a preloaded malloc when their allocator is not the C library's. One line
//! in `main.rs`:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: tracing_stacks::SampledAlloc<std::alloc::System> =
//!     tracing_stacks::SampledAlloc::new(std::alloc::System);
//! ```
//!
//! The mean bytes between samples is `STACKS_ALLOC_INTERVAL` (stacks-record sets it for a
//! command it starts; default 512 KiB), read at the first sample. Its cost with no recorder
//! attached is a thread-local subtract and compare per allocation, and a table lookup filter
//! per free.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use stacks_alloc_sampler::{after_alloc, before_free, live};

/// Wraps allocator `A`: every allocation goes to `A`; the sampled ones are reported.
pub struct SampledAlloc<A> {
    inner: A,
}

impl<A> SampledAlloc<A> {
    pub const fn new(inner: A) -> Self {
        Self { inner }
    }
}

/// Whether the fork handlers of the table of sampled pointers are registered.
static FORK_READY: AtomicBool = AtomicBool::new(false);

/// Register the fork handlers once, outside the allocator's own calls (they allocate with the
/// C library's malloc, never with this allocator).
#[inline(always)]
fn ready() {
    if !FORK_READY.load(Ordering::Relaxed) && !FORK_READY.swap(true, Ordering::Relaxed) {
        live::at_fork();
    }
}

/// After an allocation: the sampler's decision, reported with the requested size.
#[inline(always)]
fn allocated(p: *mut u8, size: usize) -> *mut u8 {
    after_alloc(p.cast::<c_void>(), size).cast::<u8>()
}

// SAFETY: every call is forwarded to `inner` with its arguments unchanged; the sampler only
// reads the pointers and sizes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for SampledAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ready();
        // SAFETY: the caller's contract, forwarded.
        allocated(unsafe { self.inner.alloc(layout) }, layout.size())
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ready();
        // SAFETY: the caller's contract, forwarded.
        allocated(unsafe { self.inner.alloc_zeroed(layout) }, layout.size())
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        before_free(ptr.cast::<c_void>());
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // As free and malloc: the old block is reported freed (a failed realloc, which keeps
        // it, then loses its later free: rare, and never counted twice).
        before_free(ptr.cast::<c_void>());
        // SAFETY: the caller's contract, forwarded.
        allocated(
            unsafe { self.inner.realloc(ptr, layout, new_size) },
            new_size,
        )
    }
}
