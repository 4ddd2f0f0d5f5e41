//! Reading symbolized frames out of a stack column (`List`/`LargeList` of `Struct`), with the
//! struct fields looked up by name and cast to one type each, so streams that went through
//! Parquet or SQL (renamed list elements, view or large strings, other integer widths) read
//! the same as the ones `stacks-symbolize` writes; and the one rule that names a frame whose
//! function is unknown, so SQL, profiles, folded stacks and traces show it alike; and why a
//! frame is unresolved ([`Unresolved`], the `reason` field's closed values).

use std::ops::Range;
use std::sync::Arc;

use crate::ContractError;

mod unresolved;
use crate::schema::frame;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, LargeListArray, ListArray, StringArray, StructArray,
    UInt64Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_cast::{can_cast_types, cast};
use arrow_schema::{DataType, Field};
pub use unresolved::Unresolved;

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

/// File name of the mapping every kernel frame belongs to (what perf calls the kernel); the
/// `module` of kernel frames in a symbolized stack.
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";
/// What a user frame's module is called when the stream does not name it.
pub const UNKNOWN_MODULE: &str = "[unknown]";
/// The one frame of a row whose stack was not recorded, where a profile or query needs one so
/// that totals stay exact (stacks-pprof, and the bundled queries in their SQL text).
pub const NO_STACK_FRAME: &str = "[no stack]";
/// How a null element of a stack (the contract has none; other writers might) is shown: a
/// frame with no address.
pub(crate) const NULL_FRAME: &str = "[0x0]";
/// The `module` of JIT code named by the process's perf map.
pub const JIT_MODULE: &str = "[jit]";
/// The `module` of an interpreted (CPython) frame.
pub const PYTHON_MODULE: &str = "[python]";
/// What the rows that fold short off-CPU intervals stand for (a trace's event name).
pub const SHORT_OFFCPU: &str = "folded short off-CPU intervals";
/// The one frame of `switch` rows folding off-CPU intervals shorter than the recorder's MIN
/// (they have no stack): [`SHORT_OFFCPU`] in brackets.
pub const SHORT_OFFCPU_FRAME: &str = "[folded short off-CPU intervals]";

impl Frame<'_> {
    /// The name this frame is shown with: its function, else [`unresolved_name`].
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match self.function {
            Some(f) => std::borrow::Cow::Borrowed(f),
            None => std::borrow::Cow::Owned(unresolved_name(self)),
        }
    }
}

/// Append frame `name` to a folded stack being written (`root;…;leaf`, as flamegraph.pl,
/// inferno and speedscope read it): `;` separates frames and a line ends the stack, so a `;`
/// in the name becomes `:` and a line break a space. The one place folded stacks are made
/// (stack_fold, the stores' `folded`, stacks-pprof's and stacks-top's folded output) and
/// the names of the frames file ([`folded_name`]) are escaped; escaping twice changes nothing.
pub fn push_folded(out: &mut String, name: &str) {
    if !out.is_empty() {
        out.push(';');
    }
    push_escaped(out, name);
}

/// The folded stack of frame names `names`, root first: each as [`push_folded`] writes it,
/// joined by `;` (an empty name is a frame too).
pub fn fold<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (n, name) in names.into_iter().enumerate() {
        if n > 0 {
            out.push(';');
        }
        push_escaped(&mut out, name);
    }
    out
}

/// Append `name` as a frame of a folded stack shows it (see [`push_folded`]).
fn push_escaped(out: &mut String, name: &str) {
    out.extend(name.chars().map(|c| match c {
        ';' => ':',
        '\n' | '\r' => ' ',
        c => c,
    }));
}

/// Frame `f`'s name as a folded stack shows it ([`Frame::name`] through [`push_folded`]):
/// what the frames file of a store holds in its `name` column, so readers of the store
/// (DuckDB, pyarrow, the bucket SQL) only join names with `;`.
pub fn folded_name(f: &Frame<'_>) -> String {
    let mut out = String::new();
    push_escaped(&mut out, &f.name());
    out
}

