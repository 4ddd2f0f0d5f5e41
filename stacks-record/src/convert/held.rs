//! Records of processes whose JIT code waits for its perf map: a runtime may write the map only
//! when asked (HotSpot's `jcmd PID Compiler.perfmap`) or as it exits (`DumpPerfMapAtExit`).
//! Once a process's stack has held JIT code no perf map named while the process had no map at
//! all, its records with user stacks are held (copied) and converted when its map appears, when
//! it execs or exits (its map read once more first), or when the recording ends; so their JIT
//! frames are named. Their rows come late, out of time order. Held records are bounded: past
//! [`HELD_MAX_BYTES`] in all or [`HELD_MAX_AGE`] for one process, the process's records are
//! converted as they are and it is not waited for again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Converter;
use crate::kernel::event::RawEvent;
use crate::kinds::{self, Life};
use crate::output::rows::RowBuilder;

/// Bytes of held records at most, over every process.
const HELD_MAX_BYTES: usize = 64 << 20;
/// How long one process's records are held at most.
const HELD_MAX_AGE: Duration = Duration::from_secs(600);

/// One process waited for.
struct Waiting {
    since: Instant,
    records: Vec<Box<[u8]>>,
    /// Held too long or too much: converted as they come from now on.
    given_up: bool,
}

/// The processes waited for and their records.
#[derive(Default)]
pub(crate) struct Held {
    procs: HashMap<u32, Waiting, ahash::RandomState>,
    bytes: usize,
    /// Records held and converted later.
    pub held: u64,
    /// Processes given up on (their map never came within the bounds).
    pub given_up: u64,
}

impl Held {
    /// Forget a process gone (nothing of it is held: its exit converted it).
    pub(super) fn forget(&mut self, pid: u32) {
        if let Some(w) = self.procs.remove(&pid) {
            debug_assert!(w.records.is_empty());
        }
    }
}

impl Converter {
    /// Wait for `pid`'s perf map (its stack just held unnamed JIT code, and it has no map).
    pub(super) fn wait_for_perf_map(&mut self, pid: u32) {
        self.held.procs.entry(pid).or_insert_with(|| Waiting {
            since: Instant::now(),
            records: Vec::new(),
            given_up: false,
        });
    }

    /// Hold record `e` (its bytes `bytes`) when its process is waited for and it has a user
    /// stack, or until its process's exit record (see `exit_wait`); true when held. A map that
    /// appeared since first converts what was held.
    pub(crate) fn hold(&mut self, e: &RawEvent<'_>, bytes: &[u8], rows: &mut RowBuilder) -> bool {
        if self.hold_for_exit(e, bytes, rows) {
            return true;
        }
        let pid = e.h.pid;
        let Some(w) = self.held.procs.get(&pid) else {
            return false;
        };
        if w.given_up || e.h.ustack_len <= 0 || kinds::effects(e.h.kind).life != Life::Runs {
            return false;
        }
        if self.norm.perf_maps.refresh(pid) {
            self.release(pid, rows, false);
            return false;
        }
        // Converted later, maybe after the process is gone: the libraries it loads are
        // learned now, while its mappings can be read.
        self.modules.learn_again(pid);
        let w = self.held.procs.get_mut(&pid).expect("waited for");
        w.records.push(bytes.into());
        self.held.bytes += bytes.len();
        self.held.held += 1;
        if self.held.bytes > HELD_MAX_BYTES || w.since.elapsed() > HELD_MAX_AGE {
            self.give_up(rows);
        }
        true
    }

    /// Convert the records held longest (or largest) as they are, and wait no more for their
    /// process.
    fn give_up(&mut self, rows: &mut RowBuilder) {
        let oldest = self
            .held
            .procs
            .iter()
            .filter(|(_, w)| !w.records.is_empty())
            .min_by_key(|(_, w)| w.since)
            .map(|(&pid, _)| pid);
        if let Some(pid) = oldest {
            self.held.given_up += 1;
            self.release(pid, rows, true);
        }
    }

    /// Convert what `pid` has held; `keep_out`: never hold its records again.
    pub(super) fn release(&mut self, pid: u32, rows: &mut RowBuilder, keep_out: bool) {
        let Some(mut w) = self.held.procs.remove(&pid) else {
            return;
        };
        let records = std::mem::take(&mut w.records);
        if keep_out {
            w.given_up = true;
            self.held.procs.insert(pid, w);
        }
        for bytes in records {
            self.held.bytes -= bytes.len();
            match RawEvent::from_bytes(&bytes) {
                Ok(e) => self.push(&e, rows),
                Err(_) => self.counts.malformed += 1,
            }
        }
    }

    /// The recording ends: every process's map is read once more, and what was held converted
    /// (what waits for an exit record too).
    pub(crate) fn release_all(&mut self, rows: &mut RowBuilder) {
        let pids: Vec<u32> = self.held.procs.keys().copied().collect();
        for pid in pids {
            self.norm.perf_maps.exited(pid);
            self.release(pid, rows, false);
        }
        self.release_all_exit_waits(rows);
    }
}
