//! `kind_unit(kind)`: the unit of `value` for rows of an event kind (`ns`, `bytes` or
//! `count`), from the registry of kinds every stacks tool reads (`stacks_stream::kinds`).

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};
use stacks_stream::kinds;

const NAME: &str = "kind_unit";

/// The `kind_unit` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct KindUnit {
    signature: Signature,
}

impl KindUnit {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

fn is_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

impl ScalarUDFImpl for KindUnit {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if !is_text(&arg_types[0]) {
            return plan_err!(
                "{NAME}: the argument must be text (a kind), not {}",
                arg_types[0]
            );
        }
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        if !is_text(arrays[0].data_type()) {
            return exec_err!("{NAME}: the argument must be text (a kind)");
        }
        let kinds = arrow_cast::cast(&arrays[0], &DataType::Utf8)?;
        let kinds = kinds.as_string::<i32>();
        let mut b = StringBuilder::new();
        for row in 0..args.number_rows {
            if kinds.is_valid(row) {
                b.append_value(kinds::unit(kinds.value(row)).short());
            } else {
                b.append_null();
            }
        }
        let out: ArrayRef = Arc::new(b.finish());
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use stacks_stream::frames::{NO_STACK_FRAME, SHORT_OFFCPU_FRAME};

    use crate::queries::BUNDLED;

    /// The marker frames the SQL writes as text (`stack_or(stack, '[no stack]')`) are the ones
    /// stacks-pprof adds for rows without a stack, so their totals add up.
    #[test]
    fn sql_marker_frames_are_the_contract_constants() {
        let mut seen: Vec<String> = Vec::new();
        for (name, sql) in BUNDLED.iter() {
            // The code of each line, without its `--` comment (prose has apostrophes).
            let code: Vec<&str> = sql
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect();
            let code = code.join("\n");
            for literal in code.split('\'').skip(1).step_by(2) {
                if literal.starts_with('[') {
                    assert!(
                        [NO_STACK_FRAME, SHORT_OFFCPU_FRAME].contains(&literal),
                        "{name}: marker frame '{literal}' is not a stacks_stream::frames constant"
                    );
                    seen.push(literal.to_string());
                }
            }
        }
        for marker in [NO_STACK_FRAME, SHORT_OFFCPU_FRAME] {
            assert!(seen.iter().any(|s| s == marker), "{marker}: {seen:?}");
        }
    }
}
