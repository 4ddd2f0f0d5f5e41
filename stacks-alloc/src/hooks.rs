//! The exported allocator functions that interpose glibc's (C++'s `operator new`/`delete` call
//! malloc and free on glibc): each asks stacks-alloc-sampler whether its bytes are sampled, and
//! fires `stacks:alloc` for a sampled block and `stacks:free` when a kept pointer is freed,
//! before the block goes back (so its address cannot be reused by another thread in between).

use std::ffi::c_void;

use stacks_alloc_sampler::sampler::{counts_down, due};
use stacks_alloc_sampler::{after_alloc, before_free, report_alloc, report_free};

use crate::real;

/// # Safety
/// The C `malloc` contract.
///
/// In assembly (the Rust version is for other targets): no frame, no saved register (the
/// workspace forces frame pointers, which a Rust function pushes and pops around its jump).
/// The countdown (stacks-alloc-sampler's `left::sub` in place, on its TLS variable), then a
/// tail jump through the slot (the C library's malloc, or until it is looked up the
/// bootstrap's: no check of the state here), or when the countdown crossed zero (the first
/// malloc of every thread does: it starts at 0) to `crossed_malloc`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    std::arch::naked_asm!(
        ".cfi_startproc",
        concat!("mov rax, qword ptr [rip + ", stacks_alloc_sampler::countdown_symbol!(), "@GOTTPOFF]"),
        "sub qword ptr fs:[rax], rdi",
        "js {crossed}",
        "jmp qword ptr [rip + {slot}]",
        ".cfi_endproc",
        crossed = sym crossed_malloc,
        slot = sym real::MALLOC,
    )
}

/// # Safety
/// The C `malloc` contract.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // The countdown, then a tail jump through the slot (the C library's malloc, or until it is
    // looked up the bootstrap's: no check of the state here). The first malloc of every thread
    // crosses it (it starts at 0).
    if counts_down(size) {
        // SAFETY: the slot's malloc; the caller's contract.
        return unsafe { real::malloc(size) };
    }
    // SAFETY: the caller's contract.
    unsafe { crossed_malloc(size) }
}

/// A malloc that crossed its thread's countdown: sampled or not (the slow path decides), the
/// allocation, then its report. Out of line (and `extern "C"`, which cannot unwind, so that
/// `malloc` tail-calls it). Before the lookup nothing is sampled (the countdown stays crossed).
#[cold]
#[inline(never)]
unsafe extern "C" fn crossed_malloc(size: usize) -> *mut c_void {
    if !real::is_ready() {
        // SAFETY: the bootstrap's malloc (or the C library's, looked up since).
        return unsafe { real::malloc(size) };
    }
    match due(size) {
        // SAFETY: the C library's malloc.
        None => unsafe { real::malloc(size) },
        // SAFETY: as above.
        Some(w) => report_alloc(unsafe { real::malloc(size) }, size, w),
    }
}

/// # Safety
/// The C `free` contract.
///
/// In assembly, as `malloc`: the filter's bucket of `p` (stacks-alloc-sampler's `live::maybe`:
/// a multiply, a shift and one load), then a tail jump through the slot, or when the bucket is
/// not 0 to `sampled_free`. Null goes to the C library's free (a no-op there, and in the
/// bootstrap's); arena blocks are pinned in the filter, so they take the slow path.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    std::arch::naked_asm!(
        ".cfi_startproc",
        "mov rax, rdi",
        "shr rax, 4",
        "movabs rcx, {mul}",
        "imul rax, rcx",
        "shr rax, {shift}",
        "mov rcx, qword ptr [rip + {counts}@GOTPCREL]",
        "cmp word ptr [rcx + 2*rax], 0",
        "jne {sampled}",
        "jmp qword ptr [rip + {slot}]",
        ".cfi_endproc",
        mul = const stacks_alloc_sampler::live::HASH_MUL as i64,
        shift = const stacks_alloc_sampler::live::BUCKET_SHIFT,
        counts = sym stacks_alloc_sampler::live::COUNTS,
        sampled = sym sampled_free,
        slot = sym real::FREE,
    )
}

