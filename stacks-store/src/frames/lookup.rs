//! Reading the frames level: [`FrameLookup`] holds a frames file's frames by id and assembles
//! the `stack` lists of a stacks file's `frame_ids` from them.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, StructArray, UInt32Array};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType, Field, SchemaRef};

use super::{FRAME_ID, FRAME_IDS, stack_type_of};

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
