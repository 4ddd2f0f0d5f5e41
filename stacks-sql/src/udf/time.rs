//! `time_bucket(time, interval)`: the start of the fixed-width bucket a timestamp falls in,
//! buckets aligned to the Unix epoch. `interval` is text (`'1s'`, `'100ms'`, `'5m'`), an
//! integer number of nanoseconds, an SQL interval without months, or a duration.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType, DurationSecondType,
    Int64Type, IntervalMonthDayNanoType, TimestampNanosecondType,
};
use arrow_array::{Array, ArrayRef, TimestampNanosecondArray};
use arrow_schema::{DataType, TimeUnit};
use datafusion::common::{Result, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::params::parse_duration_ns;

const NAME: &str = "time_bucket";

/// The `time_bucket` function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct TimeBucket {
    signature: Signature,
}

impl TimeBucket {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

/// Bucket widths in ns, one per row, from any accepted interval array.
fn widths(a: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let n = a.len();
    let per = |f: &dyn Fn(usize) -> Result<i64>| -> Result<Vec<Option<i64>>> {
        (0..n)
            .map(|i| {
                if a.is_null(i) {
                    Ok(None)
                } else {
                    f(i).map(Some)
                }
            })
            .collect()
    };
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = arrow_cast::cast(a, &DataType::Utf8)?;
            let s = s.as_string::<i32>();
            per(&|i| match parse_duration_ns(s.value(i)) {
                Some(ns) => Ok(ns),
                None => exec_err!(
                    "{NAME}: {:?} is not an interval (e.g. '1s', '100ms', '5m')",
                    s.value(i)
                ),
            })
        }
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => {
            let v = arrow_cast::cast(a, &DataType::Int64)?;
            let v = v.as_primitive::<Int64Type>().clone();
            per(&|i| Ok(v.value(i)))
        }
        DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano) => {
            let v = a.as_primitive::<IntervalMonthDayNanoType>();
            per(&|i| {
                let x = v.value(i);
                if x.months != 0 {
                    return exec_err!("{NAME}: intervals of months have no fixed width");
                }
                Ok(i64::from(x.days) * 86_400_000_000_000 + x.nanoseconds)
            })
        }
        DataType::Duration(unit) => {
            let v: Vec<Option<i64>> = match unit {
                TimeUnit::Second => a
                    .as_primitive::<DurationSecondType>()
                    .iter()
                    .map(|x| x.map(|x| x * 1_000_000_000))
                    .collect(),
                TimeUnit::Millisecond => a
                    .as_primitive::<DurationMillisecondType>()
                    .iter()
                    .map(|x| x.map(|x| x * 1_000_000))
                    .collect(),
                TimeUnit::Microsecond => a
                    .as_primitive::<DurationMicrosecondType>()
                    .iter()
                    .map(|x| x.map(|x| x * 1_000))
                    .collect(),
                TimeUnit::Nanosecond => a.as_primitive::<DurationNanosecondType>().iter().collect(),
            };
            Ok(v)
        }
        DataType::Null => Ok(vec![None; n]),
        other => exec_err!(
            "{NAME}: the interval must be text like '1s', nanoseconds, or an interval, not {other}"
        ),
    }
}

impl ScalarUDFImpl for TimeBucket {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match &arg_types[0] {
            DataType::Timestamp(_, tz) => Ok(DataType::Timestamp(TimeUnit::Nanosecond, tz.clone())),
            DataType::Null => Ok(DataType::Timestamp(
                TimeUnit::Nanosecond,
                Some("UTC".into()),
            )),
            other => plan_err!(
                "{NAME}: the first argument must be a timestamp (e.g. `time`), not {other}"
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let tz = match args.return_type() {
            DataType::Timestamp(_, tz) => tz.clone(),
            _ => None,
        };
        let t = arrow_cast::cast(
            &arrays[0],
            &DataType::Timestamp(TimeUnit::Nanosecond, tz.clone()),
        )?;
        let t = t.as_primitive::<TimestampNanosecondType>();
        let w = widths(&arrays[1])?;
        let mut out = Vec::with_capacity(t.len());
        for (i, width) in w.iter().enumerate() {
            out.push(match (t.is_valid(i), width) {
                (true, Some(width)) if *width > 0 => {
                    let v = t.value(i);
                    Some(v - v.rem_euclid(*width))
                }
                (true, Some(width)) => {
                    return exec_err!("{NAME}: the interval must be positive, got {width} ns");
                }
                _ => None,
            });
        }
        let arr = TimestampNanosecondArray::from(out).with_timezone_opt(tz);
        Ok(ColumnarValue::Array(Arc::new(arr) as ArrayRef))
    }
}
