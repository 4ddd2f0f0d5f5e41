//! Counting the distinct stacks of a stream in bounded memory: exactly while there are at
//! most [`EXACT`], then estimated from the [`SKETCH`] smallest ids (a k-minimum-values sketch:
//! ids are uniform 128-bit hashes, so the k-th smallest of n distinct ids is about k/n of the
//! id space; relative error about 1/√k, 1.6%). A packer that keeps only the stacks of its open
//! file still reports the stream's distinct stacks without holding every id it saw.

use std::collections::{BTreeSet, HashSet};

use crate::StackId;

/// Distinct ids counted exactly.
pub(super) const EXACT: usize = 1 << 16;

/// Ids the estimate keeps past [`EXACT`].
pub(super) const SKETCH: usize = 4096;

/// The distinct ids of a stream, counted; see the module documentation.
#[derive(Debug, Default)]
pub struct DistinctCount {
    exact: HashSet<u64, ahash::RandomState>,
    /// Past [`EXACT`]: the smallest ids.
    sketch: Option<BTreeSet<u64>>,
}

/// The first 64 bits of an id (uniform, as the whole id is).
fn prefix(id: &StackId) -> u64 {
    u64::from_be_bytes(id[..8].try_into().expect("8 bytes"))
}

impl DistinctCount {
    /// Count `id` (again, when it was seen: it counts once).
    pub fn add(&mut self, id: &StackId) {
        let x = prefix(id);
        match &mut self.sketch {
            None => {
                self.exact.insert(x);
                if self.exact.len() > EXACT {
                    let mut all: Vec<u64> = self.exact.drain().collect();
                    all.sort_unstable();
                    all.truncate(SKETCH);
                    self.exact = HashSet::default();
                    self.sketch = Some(all.into_iter().collect());
                }
            }
            Some(s) => {
                let largest = *s.last().expect("a full sketch");
                if x < largest && s.insert(x) {
                    s.pop_last();
                }
            }
        }
    }

    /// The count, and whether it is an estimate.
    pub fn get(&self) -> (u64, bool) {
        match &self.sketch {
            None => (self.exact.len() as u64, false),
            Some(s) => {
                let kth = *s.last().expect("a full sketch") as f64 + 1.0;
                let space = u64::MAX as f64 + 1.0;
                (((SKETCH - 1) as f64 * space / kth).round() as u64, true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> StackId {
        // Spread like stack ids: a hash of n (splitmix64).
        let mut h = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&h.to_be_bytes());
        id
    }

    #[test]
    fn exact_then_estimated_within_a_few_percent() {
        let mut c = DistinctCount::default();
        for n in 0..1000 {
            c.add(&id(n));
            c.add(&id(n));
        }
        assert_eq!(c.get(), (1000, false));
        for n in 0..400_000 {
            c.add(&id(n));
        }
        let (got, estimated) = c.get();
        assert!(estimated);
        let err = (got as f64 - 400_000.0).abs() / 400_000.0;
        assert!(err < 0.05, "estimate {got} of 400000");
        for n in 0..400_000 {
            c.add(&id(n));
        }
        assert_eq!(c.get(), (got, true), "repeats do not count");
    }
}
