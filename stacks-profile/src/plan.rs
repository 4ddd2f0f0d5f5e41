//! Which columns of the input become the stack, the sample values and the labels, and what
//! sample type (name and unit) each value column stands for.

use arrow_schema::{DataType, Schema, TimeUnit};
use stacks_stream::columns::is_string;
use stacks_stream::{ContractError, col, is_stack_type, kinds};

use crate::Error;

/// Integer columns that become numeric labels (and are never summed as values).
const NUMERIC_LABELS: [&str; 10] = [
    col::PID,
    col::TID,
    col::CPU,
    col::WAKER,
    col::FD,
    col::CHILD,
    col::ERRNO,
    col::EXIT_CODE,
    col::SPAN_ID,
    col::PARENT_SPAN_ID,
];

/// Numeric row columns that describe a row rather than weigh it (`value` does that).
const ROW_ATTRIBUTES: [&str; 3] = [col::DURATION, col::COUNT, col::RSS];

/// Name of the synthetic value column counting one per row.
const SYNTHETIC: &str = "samples";

/// A pprof sample type derived from a value column name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleKind {
    /// The sample type, e.g. `cpu` for a `cpu_ns` column.
    pub name: String,
    /// `count`, `nanoseconds` or `bytes`.
    pub unit: &'static str,
}

/// The sample type for a value column: `samples`/`count`/`*_count` count, `*_ns` are
/// nanoseconds (the suffix is dropped from the name), `bytes`/`*_bytes` are bytes, anything
/// else counts.
pub fn sample_kind(column: &str) -> SampleKind {
    let kind = |name: &str, unit| SampleKind {
        name: name.to_string(),
        unit,
    };
    if column == "samples" || column == "count" || column.ends_with("_count") {
        kind(column, "count")
    } else if let Some(base) = column.strip_suffix("_ns")
        && !base.is_empty()
    {
        kind(base, "nanoseconds")
    } else if column == "bytes" || column.ends_with("_bytes") {
        kind(column, "bytes")
    } else {
        kind(column, "count")
    }
}

/// How a value column's numbers are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numeric {
    Int,
    Float,
}

/// One value of every sample.
#[derive(Debug, Clone)]
pub struct ValueColumn {
    /// Column index, `None` for the synthetic one-per-row count.
    pub index: Option<usize>,
    pub name: String,
    pub numeric: Numeric,
    pub kind: SampleKind,
    /// A null (or absent) column counts 1 per row instead of 0: the `count` column of rows,
    /// which is null where a row stands for one event.
    pub null_is_one: bool,
    /// For a row stream of several kinds: only rows of this kind add to this value.
    pub of_kind: Option<String>,
}

/// A column turned into a label on every sample.
#[derive(Debug, Clone)]
pub struct LabelColumn {
    pub index: usize,
    pub name: String,
    /// Numeric label (`num`) instead of a string one (`str`).
    pub numeric: bool,
}

/// The column roles of one input stream.
#[derive(Debug, Clone)]
pub struct Plan {
    pub stack: usize,
    pub stack_name: String,
    pub values: Vec<ValueColumn>,
    /// Index in `values` of the sample type shown by default.
    pub default_value: usize,
    pub labels: Vec<LabelColumn>,
    /// The `time` column and its unit, when it is a timestamp.
    pub time: Option<(usize, TimeUnit)>,
    /// For a row stream: the `kind` column and the kinds of rows converted (others skipped).
    pub rows_of_kind: Option<(usize, Vec<String>)>,
    /// The `duration` column of a row stream (a `switch` row without it folds short intervals).
    pub duration: Option<usize>,
    /// The `comm` column, when it is a string column.
    pub comm: Option<usize>,
}

fn numeric(dt: &DataType) -> Option<Numeric> {
    use DataType::*;
    match dt {
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Some(Numeric::Int),
        Float16 | Float32 | Float64 | Decimal32(..) | Decimal64(..) | Decimal128(..)
        | Decimal256(..) => Some(Numeric::Float),
        _ => None,
    }
}

