//! The BPF object's globals that user space writes while the programs run (in its .bss,
//! memory-mapped): each a 32- or 64-bit word the programs read, user space alone writes.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::abi::StacksSkel;
use super::abi::types::bss;

/// One 32-bit global of the .bss.
pub(crate) struct Global {
    at: *const AtomicU32,
}

impl Global {
    /// The global `field` picks out of the .bss; `None` when the object has no .bss. The
    /// skeleton must outlive it.
    pub(crate) fn new(skel: &mut StacksSkel<'_>, field: fn(&mut bss) -> &mut u32) -> Option<Self> {
        let bss = skel.maps.bss_data.as_deref_mut()?;
        let at = std::ptr::from_mut(field(bss))
            .cast::<AtomicU32>()
            .cast_const();
        Some(Self { at })
    }

    /// Set it (nothing is written when it holds `v` already).
    pub(crate) fn set(&self, v: u32) {
        // SAFETY: the pointer is into the skeleton's mapped .bss, which outlives `self` (see
        // `new`); the BPF side reads it, user space alone writes it, atomically.
        let at = unsafe { &*self.at };
        if at.load(Ordering::Relaxed) != v {
            at.store(v, Ordering::SeqCst);
        }
    }
}

/// One 64-bit global of the .bss (the settings of control.bpf.h).
pub(crate) struct Global64 {
    at: *const AtomicU64,
}

impl Global64 {
    /// The global `field` picks out of the .bss; `None` when the object has no .bss. The
    /// skeleton must outlive it.
    pub(crate) fn new(skel: &mut StacksSkel<'_>, field: fn(&mut bss) -> &mut u64) -> Option<Self> {
        let bss = skel.maps.bss_data.as_deref_mut()?;
        let at = std::ptr::from_mut(field(bss))
            .cast::<AtomicU64>()
            .cast_const();
        Some(Self { at })
    }

    /// Set it.
    pub(crate) fn set(&self, v: u64) {
        // SAFETY: as for `Global::set`: a naturally aligned u64 of the mapped .bss, which
        // outlives `self`; user space alone writes it, atomically.
        unsafe { &*self.at }.store(v, Ordering::SeqCst);
    }
}
