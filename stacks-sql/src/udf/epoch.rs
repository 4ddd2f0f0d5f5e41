//! `epoch_ns(time)`: a timestamp as nanoseconds since the Unix epoch (Int64), as DuckDB's
//! function of that name: the views of `views/` compare times with it, so that DuckDB (explore)
//! runs the same text.

use arrow_array::ArrayRef;
use arrow_schema::{DataType, TimeUnit};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

const NAME: &str = "epoch_ns";

/// The `epoch_ns` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct EpochNs {
    signature: Signature,
}

impl EpochNs {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for EpochNs {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match &arg_types[0] {
            DataType::Timestamp(..) | DataType::Null => Ok(DataType::Int64),
            other => {
                plan_err!("{NAME}: the argument must be a timestamp (e.g. `time`), not {other}")
            }
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let a = &arrays[0];
        let ns: ArrayRef = match a.data_type() {
            DataType::Timestamp(_, tz) => {
                let t =
                    arrow_cast::cast(a, &DataType::Timestamp(TimeUnit::Nanosecond, tz.clone()))?;
                arrow_cast::cast(&t, &DataType::Int64)?
            }
            _ => arrow_cast::cast(a, &DataType::Int64)?,
        };
        Ok(ColumnarValue::Array(ns))
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use datafusion::prelude::SessionContext;

    async fn ns(sql: &str) -> Vec<Option<i64>> {
        let mut ctx = SessionContext::new();
        crate::udf::register(&mut ctx).unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let mut out = Vec::new();
        for b in batches {
            out.extend(b.column(0).as_primitive::<Int64Type>().iter());
        }
        out
    }

    #[tokio::test]
    async fn nanoseconds_since_the_epoch_of_any_unit() {
        let text = "SELECT epoch_ns(arrow_cast('2023-11-14T22:13:20.123456789Z', \
                    'Timestamp(Nanosecond, Some(\"UTC\"))'))";
        assert_eq!(ns(text).await, [Some(1_700_000_000_123_456_789)]);
        let micros = "SELECT epoch_ns(arrow_cast(arrow_cast(-5, 'Int64'), \
                      'Timestamp(Microsecond, None)'))";
        assert_eq!(ns(micros).await, [Some(-5_000)]);
        assert_eq!(ns("SELECT epoch_ns(NULL)").await, [None]);
    }

    #[tokio::test]
    async fn only_timestamps() {
        let mut ctx = SessionContext::new();
        crate::udf::register(&mut ctx).unwrap();
        let e = ctx.sql("SELECT epoch_ns('x')").await.unwrap_err();
        assert!(e.to_string().contains("must be a timestamp"), "{e}");
    }
}
