//! Scalar functions over a `stack` column (a list of frame structs with at least a `function`
//! field, leaf first): fold it to text, take its leaf or root, its depth, its function names,
//! keep or drop frames by a regular expression on function or module, and stand in a marker
//! frame for a missing stack.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, BooleanArray, GenericListArray, ListArray, StringArray, StructArray,
    UInt64Array, new_null_array,
};
use arrow_schema::{DataType, Field, FieldRef, Fields};
use datafusion::common::{DataFusionError, Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};
use regex::Regex;
use stacks_stream::frames::StackFrames;
use stacks_stream::{col, frame};

/// The frame fields of a stack type, or a planning error naming the function.
pub(super) fn frame_fields<'a>(func: &str, dt: &'a DataType) -> Result<&'a Fields> {
    if let DataType::List(item) = dt
        && let DataType::Struct(fields) = item.data_type()
        && fields.iter().any(|f| f.name() == frame::FUNCTION)
    {
        return Ok(fields);
    }
    plan_err!(
        "{func}: the first argument must be a stack (a list of frames with a `function` field), not {dt}"
    )
}

/// The frames of a stack argument, named as every stacks tool names them.
struct Names {
    frames: StackFrames,
}

impl Names {
    /// Frame `i`'s display name: its function, else [`stacks_stream::frames::unresolved_name`].
    fn get(&self, i: usize) -> String {
        match self.frames.frame(i) {
            Some(f) => f.name().into_owned(),
            // A null element (the contract has none) has no address either.
            None => "[0x0]".to_string(),
        }
    }

    /// Whether the frame's function or module matches `re`.
    fn matches(&self, i: usize, re: &Regex) -> bool {
        self.frames.frame(i).is_some_and(|f| {
            f.function.is_some_and(|name| re.is_match(name))
                || f.module.is_some_and(|module| re.is_match(module))
        })
    }
}

/// The list argument as an array of `rows`, with its frame names.
fn stack_input(func: &str, args: &ScalarFunctionArgs) -> Result<(ListArray, Names, Vec<ArrayRef>)> {
    let arrays = ColumnarValue::values_to_arrays(&args.args)?;
    let list = arrays[0].as_list::<i32>().clone();
    let frames = StackFrames::new(&arrays[0], func, col::STACK)
        .map_err(|e| DataFusionError::Execution(e.to_string()))?;
    Ok((list, Names { frames }, arrays))
}

fn row_range(list: &ListArray, row: usize) -> std::ops::Range<usize> {
    let o = list.value_offsets();
    o[row] as usize..o[row + 1] as usize
}

/// Which of the stack functions an instance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Fold,
    Leaf,
    UserLeaf,
    KernelLeaf,
    Root,
    Depth,
    Functions,
    Keep,
    Drop,
    Or,
    Key,
}

/// One stack function (see [`super::register`] for the list).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct StackFn {
    op: Op,
    name: &'static str,
    signature: Signature,
}

impl StackFn {
    fn new(op: Op, name: &'static str, signature: Signature) -> Self {
        Self {
            op,
            name,
            signature,
        }
    }

    /// Every stack function.
    pub(super) fn all() -> Vec<Self> {
        let im = Volatility::Immutable;
        let one = || Signature::any(1, im);
        let two = || Signature::any(2, im);
        vec![
            Self::new(
                Op::Fold,
                "stack_fold",
                Signature::one_of(vec![TypeSignature::Any(1), TypeSignature::Any(2)], im),
            ),
            Self::new(Op::Leaf, "stack_leaf", one()),
            Self::new(Op::UserLeaf, "stack_user_leaf", one()),
            Self::new(Op::KernelLeaf, "stack_kernel_leaf", one()),
            Self::new(Op::Root, "stack_root", one()),
            Self::new(Op::Depth, "stack_depth", one()),
            Self::new(Op::Functions, "stack_functions", one()),
            Self::new(Op::Keep, "stack_keep", two()),
            Self::new(Op::Drop, "stack_drop", two()),
            Self::new(Op::Or, "stack_or", two()),
            Self::new(Op::Key, "stack_key", one()),
        ]
    }
}

