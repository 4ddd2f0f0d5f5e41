//! The frames level of a file set: each distinct frame of its stacks stored once in the frames
//! file (`frame_id` → the frame's fields), each stack in the stacks file as the ids of its
//! frames (`frame_ids`, leaf first, as `stack` holds them). [`Framer`] holds stacks that way
//! and builds both for a file set of them; [`assemble`] turns them back into `stack` lists.
//!
//! Frames are sorted by (kernel, module, build id, offset, address, …) before they get their
//! ids, so neighbouring rows differ little and the integer columns delta-encode well; stacks
//! are sorted by their frames root first, so neighbouring lists share their long common root
//! paths, which zstd then stores once.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{FixedSizeBinaryBuilder, ListBuilder, UInt32Builder, UInt64Builder};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, ListArray, RecordBatch, StructArray, UInt32Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_row::{RowConverter, SortField};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef};

use crate::StackId;
use stacks_stream::schema::frame::NAME;
use stacks_stream::schema::{col, frame, stack_id_type};

/// Column of the frames file: the frame's number in its file set.
pub const FRAME_ID: &str = "frame_id";
/// Column of the stacks and frames files: the file set's number, the same in both (joins of
/// several file sets' rows go by (`set_id`, `frame_id`)).
pub const SET_ID: &str = "set_id";
/// Column of the stacks file: the ids of the stack's frames, leaf first.
pub const FRAME_IDS: &str = "frame_ids";

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

/// The frame struct fields of stack type `stack` (a list of structs).
pub fn frame_struct(stack: &DataType) -> Option<&Fields> {
    match stack {
        DataType::List(f) | DataType::LargeList(f) => match f.data_type() {
            DataType::Struct(fields) => Some(fields),
            _ => None,
        },
        _ => None,
    }
}

/// The element field of `frame_ids`.
fn frame_ids_item() -> Arc<Field> {
    Arc::new(Field::new(FRAME_ID, DataType::UInt32, false))
}

/// Schema of a frames file for stacks of type `stack`: `frame_id`, the frame's fields,
/// `name`, then `set_id`; `metadata` kept.
pub fn frames_schema(stack: &DataType, metadata: HashMap<String, String>) -> Option<SchemaRef> {
    let fields = frame_struct(stack)?;
    let mut out = vec![Field::new(FRAME_ID, DataType::UInt32, false)];
    out.extend(fields.iter().map(|f| f.as_ref().clone()));
    out.push(Field::new(NAME, DataType::Utf8, false));
    out.push(Field::new(SET_ID, DataType::UInt64, false));
    Some(Arc::new(Schema::new_with_metadata(out, metadata)))
}

/// Schema of a stacks file whose frames are in a frames file: `stack_id`, `frame_ids`,
/// `set_id`; `metadata` kept.
pub fn framed_stacks_schema(metadata: HashMap<String, String>) -> SchemaRef {
    Arc::new(Schema::new_with_metadata(
        vec![
            Field::new(col::STACK_ID, stack_id_type(), false),
            Field::new(FRAME_IDS, DataType::List(frame_ids_item()), true),
            Field::new(SET_ID, DataType::UInt64, false),
        ],
        metadata,
    ))
}

/// The stack type a frames file of `schema` rebuilds: a list of structs of its columns but
/// `frame_id`, `name` and `set_id`, with the element field of the contract's `stack`.
pub fn stack_type_of(frames: &Schema) -> DataType {
    let fields: Vec<Field> = frames
        .fields()
        .iter()
        .filter(|f| ![FRAME_ID, NAME, SET_ID].contains(&f.name().as_str()))
        .map(|f| f.as_ref().clone())
        .collect();
    DataType::List(Arc::new(Field::new(
        "frame",
        DataType::Struct(Fields::from(fields)),
        false,
    )))
}

/// A file set's number for the base name of its files (FNV-1a, 64 bits): stable, so a file
/// set written again from the same stream gets the same files.
pub fn set_id(base: &str) -> u64 {
    base.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

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

    /// The files of a set of every stack held: see [`SetParts::finish`].
    pub fn finish(
        self,
        set: u64,
        frames_schema: &SchemaRef,
        stacks_schema: &SchemaRef,
        chunk: usize,
    ) -> Result<(RecordBatch, Vec<RecordBatch>), ArrowError> {
        let ids: Vec<StackId> = self.stacks.keys().copied().collect();
        self.parts(&ids)?
            .finish(set, frames_schema, stacks_schema, chunk)
    }
}