impl Plan {
    /// Pick the columns of `schema` (read from `input`) according to `stack`, `values` and
    /// `labels` (see [`crate::Options`]).
    pub fn new(
        schema: &Schema,
        input: &str,
        stack: Option<&str>,
        values: &[String],
        labels: bool,
        kinds: &[String],
    ) -> Result<Self, Error> {
        let stack = find_stack(schema, input, stack)?;
        let stack_name = schema.field(stack).name().clone();
        let rows_of_kind = row_stream(schema, input, kinds)?;
        let by_kind = rows_of_kind.is_some() && values.is_empty();
        let values = match (&rows_of_kind, values.is_empty()) {
            (Some((_, k)), true) => kind_values(schema, k),
            (_, true) => default_values(schema),
            (_, false) => explicit_values(schema, input, values)?,
        };
        // The column the stream names (a bundled query's `-- default-value:`); else, rows of
        // several kinds: the first kind's `value`; otherwise the last value column.
        let named = schema
            .metadata()
            .get(stacks_stream::meta::DEFAULT_VALUE)
            .and_then(|name| values.iter().position(|v| &v.name == name));
        let default_value = match &rows_of_kind {
            _ if named.is_some() => named.unwrap_or_default(),
            Some((_, kinds)) if by_kind && kinds.len() > 1 => values
                .iter()
                .position(|v| v.index.is_some() && !v.null_is_one)
                .unwrap_or(0),
            _ => values.len().saturating_sub(1),
        };
        let mut labels = if labels {
            label_columns(schema, stack)
        } else {
            Vec::new()
        };
        if let Some((k, kinds)) = &rows_of_kind
            && kinds.len() == 1
        {
            // Every converted row has the same kind: a label would say nothing.
            labels.retain(|l| l.index != *k);
        }
        let duration = rows_of_kind
            .as_ref()
            .and_then(|_| schema.index_of(col::DURATION).ok())
            .filter(|&i| numeric(schema.field(i).data_type()).is_some());
        let comm = schema
            .index_of(col::COMM)
            .ok()
            .filter(|&i| is_string(schema.field(i).data_type()));
        let time =
            schema
                .index_of(col::TIME)
                .ok()
                .and_then(|i| match schema.field(i).data_type() {
                    DataType::Timestamp(unit, _) => Some((i, *unit)),
                    _ => None,
                });
        Ok(Self {
            stack,
            stack_name,
            values,
            default_value,
            labels,
            time,
            rows_of_kind,
            duration,
            comm,
        })
    }
}

/// A stream of event rows (`kind` and `value` columns) rather than a query result: returns the
/// `kind` column and the kinds to convert (`requested`, default `profile`), deduplicated in the
/// order given.
fn row_stream(
    schema: &Schema,
    input: &str,
    requested: &[String],
) -> Result<Option<(usize, Vec<String>)>, Error> {
    let kind_col = schema
        .index_of(col::KIND)
        .ok()
        .filter(|&i| is_string(schema.field(i).data_type()));
    let value_col = schema.index_of(col::VALUE).ok();
    if kind_col.is_some()
        && let Some(v) = value_col
        && numeric(schema.field(v).data_type()).is_none()
    {
        // Row columns with a `value` that cannot be a weight: a broken stream, not a query.
        return Err(ContractError::WrongType {
            input: input.into(),
            column: col::VALUE.into(),
            found: schema.field(v).data_type().to_string(),
            expected: "Int64".into(),
        }
        .into());
    }
    let has_value = value_col.is_some_and(|i| numeric(schema.field(i).data_type()).is_some());
    match (kind_col, has_value) {
        (Some(i), true) => {
            let mut kinds: Vec<String> = Vec::new();
            let mut names: Vec<&str> = Vec::new();
            for k in requested.iter().flat_map(|k| k.split(',')).map(str::trim) {
                if k == "all" {
                    names.extend(kinds::ALL.iter().map(|k| k.name));
                } else {
                    names.push(k);
                }
            }
            for k in names {
                if kinds::get(k).is_none() {
                    return Err(Error::UnknownKind {
                        input: input.into(),
                        kind: k.into(),
                    });
                }
                if !kinds.iter().any(|x| x == k) {
                    kinds.push(k.to_string());
                }
            }
            if kinds.is_empty() {
                kinds.push(stacks_stream::kind::PROFILE.to_string());
            }
            Ok(Some((i, kinds)))
        }
        _ if !requested.is_empty() => Err(ContractError::MissingColumn {
            input: input.into(),
            column: format!("{}` and `{}", col::KIND, col::VALUE),
            why: "--kind selects rows of an event stream".into(),
        }
        .into()),
        _ => Ok(None),
    }
}