/// Compiled patterns by text, for per-row pattern arguments (usually one constant).
struct Patterns {
    func: &'static str,
    cache: HashMap<String, Regex>,
}

impl Patterns {
    fn get(&mut self, text: &str) -> Result<&Regex> {
        if !self.cache.contains_key(text) {
            let re = match Regex::new(text) {
                Ok(re) => re,
                Err(e) => {
                    let msg = e.to_string().replace('\n', " ");
                    return exec_err!("{}: bad pattern {text:?}: {msg}", self.func);
                }
            };
            self.cache.insert(text.to_string(), re);
        }
        Ok(&self.cache[text])
    }
}

fn utf8_arg(func: &str, a: &ArrayRef) -> Result<StringArray> {
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
            Ok(arrow_cast::cast(a, &DataType::Utf8)?
                .as_string::<i32>()
                .clone())
        }
        other => exec_err!("{func}: the second argument must be text, not {other}"),
    }
}

impl ScalarUDFImpl for StackFn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        frame_fields(self.name, &arg_types[0])?;
        if arg_types.len() > 1 {
            match &arg_types[1] {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {}
                other => {
                    return plan_err!(
                        "{}: the second argument must be text, not {other}",
                        self.name
                    );
                }
            }
        }
        Ok(match self.op {
            Op::Fold | Op::Leaf | Op::UserLeaf | Op::KernelLeaf | Op::Root => DataType::Utf8,
            Op::Depth => DataType::Int64,
            Op::Functions => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            Op::Keep | Op::Drop | Op::Or => arg_types[0].clone(),
            Op::Key => DataType::FixedSizeBinary(16),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let (list, names, arrays) = stack_input(self.name, &args)?;
        let out: ArrayRef = match self.op {
            Op::Fold => {
                let sep = match arrays.get(1) {
                    Some(a) => Some(utf8_arg(self.name, a)?),
                    None => None,
                };
                let mut b = StringBuilder::new();
                for row in 0..rows {
                    let sep_here = match &sep {
                        Some(s) if s.is_null(row) => None,
                        Some(s) => Some(s.value(row)),
                        None => Some(";"),
                    };
                    match sep_here {
                        // Folded names hold no `;`: each of the folded text's separates frames.
                        Some(sep) if list.is_valid(row) => {
                            let folded = names.frames.folded(row_range(&list, row));
                            if sep == ";" {
                                b.append_value(folded);
                            } else {
                                b.append_value(folded.replace(';', sep));
                            }
                        }
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            Op::Leaf | Op::Root => {
                let mut b = StringBuilder::new();
                for row in 0..rows {
                    let r = row_range(&list, row);
                    let pick = if self.op == Op::Leaf {
                        r.clone().next()
                    } else {
                        r.clone().next_back()
                    };
                    match pick {
                        Some(i) if list.is_valid(row) => b.append_value(names.get(i)),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            Op::UserLeaf | Op::KernelLeaf => {
                // Frames are leaf first: the first frame of the wanted side is its leaf.
                let kernel = self.op == Op::KernelLeaf;
                let mut b = StringBuilder::new();
                for row in 0..rows {
                    let pick = row_range(&list, row)
                        .find(|&i| names.frames.frame(i).is_some_and(|f| f.kernel == kernel));
                    match pick {
                        Some(i) if list.is_valid(row) => b.append_value(names.get(i)),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            Op::Depth => {
                let mut b = Int64Builder::new();
                for row in 0..rows {
                    if list.is_valid(row) {
                        b.append_value(row_range(&list, row).len() as i64);
                    } else {
                        b.append_null();
                    }
                }
                Arc::new(b.finish())
            }
            Op::Functions => {
                let mut b = ListBuilder::new(StringBuilder::new());
                for row in 0..rows {
                    if list.is_valid(row) {
                        for i in row_range(&list, row) {
                            b.values().append_value(names.get(i));
                        }
                        b.append(true);
                    } else {
                        b.append(false);
                    }
                }
                Arc::new(b.finish())
            }
            Op::Keep | Op::Drop => {
                let pattern = utf8_arg(self.name, &arrays[1])?;
                let mut patterns = Patterns {
                    func: self.name,
                    cache: HashMap::new(),
                };
                filter_frames(&list, rows, |row, i| {
                    if pattern.is_null(row) {
                        return Ok(true);
                    }
                    let hit = names.matches(i, patterns.get(pattern.value(row))?);
                    Ok(hit == (self.op == Op::Keep))
                })?
            }
            Op::Or => {
                let label = utf8_arg(self.name, &arrays[1])?;
                or_marker(&list, rows, &label)?
            }
            Op::Key => Arc::new(stacks_stream::stack_key::stack_keys(&list, rows)?),
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// A copy of `list` keeping the frames for which `keep(row, frame index)` is true.
fn filter_frames(
    list: &ListArray,
    rows: usize,
    mut keep: impl FnMut(usize, usize) -> Result<bool>,
) -> Result<ArrayRef> {
    let values = list.values();
    let mut mask = vec![false; values.len()];
    let mut lengths = Vec::with_capacity(rows);
    for row in 0..rows {
        let mut n = 0;
        if list.is_valid(row) {
            for i in row_range(list, row) {
                if keep(row, i)? {
                    mask[i] = true;
                    n += 1;
                }
            }
        }
        lengths.push(n);
    }
    let kept = arrow_select::filter::filter(values.as_ref(), &BooleanArray::from(mask))?;
    let field = match list.data_type() {
        DataType::List(f) => f.clone(),
        other => return exec_err!("stack expected, got {other}"),
    };
    Ok(Arc::new(GenericListArray::<i32>::try_new(
        field,
        arrow_buffer::OffsetBuffer::from_lengths(lengths),
        kept,
        list.nulls().cloned(),
    )?))
}

/// One marker frame per row of `label`, of the frame type of stacks of type `list_type`: its
/// function is the label, its other fields null (or zero and false where not nullable).
pub(super) fn marker_frames(list_type: &DataType, label: &StringArray) -> Result<StructArray> {
    let rows = label.len();
    let field: FieldRef = match list_type {
        DataType::List(f) => f.clone(),
        other => return exec_err!("stack expected, got {other}"),
    };
    let DataType::Struct(fields) = field.data_type() else {
        return exec_err!("stack frames must be structs");
    };
    let columns = fields
        .iter()
        .map(|f| -> Result<ArrayRef> {
            Ok(match (f.name().as_str(), f.data_type()) {
                (frame::FUNCTION, _) => arrow_cast::cast(label, f.data_type())?,
                (_, DataType::Boolean) if !f.is_nullable() => {
                    Arc::new(BooleanArray::from(vec![false; rows]))
                }
                (_, DataType::UInt64) if !f.is_nullable() => {
                    Arc::new(UInt64Array::from(vec![0; rows]))
                }
                (_, dt) if !f.is_nullable() => {
                    arrow_cast::cast(&UInt64Array::from(vec![0; rows]), dt)?
                }
                (_, dt) => new_null_array(dt, rows),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(StructArray::try_new(fields.clone(), columns, None)?)
}

/// `list`, with each null stack replaced by one frame whose function is `label` (null labels
/// keep the stack null).
fn or_marker(list: &ListArray, rows: usize, label: &StringArray) -> Result<ArrayRef> {
    let field: FieldRef = match list.data_type() {
        DataType::List(f) => f.clone(),
        other => return exec_err!("stack expected, got {other}"),
    };
    // One marker frame per row (only used where the stack is null).
    let markers = marker_frames(list.data_type(), label)?;
    let marker_lists = ListArray::try_new(
        field,
        arrow_buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(1, rows)),
        Arc::new(markers),
        None,
    )?;
    let indices: Vec<(usize, usize)> = (0..rows)
        .map(|row| {
            if list.is_null(row) && label.is_valid(row) {
                (1, row)
            } else {
                (0, row)
            }
        })
        .collect();
    Ok(arrow_select::interleave::interleave(
        &[list as &dyn Array, &marker_lists as &dyn Array],
        &indices,
    )?)
}
