//! What the packer does to a directory store besides writing it: retention passes (at the
//! start, after each finished set, and every [`PASS_EVERY`] while input is idle) and the
//! `--stats` file. Runs on the writing thread, between sets, so it never races the set being
//! written.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use arrow_array::RecordBatch;

use crate::retention::{self, Policy};
use crate::stats::Stats;

/// Longest time between two retention passes (`--retain` deletes sets as they age).
pub(crate) const PASS_EVERY: Duration = Duration::from_secs(10);

/// Retention and stats of one packer.
#[derive(Debug)]
pub(crate) struct Upkeep {
    /// The directory store, when retention or stats look at it.
    dir: Option<PathBuf>,
    policy: Policy,
    stats: Option<Stats>,
    sets_seen: u64,
    last_pass: Option<Instant>,
}

impl Upkeep {
    /// Upkeep of `dir` (`None`: not a directory store) as `policy` says, with stats to `stats`.
    pub(crate) fn new(
        dir: Option<PathBuf>,
        policy: Policy,
        stats: Option<&std::path::Path>,
    ) -> Self {
        Self {
            dir,
            policy,
            stats: stats.map(Stats::new),
            sets_seen: 0,
            last_pass: None,
        }
    }

    /// Rows taken.
    pub(crate) fn count(&mut self, batch: &RecordBatch) {
        if let Some(s) = &mut self.stats {
            s.count(batch);
        }
    }

    /// Rows dropped while the store could not be written (see [`crate::outage`]).
    pub(crate) fn dropped(&mut self, why: &str, tally: &crate::outage::Tally) {
        if let Some(s) = &mut self.stats {
            s.dropped(why, tally);
        }
    }

    /// `n` `lost` rows written for rows dropped earlier.
    pub(crate) fn wrote_lost_rows(&mut self, n: u64) {
        if let Some(s) = &mut self.stats {
            s.wrote_lost_rows(n);
        }
    }

    /// The store can (`None`) or cannot be written, and why: shown in the stats at once.
    pub(crate) fn unwritable(&mut self, why: Option<&str>) {
        if let Some(s) = &mut self.stats {
            s.unwritable(why);
            s.maybe_write(true);
        }
    }

    /// Called regularly with the sets and bytes the packer has finished and what it has not
    /// (`unfinished`, asked only when the stats are written): a pass if one is due, the stats
    /// file if due (`force`: now). A set just finished is in the file before the pass, so that
    /// a packer killed during it is not taken to have lost that set.
    pub(crate) fn tick(
        &mut self,
        sets_written: u64,
        bytes_written: u64,
        force: bool,
        unfinished: impl Fn() -> crate::outage::Tally,
    ) {
        let new_set = sets_written != self.sets_seen;
        self.sets_seen = sets_written;
        let due = self.last_pass.is_none_or(|t| t.elapsed() >= PASS_EVERY);
        if let Some(s) = &mut self.stats
            && s.due(force || new_set)
        {
            s.written(sets_written, bytes_written);
            s.unfinished(&unfinished());
            s.maybe_write(true);
        }
        if let Some(dir) = &self.dir
            && (new_set || due || force)
            && (self.policy.is_active() || self.stats.is_some())
        {
            self.last_pass = Some(Instant::now());
            let pass = if self.policy.is_active() {
                retention::enforce(dir, &self.policy, SystemTime::now())
            } else {
                retention::Pass {
                    left: retention::census(dir),
                    ..Default::default()
                }
            };
            if let Some(s) = &mut self.stats {
                s.note_pass(&pass);
                if pass.deleted_sets > 0 || force || new_set {
                    s.maybe_write(true);
                }
            }
        }
    }
}
