//! The stream's distinct raw stacks: what tells one apart (its entries in dictionary-encoded
//! input columns, or a hash of its contents), each one's key in the output dictionaries, when
//! those start over, and the raw stack columns encoded anew with the same keys.

use std::collections::HashMap;

use arrow_array::{Array, ArrayRef, Int32Array, RecordBatch, UInt32Array};
use arrow_schema::ArrowError;
use stacks_stream::dict::{Entries, StackDictionary};

use super::columns::{StackColumns, hash_lanes};
use super::{Layout, Symbolize};
use crate::fx::FxMap;

/// What tells a raw stack apart: its entries in dictionary-encoded stack columns (keys hold
/// for the whole stream), or a 128-bit hash of its contents.
#[derive(Hash, PartialEq, Eq, Clone, Copy)]
enum StackId {
    Entries(RawStack),
    Hash(u64, u64),
}

/// Per-stream state: each distinct raw stack's key in the output dictionaries.
#[derive(Default)]
pub(super) struct StreamState {
    keys: FxMap<StackId, i32>,
    /// The `stack` dictionary (created with the first batch).
    pub(super) stack: Option<StackDictionary>,
    /// Raw stack columns encoded anew (input column index → dictionary), when they are not
    /// all dictionary-encoded in the input.
    raw: HashMap<usize, StackDictionary>,
    /// Entries of the input dictionaries at the last batch: a dictionary that shrinks was
    /// replaced, and the keys seen so far mean nothing any more.
    entries: [usize; 3],
}

/// One row's raw stack: its entries in the kernel, user and kernel-symbol columns (`None`:
/// null) and its capture errors.
#[derive(Hash, PartialEq, Eq, Clone, Copy, Debug)]
pub(super) struct RawStack {
    pub(super) k: Option<usize>,
    pub(super) u: Option<usize>,
    pub(super) s: Option<usize>,
    pub(super) kerr: Option<i32>,
    pub(super) uerr: Option<i32>,
}

impl Symbolize {
    /// Start the output dictionaries over when they are full or the input's started over,
    /// and this batch's stacks are fewer than they hold.
    pub(super) fn start_over_if_full(&mut self, columns: &StackColumns, layout: &Layout) {
        // Bounded dictionaries: a full one is replaced by a new, smaller one (only entries of
        // this batch, fewer than the rows), which readers take as a replacement.
        let (written, full) = self.stream.stack.as_ref().map_or((0, false), |d| {
            (d.len(), d.is_full() || d.len() >= self.max_stacks)
        });
        // A full dictionary starts over when this batch's stacks are fewer than it holds (the
        // new one must be shorter): counted, not bounded by the batch's rows, which would keep
        // a dictionary of fewer stacks than a batch has rows growing past its byte limit (a
        // symbolized stack is KiBs: 8,192-row batches let it reach tens of MiB, held again by
        // every reader of the stream).
        // So does one whose input dictionaries started over (the recorder's restart): every
        // stack of the batch is new to it then, and appended again it would grow by a whole
        // batch of stacks already in it, in one delta that every reader concatenates.
        let input_restarted = layout.by_entry
            && input_lens(columns)
                .iter()
                .zip(&self.stream.entries)
                .any(|(now, before)| now < before);
        if (full || input_restarted) && written > 0 && Self::batch_stacks(columns, layout) < written
        {
            self.stream = StreamState {
                entries: self.stream.entries,
                ..StreamState::default()
            };
            self.stats.restarts += 1;
            stacks_stream::sys::release_free_memory();
        }
    }

    /// The distinct raw stacks of a batch's rows (rows without a stack not counted).
    fn batch_stacks(c: &StackColumns, layout: &Layout) -> usize {
        let hashers = hash_lanes();
        let mut seen: crate::fx::FxSet<StackId> = Default::default();
        for row in 0..c.rows {
            let r = c.raw(row);
            if r.k.is_none() && r.u.is_none() && r.s.is_none() {
                continue;
            }
            seen.insert(if layout.by_entry {
                StackId::Entries(r)
            } else {
                let (a, b) = c.hash(&hashers, &r);
                StackId::Hash(a, b)
            });
        }
        seen.len()
    }

    /// Each row's key in the output dictionaries (null: no stack at all) and the raw stacks
    /// new to the stream, in key order.
    pub(super) fn distinct(
        &mut self,
        c: &StackColumns,
        layout: &Layout,
    ) -> (Vec<Option<i32>>, Vec<RawStack>) {
        let st = &mut self.stream;
        let lens = input_lens(c);
        if layout.by_entry {
            if lens
                .iter()
                .zip(&st.entries)
                .any(|(now, before)| now < before)
            {
                st.keys.clear();
            }
            st.entries = lens;
        }
        let next = st.stack.as_ref().map_or(0, StackDictionary::len);
        let mut new: Vec<RawStack> = Vec::new();
        let mut keys = Vec::with_capacity(c.rows);
        let hashers = hash_lanes();
        for row in 0..c.rows {
            let r = c.raw(row);
            if r.k.is_none() && r.u.is_none() && r.s.is_none() {
                keys.push(None);
                continue;
            }
            let id = if layout.by_entry {
                StackId::Entries(r)
            } else {
                let (a, b) = c.hash(&hashers, &r);
                StackId::Hash(a, b)
            };
            let key = *st.keys.entry(id).or_insert_with(|| {
                new.push(r);
                // Past 2^31 entries the dictionary refuses to grow (an error below).
                i32::try_from(next + new.len() - 1).unwrap_or(i32::MAX)
            });
            keys.push(Some(key));
        }
        (keys, new)
    }

    /// Output column for input column `i`: as it is, or a raw stack column encoded anew with
    /// the rows' `keys` (new entries: the `new` stacks' entries of the column).
    pub(super) fn raw_column(
        &mut self,
        batch: &RecordBatch,
        layout: &Layout,
        i: usize,
        c: &StackColumns,
        keys: &Int32Array,
        new: &[RawStack],
    ) -> Result<ArrayRef, ArrowError> {
        let (entries, pick): (&Entries, fn(&RawStack) -> Option<usize>) = match i {
            _ if layout.by_entry => return Ok(batch.column(i).clone()),
            _ if i == layout.kstack => (&c.kent, |r| r.k),
            _ if i == layout.ustack => (&c.uent, |r| r.u),
            _ if Some(i) == layout.kstack_symbols => match &c.sent {
                Some(s) => (s, |r| r.s),
                None => return Ok(batch.column(i).clone()),
            },
            _ => return Ok(batch.column(i).clone()),
        };
        let values = entries.values();
        let dict = self
            .stream
            .raw
            .entry(i)
            .or_insert_with(|| StackDictionary::new(values.data_type()));
        let take: UInt32Array = new
            .iter()
            .map(|r| pick(r).and_then(|e| u32::try_from(e).ok()))
            .collect();
        dict.extend(arrow_select::take::take(values.as_ref(), &take, None)?.as_ref())?;
        // A row's key where its entry of this column is not null.
        let keys: Int32Array = keys
            .iter()
            .enumerate()
            .map(|(row, k)| k.filter(|_| entries.entry(row).is_some()))
            .collect();
        dict.stream_column(keys)
    }
}

/// The entries of a batch's input stack dictionaries (kernel, user, kernel symbols): one that
/// shrinks was replaced.
fn input_lens(c: &StackColumns) -> [usize; 3] {
    [
        c.kent.values().len(),
        c.uent.values().len(),
        c.sent.as_ref().map_or(0, |s| s.values().len()),
    ]
}