/// The [`folded_name`] of every frame of `frames` (the rows of a frames file, as a struct of
/// the frame fields); a null frame is [`NULL_FRAME`].
pub fn folded_names(frames: &StructArray) -> Result<StringArray, ContractError> {
    let n = i32::try_from(frames.len()).map_err(|_| ContractError::Column {
        input: "frames".into(),
        column: frame::NAME.into(),
        detail: format!("{} frames in one file", frames.len()),
    })?;
    let item = Arc::new(Field::new("frame", frames.data_type().clone(), true));
    let one: ArrayRef = Arc::new(ListArray::new(
        item,
        OffsetBuffer::new(vec![0, n].into()),
        Arc::new(frames.clone()),
        None,
    ));
    let view = StackFrames::new(&one, "frames", crate::col::STACK)?;
    Ok((0..frames.len())
        .map(|i| {
            Some(match view.frame(i) {
                Some(f) => folded_name(&f),
                None => NULL_FRAME.to_string(),
            })
        })
        .collect())
}

/// The name of a frame whose function is unknown, from where it is, always in brackets so it
/// is never taken for a function name: `[MODULE+0xOFFSET]` (the module's file name and the
/// file offset) for a user frame whose offset is known (`unknown` standing in for an unknown
/// module; `[vdso+0x…]` for a pseudo-file such as `[vdso]`, never doubled brackets),
/// `[kernel 0xADDR]` for a kernel frame, else `[0xADDR]`.
pub fn unresolved_name(f: &Frame<'_>) -> String {
    match (f.kernel, f.offset) {
        (true, _) => format!("[kernel {:#x}]", f.addr),
        (false, Some(offset)) => {
            let module = f.module.map_or("unknown", basename);
            // A pseudo-file of /proc/PID/maps (`[vdso]`, `[heap]`) keeps its own brackets.
            let module = module
                .strip_prefix('[')
                .and_then(|m| m.strip_suffix(']'))
                .unwrap_or(module);
            format!("[{module}+{offset:#x}]")
        }
        (false, None) => format!("[{:#x}]", f.addr),
    }
}

/// The file name of a frame's module (its path's last component), [`UNKNOWN_MODULE`] when
/// the stream does not name it.
pub fn module_basename(module: Option<&str>) -> &str {
    basename(module.unwrap_or(UNKNOWN_MODULE))
}

/// The last component of a path.
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
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
pub fn check_type(dt: &DataType, input: &str, column: &str) -> Result<(), ContractError> {
    let fields = match crate::dict::value_type(dt) {
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
            return Err(ContractError::Column {
                input: input.into(),
                column: format!("{column}.{name}"),
                detail: format!("type {} cannot be read as {target}", f.data_type()),
            });
        }
    }
    Ok(())
}

fn not_readable(input: &str, column: &str, dt: &DataType) -> ContractError {
    ContractError::Column {
        input: input.into(),
        column: column.into(),
        detail: format!("type {dt} is not a list of frame structs"),
    }
}

enum Lists {
    Small(ListArray),
    Large(LargeListArray),
}

/// The stack column of one batch, plain or dictionary-encoded: rows map to entries (a
/// dictionary's distinct stacks, or the rows themselves), entries to frames.
pub struct StackFrames {
    lists: Lists,
    /// Each row's entry, for a dictionary-encoded column.
    keys: Option<crate::dict::Entries>,
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
    /// The frames' folded names, when they carry them (see [`Self::folded`]).
    name: Option<StringArray>,
}

impl StackFrames {
    /// View `array` (the stack column of a batch) as frames.
    pub fn new(array: &ArrayRef, input: &str, column: &str) -> Result<Self, ContractError> {
        let rows = array.len();
        let (array, keys) = match array.data_type() {
            DataType::Dictionary(..) => {
                let entries =
                    crate::dict::Entries::new(array).map_err(|e| ContractError::Column {
                        input: input.into(),
                        column: column.into(),
                        detail: e.to_string(),
                    })?;
                (entries.values().clone(), Some(entries))
            }
            _ => (array.clone(), None),
        };
        let array = &array;
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
        let field = |name: &str, target: &DataType| -> Result<Option<ArrayRef>, ContractError> {
            structs
                .column_by_name(name)
                .map(|a| {
                    cast(a, target).map_err(|e| ContractError::Column {
                        input: input.into(),
                        column: format!("{column}.{name}"),
                        detail: e.to_string(),
                    })
                })
                .transpose()
        };
        let string = |name| -> Result<Option<StringArray>, ContractError> {
            Ok(field(name, &DataType::Utf8)?.and_then(|a| a.as_string_opt::<i32>().cloned()))
        };
        let int = |name| -> Result<Option<Int64Array>, ContractError> {
            Ok(field(name, &DataType::Int64)?
                .and_then(|a| a.as_primitive_opt::<Int64Type>().cloned()))
        };
        let uint = |name| -> Result<Option<UInt64Array>, ContractError> {
            Ok(field(name, &DataType::UInt64)?
                .and_then(|a| a.as_primitive_opt::<UInt64Type>().cloned()))
        };
        let boolean = |name| -> Result<Option<BooleanArray>, ContractError> {
            Ok(field(name, &DataType::Boolean)?.and_then(|a| a.as_boolean_opt().cloned()))
        };
        Ok(Self {
            len: rows,
            keys,
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
            name: string(frame::NAME)?,
            lists,
            structs,
        })
    }

