//! The C library's allocator, found with `dlsym(RTLD_NEXT, …)` (whatever comes after us in the
//! lookup order: glibc, or another preloaded allocator), and the bootstrap arena that serves
//! the allocations made while looking it up (glibc's dlsym may call calloc for its error
//! buffer, which comes back to us before we know the real calloc).
//!
//! The slots of `malloc`, `calloc` and `free` start out holding this module's bootstrap
//! functions, which look the C library's up (or use the arena while that is under way), and
//! then hold the C library's: the hooks' fast paths jump through them with no check of the
//! state. Arena blocks are pinned in the sampler's filter of sampled pointers, so `free` finds
//! them on its slow path, never on its fast path.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

type Malloc = unsafe extern "C" fn(usize) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void);
type Calloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;
type Realloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
type PosixMemalign = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> i32;
type Memalign = unsafe extern "C" fn(usize, usize) -> *mut c_void;

/// Not looked up yet / being looked up (allocations go to the arena) / ready.
const UNINIT: u8 = 0;
const LOOKING: u8 = 1;
const READY: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNINIT);

pub(crate) static MALLOC: AtomicPtr<c_void> = AtomicPtr::new(boot_malloc as *mut c_void);
pub(crate) static FREE: AtomicPtr<c_void> = AtomicPtr::new(boot_free as *mut c_void);
static CALLOC: AtomicPtr<c_void> = AtomicPtr::new(boot_calloc as *mut c_void);
static REALLOC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static POSIX_MEMALIGN: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static ALIGNED_ALLOC: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static MEMALIGN: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Look the functions up, once (the first allocation, or the load-time constructor).
/// False while the lookup is under way (the caller uses the arena).
#[inline(always)]
pub(crate) fn ready() -> bool {
    is_ready() || init()
}

/// Whether the functions were looked up (one load; the hooks' slow paths ask, not their fast
/// paths).
#[inline(always)]
pub(crate) fn is_ready() -> bool {
    STATE.load(Ordering::Acquire) == READY
}

#[cold]
fn init() -> bool {
    match STATE.compare_exchange(UNINIT, LOOKING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        // Another thread is looking them up (or we are, reentered from dlsym): the arena.
        Err(LOOKING) => return false,
        Err(_) => return true,
    }
    stacks_alloc_sampler::sampler::configure();
    for (slot, name) in [
        (&MALLOC, c"malloc"),
        (&FREE, c"free"),
        (&CALLOC, c"calloc"),
        (&REALLOC, c"realloc"),
        (&POSIX_MEMALIGN, c"posix_memalign"),
        (&ALIGNED_ALLOC, c"aligned_alloc"),
        (&MEMALIGN, c"memalign"),
    ] {
        slot.store(lookup(name), Ordering::Relaxed);
    }
    STATE.store(READY, Ordering::Release);
    // After READY: registering may allocate.
    stacks_alloc_sampler::live::at_fork();
    true
}

fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a valid handle constant and a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if f.is_null() {
        // No allocator after us: nothing sensible can run. Say so without allocating.
        let msg =
            b"libstacks_alloc.so: no next malloc/free in the lookup order (dlsym RTLD_NEXT)\n";
        // SAFETY: writing a static buffer to stderr, then exiting.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    f
}

/// `malloc` until the C library's is looked up: looks it up, or (while the lookup is under way,
/// from this thread's dlsym or another thread's) takes the block from the arena.
unsafe extern "C" fn boot_malloc(n: usize) -> *mut c_void {
    if ready() {
        // SAFETY: looked up (and the slot now holds the C library's malloc).
        unsafe { malloc(n) }
    } else {
        arena_alloc(n, 16)
    }
}

/// `calloc` until the C library's is looked up, as `boot_malloc` (arena blocks are zeroed:
/// the arena is, and its bytes are never reused).
unsafe extern "C" fn boot_calloc(n: usize, size: usize) -> *mut c_void {
    if ready() {
        // SAFETY: as in `boot_malloc`.
        unsafe { calloc(n, size) }
    } else {
        n.checked_mul(size)
            .map_or(std::ptr::null_mut(), |b| arena_alloc(b, 16))
    }
}

