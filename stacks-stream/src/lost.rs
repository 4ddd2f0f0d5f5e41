//! The causes of `lost` rows (docs/format.md, the `lost` kind): `WHY:KIND`, named by
//! stacks-record and counted by cause downstream (stacks-pack's `--stats`, the agent's
//! `stacks_lost_events_total{cause}`). Listed here so that a consumer can show every cause at 0
//! before anything is lost.

use crate::kinds;

/// A traced thread switching out found no per-thread storage.
pub const NO_TASK_STORAGE_SWITCH: &str = "no_task_storage:switch_out";
/// A system call's entry found no per-thread storage.
pub const NO_TASK_STORAGE_VFS: &str = "no_task_storage:vfs";
/// Probe hits nested deeper than the per-CPU slots.
pub const NO_FREE_SLOT_PROBE: &str = "no_free_slot:probe";
/// A block request issued to its device whose completion the kernel reported to no program
/// (found when its request structure starts the next request).
pub const COMPLETION_UNSEEN_BLOCK: &str = "completion_unseen:block";

/// The causes that name no kind's ring buffer or table, in a fixed order.
pub const FIXED: [&str; 4] = [
    NO_TASK_STORAGE_SWITCH,
    NO_TASK_STORAGE_VFS,
    NO_FREE_SLOT_PROBE,
    COMPLETION_UNSEEN_BLOCK,
];

/// The `WHY` of events of a kind that reached stacks-pack `--keep-going` while its directory
/// store was full, and of those while it was read-only: dropped there and counted.
pub const STORE_FULL: &str = "store_full";
pub const STORE_READ_ONLY: &str = "store_read_only";
/// The causes the packer counts, by their `WHY`.
pub const PACKER: [&str; 2] = [STORE_FULL, STORE_READ_ONLY];

/// The cause of events of `kind` that left the recorder and reached no file set because a
/// stage of stacks-agent's pipeline died (killed, out of memory, crashed) with them in it or
/// in a pipe: the packer's unfinished set, the symbolizer's batch, the pipes.
pub fn stage_died(kind: &str) -> String {
    format!("stage_died:{kind}")
}

/// [`stage_died`] of every kind of the registry but `lost` itself, in its order: what a
/// supervisor of the pipeline can count.
pub fn stage_died_all() -> Vec<String> {
    kinds::ALL
        .iter()
        .filter(|k| k.name != crate::kind::LOST)
        .map(|k| stage_died(k.name))
        .collect()
}

/// The cause of records of `kind` the kind's ring buffer had no room for.
pub fn ring_buffer_full(kind: &str) -> String {
    format!("ring_buffer_full:{kind}")
}

/// The cause `loss` of events of `kind` (`map_full:block`).
pub fn of(loss: kinds::Loss, kind: &str) -> String {
    format!("{}:{kind}", loss.why())
}

/// Every cause this version of the recorder can name: [`FIXED`], then each kind's own
/// ([`kinds::Kind::losses`]), then `ring_buffer_full` of each kind whose records go through a
/// ring buffer, in the registry's order.
pub fn known() -> Vec<String> {
    known_of(kinds::ALL)
}

/// [`known`] for the kinds of registry `all`.
fn known_of(all: &[kinds::Kind]) -> Vec<String> {
    let own = all
        .iter()
        .flat_map(|k| k.losses.iter().map(|l| of(*l, k.name)));
    let rings = all
        .iter()
        .filter(|k| k.ring.is_some())
        .map(|k| ring_buffer_full(k.name));
    FIXED
        .iter()
        .map(|c| c.to_string())
        .chain(own)
        .chain(rings)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up kind of the IO ring with a table of its own: its causes are its own, from its
    /// entry alone.
    #[test]
    fn a_new_kind_names_its_own_causes() {
        let fake = kinds::Kind {
            name: "fake",
            losses: &[kinds::Loss::MapFull],
            ..*kinds::get("uring").unwrap()
        };
        let mut all = kinds::ALL.to_vec();
        all.push(fake);
        let causes = known_of(&all);
        assert!(causes.contains(&"ring_buffer_full:fake".to_string()));
        assert!(causes.contains(&"map_full:fake".to_string()));
        assert_eq!(causes.len(), known().len() + 2);
    }

    #[test]
    fn every_ring_kind_has_a_cause_and_none_repeats() {
        let causes = known();
        assert!(causes.contains(&"ring_buffer_full:switch".to_string()));
        assert!(causes.contains(&"ring_buffer_full:exec".to_string()));
        assert!(!causes.contains(&"ring_buffer_full:lost".to_string()));
        for own in ["map_full:block", "map_full:rss", "map_full:uring"] {
            assert!(causes.contains(&own.to_string()), "{own}");
        }
        let mut sorted = causes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), causes.len());
    }
}
