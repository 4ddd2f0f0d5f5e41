//! Splitting stream batches into the two halves of the store: samples rows (every column but
//! the stacks, plus `stack_id`) and the distinct stacks they reference, each kept once, so a
//! writer can give every samples file exactly the stacks it needs. For dictionary-encoded
//! input the ids are computed per new dictionary entry; for plain input, per row. The writer
//! says which stacks it still needs ([`StackSplitter::retain`]): memory is bounded by the
//! stacks of the rows not written yet and of the file being written, not by the stream's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::builder::{FixedSizeBinaryBuilder, Int32Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, FixedSizeBinaryArray, RecordBatch, UInt32Array};
use arrow_schema::{ArrowError, DataType, Schema, SchemaRef};

use stacks_stream::dict::{Entries, EntryCache, is_stack_column};
use stacks_stream::frames::StackFrames;
use stacks_stream::schema::col;
use stacks_stream::stack_key::{combine, stack_keys};

use crate::frames::{Framer, SetParts};
use crate::{DistinctCount, samples_schema, stacks_schema};

/// A stack id: 128 bits.
pub type StackId = [u8; 16];

/// Where a held stack is, and the last split batch using it.
#[derive(Clone, Copy, Debug)]
struct Held {
    batch: u32,
    row: u32,
    last: u64,
}

/// Splits batches of one stream; see the module documentation.
pub struct StackSplitter {
    samples: SchemaRef,
    stacks: SchemaRef,
    /// Stream index of each samples column but `stack_id`.
    sample_columns: Vec<usize>,
    /// Stream index of each stack column, in stacks-file order.
    stack_columns: Vec<usize>,
    /// What the id is computed from: `stack` if present, else the raw `kstack` and `ustack`.
    identity: Vec<usize>,
    /// Per identity column, the ids of its entries (dictionary input: for the stream).
    entry_ids: Vec<EntryCache<Option<StackId>>>,
    /// Where each held stack is: (batch, row) in `distinct`, and the last split batch (see
    /// `splits`) whose rows use it.
    known: HashMap<StackId, Held, ahash::RandomState>,
    /// Batches split so far; the n-th is number n.
    splits: u64,
    /// The stream's distinct stacks, counted.
    count: DistinctCount,
    /// The distinct stacks: `stack_id` and the stack columns. Their `folded`/`leaf`/`depth`
    /// are computed when written ([`Self::stacks`]), not held: they were a third of
    /// stacks-pack's memory.
    distinct: Vec<RecordBatch>,
    held: SchemaRef,
    /// With [`Self::with_framer`]: the distinct stacks held as the ids of their frames instead
    /// (`distinct` stays empty).
    framer: Option<Framer>,
}

impl StackSplitter {
    /// A splitter for rows of `stream`. Its stacks are identified by `stack` if present, else
    /// by the raw `kstack`/`ustack`; a stream with none of them (the contract allows it) gets
    /// a null `stack_id` on every row and no stacks.
    pub fn new(stream: &Schema) -> Result<Self, ArrowError> {
        let index = |name: &str| stream.index_of(name).ok();
        let identity: Vec<usize> = match index(col::STACK) {
            Some(i) => vec![i],
            None => [col::KSTACK, col::USTACK]
                .iter()
                .filter_map(|c| index(c))
                .collect(),
        };
        let stack_columns = (0..stream.fields().len())
            .filter(|&i| is_stack_column(stream.field(i).name()))
            .collect();
        let sample_columns = (0..stream.fields().len())
            .filter(|&i| {
                let name = stream.field(i).name();
                !is_stack_column(name) && name != col::STACK_ID
            })
            .collect();
        let stacks = stacks_schema(stream);
        let held = Arc::new(stacks.project(&(0..=stack_columns_len(&stacks)).collect::<Vec<_>>())?);
        Ok(StackSplitter {
            samples: samples_schema(stream),
            stacks,
            held,
            sample_columns,
            stack_columns,
            entry_ids: identity.iter().map(|_| EntryCache::default()).collect(),
            identity,
            known: HashMap::default(),
            splits: 0,
            count: DistinctCount::default(),
            distinct: Vec::new(),
            framer: None,
        })
    }

