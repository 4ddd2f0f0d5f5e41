//! Writing the frames level: [`Framer`] holds a stream's stacks as the ids of their frames,
//! each distinct frame once, sorted as the frames file stores them, and builds the frames and
//! stacks files of a file set ([`SetParts`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{FixedSizeBinaryBuilder, ListBuilder, UInt32Builder, UInt64Builder};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, ListArray, RecordBatch, StructArray, UInt32Array,
};
use arrow_row::{RowConverter, SortField};
use arrow_schema::{ArrowError, DataType, Fields, SchemaRef};
use stacks_stream::schema::frame;

use super::{frame_ids_item, frame_struct};
use crate::StackId;

/// Fields of a frame struct, in the order frames are sorted by; any field not named here
/// follows, in struct order.
const SORT_ORDER: [&str; 13] = [
    frame::KERNEL,
    frame::MODULE,
    frame::BUILD_ID,
    frame::OFFSET,
    frame::ADDR,
    frame::INLINED,
    frame::FUNCTION,
    frame::FILE,
    frame::LINE,
    frame::COLUMN,
    frame::ERROR,
    frame::SYMBOL,
    frame::REASON,
];

/// Holds stacks as the ids of their frames, each distinct frame once (its row bytes), and
/// builds the frames and stacks files of a file set from any of them; see the module
/// documentation. A packer keeps one for its stream: a stack costs four bytes a frame, a frame
/// its bytes once, where a held `stack` list repeats every frame of every stack.
pub struct Framer {
    /// What the frames' fields are and how their rows are made.
    format: RowFormat,
    converter: RowConverter,
    /// Each distinct frame's index in `frames`, by its row bytes (which compare as the frames
    /// sort).
    ids: HashMap<Arc<[u8]>, u32, ahash::RandomState>,
    /// The row bytes of each distinct frame.
    frames: Vec<Arc<[u8]>>,
    /// Each stack's range in `refs` (None: a null stack).
    stacks: HashMap<StackId, Option<(u32, u32)>, ahash::RandomState>,
    /// Frame indices of every stack, concatenated (with the ranges of stacks dropped since the
    /// last compaction).
    refs: Vec<u32>,
}

/// The frame struct's fields and the order of its row columns.
#[derive(Clone)]
struct RowFormat {
    fields: Fields,
    /// Struct field index of each converter column, in [`SORT_ORDER`].
    order: Vec<usize>,
}

impl RowFormat {
    fn converter(&self) -> Result<RowConverter, ArrowError> {
        RowConverter::new(
            self.order
                .iter()
                .map(|&i| SortField::new(self.fields[i].data_type().clone()))
                .collect(),
        )
    }
}

impl Framer {
    /// A framer for stacks of type `stack`; `None` if it is not a list of structs.
    pub fn new(stack: &DataType) -> Result<Option<Self>, ArrowError> {
        let Some(fields) = frame_struct(stack) else {
            return Ok(None);
        };
        let mut order: Vec<usize> = SORT_ORDER
            .iter()
            .filter_map(|n| fields.find(n).map(|(i, _)| i))
            .collect();
        for i in 0..fields.len() {
            if !order.contains(&i) {
                order.push(i);
            }
        }
        let format = RowFormat {
            fields: fields.clone(),
            order,
        };
        Ok(Some(Framer {
            converter: format.converter()?,
            format,
            ids: HashMap::default(),
            frames: Vec::new(),
            stacks: HashMap::default(),
            refs: Vec::new(),
        }))
    }

    /// Distinct frames held.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// Stacks held.
    pub fn stacks(&self) -> usize {
        self.stacks.len()
    }

    /// Bytes held: the frames' rows, the stacks' frame indices and the maps.
    pub fn bytes(&self) -> usize {
        let rows: usize = self.frames.iter().map(|r| r.len() + 16).sum();
        rows + self.ids.capacity() * 28
            + self.refs.capacity() * 4
            + self.stacks.capacity() * (16 + 12)
    }