/// `free` until the C library's is looked up: the hook passes null here (arena blocks are
/// pinned, and freed on its slow path), or a block of the C library's, which was allocated
/// after the lookup, so that `ready` is true here too.
unsafe extern "C" fn boot_free(p: *mut c_void) {
    if p.is_null() || in_arena(p) {
        return;
    }
    if ready() {
        // SAFETY: a block of the C library's allocator, by contract.
        unsafe { free(p) }
    }
}

macro_rules! real {
    ($slot:ident, $ty:ty) => {{
        // A bootstrap function of this type, or set by `init` to the address dlsym gave for
        // this function, of this type (callers are in unsafe blocks: the transmute is theirs).
        std::mem::transmute::<*mut c_void, $ty>($slot.load(Ordering::Relaxed))
    }};
}

pub(crate) unsafe fn malloc(n: usize) -> *mut c_void {
    // SAFETY: the C library's malloc; the caller's contract.
    unsafe { real!(MALLOC, Malloc)(n) }
}
pub(crate) unsafe fn free(p: *mut c_void) {
    // SAFETY: as above.
    unsafe { real!(FREE, Free)(p) }
}
pub(crate) unsafe fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: as above.
    unsafe { real!(CALLOC, Calloc)(n, size) }
}
pub(crate) unsafe fn realloc(p: *mut c_void, n: usize) -> *mut c_void {
    // SAFETY: as above.
    unsafe { real!(REALLOC, Realloc)(p, n) }
}
pub(crate) unsafe fn posix_memalign(out: *mut *mut c_void, align: usize, n: usize) -> i32 {
    // SAFETY: as above.
    unsafe { real!(POSIX_MEMALIGN, PosixMemalign)(out, align, n) }
}
pub(crate) unsafe fn aligned_alloc(align: usize, n: usize) -> *mut c_void {
    // SAFETY: as above.
    unsafe { real!(ALIGNED_ALLOC, Memalign)(align, n) }
}
pub(crate) unsafe fn memalign(align: usize, n: usize) -> *mut c_void {
    // SAFETY: as above.
    unsafe { real!(MEMALIGN, Memalign)(align, n) }
}

/// The bootstrap arena: a static bump area for the few allocations of the lookup itself.
/// Never freed (freeing its blocks is a no-op); each block has its size in the 16 bytes before
/// it, for realloc.
const ARENA: usize = 64 << 10;
#[repr(C, align(16))]
struct Arena([u8; ARENA]);
static mut BOOT: Arena = Arena([0; ARENA]);
static BOOT_USED: AtomicUsize = AtomicUsize::new(0);

/// A zeroed block of `n` bytes aligned to `align` (a power of two, at most 4096) from the
/// arena, or null when it is full. The block is pinned in the filter of sampled pointers, so
/// its `free` takes the slow path, which knows arena blocks.
pub(crate) fn arena_alloc(n: usize, align: usize) -> *mut c_void {
    let align = align.max(16);
    let base = (&raw mut BOOT).cast::<u8>();
    let mut used = BOOT_USED.load(Ordering::Relaxed);
    loop {
        let start = (used + 16).next_multiple_of(align);
        let Some(end) = start.checked_add(n).filter(|e| *e <= ARENA) else {
            return std::ptr::null_mut();
        };
        match BOOT_USED.compare_exchange(used, end, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                // SAFETY: [start - 16, end) is inside the arena and now ours alone.
                let p = unsafe {
                    base.add(start - 8).cast::<usize>().write(n);
                    base.add(start)
                };
                stacks_alloc_sampler::live::pin(p as usize);
                return p.cast();
            }
            Err(now) => used = now,
        }
    }
}

/// Whether `p` is a block of the arena.
pub(crate) fn in_arena(p: *const c_void) -> bool {
    let base = (&raw const BOOT) as usize;
    (base..base + ARENA).contains(&(p as usize))
}

/// The size of arena block `p`.
pub(crate) fn arena_size(p: *const c_void) -> usize {
    // SAFETY: `p` is an arena block (checked by the caller): its size is 8 bytes before it.
    unsafe { p.cast::<u8>().sub(8).cast::<usize>().read() }
}
