//! `as_stack(frames)`: a list of frame structs (as `array_agg(named_struct(…))` gathers them
//! from a frames file) as a stack of the contract's type: the same values under the `stack`
//! column's element field and, when the structs have the contract's frame fields, with their
//! nullability (SQL makes every field nullable), so it compares, unions and casts with stored
//! stacks and the stack functions fill marker frames as they do for stored ones.
//!
//! The list may instead hold positioned frames, structs of exactly `pos` (an integer) and
//! `frame` (the frame struct), in any order: each stack's frames are then put in `pos` order,
//! and entries whose `frame` is null are left out (so a left join gathers a stack of no
//! frames).
//! That lets the frames be gathered by an unordered `array_agg`, which DataFusion keeps as
//! slices of its input batches and accounts for by their size, where an `ORDER BY` inside
//! `array_agg` keeps one value per frame and counts each as its whole input batch: gigabytes
//! for thousands of stacks, beyond any memory limit (`--memory-limit`, a cluster's
//! executors).
//!
//! Positioned frames keep their fields; a plain list of frames with the contract's fields
//! and then `name` (a frames file's columns) becomes the contract's stack without `name`:
//! the bucket SQL orders named frames with one call, folds their stored names
//! (`stack_fold`) and drops them with a second.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, ListArray, StructArray, UInt32Array};
use arrow_buffer::OffsetBuffer;
use arrow_cast::cast;
use arrow_schema::{DataType, Field};
use arrow_select::take::take;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use stacks_store::frames;

const NAME: &str = "as_stack";

/// The `as_stack` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct AsStack {
    signature: Signature,
}