    /// Add stacks: `ids[i]` is the id of `stack`'s row `i`. A stack held already, or with a
    /// null id, is skipped.
    pub fn add(&mut self, ids: &FixedSizeBinaryArray, stack: &ListArray) -> Result<(), ArrowError> {
        let offsets = stack.value_offsets();
        let (lo, hi) = (offsets[0] as usize, offsets[stack.len()] as usize);
        let values = stack.values().slice(lo, hi - lo);
        let frames = values.as_struct_opt().ok_or_else(|| {
            ArrowError::SchemaError(format!("`stack` of type {}", stack.data_type()))
        })?;
        let columns: Vec<ArrayRef> = self
            .format
            .order
            .iter()
            .map(|&i| Arc::clone(frames.column(i)))
            .collect();
        let rows = self.converter.convert_columns(&columns)?;
        let mut local: Vec<u32> = Vec::with_capacity(rows.num_rows());
        for row in rows.iter() {
            let id = match self.ids.get(row.as_ref()) {
                Some(&id) => id,
                None => {
                    let next = u32::try_from(self.frames.len())
                        .map_err(|_| ArrowError::ComputeError("over 2^32 frames held".into()))?;
                    let bytes: Arc<[u8]> = row.as_ref().into();
                    self.ids.insert(Arc::clone(&bytes), next);
                    self.frames.push(bytes);
                    next
                }
            };
            local.push(id);
        }
        for i in 0..stack.len() {
            if ids.is_null(i) {
                continue;
            }
            let id: StackId = ids.value(i).try_into().map_err(|_| {
                ArrowError::SchemaError(format!("`stack_id` of width {}", ids.value_length()))
            })?;
            if self.stacks.contains_key(&id) {
                continue;
            }
            if stack.is_null(i) {
                self.stacks.insert(id, None);
                continue;
            }
            let start = self.refs.len() as u32;
            let range = offsets[i] as usize - lo..offsets[i + 1] as usize - lo;
            self.refs.extend_from_slice(&local[range]);
            self.stacks
                .insert(id, Some((start, self.refs.len() as u32)));
        }
        Ok(())
    }

    /// Keep only the stacks `keep` says; the frame indices and frames no stack kept uses are
    /// dropped once they are as many as the live ones (so dropping costs amortized time).
    pub fn retain(&mut self, keep: impl Fn(&StackId) -> bool) {
        self.stacks.retain(|id, _| keep(id));
        let live: usize = self
            .stacks
            .values()
            .map(|r| r.map_or(0, |(a, b)| (b - a) as usize))
            .sum();
        if self.refs.len() <= 2 * live.max(1024) {
            return;
        }
        let mut used = vec![false; self.frames.len()];
        let mut refs = Vec::with_capacity(live);
        for range in self.stacks.values_mut() {
            if let Some((a, b)) = range {
                let start = refs.len() as u32;
                for &f in &self.refs[*a as usize..*b as usize] {
                    used[f as usize] = true;
                    refs.push(f);
                }
                *range = Some((start, refs.len() as u32));
            }
        }
        self.refs = refs;
        let kept = used.iter().filter(|&&u| u).count();
        if self.frames.len() > 2 * kept.max(1024) {
            let mut new_index = vec![u32::MAX; self.frames.len()];
            let old = std::mem::take(&mut self.frames);
            self.ids.clear();
            for (i, bytes) in old.into_iter().enumerate() {
                if used[i] {
                    new_index[i] = self.frames.len() as u32;
                    self.ids.insert(Arc::clone(&bytes), new_index[i]);
                    self.frames.push(bytes);
                }
            }
            for f in &mut self.refs {
                *f = new_index[*f as usize];
            }
            self.ids.shrink_to_fit();
        }
        self.refs.shrink_to_fit();
        self.stacks.shrink_to_fit();
    }

    /// What the files of a set of the held stacks `ids` are made from (each must be held):
    /// cheap to take (the frames' bytes are shared), so a caller holding a lock can build
    /// the files after releasing it.
    pub fn parts(&self, ids: &[StackId]) -> Result<SetParts, ArrowError> {
        let mut stacks = Vec::with_capacity(ids.len());
        let mut refs = Vec::new();
        let mut local = HashMap::<u32, u32, ahash::RandomState>::default();
        let mut frames = Vec::new();
        for id in ids {
            let range = self.stacks.get(id).ok_or_else(|| {
                ArrowError::InvalidArgumentError("a stack id the framer does not hold".into())
            })?;
            let Some((a, b)) = *range else {
                stacks.push((*id, None));
                continue;
            };
            let start = refs.len() as u32;
            for &f in &self.refs[a as usize..b as usize] {
                let n = *local.entry(f).or_insert_with(|| {
                    frames.push(Arc::clone(&self.frames[f as usize]));
                    frames.len() as u32 - 1
                });
                refs.push(n);
            }
            stacks.push((*id, Some((start, refs.len() as u32))));
        }
        Ok(SetParts {
            format: self.format.clone(),
            frames,
            stacks,
            refs,
        })
    }

    /// The files of a set of every stack held, the frames in one batch (tests): see
    /// [`SetParts::finish`].
    #[cfg(test)]
    pub(crate) fn finish(
        self,
        set: u64,
        frames_schema: &SchemaRef,
        stacks_schema: &SchemaRef,
        chunk: usize,
    ) -> Result<(RecordBatch, Vec<RecordBatch>), ArrowError> {
        let ids: Vec<StackId> = self.stacks.keys().copied().collect();
        self.parts(&ids)?
            .finish_whole(set, frames_schema, stacks_schema, chunk)
    }
}

/// Frames per batch of a frames file's rows (see [`SetParts::finish`]).
pub(crate) const FRAMES_CHUNK: usize = 16 * 1024;

/// The stacks of one file set, as frame indices into the distinct frames they use (row
/// bytes); see [`Framer::parts`].
pub struct SetParts {
    format: RowFormat,
    frames: Vec<Arc<[u8]>>,
    stacks: Vec<(StackId, Option<(u32, u32)>)>,
    refs: Vec<u32>,
}

