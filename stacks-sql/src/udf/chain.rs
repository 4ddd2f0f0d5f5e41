//! `stack_chain(waker_stack, wakee_stack)`: one stack of a wakeup as bcc's offwaketime folds it,
//! for `offwake` flame graphs: leaf first, the waker's frames root to leaf, a `--` frame, then
//! the woken thread's frames leaf to root. Folded root first, it reads: the woken thread from
//! its root to where it blocked, `--`, the waker from where it woke it back to its root.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, StringArray, UInt32Array};
use arrow_schema::DataType;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use super::stack::{frame_fields, marker_frames};

const NAME: &str = "stack_chain";

/// The separator frame's function.
pub(super) const SEPARATOR: &str = "--";

/// The `stack_chain` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct StackChain {
    signature: Signature,
}

impl StackChain {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for StackChain {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        frame_fields(NAME, &arg_types[0])?;
        frame_fields(NAME, &arg_types[1])?;
        if arg_types[0] != arg_types[1] {
            return plan_err!(
                "{NAME}: both stacks must have the same frame type, not {} and {}",
                arg_types[0],
                arg_types[1]
            );
        }
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (waker, wakee) = (arrays[0].as_list::<i32>(), arrays[1].as_list::<i32>());
        Ok(ColumnarValue::Array(chain(waker, wakee)?))
    }
}

/// Row by row: `waker` reversed, a separator frame, `wakee`; null when either is null.
fn chain(waker: &ListArray, wakee: &ListArray) -> Result<ArrayRef> {
    let rows = waker.len();
    let sep = marker_frames(waker.data_type(), &StringArray::from(vec![SEPARATOR; rows]))?;
    // Every frame of the result, by its index in [waker frames, wakee frames, separators].
    let values =
        arrow_select::concat::concat(&[waker.values().as_ref(), wakee.values().as_ref(), &sep])?;
    let (wakee_at, sep_at) = (
        waker.values().len(),
        waker.values().len() + wakee.values().len(),
    );
    let (mut take, mut lengths, mut valid) = (Vec::new(), Vec::with_capacity(rows), Vec::new());
    for row in 0..rows {
        if waker.is_null(row) || wakee.is_null(row) {
            lengths.push(0);
            valid.push(false);
            continue;
        }
        let start = take.len();
        let (wo, eo) = (waker.value_offsets(), wakee.value_offsets());
        take.extend((wo[row] as u32..wo[row + 1] as u32).rev());
        take.push((sep_at + row) as u32);
        take.extend(
            (eo[row] as usize + wakee_at..eo[row + 1] as usize + wakee_at).map(|i| i as u32),
        );
        lengths.push(take.len() - start);
        valid.push(true);
    }
    let frames = arrow_select::take::take(values.as_ref(), &UInt32Array::from(take), None)?;
    let DataType::List(field) = waker.data_type() else {
        return exec_err!("{NAME}: stack expected");
    };
    Ok(Arc::new(ListArray::try_new(
        field.clone(),
        arrow_buffer::OffsetBuffer::from_lengths(lengths),
        frames,
        Some(valid.into()),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
    use arrow_schema::{Field, Fields};

    /// Stacks of frames with a `function` only, leaf first.
    fn stacks(rows: &[Option<&[&str]>]) -> ListArray {
        let fields = Fields::from(vec![Field::new("function", DataType::Utf8, true)]);
        let mut b = ListBuilder::new(StructBuilder::from_fields(fields, 0));
        for r in rows {
            match r {
                Some(frames) => {
                    for f in *frames {
                        let s = b.values();
                        s.field_builder::<StringBuilder>(0).unwrap().append_value(f);
                        s.append(true);
                    }
                    b.append(true);
                }
                None => b.append(false),
            }
        }
        b.finish()
    }

    fn names(a: &ArrayRef) -> Vec<Option<Vec<String>>> {
        let l = a.as_list::<i32>();
        (0..l.len())
            .map(|r| {
                l.is_valid(r).then(|| {
                    let v = l.value(r);
                    let f = v.as_struct().column(0).as_string::<i32>().clone();
                    (0..f.len()).map(|i| f.value(i).to_string()).collect()
                })
            })
            .collect()
    }

    #[test]
    fn waker_reversed_then_separator_then_wakee() {
        let waker = stacks(&[
            Some(&["try_to_wake_up", "chain_pass", "main"]),
            Some(&["[irq]"]),
            None,
        ]);
        let wakee = stacks(&[
            Some(&["schedule", "chain_wait", "main"]),
            Some(&["io_schedule"]),
            Some(&["x"]),
        ]);
        let out = chain(&waker, &wakee).unwrap();
        let v = |s: &[&str]| Some(s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            names(&out),
            vec![
                v(&[
                    "main",
                    "chain_pass",
                    "try_to_wake_up",
                    "--",
                    "schedule",
                    "chain_wait",
                    "main"
                ]),
                v(&["[irq]", "--", "io_schedule"]),
                None,
            ]
        );
    }
}