/// # Safety
/// The C `free` contract.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // One filter load, then a tail jump through the slot. Null goes to the C library's free
    // (a no-op there, and in the bootstrap's); arena blocks are pinned in the filter, so they
    // take the slow path.
    if stacks_alloc_sampler::maybe_sampled(p) {
        // SAFETY: the caller's contract.
        return unsafe { sampled_free(p) };
    }
    // SAFETY: a block of the slot's allocator (not the arena's), freed once by contract.
    unsafe { real::free(p) }
}

/// A free of a block that may be a sampled one or an arena block: its report (before the
/// block can be reused by another thread), then the free. Out of line, as `crossed_malloc`.
#[cold]
#[inline(never)]
unsafe extern "C" fn sampled_free(p: *mut c_void) {
    if p.is_null() || real::in_arena(p) {
        return;
    }
    report_free(p);
    // SAFETY: a block of the C library's allocator, freed once by contract.
    unsafe { real::free(p) }
}

/// # Safety
/// The C `calloc` contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        return std::ptr::null_mut();
    };
    if counts_down(bytes) {
        // SAFETY: the slot's calloc, as in `malloc`.
        return unsafe { real::calloc(n, size) };
    }
    // SAFETY: the caller's contract.
    unsafe { crossed_calloc(n, size) }
}

/// A calloc that crossed its thread's countdown (as `crossed_malloc`; `n * size` does not
/// overflow: `calloc` checked).
#[cold]
#[inline(never)]
unsafe extern "C" fn crossed_calloc(n: usize, size: usize) -> *mut c_void {
    if !real::is_ready() {
        // SAFETY: the bootstrap's calloc (or the C library's, looked up since).
        return unsafe { real::calloc(n, size) };
    }
    match due(n * size) {
        // SAFETY: the C library's calloc.
        None => unsafe { real::calloc(n, size) },
        // SAFETY: as above.
        Some(w) => report_alloc(unsafe { real::calloc(n, size) }, n * size, w),
    }
}

/// # Safety
/// The C `realloc` contract. A realloc is a free of the old block and an allocation of the
/// new size (as jemalloc and Go count it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        // SAFETY: realloc(NULL, n) is malloc(n).
        return unsafe { malloc(size) };
    }
    if real::in_arena(p) {
        // SAFETY: a fresh block, and the arena block's bytes, both valid for the copy.
        unsafe {
            let q = malloc(size);
            if !q.is_null() {
                let n = real::arena_size(p).min(size);
                std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), n);
            }
            return q;
        }
    }
    if !real::ready() {
        return std::ptr::null_mut();
    }
    before_free(p);
    // SAFETY: a block of the C library's allocator, by contract.
    let q = unsafe { real::realloc(p, size) };
    if size == 0 { q } else { after_alloc(q, size) }
}

/// # Safety
/// The C `reallocarray` contract (glibc's calls its realloc internally, past us).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: as realloc.
        Some(bytes) => unsafe { realloc(p, bytes) },
        None => {
            // SAFETY: errno of this thread.
            unsafe { *libc::__errno_location() = libc::ENOMEM };
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// The C `posix_memalign` contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !real::ready() {
        let p = real::arena_alloc(size, align);
        if p.is_null() {
            return libc::ENOMEM;
        }
        // SAFETY: `out` is valid for a write by contract.
        unsafe { *out = p };
        return 0;
    }
    // SAFETY: the C library's posix_memalign.
    let rc = unsafe { real::posix_memalign(out, align, size) };
    if rc == 0 {
        // SAFETY: set by a successful posix_memalign.
        after_alloc(unsafe { *out }, size);
    }
    rc
}

/// # Safety
/// The C `aligned_alloc` contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !real::ready() {
        return real::arena_alloc(size, align);
    }
    // SAFETY: the C library's aligned_alloc.
    after_alloc(unsafe { real::aligned_alloc(align, size) }, size)
}

/// # Safety
/// The C `memalign` contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    if !real::ready() {
        return real::arena_alloc(size, align);
    }
    // SAFETY: the C library's memalign.
    after_alloc(unsafe { real::memalign(align, size) }, size)
}

/// Look the C library's functions up when the library is loaded, before the program runs.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = {
    extern "C" fn init() {
        let _ = real::ready();
    }
    init
};