    /// Hold the stacks as the ids of their frames, each distinct frame once (a [`Framer`]),
    /// for a writer of the frames layout: memory then follows the distinct frames, not the
    /// frames of every stack. `Ok(None)` when the stream's `stack` is not a list of frames.
    /// Such a splitter gives the stacks of a file set by [`Self::framed_parts`], not
    /// [`Self::held_stacks`].
    pub fn with_framer(mut self, stream: &Schema) -> Result<Option<Self>, ArrowError> {
        let Ok(field) = stream.field_with_name(col::STACK) else {
            return Ok(None);
        };
        let Some(framer) = Framer::new(stacks_stream::dict::value_type(field.data_type()))? else {
            return Ok(None);
        };
        if self.identity != [stream.index_of(col::STACK)?] {
            return Ok(None);
        }
        self.framer = Some(framer);
        Ok(Some(self))
    }

    /// Bytes the held stacks take (the stacks rows, or the framer's).
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        match &self.framer {
            Some(f) => f.bytes(),
            None => self
                .distinct
                .iter()
                .map(|b| b.get_array_memory_size())
                .sum(),
        }
    }

    /// Schema of the samples rows [`Self::split`] returns.
    pub fn samples_schema(&self) -> &SchemaRef {
        &self.samples
    }

    /// Schema of the stacks rows [`Self::stacks`] returns.
    pub fn stacks_schema(&self) -> &SchemaRef {
        &self.stacks
    }

    /// Distinct stacks of the stream so far, and whether the count is an estimate (past
    /// [`crate::distinct::EXACT`]).
    pub fn distinct(&self) -> (u64, bool) {
        self.count.get()
    }

    /// Stacks held now.
    pub fn held(&self) -> usize {
        self.known.len()
    }

    /// Batches split so far: the writer counts the samples batches it took the same way, so
    /// [`Self::retain`] knows which batches are still on their way to it.
    pub fn splits(&self) -> u64 {
        self.splits
    }

    /// Drop the stacks the writer no longer needs: those used by no batch after the first
    /// `taken` split batches (still on their way to the writer) and for which `live` (the rows
    /// the writer holds and the file it is writing) is false.
    pub fn retain(
        &mut self,
        taken: u64,
        live: impl Fn(&StackId) -> bool,
    ) -> Result<(), ArrowError> {
        let keep: Vec<(StackId, Held)> = self
            .known
            .iter()
            .filter(|(id, h)| h.last > taken || live(id))
            .map(|(id, h)| (*id, *h))
            .collect();
        if keep.len() == self.known.len() {
            return Ok(());
        }
        if let Some(framer) = &mut self.framer {
            self.known = keep.into_iter().collect();
            let known = &self.known;
            framer.retain(|id| known.contains_key(id));
            return Ok(());
        }
        let mut known = HashMap::with_capacity_and_hasher(keep.len(), Default::default());
        let mut distinct = Vec::new();
        if !keep.is_empty() {
            let at: Vec<(usize, usize)> = keep
                .iter()
                .map(|(_, h)| (h.batch as usize, h.row as usize))
                .collect();
            let batches: Vec<&RecordBatch> = self.distinct.iter().collect();
            distinct.push(arrow_select::interleave::interleave_record_batch(
                &batches, &at,
            )?);
            for (row, (id, h)) in keep.into_iter().enumerate() {
                let held = Held {
                    batch: 0,
                    row: row as u32,
                    last: h.last,
                };
                known.insert(id, held);
            }
        }
        self.known = known;
        self.distinct = distinct;
        Ok(())
    }

    /// The samples rows of `batch` (its `stack_id` computed), remembering stacks not seen yet.
    pub fn split(&mut self, batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
        self.splits += 1;
        let split = self.splits;
        let rows = batch.num_rows();
        let mut per_column: Vec<(Entries, Vec<Option<StackId>>)> = Vec::new();
        for (k, &c) in self.identity.iter().enumerate() {
            let entries = Entries::new(batch.column(c))?;
            let cache = &mut self.entry_ids[k];
            cache.prepare(&entries);
            let ids = entry_ids(&entries, cache, rows)?;
            per_column.push((entries, ids));
        }
        let mut b = FixedSizeBinaryBuilder::with_capacity(rows, 16);
        let mut new_rows: Vec<u32> = Vec::new();
        let mut new_ids: Vec<StackId> = Vec::new();
        let mut fresh: HashSet<StackId, ahash::RandomState> = HashSet::default();
        for row in 0..rows {
            let id = match per_column.as_slice() {
                [] => None,
                [(e, ids)] => e.entry(row).and_then(|i| ids[i]),
                [(ek, kids), (eu, uids)] => {
                    let k = ek.entry(row).and_then(|i| kids[i]);
                    let u = eu.entry(row).and_then(|i| uids[i]);
                    combine(k.as_ref().map(|k| &k[..]), u.as_ref().map(|u| &u[..]))
                }
                _ => unreachable!("one or two identity columns"),
            };
            match id {
                None => b.append_null(),
                Some(id) => {
                    b.append_value(id)?;
                    match self.known.get_mut(&id) {
                        Some(held) => held.last = split,
                        None => {
                            if fresh.insert(id) {
                                new_rows.push(row as u32);
                                new_ids.push(id);
                                self.count.add(&id);
                            }
                        }
                    }
                }
            }
        }
        if let (false, Some(framer)) = (new_rows.is_empty(), self.framer.as_mut()) {
            let (entries, _) = &per_column[0];
            let take: UInt32Array = new_rows
                .iter()
                .map(|&r| entries.entry(r as usize).map(|i| i as u32))
                .collect();
            let stack = arrow_select::take::take(entries.values().as_ref(), &take, None)?;
            let ids = FixedSizeBinaryArray::try_from_iter(new_ids.iter())?;
            framer.add(&ids, stack.as_list::<i32>())?;
            for id in &new_ids {
                let held = Held {
                    batch: 0,
                    row: 0,
                    last: split,
                };
                self.known.insert(*id, held);
            }
        } else if !new_rows.is_empty() {
            let stacks = self.distinct_rows(batch, &new_rows, &new_ids)?;
            let at = self.distinct.len() as u32;
            for (r, id) in new_ids.iter().enumerate() {
                let held = Held {
                    batch: at,
                    row: r as u32,
                    last: split,
                };
                self.known.insert(*id, held);
            }
            self.distinct.push(stacks);
        }
        let mut columns: Vec<ArrayRef> = self
            .sample_columns
            .iter()
            .map(|&c| Arc::clone(batch.column(c)))
            .collect();
        columns.push(Arc::new(b.finish()));
        RecordBatch::try_new(Arc::clone(&self.samples), columns)
    }

    /// The held rows of `ids` (each seen by [`Self::split`]), in that order: `stack_id` and
    /// the stream's stack columns.
    pub(crate) fn held_stacks(&self, ids: &[StackId]) -> Result<RecordBatch, ArrowError> {
        if self.framer.is_some() {
            return Err(ArrowError::InvalidArgumentError(
                "the stacks are held as frames (framed_parts)".into(),
            ));
        }
        let mut at = Vec::with_capacity(ids.len());
        for id in ids {
            let h = self.known.get(id).ok_or_else(|| {
                ArrowError::InvalidArgumentError("a stack id the splitter does not hold".into())
            })?;
            at.push((h.batch as usize, h.row as usize));
        }
        if at.is_empty() {
            return Ok(RecordBatch::new_empty(Arc::clone(&self.held)));
        }
        let batches: Vec<&RecordBatch> = self.distinct.iter().collect();
        arrow_select::interleave::interleave_record_batch(&batches, &at)
    }

    /// What the frames and stacks files of a file set of `ids` (each seen by [`Self::split`])
    /// are made from, with [`Self::with_framer`].
    pub fn framed_parts(&self, ids: &[StackId]) -> Result<SetParts, ArrowError> {
        match &self.framer {
            Some(f) => f.parts(ids),
            None => Err(ArrowError::InvalidArgumentError(
                "the stacks are held whole (held_stacks)".into(),
            )),
        }
    }

    /// The stacks rows of `ids` (each seen by [`Self::split`]), in that order, with their
    /// `folded`, `leaf` and `depth`.
    pub fn stacks(&self, ids: &[StackId]) -> Result<RecordBatch, ArrowError> {
        if ids.is_empty() {
            return Ok(RecordBatch::new_empty(Arc::clone(&self.stacks)));
        }
        let held = self.held_stacks(ids)?;
        let stack = held
            .schema()
            .index_of(col::STACK)
            .ok()
            .map(|i| held.column(i));
        let (folded, leaf, depth) = summaries(stack, held.num_rows())?;
        let mut columns = held.columns().to_vec();
        columns.extend([folded, leaf, depth]);
        RecordBatch::try_new(Arc::clone(&self.stacks), columns)
    }

    /// Held stacks rows (`stack_id` and the stack columns) for the stacks first seen at `rows`
    /// of `batch`.
    fn distinct_rows(
        &self,
        batch: &RecordBatch,
        rows: &[u32],
        ids: &[StackId],
    ) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(FixedSizeBinaryArray::try_from_iter(ids.iter())?)];
        for &c in &self.stack_columns {
            let entries = Entries::new(batch.column(c))?;
            let take: UInt32Array = rows
                .iter()
                .map(|&r| entries.entry(r as usize).map(|i| i as u32))
                .collect();
            columns.push(arrow_select::take::take(
                entries.values().as_ref(),
                &take,
                None,
            )?);
        }
        RecordBatch::try_new(Arc::clone(&self.held), columns)
    }
}