impl SetParts {
    /// The frames file's rows (sorted, ids in row order), handed to `frames_out` a batch of
    /// [`FRAMES_CHUNK`] frames at a time (so that only one batch of them is held as Arrow
    /// arrays beside the row bytes: converted whole, a minute of a system-wide recording's
    /// frames took 18.5 MiB at once, the largest part of stacks-pack's peak), then the stacks
    /// file's rows (sorted by frames root first), in batches of at most `chunk` stacks, for
    /// file set `set`.
    pub fn finish(
        self,
        set: u64,
        frames_schema: &SchemaRef,
        stacks_schema: &SchemaRef,
        chunk: usize,
        mut frames_out: impl FnMut(RecordBatch) -> Result<(), ArrowError>,
    ) -> Result<Vec<RecordBatch>, ArrowError> {
        // Final ids: the distinct frames in sorted order.
        let mut order: Vec<u32> = (0..self.frames.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.frames[a as usize].cmp(&self.frames[b as usize]));
        let mut final_id = vec![0u32; order.len()];
        for (n, &provisional) in order.iter().enumerate() {
            final_id[provisional as usize] = n as u32;
        }
        let converter = self.format.converter()?;
        for (k, part) in order.chunks(FRAMES_CHUNK).enumerate() {
            let first = (k * FRAMES_CHUNK) as u32;
            frames_out(self.frame_rows(&converter, part, first, set, frames_schema)?)?;
        }

        let refs: Vec<u32> = self.refs.iter().map(|&p| final_id[p as usize]).collect();
        let slice = |s: &(StackId, Option<(u32, u32)>)| -> &[u32] {
            s.1.map_or(&[][..], |(a, b)| &refs[a as usize..b as usize])
        };
        let mut stacks = self.stacks;
        stacks.sort_by(|a, b| {
            slice(a)
                .iter()
                .rev()
                .cmp(slice(b).iter().rev())
                .then(a.0.cmp(&b.0))
        });
        let mut out = Vec::new();
        for part in stacks.chunks(chunk.max(1)) {
            let mut ids = FixedSizeBinaryBuilder::with_capacity(part.len(), 16);
            let mut lists = ListBuilder::new(UInt32Builder::new()).with_field(frame_ids_item());
            let mut sets = UInt64Builder::with_capacity(part.len());
            for s in part {
                ids.append_value(s.0)?;
                match s.1 {
                    Some(_) => {
                        lists.values().append_slice(slice(s));
                        lists.append(true);
                    }
                    None => lists.append_null(),
                }
                sets.append_value(set);
            }
            out.push(RecordBatch::try_new(
                Arc::clone(stacks_schema),
                vec![
                    Arc::new(ids.finish()),
                    Arc::new(lists.finish()),
                    Arc::new(sets.finish()),
                ],
            )?);
        }
        Ok(out)
    }

    /// The frames file's rows of the frames `part` (provisional ids, in final order), whose
    /// final ids start at `first`.
    fn frame_rows(
        &self,
        converter: &RowConverter,
        part: &[u32],
        first: u32,
        set: u64,
        frames_schema: &SchemaRef,
    ) -> Result<RecordBatch, ArrowError> {
        let parser = converter.parser();
        let sorted =
            converter.convert_rows(part.iter().map(|&i| parser.parse(&self.frames[i as usize])))?;
        drop(parser);
        let mut by_field: Vec<Option<ArrayRef>> = vec![None; self.format.fields.len()];
        for (column, &field) in sorted.into_iter().zip(&self.format.order) {
            by_field[field] = Some(column);
        }
        let n = part.len() as u32;
        let fields: Vec<ArrayRef> = by_field
            .into_iter()
            .map(|c| c.expect("every field converted"))
            .collect();
        let rows = StructArray::try_new(self.format.fields.clone(), fields.clone(), None)?;
        let names = stacks_stream::frames::folded_names(&rows)
            .map_err(|e| ArrowError::InvalidArgumentError(e.to_string()))?;
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(UInt32Array::from_iter_values(first..first + n))];
        columns.extend(fields);
        columns.push(Arc::new(names));
        columns.push(Arc::new(arrow_array::UInt64Array::from(vec![
            set;
            n as usize
        ])));
        RecordBatch::try_new(Arc::clone(frames_schema), columns)
    }

    /// [`Self::finish`] with the frames file's rows in one batch (tests).
    #[cfg(test)]
    pub(crate) fn finish_whole(
        self,
        set: u64,
        frames_schema: &SchemaRef,
        stacks_schema: &SchemaRef,
        chunk: usize,
    ) -> Result<(RecordBatch, Vec<RecordBatch>), ArrowError> {
        let mut frames = Vec::new();
        let stacks = self.finish(set, frames_schema, stacks_schema, chunk, |b| {
            frames.push(b);
            Ok(())
        })?;
        let frames = arrow_select::concat::concat_batches(frames_schema, &frames)?;
        Ok((frames, stacks))
    }
}
