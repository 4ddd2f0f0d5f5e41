//! Finishing a batch, and what a restart of the stack dictionaries means for the converter.
//! The dictionaries start over once full (`stacks_stream::dict::StackDictionary::is_full`),
//! which on a busy host with process churn happens every few seconds to minutes, or once a
//! minute old (and past 1 MiB: `output::stack_table`); at a restart
//! the converter's per-stack memory starts over with them: the normalized user frames (their
//! table and every cache of frame ids), and the `state` rows' stacks of threads not seen since
//! the previous restart. What later rows still need (each live thread's latest `state` stacks,
//! which the kernel side may say are repeated; intervals open, such as spans entered and not
//! left) is kept through the
//! restart and renumbered. So memory follows what the last restart period saw, not the whole
//! recording.

use arrow_array::RecordBatch;
use arrow_schema::ArrowError;

use super::{Converter, RowStacks};
use crate::output::rows::RowBuilder;
use crate::output::stack_table::{Renumbered, StackRef};

/// The one key a row's stack columns share (the stack table gives them the same).
fn any_key(k: &StackRef) -> Option<i32> {
    k.kstack.or(k.ustack).or(k.kstack_symbols)
}

/// `k` renumbered after a restart; false when one of its keys was not kept.
fn renumber(k: &mut StackRef, map: &Renumbered) -> bool {
    let mut kept = true;
    for key in [&mut k.kstack, &mut k.ustack, &mut k.kstack_symbols] {
        if let Some(old) = *key {
            match map.get(&old) {
                Some(&new) => *key = Some(new),
                None => {
                    *key = None;
                    kept = false;
                }
            }
        }
    }
    kept
}

impl Converter {
    /// Take the rows of `rows` as a batch; see the module documentation.
    pub(crate) fn finish_batch(
        &mut self,
        rows: &mut RowBuilder,
    ) -> Result<RecordBatch, ArrowError> {
        let pinned: Vec<i32> = self
            .latest_stacks
            .values()
            .filter(|(_, fresh)| *fresh)
            .map(|(s, _)| s.key)
            .chain(self.open.stacks().map(|s| s.key))
            .filter_map(|k| any_key(&k))
            .collect();
        let (batch, renumbered) = rows.finish_pinned(&pinned)?;
        if let Some(map) = renumbered {
            self.restarted(&map);
        }
        Ok(batch)
    }

    /// The stack dictionaries started over, keeping the entries of `map`.
    fn restarted(&mut self, map: &Renumbered) {
        self.latest_stacks.retain(|_, (s, fresh)| {
            let keep = *fresh && renumber(&mut s.key, map);
            *fresh = false;
            keep
        });
        self.open
            .for_each_stacks(|s: &mut RowStacks| _ = renumber(&mut s.key, map));
        // Frame ids are part of the stack table's lookup keys, forgotten with them: the frames
        // start over too. Block requests in flight keep their stacks, by value.
        let old = self.norm.restart_frames();
        self.resolved.clear();
        self.user_stacks.clear();
        self.build_ids.clear();
        let table = &mut self.norm.table;
        for (ids, _) in self.apart.values_mut() {
            *ids = ids
                .iter()
                .map(|&i| table.intern(old.get(i).clone()))
                .collect();
        }
        drop(old);
        stacks_stream::sys::release_free_memory();
    }
}
