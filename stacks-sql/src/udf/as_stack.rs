//! `as_stack(frames)`: a list of frame structs (as `array_agg(named_struct(…))` gathers them
//! from a frames file) as a stack of the contract's type: the same values under the `stack`
//! column's element field and, when the structs have the contract's frame fields, with their
//! nullability (SQL makes every field nullable), so it compares, unions and casts with stored
//! stacks and the stack functions fill marker frames as they do for stored ones.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, ListArray, StructArray};
use arrow_schema::{DataType, Field};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use stacks_stream::store::frames;

const NAME: &str = "as_stack";

/// The `as_stack` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AsStack {
    signature: Signature,
}

impl AsStack {
    pub fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// The stack type for frames of type `frame` (a struct): the contract's when `frame` has the
/// contract's frame fields (names and types), else a list of `frame`.
fn stack_of(frame: &DataType) -> DataType {
    let contract = stacks_stream::stack_type();
    if let (DataType::Struct(have), Some(want)) = (frame, frames::frame_struct(&contract))
        && have.len() == want.len()
        && have
            .iter()
            .zip(want.iter())
            .all(|(h, w)| h.name() == w.name() && h.data_type() == w.data_type())
    {
        return contract;
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
                Ok(stack_of(f.data_type()))
            }
            other => plan_err!("{NAME}: the argument must be a list of frame structs, not {other}"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(list) = arrays[0].as_list_opt::<i32>() else {
            return exec_err!("{NAME}: the argument must be a list of frame structs");
        };
        let values = list.values();
        if values.null_count() > 0 {
            return exec_err!("{NAME}: a null frame in a list");
        }
        let DataType::List(field) = stack_of(values.data_type()) else {
            unreachable!("a list type")
        };
        let values: ArrayRef = match field.data_type() {
            DataType::Struct(fields) if values.data_type() != field.data_type() => {
                // The contract's fields: a null in a field it says is never null is an error.
                let s = values.as_struct();
                Arc::new(StructArray::try_new(
                    fields.clone(),
                    s.columns().to_vec(),
                    s.nulls().cloned(),
                )?)
            }
            _ => Arc::clone(values),
        };
        let out = ListArray::try_new(field, list.offsets().clone(), values, list.nulls().cloned())?;
        let out: ArrayRef = Arc::new(out);
        Ok(ColumnarValue::Array(out))
    }
}
