//! The input columns stacks-trace reads: `time`, `pid`, `tid` and `kind` are required; the
//! names, stack and per-kind columns are used when present. Each is cast to one type per batch
//! (Int64, Utf8), so query results with other integer widths or string types read the same.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, Int64Array, ListArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema};
use stacks_stream::columns::{cast_column, column, is_string, ns_per_unit};
use stacks_stream::frames::{StackFrames, check_type};
use stacks_stream::table::{COLUMNS, ColumnType};
use stacks_stream::{ContractError, col, is_stack_type};

use crate::Error;

/// The table's columns of `types`, read when present.
fn of_types(types: &'static [ColumnType]) -> impl Iterator<Item = &'static str> {
    COLUMNS
        .iter()
        .filter(|c| types.contains(&c.ty))
        .map(|c| c.name)
}

/// Integer columns, read when present (each cast to Int64).
const INT_TYPES: &[ColumnType] = &[ColumnType::Int32, ColumnType::Int64, ColumnType::UInt64];

/// Where each column is in the stream.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    time: (usize, i64),
    pid: usize,
    tid: usize,
    ints: Vec<(&'static str, usize)>,
    strs: Vec<(&'static str, usize)>,
    stack: Option<(usize, String)>,
    /// `args` (a list of integers: probe arguments, an allocation's address and size).
    args: Option<usize>,
}

fn is_int(dt: &DataType) -> bool {
    dt.is_integer()
}

fn is_int_list(dt: &DataType) -> bool {
    matches!(dt, DataType::List(f) | DataType::LargeList(f) if f.data_type().is_integer())
}

impl Layout {
    /// Find the columns of `schema` (read from `input`); the error names the missing or
    /// mistyped column.
    pub(crate) fn new(schema: &Schema, input: &str) -> Result<Self, Error> {
        let why = "stacks-trace places every event by time, process, thread and kind";
        let find = |name: &str, ok: fn(&DataType) -> bool, expected: &str| {
            let i = schema
                .index_of(name)
                .map_err(|_| ContractError::MissingColumn {
                    input: input.into(),
                    column: name.into(),
                    why: why.into(),
                })?;
            let dt = schema.field(i).data_type();
            if !ok(dt) {
                return Err(ContractError::WrongType {
                    input: input.into(),
                    column: name.into(),
                    found: dt.to_string(),
                    expected: expected.into(),
                });
            }
            Ok(i)
        };
        let time = find(
            col::TIME,
            |dt| matches!(dt, DataType::Timestamp(..)),
            "a timestamp",
        )?;
        let scale = match schema.field(time).data_type() {
            DataType::Timestamp(unit, _) => ns_per_unit(*unit),
            _ => 1,
        };
        let pid = find(col::PID, is_int, "an integer")?;
        let tid = find(col::TID, is_int, "an integer")?;
        find(col::KIND, is_string, "a string")?;
        // Optional columns must still be readable when present.
        let optional = |name: &'static str, ok: fn(&DataType) -> bool, expected: &str| match schema
            .index_of(name)
        {
            Ok(i) if ok(schema.field(i).data_type()) => Ok(Some((name, i))),
            Ok(i) => Err(ContractError::WrongType {
                input: input.into(),
                column: name.into(),
                found: schema.field(i).data_type().to_string(),
                expected: expected.into(),
            }),
            Err(_) => Ok(None),
        };
        let mut ints = Vec::new();
        for name in of_types(INT_TYPES) {
            ints.extend(optional(name, is_int, "an integer")?);
        }
        let mut strs = Vec::new();
        for name in of_types(&[ColumnType::Utf8]) {
            strs.extend(optional(name, is_string, "a string")?);
        }
        let args = optional(col::ARGS, is_int_list, "a list of integers")?.map(|(_, i)| i);
        let stack = match schema.index_of(col::STACK) {
            Ok(i) if is_stack_type(schema.field(i).data_type()) => Some(i),
            Ok(i) => {
                return Err(ContractError::WrongType {
                    input: input.into(),
                    column: col::STACK.into(),
                    found: schema.field(i).data_type().to_string(),
                    expected: "a symbolized stack: List<Struct<function, file, line, …>>".into(),
                }
                .into());
            }
            Err(_) => None,
        };
        if let Some(i) = stack {
            check_type(schema.field(i).data_type(), input, col::STACK)?;
        }
        Ok(Self {
            time: (time, scale),
            pid,
            tid,
            ints,
            strs,
            stack: stack.map(|i| (i, col::STACK.to_string())),
            args,
        })
    }
}

/// One batch's columns, cast.
pub(crate) struct Columns {
    pub time: Int64Array,
    time_scale: i64,
    pub pid: Int64Array,
    pub tid: Int64Array,
    ints: Vec<(&'static str, Int64Array)>,
    strs: Vec<(&'static str, StringArray)>,
    pub stack: Option<StackFrames>,
    args: Option<ListArray>,
}

fn ints(batch: &RecordBatch, i: usize, name: &str, input: &str) -> Result<Int64Array, Error> {
    let a = cast_column(batch, i, name, &DataType::Int64, input)?;
    Ok(a.as_primitive::<Int64Type>().clone())
}

impl Columns {
    pub(crate) fn new(batch: &RecordBatch, layout: &Layout, input: &str) -> Result<Self, Error> {
        let mut int_cols = Vec::with_capacity(layout.ints.len());
        for &(name, i) in &layout.ints {
            int_cols.push((name, ints(batch, i, name, input)?));
        }
        let mut str_cols = Vec::with_capacity(layout.strs.len());
        for &(name, i) in &layout.strs {
            let a = cast_column(batch, i, name, &DataType::Utf8, input)?;
            str_cols.push((name, a.as_string::<i32>().clone()));
        }
        let stack = match &layout.stack {
            Some((i, name)) => Some(StackFrames::new(
                column(batch, *i, name, input)?,
                input,
                name,
            )?),
            None => None,
        };
        let args = match layout.args {
            Some(i) => {
                let to = DataType::List(std::sync::Arc::new(arrow_schema::Field::new(
                    "arg",
                    DataType::Int64,
                    true,
                )));
                Some(
                    cast_column(batch, i, col::ARGS, &to, input)?
                        .as_list::<i32>()
                        .clone(),
                )
            }
            None => None,
        };
        Ok(Self {
            time: ints(batch, layout.time.0, col::TIME, input)?,
            time_scale: layout.time.1,
            pid: ints(batch, layout.pid, col::PID, input)?,
            tid: ints(batch, layout.tid, col::TID, input)?,
            ints: int_cols,
            strs: str_cols,
            stack,
            args,
        })
    }

    /// `time` of `row` in ns; `None` when null.
    pub(crate) fn time(&self, row: usize) -> Option<i64> {
        self.time
            .is_valid(row)
            .then(|| self.time.value(row).saturating_mul(self.time_scale))
    }

    /// Integer column `name` at `row`; `None` when absent or null.
    pub(crate) fn int(&self, name: &str, row: usize) -> Option<i64> {
        self.ints
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, a)| a.is_valid(row).then(|| a.value(row)))
    }

    /// Element `i` of `args` at `row`; `None` when absent or null.
    pub(crate) fn arg(&self, row: usize, i: usize) -> Option<i64> {
        let args = self.args.as_ref().filter(|a| a.is_valid(row))?;
        let list = args.value(row);
        let values = list.as_primitive::<Int64Type>();
        (i < values.len() && values.is_valid(i)).then(|| values.value(i))
    }

    /// String column `name` at `row`; `None` when absent, null or empty.
    pub(crate) fn str(&self, name: &str, row: usize) -> Option<&str> {
        self.strs
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, a)| a.is_valid(row).then(|| a.value(row)))
            .filter(|s| !s.is_empty())
    }
}
