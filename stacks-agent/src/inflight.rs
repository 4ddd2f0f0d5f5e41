//! What a run of the pipeline lost between the recorder and the store: the events of each kind
//! that left the recorder (its `--stats`, counted as produced) and reached no finished file set
//! nor a count of the packer's (`store_full:KIND`, `store_read_only:KIND`). A stage that died
//! took them with it: the packer's unfinished set, the symbolizer's batch, the pipes, what the
//! recorder handed over after its output closed. They are lost, cause `stage_died:KIND`; the
//! next packer writes them as `lost` rows. A run stopped in order loses nothing (every row
//! reaches a set the packer finishes), so this is 0 then, and nothing is counted twice.
//!
//! What a recorder that itself died still held is not counted: it cannot say (its last
//! `--stats` is up to a second old, and is compared as it is, a kind whose packer stored more
//! counting 0). `lost` rows are not compared: the packer writes some of its own.

use std::collections::BTreeMap;

use stacks_store::PackStats;
use stacks_stream::lost;
use stacks_stream::tally::RecordStats;

/// The events that left the recorder (`left`) and did not reach the store of the packer's run
/// (`stored`: what it had not finished already taken out, [`PackStats::drop_unfinished`]), by
/// cause `stage_died:KIND`; kinds that lost nothing are absent.
pub(crate) fn died(left: &RecordStats, stored: &PackStats) -> BTreeMap<String, u64> {
    let get = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    left.events
        .iter()
        .filter(|(kind, _)| kind.as_str() != stacks_stream::kind::LOST)
        .filter_map(|(kind, &n)| {
            let counted: u64 = lost::PACKER
                .iter()
                .map(|why| get(&stored.lost, &format!("{why}:{kind}")))
                .sum();
            let reached = get(&stored.events, kind) + counted;
            (n > reached).then(|| (lost::stage_died(kind), n - reached))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn what_left_the_recorder_and_was_not_stored_died() {
        let left = RecordStats {
            events: map(&[("switch", 1000), ("wake", 50), ("profile", 10), ("lost", 4)]),
            ..Default::default()
        };
        let mut run = PackStats {
            events: map(&[("switch", 900), ("wake", 20), ("profile", 12), ("lost", 1)]),
            lost: map(&[("store_full:wake", 30), ("ring_buffer_full:switch", 7)]),
            unfinished_events: map(&[("switch", 300)]),
            ..Default::default()
        };
        run.drop_unfinished();
        // switch: 600 stored of 1000; wake: 20 stored + 30 dropped by the packer and counted;
        // profile: the packer has more than the recorder's last file said (a recorder that
        // died): 0; lost rows are not compared.
        assert_eq!(died(&left, &run), map(&[("stage_died:switch", 400)]));
    }

    #[test]
    fn a_run_stopped_in_order_lost_nothing() {
        let left = RecordStats {
            events: map(&[("switch", 1000), ("exec", 2)]),
            ended: true,
            ..Default::default()
        };
        let run = PackStats {
            events: map(&[("switch", 1000), ("exec", 2), ("lost", 3)]),
            ..Default::default()
        };
        assert!(died(&left, &run).is_empty());
        // No packer at all (it could not be started): everything that left died.
        assert_eq!(
            died(&left, &PackStats::default()),
            map(&[("stage_died:exec", 2), ("stage_died:switch", 1000)])
        );
    }
}