    /// Frame indexes of `row`'s stack, leaf first; empty for a null stack.
    pub fn row(&self, row: usize) -> Range<usize> {
        match self.entry(row) {
            Some(entry) => self.entry_frames(entry),
            None => 0..0,
        }
    }

    /// Whether `row`'s stack is null (not requested), as opposed to present or empty.
    pub fn is_null(&self, row: usize) -> bool {
        row < self.len && self.entry(row).is_none()
    }

    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.len
    }

    /// Whether entries are the distinct stacks of a dictionary-encoded column (their indexes
    /// hold for the whole stream, see [`crate::dict`]) rather than the rows themselves.
    pub fn is_dictionary(&self) -> bool {
        self.keys.is_some()
    }

    /// The entries of the column, as [`crate::dict::EntryCache::prepare`] takes them.
    pub fn entries(&self) -> Option<&crate::dict::Entries> {
        self.keys.as_ref()
    }

    /// The entry holding `row`'s stack; `None` for a null stack.
    #[inline]
    pub fn entry(&self, row: usize) -> Option<usize> {
        if row >= self.len {
            return None;
        }
        let entry = match &self.keys {
            Some(keys) => keys.entry(row)?,
            None => row,
        };
        let valid = match &self.lists {
            Lists::Small(l) => entry < l.len() && l.is_valid(entry),
            Lists::Large(l) => entry < l.len() && l.is_valid(entry),
        };
        valid.then_some(entry)
    }

    /// Frame indexes of entry `entry`, leaf first.
    pub fn entry_frames(&self, entry: usize) -> Range<usize> {
        fn range<O: Copy + TryInto<usize>>(offsets: &[O], row: usize) -> Range<usize> {
            let at = |i: usize| offsets.get(i).and_then(|o| (*o).try_into().ok());
            match (at(row), at(row + 1)) {
                (Some(start), Some(end)) if start <= end => start..end,
                _ => 0..0,
            }
        }
        match &self.lists {
            Lists::Small(l) if entry < l.len() && l.is_valid(entry) => {
                range(l.value_offsets(), entry)
            }
            Lists::Large(l) if entry < l.len() && l.is_valid(entry) => {
                range(l.value_offsets(), entry)
            }
            _ => 0..0,
        }
    }

    /// The folded stack of the frames `frames` (an entry's or row's range): every frame's
    /// [`Frame::name`], root first, through [`push_folded`]. Frames that carry their folded
    /// name (a `name` field, as a store's frames file holds it) are not named again; frames
    /// of an older frames file without one (null) are.
    pub fn folded(&self, frames: Range<usize>) -> String {
        let names: Vec<std::borrow::Cow<'_, str>> = frames
            .rev()
            .map(|i| match (self.stored_name(i), self.frame(i)) {
                (Some(name), _) => name.into(),
                (None, Some(f)) => f.name().into_owned().into(),
                (None, None) => NULL_FRAME.into(),
            })
            .collect();
        fold(names.iter().map(|n| n.as_ref()))
    }

    /// The folded name frame `i` carries (see [`Self::folded`]), when the frames have one.
    fn stored_name(&self, i: usize) -> Option<&str> {
        self.name
            .as_ref()
            .filter(|a| i < a.len() && a.is_valid(i))
            .map(|a| a.value(i))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An unresolved frame of libc.
    const LIBC: Frame<'static> = Frame {
        function: None,
        file: None,
        line: 0,
        column: 0,
        inlined: false,
        kernel: false,
        module: Some("/usr/lib/libc.so.6"),
        build_id: None,
        offset: Some(0x1a2b),
        addr: 0xffff_ffff_8100_1234,
        symbol: None,
    };

    #[test]
    fn unresolved_names() {
        assert_eq!(unresolved_name(&LIBC), "[libc.so.6+0x1a2b]");
        assert_eq!(LIBC.name(), "[libc.so.6+0x1a2b]");
        let unknown = Frame {
            module: None,
            offset: Some(0x10),
            ..LIBC
        };
        assert_eq!(unresolved_name(&unknown), "[unknown+0x10]");
        let vdso = Frame {
            module: Some("[vdso]"),
            offset: Some(0xb46),
            ..LIBC
        };
        assert_eq!(unresolved_name(&vdso), "[vdso+0xb46]");
        let no_offset = Frame {
            offset: None,
            ..LIBC
        };
        assert_eq!(unresolved_name(&no_offset), "[0xffffffff81001234]");
        let kernel = Frame {
            kernel: true,
            module: Some(KERNEL_MODULE),
            offset: None,
            ..LIBC
        };
        assert_eq!(unresolved_name(&kernel), "[kernel 0xffffffff81001234]");
        let named = Frame {
            function: Some("main"),
            ..LIBC
        };
        assert_eq!(named.name(), "main");
    }

    #[test]
    fn folded_fields_escape_separators() {
        let mut line = String::new();
        push_folded(&mut line, "main");
        push_folded(&mut line, "a;b\nc");
        assert_eq!(line, "main;a:b c");
        assert_eq!(fold(["main", "a;b\nc"]), line);
        assert_eq!(fold(["", "x"]), ";x", "an empty name is a frame");
    }

    #[test]
    fn frames_file_names_are_folded_names_and_are_not_named_again() {
        use stacks_testkit::rows::{Frame as Row, Row as Sample, batch};
        let libc = Row {
            module: Some("/usr/lib/libc.so.6".into()),
            offset: Some(0x1a2b),
            addr: 0x7f00_0000_1a2b,
            ..Default::default()
        };
        let fmt = Row {
            function: Some("<[u8; 4] as Debug>::fmt".into()),
            ..libc.clone()
        };
        let schema = Arc::new(crate::symbolized_schema(Default::default()));
        let sample = Sample {
            kind: "profile".into(),
            stack: Some(vec![fmt, libc]),
            ..Default::default()
        };
        let b = batch(&schema, &[sample]);
        let stack = b.column_by_name(crate::col::STACK).unwrap();
        let frames = StackFrames::new(stack, "test", crate::col::STACK).unwrap();
        assert_eq!(
            frames.folded(frames.row(0)),
            "[libc.so.6+0x1a2b];<[u8: 4] as Debug>::fmt"
        );
        let structs = stack.as_list::<i32>().values().as_struct().clone();
        let names = folded_names(&structs).unwrap();
        assert_eq!(names.value(0), "<[u8: 4] as Debug>::fmt");
        assert_eq!(names.value(1), "[libc.so.6+0x1a2b]");
        // Frames carrying a name are shown by it (a store's assembled frames), unless null
        // (a frames file written before the column).
        let (fields, mut columns, _) = structs.into_parts();
        let mut with: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
        with.push(Field::new(frame::NAME, DataType::Utf8, true));
        columns.push(Arc::new(StringArray::from(vec![Some("stored"), None])));
        let named = StructArray::new(with.into(), columns, None);
        let item = Arc::new(Field::new("frame", named.data_type().clone(), true));
        let list: ArrayRef = Arc::new(ListArray::new(
            item,
            OffsetBuffer::new(vec![0, 2].into()),
            Arc::new(named),
            None,
        ));
        let frames = StackFrames::new(&list, "test", crate::col::STACK).unwrap();
        assert_eq!(frames.folded(frames.row(0)), "[libc.so.6+0x1a2b];stored");
    }

    #[test]
    fn marker_frames_bracket_their_text() {
        assert_eq!(SHORT_OFFCPU_FRAME, format!("[{SHORT_OFFCPU}]"));
        assert!(NO_STACK_FRAME.starts_with('[') && NO_STACK_FRAME.ends_with(']'));
    }
}
