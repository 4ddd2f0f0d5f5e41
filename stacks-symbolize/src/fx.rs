//! FxHash, the fast non-cryptographic hash of rustc, for the per-frame maps: their keys are
//! short (ids, offsets, names from the stream) and attacker control is not a concern.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash: a fast hash for the short keys of the per-frame maps.
#[derive(Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64)
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64)
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i)
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64)
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Fx {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A HashMap with [`Fx`].
pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;
/// A set hashed with [`Fx`].
pub(crate) type FxSet<K> = std::collections::HashSet<K, BuildHasherDefault<Fx>>;