/// Values of a row stream, per kind, with the kind's registered sample types: the number of
/// events (the `count` column, 1 where null) and `value` in the kind's unit; for kinds whose
/// `value` is a count (lost, exec, fork, exit), `value` alone, named after the kind. With one kind, every row adds to every value; with
/// several, each row adds to its kind's values only.
fn kind_values(schema: &Schema, kinds: &[String]) -> Vec<ValueColumn> {
    let value = schema.index_of(col::VALUE).ok();
    let count = schema
        .index_of(col::COUNT)
        .ok()
        .filter(|&i| numeric(schema.field(i).data_type()) == Some(Numeric::Int));
    let of_kind = |k: &String| (kinds.len() > 1).then(|| k.clone());
    let mut values = Vec::new();
    for k in kinds {
        // `row_stream` let known kinds only through.
        let Some(registered) = kinds::get(k) else {
            continue;
        };
        if let Some(counted) = registered.count {
            values.push(ValueColumn {
                index: count,
                name: counted.name.into(),
                numeric: Numeric::Int,
                kind: sample_type(counted),
                null_is_one: true,
                of_kind: of_kind(k),
            });
        }
        values.push(ValueColumn {
            index: value,
            name: col::VALUE.into(),
            numeric: Numeric::Int,
            kind: sample_type(registered.value),
            null_is_one: false,
            of_kind: of_kind(k),
        });
    }
    values
}

fn sample_type(t: kinds::SampleType) -> SampleKind {
    SampleKind {
        name: t.name.into(),
        unit: t.unit.pprof(),
    }
}

fn find_stack(schema: &Schema, input: &str, requested: Option<&str>) -> Result<usize, Error> {
    let missing = |column: &str, why: &str| ContractError::MissingColumn {
        input: input.into(),
        column: column.into(),
        why: why.into(),
    };
    let wrong = |column: &str, found: &DataType| ContractError::WrongType {
        input: input.into(),
        column: column.into(),
        found: found.to_string(),
        expected: "a symbolized stack: List<Struct<function, file, line, …>>".into(),
    };
    if let Some(name) = requested {
        let idx = schema
            .index_of(name)
            .map_err(|_| missing(name, "--stack"))?;
        let dt = schema.field(idx).data_type();
        if !is_stack_type(dt) {
            return Err(wrong(name, dt).into());
        }
        return Ok(idx);
    }
    if let Ok(idx) = schema.index_of(col::STACK)
        && is_stack_type(schema.field(idx).data_type())
    {
        return Ok(idx);
    }
    if let Some(idx) = schema
        .fields()
        .iter()
        .position(|f| is_stack_type(f.data_type()))
    {
        return Ok(idx);
    }
    if let Ok(idx) = schema.index_of(col::STACK) {
        return Err(wrong(col::STACK, schema.field(idx).data_type()).into());
    }
    Err(missing(
        col::STACK,
        "symbolized stacks; run stacks-symbolize first or name another column with --stack",
    )
    .into())
}

