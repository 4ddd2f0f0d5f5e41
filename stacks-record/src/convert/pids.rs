//! The processes a recording saw, for the summary's count: one bit per pid, so the memory is
//! bounded by the highest pid (pid_max: 512 KiB at most for the kernel's 4M limit) however many
//! processes come and go, where a set of every pid seen grew with each one.

/// A set of pids, counted.
#[derive(Default)]
pub(crate) struct PidSet {
    bits: Vec<u64>,
    len: usize,
}

impl PidSet {
    /// Add `pid`.
    pub(crate) fn insert(&mut self, pid: u32) {
        let (word, bit) = ((pid / 64) as usize, pid % 64);
        if word >= self.bits.len() {
            self.bits.resize(word + 1, 0);
        }
        let mask = 1u64 << bit;
        if self.bits[word] & mask == 0 {
            self.bits[word] |= mask;
            self.len += 1;
        }
    }

    /// Pids added.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_pid_once() {
        let mut s = PidSet::default();
        for pid in [0, 1, 63, 64, 4_194_303, 1, 64] {
            s.insert(pid);
        }
        assert_eq!(s.len(), 5);
        assert_eq!(s.bits.len(), 4_194_304 / 64);
    }
}
