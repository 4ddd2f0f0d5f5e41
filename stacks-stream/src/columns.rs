//! Reading a stream's columns as one type each, whatever type the writer chose (query results
//! and Parquet round trips bring other integer widths, view or large strings, timestamp units):
//! the cast, the type tests and the unit scaling every reader needs.

use arrow_array::{ArrayRef, RecordBatch};
use arrow_cast::{can_cast_types, cast};
use arrow_schema::{DataType, TimeUnit};

use crate::ContractError;

/// Column `index` (called `name`) of `batch`, which must have the stream schema's columns;
/// errors name `input` and the column.
pub fn column<'a>(
    batch: &'a RecordBatch,
    index: usize,
    name: &str,
    input: &str,
) -> Result<&'a ArrayRef, ContractError> {
    batch
        .columns()
        .get(index)
        .ok_or_else(|| ContractError::Column {
            input: input.into(),
            column: name.into(),
            detail: format!(
                "a batch has only {} columns, not the stream schema's",
                batch.num_columns()
            ),
        })
}

/// Column `index` (called `name`) of `batch`, cast to `to`; errors name `input` and the
/// column. The batch must have the stream schema's columns.
pub fn cast_column(
    batch: &RecordBatch,
    index: usize,
    name: &str,
    to: &DataType,
    input: &str,
) -> Result<ArrayRef, ContractError> {
    let error = |detail: String| ContractError::Column {
        input: input.into(),
        column: name.into(),
        detail,
    };
    let column = column(batch, index, name, input)?;
    if !can_cast_types(column.data_type(), to) {
        return Err(error(format!(
            "type {} cannot be read as {to}",
            column.data_type()
        )));
    }
    cast(column, to).map_err(|e| error(e.to_string()))
}

/// Whether a column of type `dt` holds text (any string type, or a dictionary of one).
pub fn is_string(dt: &DataType) -> bool {
    match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, v) => is_string(v),
        _ => false,
    }
}

/// Nanoseconds in one tick of a timestamp of `unit`.
pub fn ns_per_unit(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int32Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    #[test]
    fn casts_and_names_the_column() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("pid", DataType::Int32, false),
            Field::new("when", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(vec![7])),
                Arc::new(StringArray::from(vec!["x"])),
            ],
        )
        .unwrap();
        let pid = cast_column(&batch, 0, "pid", &DataType::Int64, "in").unwrap();
        assert_eq!(pid.as_primitive::<Int64Type>().value(0), 7);
        let err = cast_column(&batch, 5, "time", &DataType::Int64, "in").unwrap_err();
        assert_eq!(
            err.to_string(),
            "in: reading column `time`: a batch has only 2 columns, not the stream schema's"
        );
        let to = DataType::Struct(vec![Field::new("a", DataType::Int64, true)].into());
        let err = cast_column(&batch, 1, "when", &to, "in").unwrap_err();
        assert!(
            err.to_string()
                .contains("`when`: type Utf8 cannot be read as Struct"),
            "{err}"
        );
    }

    #[test]
    fn string_types_and_units() {
        assert!(is_string(&DataType::Utf8View));
        assert!(is_string(&DataType::Dictionary(
            Box::new(DataType::Int32),
            Box::new(DataType::LargeUtf8)
        )));
        assert!(!is_string(&DataType::Int64));
        assert_eq!(ns_per_unit(TimeUnit::Millisecond), 1_000_000);
        assert_eq!(ns_per_unit(TimeUnit::Nanosecond), 1);
    }
}
