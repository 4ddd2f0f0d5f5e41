//! stacks-pack's counters (its `--stats FILE`, docs/agent.md, read as
//! [`stacks_store::PackStats`], the one list of its fields) summed over the packer's runs: each
//! run starts its counters from zero, so what a run had counted when it ended is added to the
//! totals of the runs before it ([`PackStats::add_run`]); the store's census is the latest.

pub(crate) use stacks_store::PackStats;

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

    /// The running packer ended (after a last [`Self::update`]): its counters are kept, but
    /// for what it had not finished, which was never stored. Returns that run's counters so.
    pub(crate) fn end_run(&mut self) -> PackStats {
        let mut run = std::mem::take(&mut self.current);
        run.drop_unfinished();
        self.ended.add_run(&run);
        run
    }

    /// Events lost between the packer's runs (`stage_died:KIND`, [`crate::inflight`]), by cause.
    pub(crate) fn count_lost(&mut self, lost: &std::collections::BTreeMap<String, u64>) {
        for (cause, n) in lost {
            *self.ended.lost.entry(cause.clone()).or_default() += n;
        }
    }

    /// Every run's counters together.
    pub(crate) fn totals(&self) -> PackTotals {
        let mut t = self.ended.clone();
        t.add_run(&self.current);
        // A packer that has not counted the store yet keeps the census of the run before.
        if self.current.store_sets == 0 && self.current.store_bytes == 0 {
            t.store_sets = self.ended.store_sets;
            t.store_bytes = self.ended.store_bytes;
        }
        t
    }
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
               "stack_errors":{},"sets_written":1,"bytes_written":40,"store_sets":0,
               "store_bytes":0,"deleted_sets":1,"deleted_bytes":50,"unwritable":"store_full"}"#,
        ));
        let t = acc.totals();
        assert_eq!(t.rows["profile"], 15);
        assert_eq!(t.rows["state"], 1);
        assert_eq!(t.lost["ring_full:io"], 3);
        assert_eq!((t.sets_written, t.bytes_written), (3, 140));
        assert_eq!(
            (t.store_sets, t.store_bytes),
            (2, 100),
            "no census yet: the last one"
        );
        assert_eq!((t.deleted_sets, t.deleted_bytes), (1, 50));
        assert_eq!(t.unwritable.as_deref(), Some("store_full"));
        acc.update(run(
            r#"{"time":3.5,"rows":{"profile":6,"state":1},"lost":{"ring_full:io":3},"events":{},
               "stack_errors":{},"sets_written":1,"bytes_written":40,"store_sets":2,
               "store_bytes":90,"deleted_sets":1,"deleted_bytes":50}"#,
        ));
        let t = acc.totals();
        assert_eq!(t.rows["profile"], 16);
        assert_eq!((t.store_sets, t.store_bytes), (2, 90));
        assert_eq!(t.unwritable, None);
    }

    /// A packer killed with a set unfinished: its rows leave the totals, and what the agent
    /// counts lost for it is added.
    #[test]
    fn a_killed_packers_unfinished_set_is_not_counted_stored() {
        let run = |text: &str| PackStats::from_json(text).unwrap();
        let mut acc = Accumulator::default();
        acc.update(run(
            r#"{"time":1.5,"rows":{"switch":10},"lost":{},"events":{"switch":40},"stack_errors":{},
               "unfinished_rows":{"switch":4},"unfinished_events":{"switch":16},
               "sets_written":1,"bytes_written":100,"store_sets":1,"store_bytes":100,
               "deleted_sets":0,"deleted_bytes":0}"#,
        ));
        assert_eq!(acc.totals().unfinished_events["switch"], 16);
        let ended = acc.end_run();
        assert_eq!((ended.rows["switch"], ended.events["switch"]), (6, 24));
        acc.count_lost(&[("stage_died:switch".to_string(), 16)].into());
        let t = acc.totals();
        assert_eq!((t.rows["switch"], t.events["switch"]), (6, 24));
        assert_eq!(t.lost["stage_died:switch"], 16);
        assert!(t.unfinished_events.is_empty());
    }
}