fn default_values(schema: &Schema) -> Vec<ValueColumn> {
    let mut values: Vec<ValueColumn> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !NUMERIC_LABELS.contains(&f.name().as_str()))
        .filter(|(_, f)| !f.name().ends_with("_error"))
        .filter(|(_, f)| !ROW_ATTRIBUTES.contains(&f.name().as_str()))
        .filter_map(|(i, f)| {
            numeric(f.data_type()).map(|numeric| ValueColumn {
                index: Some(i),
                name: f.name().clone(),
                numeric,
                kind: sample_kind(f.name()),
                null_is_one: false,
                of_kind: None,
            })
        })
        .collect();
    if values.is_empty() {
        values.push(ValueColumn {
            index: None,
            name: SYNTHETIC.into(),
            numeric: Numeric::Int,
            kind: sample_kind(SYNTHETIC),
            null_is_one: false,
            of_kind: None,
        });
    }
    values
}

fn explicit_values(
    schema: &Schema,
    input: &str,
    names: &[String],
) -> Result<Vec<ValueColumn>, Error> {
    names
        .iter()
        .map(|name| {
            let idx = schema
                .index_of(name)
                .map_err(|_| ContractError::MissingColumn {
                    input: input.into(),
                    column: name.clone(),
                    why: "--value".into(),
                })?;
            let dt = schema.field(idx).data_type();
            let numeric = numeric(dt).ok_or_else(|| Error::NotNumeric {
                input: input.into(),
                column: name.clone(),
                found: dt.to_string(),
            })?;
            Ok(ValueColumn {
                index: Some(idx),
                name: name.clone(),
                numeric,
                kind: sample_kind(name),
                null_is_one: false,
                of_kind: None,
            })
        })
        .collect()
}

