//! The causes of `lost` rows (docs/format.md, the `lost` kind): `WHY:KIND`, named by
//! stacks-record and counted by cause downstream (stacks-pack's `--stats`, the agent's
//! `stacks_lost_events_total{cause}`). Listed here so that a consumer can show every cause at 0
//! before anything is lost.

use crate::kinds;

/// A traced thread switching out found no per-thread storage.
pub const NO_TASK_STORAGE_SWITCH: &str = "no_task_storage:switch_out";
/// A system call's entry found no per-thread storage.
pub const NO_TASK_STORAGE_VFS: &str = "no_task_storage:vfs";
/// The in-flight block request table was full.
pub const MAP_FULL_BLOCK: &str = "map_full:block";
/// A per-process or per-thread RSS table was full.
pub const MAP_FULL_RSS: &str = "map_full:rss";
/// The in-flight io_uring request table was full.
pub const MAP_FULL_URING: &str = "map_full:uring";
/// Probe hits nested deeper than the per-CPU slots.
pub const NO_FREE_SLOT_PROBE: &str = "no_free_slot:probe";
/// A block request issued to its device whose completion the kernel reported to no program
/// (found when its request structure starts the next request).
pub const COMPLETION_UNSEEN_BLOCK: &str = "completion_unseen:block";

/// The causes that do not name a ring buffer, in a fixed order.
pub const FIXED: [&str; 7] = [
    NO_TASK_STORAGE_SWITCH,
    NO_TASK_STORAGE_VFS,
    MAP_FULL_BLOCK,
    MAP_FULL_RSS,
    MAP_FULL_URING,
    NO_FREE_SLOT_PROBE,
    COMPLETION_UNSEEN_BLOCK,
];

/// The cause of records of `kind` the kind's ring buffer had no room for.
pub fn ring_buffer_full(kind: &str) -> String {
    format!("ring_buffer_full:{kind}")
}

/// Every cause this version of the recorder can name: [`FIXED`], then `ring_buffer_full` of
/// each kind whose records go through a ring buffer, in the registry's order.
pub fn known() -> Vec<String> {
    FIXED
        .iter()
        .map(|c| c.to_string())
        .chain(
            kinds::ALL
                .iter()
                .filter(|k| k.ring.is_some())
                .map(|k| ring_buffer_full(k.name)),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ring_kind_has_a_cause_and_none_repeats() {
        let causes = known();
        assert!(causes.contains(&"ring_buffer_full:switch".to_string()));
        assert!(causes.contains(&"ring_buffer_full:exec".to_string()));
        assert!(!causes.contains(&"ring_buffer_full:lost".to_string()));
        let mut sorted = causes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), causes.len());
    }
}