/// The stacks of one file set, as frame indices into the distinct frames they use (row
/// bytes); see [`Framer::parts`].
pub struct SetParts {
    format: RowFormat,
    frames: Vec<Arc<[u8]>>,
    stacks: Vec<(StackId, Option<(u32, u32)>)>,
    refs: Vec<u32>,
}

impl SetParts {
    /// The frames file's rows (sorted, ids in row order) and the stacks file's rows (sorted
    /// by frames root first), in batches of at most `chunk` stacks, for file set `set`.
    pub fn finish(
        self,
        set: u64,
        frames_schema: &SchemaRef,
        stacks_schema: &SchemaRef,
        chunk: usize,
    ) -> Result<(RecordBatch, Vec<RecordBatch>), ArrowError> {
        // Final ids: the distinct frames in sorted order.
        let mut order: Vec<u32> = (0..self.frames.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.frames[a as usize].cmp(&self.frames[b as usize]));
        let mut final_id = vec![0u32; order.len()];
        for (n, &provisional) in order.iter().enumerate() {
            final_id[provisional as usize] = n as u32;
        }
        let converter = self.format.converter()?;
        let parser = converter.parser();
        let sorted = converter.convert_rows(
            order
                .iter()
                .map(|&i| parser.parse(&self.frames[i as usize])),
        )?;
        drop(parser);
        let mut by_field: Vec<Option<ArrayRef>> = vec![None; self.format.fields.len()];
        for (column, &field) in sorted.into_iter().zip(&self.format.order) {
            by_field[field] = Some(column);
        }
        let n = order.len();
        let fields: Vec<ArrayRef> = by_field
            .into_iter()
            .map(|c| c.expect("every field converted"))
            .collect();
        let rows = StructArray::try_new(self.format.fields.clone(), fields.clone(), None)?;
        let names = stacks_stream::frames::folded_names(&rows)
            .map_err(|e| ArrowError::InvalidArgumentError(e.to_string()))?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from_iter_values(0..n as u32))];
        columns.extend(fields);
        columns.push(Arc::new(names));
        columns.push(Arc::new(arrow_array::UInt64Array::from(vec![set; n])));
        let frames = RecordBatch::try_new(Arc::clone(frames_schema), columns)?;

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
        Ok((frames, out))
    }
}

/// The frames of a frames file, by id: its rows as a struct array of the frame fields, and the
/// row of each id.
pub struct FrameLookup {
    frames: StructArray,
    /// Row of id `i`, when ids are not simply row numbers.
    rows: Option<Vec<u32>>,
}

impl FrameLookup {
    /// The frames of `batches` (rows of a frames file: `frame_id`, the fields, `set_id`, as
    /// [`frames_schema`] makes them; `set_id` may be absent).
    pub fn new(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Self, ArrowError> {
        let all = arrow_select::concat::concat_batches(schema, batches)?;
        let ids = all
            .column_by_name(FRAME_ID)
            .ok_or_else(|| ArrowError::SchemaError(format!("no `{FRAME_ID}` column")))?;
        let ids = arrow_cast::cast(ids, &DataType::UInt32)?;
        let ids = ids.as_primitive::<arrow_array::types::UInt32Type>();
        if ids.null_count() > 0 {
            return Err(ArrowError::InvalidArgumentError(format!(
                "`{FRAME_ID}` has nulls"
            )));
        }
        let identity = ids
            .values()
            .iter()
            .enumerate()
            .all(|(i, &id)| id as usize == i);
        let rows = if identity {
            None
        } else {
            let max = ids.values().iter().copied().max().unwrap_or(0) as usize;
            if max >= ids.len().saturating_mul(4).max(1 << 16) {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "`{FRAME_ID}` values up to {max} for {} frames",
                    ids.len()
                )));
            }
            let mut rows = vec![u32::MAX; max + 1];
            for (row, &id) in ids.values().iter().enumerate() {
                rows[id as usize] = row as u32;
            }
            Some(rows)
        };
        let DataType::List(item) = stack_type_of(&all.schema()) else {
            unreachable!("a list type")
        };
        let DataType::Struct(fields) = item.data_type() else {
            unreachable!("a struct element")
        };
        let columns: Vec<ArrayRef> = fields
            .iter()
            .map(|f| Arc::clone(all.column_by_name(f.name()).expect("a column of the file")))
            .collect();
        let frames = StructArray::try_new(fields.clone(), columns, None)?;
        Ok(FrameLookup { frames, rows })
    }

    /// The stack type [`Self::assemble`] returns.
    pub fn stack_type(&self) -> DataType {
        DataType::List(Arc::new(Field::new(
            "frame",
            self.frames.data_type().clone(),
            false,
        )))
    }

    /// Distinct frames held.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no frames are held.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// `frame_ids` lists (a stacks file's column) as `stack` lists of these frames.
    pub fn assemble(&self, frame_ids: &ArrayRef) -> Result<ListArray, ArrowError> {
        assemble(self, frame_ids)
    }
}