fn label_columns(schema: &Schema, stack: usize) -> Vec<LabelColumn> {
    schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != stack)
        .filter_map(|(index, f)| {
            let dt = f.data_type();
            let name = f.name().clone();
            if is_string(dt) {
                Some(LabelColumn {
                    index,
                    name,
                    numeric: false,
                })
            } else if NUMERIC_LABELS.contains(&name.as_str()) && numeric(dt) == Some(Numeric::Int) {
                Some(LabelColumn {
                    index,
                    name,
                    numeric: true,
                })
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use arrow_schema::Field;
    use stacks_stream::symbolized_schema;

    #[test]
    fn sample_kinds() {
        let k = |c| {
            let s = sample_kind(c);
            (s.name, s.unit)
        };
        assert_eq!(k("samples"), ("samples".into(), "count"));
        assert_eq!(k("count"), ("count".into(), "count"));
        assert_eq!(k("wakeup_count"), ("wakeup_count".into(), "count"));
        assert_eq!(k("cpu_ns"), ("cpu".into(), "nanoseconds"));
        assert_eq!(k("_ns"), ("_ns".into(), "count"));
        assert_eq!(k("bytes"), ("bytes".into(), "bytes"));
        assert_eq!(k("alloc_bytes"), ("alloc_bytes".into(), "bytes"));
        assert_eq!(k("value"), ("value".into(), "count"));
    }

    #[test]
    fn symbolized_stream_plan() {
        let schema = symbolized_schema(HashMap::new());
        let plan = Plan::new(&schema, "stdin", None, &[], true, &[]).unwrap();
        assert_eq!(plan.stack_name, "stack");
        // A row stream: profile rows only, one sample each, `value` in cpu nanoseconds.
        let values: Vec<_> = plan.values.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            values,
            ["samples", "value"],
            "pid/tid/cpu and *_error are not values"
        );
        assert_eq!(
            plan.values[1].kind,
            SampleKind {
                name: "cpu".into(),
                unit: "nanoseconds"
            }
        );
        assert_eq!(plan.rows_of_kind, Some((1, vec!["profile".to_string()])));
        let labels: Vec<_> = plan
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.numeric))
            .collect();
        assert_eq!(
            labels[..13],
            [
                ("pid", true),
                ("tid", true),
                ("comm", false),
                ("thread", false),
                ("host", false),
                ("cgroup", false),
                ("span_id", true),
                ("parent_span_id", true),
                ("span_name", false),
                ("trace_id", false),
                ("task", false),
                ("task_chain", false),
                ("cpu", true)
            ]
        );
        assert!(plan.time.is_some());
        let plan = Plan::new(&schema, "stdin", None, &[], false, &[]).unwrap();
        assert!(plan.labels.is_empty());
        let plan = Plan::new(&schema, "stdin", None, &[], false, &["lost".into()]).unwrap();
        assert_eq!(plan.values.len(), 1, "lost rows count themselves");
        assert_eq!(plan.values[0].kind.name, "lost");
        let plan = Plan::new(&schema, "stdin", None, &[], false, &["all".into()]).unwrap();
        let kinds = plan.rows_of_kind.as_ref().map(|(_, k)| k.len());
        assert_eq!(kinds, Some(kinds::ALL.len()));
        assert_eq!(plan.values[plan.default_value].kind.name, "cpu");
        let err = Plan::new(&schema, "stdin", None, &[], false, &["bogus".into()]).unwrap_err();
        assert!(err.to_string().contains("`bogus`"), "{err}");
        // Explicit --value keeps the row filter but not the kind's value types.
        let plan = Plan::new(&schema, "stdin", None, &["value".into()], false, &[]).unwrap();
        assert_eq!(plan.values.len(), 1);
        assert!(plan.rows_of_kind.is_some());
    }

    #[test]
    fn kind_needs_a_row_stream() {
        let schema = Schema::new(vec![
            Field::new("stack", stacks_stream::stack_type(), true),
            Field::new("samples", DataType::Int64, true),
        ]);
        let err = Plan::new(&schema, "stdin", None, &[], true, &["profile".into()]).unwrap_err();
        assert!(err.to_string().contains("--kind"), "{err}");
        assert!(
            Plan::new(&schema, "stdin", None, &[], true, &[])
                .unwrap()
                .rows_of_kind
                .is_none()
        );
    }

    #[test]
    fn synthetic_count_when_no_numbers() {
        let schema = Schema::new(vec![
            Field::new("frames", stacks_stream::stack_type(), true),
            Field::new("pid", DataType::Int32, true),
            Field::new("comm", DataType::Utf8, true),
        ]);
        let plan = Plan::new(&schema, "stdin", None, &[], true, &[]).unwrap();
        assert_eq!(plan.stack_name, "frames", "first stack-typed column");
        assert_eq!(plan.values.len(), 1);
        assert_eq!(plan.values[0].index, None);
        assert_eq!(plan.values[0].kind, sample_kind("samples"));
    }

    #[test]
    fn errors_name_the_column() {
        let schema = Schema::new(vec![
            Field::new("stack", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]);
        let err = Plan::new(&schema, "stdin", None, &[], true, &[]).unwrap_err();
        assert!(err.to_string().contains("`stack`"), "{err}");
        let schema = Schema::new(vec![Field::new("n", DataType::Int64, true)]);
        let err = Plan::new(&schema, "stdin", None, &[], true, &[]).unwrap_err();
        assert!(
            err.to_string().starts_with("stdin: missing column `stack`"),
            "{err}"
        );
        let schema = symbolized_schema(HashMap::new());
        let err = Plan::new(&schema, "in", None, &["comm".into()], true, &[]).unwrap_err();
        assert!(err.to_string().contains("value column `comm`"), "{err}");
        let err = Plan::new(&schema, "in", None, &["nope".into()], true, &[]).unwrap_err();
        assert!(err.to_string().contains("missing column `nope`"), "{err}");
        let err = Plan::new(&schema, "in", Some("kstack"), &[], true, &[]).unwrap_err();
        assert!(err.to_string().contains("`kstack`"), "{err}");
    }
}