/// How many stack columns a stacks-file schema has (between `stack_id` and the summaries).
fn stack_columns_len(stacks: &Schema) -> usize {
    stacks.fields().len() - 4
}

/// The id of every entry of `entries` the rows use, from `cache` or computed (for the entries
/// not cached yet, in one pass).
fn entry_ids(
    entries: &Entries,
    cache: &mut EntryCache<Option<StackId>>,
    rows: usize,
) -> Result<Vec<Option<StackId>>, ArrowError> {
    let values = entries.values();
    let n = values.len();
    let missing: Vec<usize> = (0..rows)
        .filter_map(|r| entries.entry(r))
        .filter(|&i| cache.get(i).is_none())
        .collect();
    if !missing.is_empty() {
        let list = values.as_list_opt::<i32>().ok_or_else(|| {
            ArrowError::SchemaError(format!("a stack column of type {}", values.data_type()))
        })?;
        // One pass over the smallest range holding every missing entry.
        let lo = *missing.iter().min().expect("not empty");
        let hi = *missing.iter().max().expect("not empty") + 1;
        let keys = stack_keys(&list.slice(lo, hi - lo), hi - lo)?;
        for i in lo..hi {
            let id = keys.is_valid(i - lo).then(|| {
                let mut id = [0u8; 16];
                id.copy_from_slice(keys.value(i - lo));
                id
            });
            cache.get_or_insert_with(i, || id);
        }
    }
    Ok((0..n).map(|i| cache.get(i).copied().flatten()).collect())
}

