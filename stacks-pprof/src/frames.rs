//! Reading symbolized frames out of a stack column (`List`/`LargeList` of `Struct`), with the
//! struct fields looked up by name and cast to one type each, so streams that went through
//! Parquet or SQL (renamed list elements, view or large strings, other integer widths) read
//! the same as the ones `stacks-symbolize` writes.

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, LargeListArray, ListArray, StringArray, StructArray,
    UInt64Array,
};
use arrow_cast::{can_cast_types, cast};
use arrow_schema::DataType;
use stacks_stream::frame;

use crate::Error;

/// One frame of a stack, borrowed from the batch.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub function: Option<&'a str>,
    pub file: Option<&'a str>,
    pub line: i64,
    pub column: i64,
    pub inlined: bool,
    pub kernel: bool,
    pub module: Option<&'a str>,
    pub build_id: Option<&'a str>,
    pub offset: Option<u64>,
    pub addr: u64,
    /// The symbol as the binary names it (mangled); `None` in streams without the field.
    pub symbol: Option<&'a str>,
}

/// The type each known frame field is read as. Fields that are absent read as null/false/0.
fn targets() -> [(&'static str, DataType); 11] {
    [
        (frame::FUNCTION, DataType::Utf8),
        (frame::FILE, DataType::Utf8),
        (frame::LINE, DataType::Int64),
        (frame::COLUMN, DataType::Int64),
        (frame::INLINED, DataType::Boolean),
        (frame::KERNEL, DataType::Boolean),
        (frame::MODULE, DataType::Utf8),
        (frame::BUILD_ID, DataType::Utf8),
        (frame::OFFSET, DataType::UInt64),
        (frame::ADDR, DataType::UInt64),
        (frame::SYMBOL, DataType::Utf8),
    ]
}

/// Check, before reading any batch, that every known frame field of the stack column type
/// `dt` can be read; the error names `column.field`.
pub fn check_type(dt: &DataType, input: &str, column: &str) -> Result<(), Error> {
    let fields = match dt {
        DataType::List(f) | DataType::LargeList(f) => match f.data_type() {
            DataType::Struct(fields) => fields,
            other => return Err(not_readable(input, column, other)),
        },
        other => return Err(not_readable(input, column, other)),
    };
    for (name, target) in targets() {
        if let Some((_, f)) = fields.find(name)
            && !can_cast_types(f.data_type(), &target)
        {
            return Err(Error::Column {
                input: input.into(),
                column: format!("{column}.{name}"),
                detail: format!("type {} cannot be read as {target}", f.data_type()),
            });
        }
    }
    Ok(())
}

fn not_readable(input: &str, column: &str, dt: &DataType) -> Error {
    Error::Column {
        input: input.into(),
        column: column.into(),
        detail: format!("type {dt} is not a list of frame structs"),
    }
}

enum Lists {
    Small(ListArray),
    Large(LargeListArray),
}

/// The stack column of one batch.
pub struct StackFrames {
    lists: Lists,
    len: usize,
    structs: StructArray,
    function: Option<StringArray>,
    file: Option<StringArray>,
    line: Option<Int64Array>,
    column: Option<Int64Array>,
    inlined: Option<BooleanArray>,
    kernel: Option<BooleanArray>,
    module: Option<StringArray>,
    build_id: Option<StringArray>,
    offset: Option<UInt64Array>,
    addr: Option<UInt64Array>,
    symbol: Option<StringArray>,
}

impl StackFrames {
    /// View `array` (the stack column of a batch) as frames.
    pub fn new(array: &ArrayRef, input: &str, column: &str) -> Result<Self, Error> {
        let lists = if let Some(l) = array.as_list_opt::<i32>() {
            Lists::Small(l.clone())
        } else if let Some(l) = array.as_list_opt::<i64>() {
            Lists::Large(l.clone())
        } else {
            return Err(not_readable(input, column, array.data_type()));
        };
        let values = match &lists {
            Lists::Small(l) => l.values(),
            Lists::Large(l) => l.values(),
        };
        let structs = values
            .as_struct_opt()
            .ok_or_else(|| not_readable(input, column, array.data_type()))?
            .clone();
        let field = |name: &str, target: &DataType| -> Result<Option<ArrayRef>, Error> {
            structs
                .column_by_name(name)
                .map(|a| {
                    cast(a, target).map_err(|e| Error::Column {
                        input: input.into(),
                        column: format!("{column}.{name}"),
                        detail: e.to_string(),
                    })
                })
                .transpose()
        };
        let string = |name| -> Result<Option<StringArray>, Error> {
            Ok(field(name, &DataType::Utf8)?.and_then(|a| a.as_string_opt::<i32>().cloned()))
        };
        let int = |name| -> Result<Option<Int64Array>, Error> {
            Ok(field(name, &DataType::Int64)?
                .and_then(|a| a.as_primitive_opt::<Int64Type>().cloned()))
        };
        let uint = |name| -> Result<Option<UInt64Array>, Error> {
            Ok(field(name, &DataType::UInt64)?
                .and_then(|a| a.as_primitive_opt::<UInt64Type>().cloned()))
        };
        let boolean = |name| -> Result<Option<BooleanArray>, Error> {
            Ok(field(name, &DataType::Boolean)?.and_then(|a| a.as_boolean_opt().cloned()))
        };
        Ok(Self {
            len: array.len(),
            function: string(frame::FUNCTION)?,
            file: string(frame::FILE)?,
            line: int(frame::LINE)?,
            column: int(frame::COLUMN)?,
            inlined: boolean(frame::INLINED)?,
            kernel: boolean(frame::KERNEL)?,
            module: string(frame::MODULE)?,
            build_id: string(frame::BUILD_ID)?,
            offset: uint(frame::OFFSET)?,
            addr: uint(frame::ADDR)?,
            symbol: string(frame::SYMBOL)?,
            lists,
            structs,
        })
    }

    /// Frame indexes of `row`'s stack, leaf first; empty for a null stack.
    pub fn row(&self, row: usize) -> Range<usize> {
        fn range<O: Copy + TryInto<usize>>(offsets: &[O], row: usize) -> Range<usize> {
            let at = |i: usize| offsets.get(i).and_then(|o| (*o).try_into().ok());
            match (at(row), at(row + 1)) {
                (Some(start), Some(end)) if start <= end => start..end,
                _ => 0..0,
            }
        }
        if row >= self.len {
            return 0..0;
        }
        match &self.lists {
            Lists::Small(l) if l.is_valid(row) => range(l.value_offsets(), row),
            Lists::Large(l) if l.is_valid(row) => range(l.value_offsets(), row),
            _ => 0..0,
        }
    }

    /// Whether `row`'s stack is null (not requested), as opposed to present or empty.
    pub fn is_null(&self, row: usize) -> bool {
        match &self.lists {
            Lists::Small(l) => row < l.len() && l.is_null(row),
            Lists::Large(l) => row < l.len() && l.is_null(row),
        }
    }

    /// Frame `i` (an index from [`Self::row`]); `None` for a null or out-of-range frame.
    pub fn frame(&self, i: usize) -> Option<Frame<'_>> {
        if i >= self.structs.len() || self.structs.is_null(i) {
            return None;
        }
        let int = |a: &Option<Int64Array>| a.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i));
        let uint =
            |a: &Option<UInt64Array>| a.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i));
        let flag = |a: &Option<BooleanArray>| {
            a.as_ref()
                .filter(|a| a.is_valid(i))
                .is_some_and(|a| a.value(i))
        };
        Some(Frame {
            function: string_at(&self.function, i),
            file: string_at(&self.file, i),
            line: int(&self.line).unwrap_or(0),
            column: int(&self.column).unwrap_or(0),
            inlined: flag(&self.inlined),
            kernel: flag(&self.kernel),
            module: string_at(&self.module, i),
            build_id: string_at(&self.build_id, i),
            offset: uint(&self.offset),
            addr: uint(&self.addr).unwrap_or(0),
            symbol: string_at(&self.symbol, i),
        })
    }
}

/// Value `i` of a string field; null, empty and absent fields are `None`.
fn string_at(a: &Option<StringArray>, i: usize) -> Option<&str> {
    a.as_ref()
        .filter(|a| a.is_valid(i))
        .map(|a| a.value(i))
        .filter(|s| !s.is_empty())
}
