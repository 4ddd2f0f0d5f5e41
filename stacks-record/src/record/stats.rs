//! `--stats FILE`: the rows that left the recorder, by kind, and the events they stand for
//! ([`stacks_stream::tally::RecordStats`]), rewritten atomically at most once a second as
//! batches are produced, at once when the output fails, and when the stream ends. A supervisor
//! (stacks-agent) compares it with what reached the store: what a dead stage took with it.
//! A batch is counted when it is produced, before it is written: a row refused by a closed
//! pipe left the recorder all the same.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use stacks_stream::tally::RecordStats;

/// How often the file is rewritten while batches are produced.
const EVERY: Duration = Duration::from_secs(1);

/// The counters and their file.
pub(super) struct Stats {
    path: PathBuf,
    last: Option<Instant>,
    counts: RecordStats,
    /// A write failed already: said once.
    warned: bool,
}

impl Stats {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            path,
            last: None,
            counts: RecordStats::default(),
            warned: false,
        }
    }

    /// A batch produced.
    pub(super) fn count(&mut self, batch: &RecordBatch) {
        self.counts.count(batch);
    }

    /// Rewrite the file if a second has passed since the last time, or `now`.
    pub(super) fn maybe_write(&mut self, now: bool) {
        if !now && self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        if let Err(e) = self.counts.write(&self.path)
            && !std::mem::replace(&mut self.warned, true)
        {
            eprintln!(
                "stacks-record: warning: cannot write --stats {}: {e}",
                self.path.display()
            );
        }
    }

    /// Everything the recorder held was produced: the last file says so.
    pub(super) fn ended(&mut self) {
        self.counts.ended = true;
        self.maybe_write(true);
    }
}
