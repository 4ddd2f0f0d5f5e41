//! A cache that keeps what was used recently: two generations of a map, the older dropped
//! when the cache ages, so it holds what the last one or two periods used, not everything
//! ever put in it (the long tail of a host's return addresses, and the garbage addresses of
//! broken frame-pointer chains, each seen once).

use std::hash::Hash;

use crate::fx::FxMap;

/// Two generations: `young` takes what is put in and what is used again; `old` is what the
/// previous period used and this one has not yet.
pub(crate) struct Recent<K, V> {
    young: FxMap<K, V>,
    old: FxMap<K, V>,
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Self {
            young: FxMap::default(),
            old: FxMap::default(),
        }
    }
}

impl<K: Hash + Eq, V> Recent<K, V> {
    /// Whether `k` is held; one of the older generation moves to the younger (it is used).
    pub(crate) fn keep(&mut self, k: &K) -> bool
    where
        K: Clone,
    {
        if self.young.contains_key(k) {
            return true;
        }
        match self.old.remove(k) {
            Some(v) => {
                self.young.insert(k.clone(), v);
                true
            }
            None => false,
        }
    }

    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        self.young.get(k).or_else(|| self.old.get(k))
    }

    pub(crate) fn insert(&mut self, k: K, v: V) {
        self.young.insert(k, v);
    }

    pub(crate) fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// A period ends: what the one before used and this one did not is dropped, and returned.
    pub(crate) fn age(&mut self) -> FxMap<K, V> {
        std::mem::replace(&mut self.old, std::mem::take(&mut self.young))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_used_for_a_whole_period_is_dropped() {
        let mut c: Recent<u64, &str> = Recent::default();
        c.insert(1, "one");
        c.insert(2, "two");
        c.age();
        assert_eq!(
            (c.len(), c.get(&1), c.get(&2)),
            (2, Some(&"one"), Some(&"two"))
        );
        // 1 is used in this period, 2 is not.
        assert!(c.keep(&1));
        c.insert(3, "three");
        c.age();
        assert_eq!(c.get(&2), None, "unused for a whole period");
        assert_eq!((c.get(&1), c.get(&3)), (Some(&"one"), Some(&"three")));
        assert!(!c.keep(&2));
        c.age();
        c.age();
        assert_eq!(c.len(), 0);
    }
}
