//! The path generation of `vfs` records (bpf/kinds/vfs.bpf.h `path_gen`): the kernel sends a
//! file's walked path once per generation, user space keeps what it was sent and starts a new
//! generation when it lets those paths go (`FileNames`); this writes it where the programs
//! read it.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::kernel::abi::StacksSkel;

/// `path_gen` in the BPF object's .bss (memory-mapped).
pub(crate) struct PathGeneration {
    generation: *const AtomicU32,
}

impl PathGeneration {
    /// The skeleton must outlive it.
    pub(crate) fn new(skel: &mut StacksSkel<'_>) -> Option<Self> {
        let bss = skel.maps.bss_data.as_deref_mut()?;
        let generation = (&raw mut bss.path_gen).cast::<AtomicU32>().cast_const();
        Some(Self { generation })
    }

    /// Programs send paths again from generation `g` on (no-op when it is the current one).
    pub(crate) fn set(&self, g: u32) {
        // SAFETY: the pointer is into the skeleton's mapped .bss, which outlives `self` (see
        // `new`); the BPF side reads it, user space alone writes it, atomically.
        let at = unsafe { &*self.generation };
        if at.load(Ordering::Relaxed) != g {
            at.store(g, Ordering::SeqCst);
        }
    }
}