/// See [`FrameLookup::assemble`].
fn assemble(lookup: &FrameLookup, frame_ids: &ArrayRef) -> Result<ListArray, ArrowError> {
    let list = frame_ids.as_list_opt::<i32>().ok_or_else(|| {
        ArrowError::SchemaError(format!("`{FRAME_IDS}` of type {}", frame_ids.data_type()))
    })?;
    let offsets = list.value_offsets();
    let (lo, hi) = (offsets[0] as usize, offsets[list.len()] as usize);
    let values = arrow_cast::cast(&list.values().slice(lo, hi - lo), &DataType::UInt32)?;
    let values = values.as_primitive::<arrow_array::types::UInt32Type>();
    let n = lookup.frames.len() as u32;
    let mut take = Vec::with_capacity(values.len());
    for (i, id) in values.iter().enumerate() {
        let id = id.ok_or_else(|| {
            ArrowError::InvalidArgumentError(format!("a null frame id at element {i}"))
        })?;
        let row = match &lookup.rows {
            None => id,
            Some(rows) => rows.get(id as usize).copied().unwrap_or(u32::MAX),
        };
        if row >= n {
            return Err(ArrowError::InvalidArgumentError(format!(
                "frame id {id} is not in the frames file ({n} frames)"
            )));
        }
        take.push(row);
    }
    let taken = arrow_select::take::take(&lookup.frames, &UInt32Array::from(take), None)?;
    let shifted: Vec<i32> = offsets.iter().map(|o| o - lo as i32).collect();
    let DataType::List(item) = lookup.stack_type() else {
        unreachable!("a list type")
    };
    ListArray::try_new(
        item,
        OffsetBuffer::new(shifted.into()),
        taken,
        list.nulls().cloned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use stacks_stream::stack_key::stack_keys;
    use stacks_testkit::rows::{Frame, Row, batch};

    fn frame(name: &str, addr: u64, kernel: bool) -> Frame {
        Frame {
            function: Some(name.into()),
            symbol: Some(name.into()),
            module: Some(if kernel { "[kernel]" } else { "/bin/app" }.into()),
            addr,
            offset: Some(addr - 0x1000),
            kernel,
            ..Default::default()
        }
    }

    /// The `stack` column of `rows` and each stack's id.
    fn stacks_of(rows: &[Row]) -> (ListArray, FixedSizeBinaryArray) {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let b = batch(&schema, rows);
        let stack = b
            .column_by_name(col::STACK)
            .unwrap()
            .as_list::<i32>()
            .clone();
        let ids = stack_keys(&stack, stack.len()).unwrap();
        (stack, ids)
    }

    fn stacks() -> Vec<Option<Vec<Frame>>> {
        let main = frame("main", 0x1100, false);
        let run = frame("run", 0x1200, false);
        let read = frame("vfs_read", 0xffff_1000, true);
        vec![
            Some(vec![
                frame("leaf", 0x1300, false),
                run.clone(),
                main.clone(),
            ]),
            None,
            Some(vec![read.clone(), run.clone(), main.clone()]),
            Some(vec![main.clone()]),
            Some(vec![]),
            Some(vec![read, frame("other", 0x1400, false), main]),
        ]
    }

    #[test]
    fn stacks_come_back_from_their_frames() {
        let rows: Vec<Row> = stacks()
            .into_iter()
            .map(|stack| Row {
                kind: "profile".into(),
                stack,
                ..Default::default()
            })
            .collect();
        let (stack, ids) = stacks_of(&rows);
        let mut framer = Framer::new(stack.data_type()).unwrap().unwrap();
        // Added in two parts, as stacks-pack adds the new stacks of each batch.
        framer.add(&ids.slice(0, 3), &stack.slice(0, 3)).unwrap();
        framer.add(&ids.slice(3, 3), &stack.slice(3, 3)).unwrap();
        assert_eq!(framer.frames(), 5, "leaf, run, main, vfs_read, other");
        let fs = frames_schema(stack.data_type(), Default::default()).unwrap();
        let ss = framed_stacks_schema(Default::default());
        let (frames, out) = framer.finish(7, &fs, &ss, 4).unwrap();
        assert_eq!(out.len(), 2, "chunks of 4");
        // Sorted: user frames (kernel = false) first, by offset.
        let function = frames
            .column_by_name(frame::FUNCTION)
            .unwrap()
            .as_string::<i32>();
        let names: Vec<&str> = (0..frames.num_rows()).map(|i| function.value(i)).collect();
        assert_eq!(names, ["main", "run", "leaf", "other", "vfs_read"]);
        let folded = frames.column_by_name(NAME).unwrap().as_string::<i32>();
        let folded: Vec<&str> = (0..frames.num_rows()).map(|i| folded.value(i)).collect();
        assert_eq!(folded, names, "named functions are their names");

        let lookup = FrameLookup::new(&fs, std::slice::from_ref(&frames)).unwrap();
        let mut by_id: HashMap<Vec<u8>, Option<Vec<Option<String>>>> = HashMap::new();
        for part in &out {
            let got = lookup.assemble(part.column(1)).unwrap();
            assert_eq!(
                got.data_type(),
                stack.data_type(),
                "the contract's stack type"
            );
            let keys = stack_keys(&got, got.len()).unwrap();
            let pid = part.column(0).as_fixed_size_binary();
            for i in 0..got.len() {
                assert_eq!(keys.value(i), pid.value(i), "the same stack, every field");
                let names = (!got.is_null(i)).then(|| {
                    let v = got.value(i);
                    let s = v.as_struct();
                    let f = s
                        .column_by_name(frame::FUNCTION)
                        .unwrap()
                        .as_string::<i32>();
                    (0..f.len())
                        .map(|j| f.is_valid(j).then(|| f.value(j).to_string()))
                        .collect()
                });
                by_id.insert(pid.value(i).to_vec(), names);
            }
        }
        assert_eq!(by_id.len(), 5, "every stack but the null one");
        assert_eq!(
            by_id
                .values()
                .filter(|v| v.as_ref().is_some_and(Vec::is_empty))
                .count(),
            1
        );
    }

    #[test]
    fn retained_stacks_keep_their_frames_and_the_rest_is_dropped() {
        let main = frame("main", 0x1100, false);
        let rows: Vec<Row> = (0..3000u64)
            .map(|i| Row {
                kind: "profile".into(),
                stack: Some(vec![
                    frame(&format!("f{i}"), 0x2000 + i, false),
                    main.clone(),
                ]),
                ..Default::default()
            })
            .collect();
        let (stack, keys) = stacks_of(&rows);
        let mut framer = Framer::new(stack.data_type()).unwrap().unwrap();
        framer.add(&keys, &stack).unwrap();
        // Adding a stack again changes nothing.
        framer.add(&keys.slice(0, 10), &stack.slice(0, 10)).unwrap();
        assert_eq!((framer.stacks(), framer.frames()), (3000, 3001));
        let kept: Vec<StackId> = (0..10)
            .map(|i| keys.value(i * 300).try_into().unwrap())
            .collect();
        let before = framer.bytes();
        framer.retain(|id| kept.contains(id));
        assert_eq!((framer.stacks(), framer.frames()), (10, 11));
        assert!(
            framer.bytes() < before / 10,
            "{} vs {before}",
            framer.bytes()
        );
        let fs = frames_schema(stack.data_type(), Default::default()).unwrap();
        let ss = framed_stacks_schema(Default::default());
        let (frames, out) = framer
            .parts(&kept)
            .unwrap()
            .finish(3, &fs, &ss, 100)
            .unwrap();
        let lookup = FrameLookup::new(&fs, std::slice::from_ref(&frames)).unwrap();
        let got = lookup.assemble(out[0].column(1)).unwrap();
        let got_keys = stack_keys(&got, got.len()).unwrap();
        let pid = out[0].column(0).as_fixed_size_binary();
        for i in 0..got.len() {
            assert_eq!(
                got_keys.value(i),
                pid.value(i),
                "the same stack, every field"
            );
        }
        assert_eq!(got.len(), 10);
    }
}