impl AsStack {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// The field names of a positioned frame.
const POS: &str = "pos";
const FRAME: &str = "frame";

/// The frame struct of positioned frames (`{pos, frame}`), or None when `item` is a frame.
fn positioned(item: &DataType) -> Option<&DataType> {
    let DataType::Struct(fields) = item else {
        return None;
    };
    match fields.iter().map(|f| f.name().as_str()).collect::<Vec<_>>()[..] {
        [POS, FRAME]
            if fields[0].data_type().is_integer()
                && matches!(fields[1].data_type(), DataType::Struct(_)) =>
        {
            Some(fields[1].data_type())
        }
        _ => None,
    }
}

/// The frames of a list of positioned frames, each list's in `pos` order (ties keep their
/// order) without null frames, as one flat struct array and its offsets (from 0: a sliced
/// list's start elsewhere).
fn in_position_order(list: &ListArray) -> Result<(ArrayRef, OffsetBuffer<i32>)> {
    let items = list.values().as_struct();
    let pos = cast(items.column(0), &DataType::Int64)?;
    if pos.null_count() > 0 {
        return exec_err!("{NAME}: a null `{POS}` in a list of positioned frames");
    }
    let pos = pos.as_primitive::<Int64Type>();
    let frame = items.column(1);
    let mut order: Vec<u32> = Vec::with_capacity(items.len());
    let mut lengths = Vec::with_capacity(list.len());
    for w in list.offsets().windows(2) {
        let first = order.len();
        order.extend((w[0] as u32..w[1] as u32).filter(|&i| frame.is_valid(i as usize)));
        order[first..].sort_by_key(|&i| pos.value(i as usize));
        lengths.push(order.len() - first);
    }
    let frames = take(frame, &UInt32Array::from(order), None)?;
    Ok((frames, OffsetBuffer::from_lengths(lengths)))
}

/// Whether `frame` (a struct) has the contract's frame fields (names and types), then
/// `name` when `named`.
fn is_contract_frame(frame: &DataType, named: bool) -> bool {
    let contract = stacks_stream::stack_type();
    let (DataType::Struct(have), Some(want)) = (frame, frames::frame_struct(&contract)) else {
        return false;
    };
    have.len() == want.len() + usize::from(named)
        && have
            .iter()
            .zip(want.iter())
            .all(|(h, w)| h.name() == w.name() && h.data_type() == w.data_type())
        && (!named
            || have
                .last()
                .is_some_and(|f| f.name() == stacks_stream::frame::NAME))
}

/// The stack type for frames of type `frame` (a struct): the contract's when `frame` has the
/// contract's frame fields, or (`plain`: not positioned) those and `name`; else a list of
/// `frame`.
fn stack_of(frame: &DataType, plain: bool) -> DataType {
    if is_contract_frame(frame, false) || (plain && is_contract_frame(frame, true)) {
        return stacks_stream::stack_type();
    }
    DataType::List(Arc::new(Field::new("frame", frame.clone(), false)))
}

impl ScalarUDFImpl for AsStack {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match &arg_types[0] {
            DataType::List(f) if matches!(f.data_type(), DataType::Struct(_)) => {
                Ok(match positioned(f.data_type()) {
                    Some(frame) => stack_of(frame, false),
                    None => stack_of(f.data_type(), true),
                })
            }
            other => plan_err!(
                "{NAME}: the argument must be a list of frame structs (or of {{{POS}, {FRAME}}} structs), not {other}"
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(list) = arrays[0].as_list_opt::<i32>() else {
            return exec_err!("{NAME}: the argument must be a list of frame structs");
        };
        let ordered;
        let plain = positioned(&list.value_type()).is_none();
        let (values, offsets) = if plain {
            (list.values(), list.offsets().clone())
        } else {
            ordered = in_position_order(list)?;
            (&ordered.0, ordered.1.clone())
        };
        if values.null_count() > 0 {
            return exec_err!("{NAME}: a null frame in a list");
        }
        let DataType::List(field) = stack_of(values.data_type(), plain) else {
            unreachable!("a list type")
        };
        let values: ArrayRef = match field.data_type() {
            DataType::Struct(fields) if values.data_type() != field.data_type() => {
                // The contract's fields (a frames file's `name` after them left out): a null
                // in a field it says is never null is an error.
                let s = values.as_struct();
                Arc::new(StructArray::try_new(
                    fields.clone(),
                    s.columns()[..fields.len()].to_vec(),
                    s.nulls().cloned(),
                )?)
            }
            _ => Arc::clone(values),
        };
        let out = ListArray::try_new(field, offsets, values, list.nulls().cloned())?;
        let out: ArrayRef = Arc::new(out);
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;

    /// The functions of each stack the query's first column gives.
    async fn stacks(sql: &str) -> Vec<Vec<String>> {
        let mut ctx = SessionContext::new();
        crate::udf::register(&mut ctx).unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let mut out = Vec::new();
        for b in batches {
            let list = b.column(0).as_list::<i32>();
            for i in 0..list.len() {
                let v = list.value(i);
                let f = v.as_struct().column_by_name("function").unwrap();
                let f = f.as_string::<i32>();
                out.push(f.iter().map(|s| s.unwrap().to_string()).collect());
            }
        }
        out
    }

    #[tokio::test]
    async fn positioned_frames_come_out_in_position_order() {
        let got = stacks(
            "SELECT as_stack(array_agg(named_struct('pos', p, 'frame', named_struct('function', f)))) \
             FROM (VALUES (1, 3, 'main'), (1, 1, 'leaf'), (2, 2, 'b'), (1, 2, 'mid'), (2, 1, 'a')) \
             AS t(s, p, f) GROUP BY s ORDER BY s",
        )
        .await;
        assert_eq!(got, [vec!["leaf", "mid", "main"], vec!["a", "b"]]);
    }

    #[tokio::test]
    async fn null_frames_are_left_out_and_a_list_of_none_is_an_empty_stack() {
        let got = stacks(
            "SELECT as_stack(array_agg(named_struct('pos', p, 'frame', \
             CASE WHEN f IS NULL THEN NULL ELSE named_struct('function', f) END))) \
             FROM (VALUES (1, 2, NULL), (1, 1, 'leaf'), (2, 1, NULL)) AS t(s, p, f) \
             GROUP BY s ORDER BY s",
        )
        .await;
        assert_eq!(got, [vec!["leaf".to_string()], vec![]]);
    }

    #[tokio::test]
    async fn a_sliced_list_of_positioned_frames_keeps_its_stacks() {
        // The second of two lists: its offsets start past the first's frames.
        let got = stacks(
            "SELECT s FROM (SELECT as_stack(x) AS s, k FROM (VALUES \
             (1, [named_struct('pos', 2, 'frame', named_struct('function', 'y')), \
                  named_struct('pos', 1, 'frame', named_struct('function', 'x'))]), \
             (2, [named_struct('pos', 9, 'frame', named_struct('function', 'q')), \
                  named_struct('pos', 3, 'frame', named_struct('function', 'p'))])) AS t(k, x)) \
             WHERE k = 2",
        )
        .await;
        assert_eq!(got, [vec!["p", "q"]]);
    }

    #[test]
    fn a_list_sliced_past_its_start_is_ordered_within_itself() {
        let lists = || -> ListArray {
            let pos = Arc::new(arrow_array::Int64Array::from(vec![2, 1, 9, 3])) as ArrayRef;
            let names = Arc::new(arrow_array::StringArray::from(vec!["y", "x", "q", "p"]));
            let frame = StructArray::from(vec![(
                Arc::new(Field::new("function", DataType::Utf8, true)),
                names as ArrayRef,
            )]);
            let items = StructArray::from(vec![
                (Arc::new(Field::new(POS, DataType::Int64, true)), pos),
                (
                    Arc::new(Field::new(FRAME, frame.data_type().clone(), true)),
                    Arc::new(frame) as ArrayRef,
                ),
            ]);
            ListArray::new(
                Arc::new(Field::new("item", items.data_type().clone(), true)),
                OffsetBuffer::from_lengths([2, 2]),
                Arc::new(items),
                None,
            )
        };
        let second = lists().slice(1, 1);
        let (frames, offsets) = in_position_order(&second).unwrap();
        assert_eq!(offsets.as_ref(), &[0, 2]);
        let names = frames.as_struct().column(0).as_string::<i32>().clone();
        assert_eq!(names.iter().flatten().collect::<Vec<_>>(), ["p", "q"]);
    }
}