/// `folded`, `leaf` and `depth` of each stack of `stack` (all null without it), as stacks
/// files hold them: every frame's name root first, `;`-joined; the innermost frame's name;
/// the number of frames.
pub fn summaries(
    stack: Option<&ArrayRef>,
    rows: usize,
) -> Result<(ArrayRef, ArrayRef, ArrayRef), ArrowError> {
    let mut folded = StringBuilder::new();
    let mut leaf = StringBuilder::new();
    let mut depth = Int32Builder::new();
    let frames = match stack {
        Some(s) if matches!(s.data_type(), DataType::List(_) | DataType::LargeList(_)) => Some(
            StackFrames::new(s, "stream", col::STACK)
                .map_err(|e| ArrowError::InvalidArgumentError(e.to_string()))?,
        ),
        _ => None,
    };
    for row in 0..rows {
        match frames.as_ref().and_then(|f| f.entry(row).map(|e| (f, e))) {
            Some((f, e)) => {
                let range = f.entry_frames(e);
                folded.append_value(f.folded(range.clone()));
                match range.clone().next().and_then(|i| f.frame(i)) {
                    Some(fr) => leaf.append_value(fr.name()),
                    None => leaf.append_null(),
                }
                depth.append_value(range.len() as i32);
            }
            None => {
                folded.append_null();
                leaf.append_null();
                depth.append_null();
            }
        }
    }
    Ok((
        Arc::new(folded.finish()),
        Arc::new(leaf.finish()),
        Arc::new(depth.finish()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;
    use stacks_stream::dict::StackDictionary;
    use stacks_testkit::rows::{Frame, Row, batch};

    fn frame(name: &str, addr: u64) -> Frame {
        Frame {
            function: Some(name.into()),
            addr,
            ..Default::default()
        }
    }

    fn rows() -> Vec<Row> {
        let a = vec![frame("leaf", 1), frame("main", 2)];
        let b = vec![frame("other", 3), frame("main", 2)];
        [Some(a.clone()), None, Some(b), Some(a)]
            .into_iter()
            .enumerate()
            .map(|(i, stack)| Row {
                time: i as i64,
                kind: "profile".into(),
                comm: "app".into(),
                thread: "app".into(),
                value: 1,
                stack,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn retain_keeps_what_is_live_or_on_its_way() {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let mut s = StackSplitter::new(&schema).unwrap();
        let first = s.split(&batch(&schema, &rows())).unwrap();
        let ids = first
            .column_by_name(col::STACK_ID)
            .unwrap()
            .as_fixed_size_binary()
            .clone();
        let (a, b): (StackId, StackId) = (
            ids.value(0).try_into().unwrap(),
            ids.value(2).try_into().unwrap(),
        );
        // Split again: both stacks are used by batch 2, which the writer has not taken.
        s.split(&batch(&schema, &rows())).unwrap();
        s.retain(1, |_| false).unwrap();
        assert_eq!(s.held(), 2, "used by a batch still on its way");
        s.retain(2, |id| *id == b).unwrap();
        assert_eq!(s.held(), 1, "only the live one");
        let stacks = s.stacks(&[b]).unwrap();
        let folded = stacks.column_by_name("folded").unwrap().as_string::<i32>();
        assert_eq!(folded.value(0), "main;other");
        assert!(s.stacks(&[a]).is_err(), "dropped");
        // A dropped stack seen again is held again, counted once.
        s.split(&batch(&schema, &rows())).unwrap();
        assert_eq!(s.held(), 2);
        assert_eq!(s.distinct(), (2, false));
        let stacks = s.stacks(&[a, b]).unwrap();
        let folded = stacks.column_by_name("folded").unwrap().as_string::<i32>();
        assert_eq!(folded.value(0), "main;leaf");
        s.retain(3, |_| false).unwrap();
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn a_framed_splitter_holds_frames_once_and_gives_the_sets_files() {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let whole = {
            let mut s = StackSplitter::new(&schema).unwrap();
            s.split(&batch(&schema, &rows())).unwrap();
            s.held_bytes()
        };
        let mut s = StackSplitter::new(&schema)
            .unwrap()
            .with_framer(&schema)
            .unwrap()
            .expect("a symbolized stream");
        let first = s.split(&batch(&schema, &rows())).unwrap();
        assert!(s.held_bytes() < whole, "{} vs {whole}", s.held_bytes());
        let ids = first.column_by_name(col::STACK_ID).unwrap();
        let ids = ids.as_fixed_size_binary();
        let (a, b): (StackId, StackId) = (
            ids.value(0).try_into().unwrap(),
            ids.value(2).try_into().unwrap(),
        );
        assert!(s.held_stacks(&[a]).is_err(), "held as frames");
        let fs = crate::frames::frames_schema(
            &stacks_stream::dict::value_type(
                schema.field_with_name(col::STACK).unwrap().data_type(),
            )
            .clone(),
            Default::default(),
        )
        .unwrap();
        let ss = crate::frames::framed_stacks_schema(Default::default());
        let (frames, stacks) = s
            .framed_parts(&[a, b])
            .unwrap()
            .finish_whole(1, &fs, &ss, 10)
            .unwrap();
        assert_eq!(frames.num_rows(), 3, "leaf, main, other");
        assert_eq!(stacks[0].num_rows(), 2);
        // b alone: its own two frames.
        s.split(&batch(&schema, &rows())).unwrap();
        s.retain(2, |id| *id == b).unwrap();
        assert_eq!(s.held(), 1);
        assert!(s.framed_parts(&[a]).is_err(), "dropped");
        let (frames, _) = s
            .framed_parts(&[b])
            .unwrap()
            .finish_whole(1, &fs, &ss, 10)
            .unwrap();
        let f = frames
            .column_by_name("function")
            .unwrap()
            .as_string::<i32>();
        let mut names: Vec<&str> = f.iter().map(|v| v.unwrap()).collect();
        names.sort();
        assert_eq!(names, ["main", "other"]);
    }

    #[test]
    fn plain_and_dictionary_input_split_alike() {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let plain = batch(&schema, &rows());
        let mut s = StackSplitter::new(&schema).unwrap();
        let samples = s.split(&plain).unwrap();
        let ids = samples
            .column_by_name(col::STACK_ID)
            .unwrap()
            .as_fixed_size_binary()
            .clone();
        assert_eq!(ids.value(0), ids.value(3));
        assert_ne!(ids.value(0), ids.value(2));
        assert!(ids.is_null(1));
        assert_eq!(s.distinct(), (2, false));
        assert!(samples.column_by_name(col::STACK).is_none());
        let want = [
            ids.value(2).try_into().unwrap(),
            ids.value(0).try_into().unwrap(),
        ];
        let stacks = s.stacks(&want).unwrap();
        let folded = stacks.column_by_name("folded").unwrap().as_string::<i32>();
        assert_eq!(folded.value(0), "main;other");
        assert_eq!(folded.value(1), "main;leaf");
        let leaf = stacks.column_by_name("leaf").unwrap().as_string::<i32>();
        assert_eq!(leaf.value(1), "leaf");

        // The same rows with `stack` dictionary-encoded: entries [a, b], keys 0, null, 1, 0.
        let idx = schema.index_of(col::STACK).unwrap();
        let stack_plain = plain.column(idx);
        let mut d = StackDictionary::new(stack_plain.data_type());
        let take = UInt32Array::from(vec![0, 2]);
        d.extend(
            arrow_select::take::take(stack_plain.as_ref(), &take, None)
                .unwrap()
                .as_ref(),
        )
        .unwrap();
        let col_dict = d
            .column(Int32Array::from(vec![Some(0), None, Some(1), Some(0)]))
            .unwrap();
        let mut fields: Vec<arrow_schema::Field> =
            schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[idx] = arrow_schema::Field::new(
            col::STACK,
            stacks_stream::dict::dictionary_type(stack_plain.data_type().clone()),
            true,
        );
        let enc = Arc::new(Schema::new(fields));
        let mut columns = plain.columns().to_vec();
        columns[idx] = col_dict;
        let encoded = RecordBatch::try_new(enc.clone(), columns).unwrap();
        let mut s2 = StackSplitter::new(&enc).unwrap();
        let samples2 = s2.split(&encoded).unwrap();
        assert_eq!(
            samples2.column_by_name(col::STACK_ID).unwrap().as_ref(),
            samples.column_by_name(col::STACK_ID).unwrap().as_ref()
        );
        assert_eq!(s2.stacks(&want).unwrap(), stacks);
        // A second batch of the same stacks adds nothing.
        s2.split(&encoded).unwrap();
        assert_eq!(s2.distinct(), (2, false));
    }

    #[test]
    fn raw_streams_are_keyed_by_their_raw_stacks() {
        let schema = Arc::new(stacks_stream::raw_schema(Default::default()));
        let mut r = rows();
        for (i, row) in r.iter_mut().enumerate() {
            row.stack = None;
            row.kstack = (i != 1).then(|| vec![10, 20 + (i as u64 % 2)]);
        }
        let mut s = StackSplitter::new(&schema).unwrap();
        let samples = s.split(&batch(&schema, &r)).unwrap();
        let ids = samples
            .column_by_name(col::STACK_ID)
            .unwrap()
            .as_fixed_size_binary()
            .clone();
        assert!(ids.is_null(1));
        assert_eq!(ids.value(0), ids.value(2), "same kstack, no ustack");
        assert_ne!(ids.value(0), ids.value(3));
        assert_eq!(s.distinct(), (2, false));
    }

    #[test]
    fn streams_without_stacks_get_null_ids() {
        let raw = stacks_stream::raw_schema(Default::default());
        let fields: Vec<arrow_schema::Field> = raw
            .fields()
            .iter()
            .filter(|f| !is_stack_column(f.name()))
            .map(|f| f.as_ref().clone())
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let full = batch(&Arc::new(raw), &rows());
        let columns = schema
            .fields()
            .iter()
            .map(|f| Arc::clone(full.column_by_name(f.name()).unwrap()))
            .collect();
        let b = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let mut s = StackSplitter::new(&schema).unwrap();
        let samples = s.split(&b).unwrap();
        let ids = samples.column_by_name(col::STACK_ID).unwrap();
        assert_eq!(ids.null_count(), 4);
        assert_eq!(s.distinct(), (0, false));
        assert_eq!(s.stacks(&[]).unwrap().num_rows(), 0);
        assert_eq!(
            s.stacks_schema().fields().len(),
            4,
            "stack_id, folded, leaf, depth"
        );
    }
}
