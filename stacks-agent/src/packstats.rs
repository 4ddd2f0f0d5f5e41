//! stacks-pack's counters (its `--stats FILE`, docs/agent.md, read as
//! [`stacks_store::PackStats`], the one list of its fields) summed over the packer's runs: each
//! run starts its counters from zero, so what a run had counted when it ended is added to the
//! totals of the runs before it; the store's census is the latest.

pub(crate) use stacks_store::PackStats;

/// The keys of `stack_errors`: the stacks whose capture can fail.
pub(crate) const STACKS: [&str; 2] = ["kernel", "user"];

/// Counters over every run of the packer: a `--stats` object whose `time` is not used.
pub(crate) type PackTotals = PackStats;

/// The totals of ended runs, and the running one's latest counters.
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    ended: PackTotals,
    current: PackStats,
}

impl Accumulator {
    /// The running packer's latest counters.
    pub(crate) fn update(&mut self, latest: PackStats) {
        self.current = latest;
    }

    /// The running packer ended (after a last [`Self::update`]): its counters are kept.
    pub(crate) fn end_run(&mut self) {
        let run = std::mem::take(&mut self.current);
        add(&mut self.ended, &run);
        self.ended.store_sets = run.store_sets;
        self.ended.store_bytes = run.store_bytes;
    }

    /// Every run's counters together.
    pub(crate) fn totals(&self) -> PackTotals {
        let mut t = self.ended.clone();
        add(&mut t, &self.current);
        t.unwritable = self.current.unwritable.clone();
        if self.current.store_sets > 0 || self.current.store_bytes > 0 {
            t.store_sets = self.current.store_sets;
            t.store_bytes = self.current.store_bytes;
        }
        t
    }
}

fn add(t: &mut PackTotals, run: &PackStats) {
    for (k, v) in &run.rows {
        *t.rows.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &run.lost {
        *t.lost.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &run.events {
        *t.events.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &run.stack_errors {
        *t.stack_errors.entry(k.clone()).or_default() += v;
    }
    t.sets_written += run.sets_written;
    t.bytes_written += run.bytes_written;
    t.deleted_sets += run.deleted_sets;
    t.deleted_bytes += run.deleted_bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_over_runs() {
        let run = |text: &str| PackStats::from_json(text).unwrap();
        let mut acc = Accumulator::default();
        acc.update(run(
            r#"{"time":1.5,"rows":{"profile":10},"lost":{},"events":{},"stack_errors":{},
               "sets_written":2,"bytes_written":100,"store_sets":2,"store_bytes":100,
               "deleted_sets":0,"deleted_bytes":0}"#,
        ));
        acc.end_run();
        acc.update(run(
            r#"{"time":2.5,"rows":{"profile":5,"state":1},"lost":{"ring_full:io":3},"events":{},
               "stack_errors":{},"sets_written":1,"bytes_written":40,"store_sets":2,
               "store_bytes":90,"deleted_sets":1,"deleted_bytes":50}"#,
        ));
        let t = acc.totals();
        assert_eq!(t.rows["profile"], 15);
        assert_eq!(t.rows["state"], 1);
        assert_eq!(t.lost["ring_full:io"], 3);
        assert_eq!((t.sets_written, t.bytes_written), (3, 140));
        assert_eq!((t.store_sets, t.store_bytes), (2, 90));
        assert_eq!((t.deleted_sets, t.deleted_bytes), (1, 50));
    }
}
