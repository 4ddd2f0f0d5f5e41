//! One fixture model for every test: a [`Row`] holds every column of the raw and symbolized
//! schemas, its stacks as [`Frame`]s (symbolized), [`UFrame`]s (raw user) and [`Ksym`]s
//! (kernel symbols recorded with the raw addresses). [`batch`] turns rows into a batch of any
//! schema made of the contract's columns, [`Encoder`] the same with the stack columns
//! dictionary-encoded (schema version 2); [`read_frames`] reads a `stack` column
//! back, plain or dictionary-encoded.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, FieldRef, SchemaRef};
use stacks_stream::col;
use stacks_stream::dict::{self, Entries, StackDictionary};

/// One symbolized frame (an element of the `stack` column).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub inlined: bool,
    pub kernel: bool,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub offset: Option<u64>,
    pub addr: u64,
    pub error: Option<String>,
    /// The raw symbol; `None` also when the stream's frames have no such field.
    pub symbol: Option<String>,
    /// Why it is unresolved (`stacks_stream::Unresolved`); `None` also when the stream's
    /// frames have no such field.
    pub reason: Option<String>,
}

/// One raw user frame (an element of the `ustack` column).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UFrame {
    pub addr: u64,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub offset: Option<u64>,
    pub error: Option<String>,
    /// JIT code's name from a perf map.
    pub symbol: Option<String>,
}

/// A kernel symbol recorded for one `kstack` address (an element of `kstack_symbols`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ksym {
    pub symbol: String,
    pub offset: u64,
    pub module: Option<String>,
}

/// A column's field type in [`Row`], by the table's type and nullability.
macro_rules! field_type {
    (Time, false) => { i64 };
    (Time, true) => { Option<i64> };
    (Utf8, false) => { String };
    (Utf8, true) => { Option<String> };
    (Int32, false) => { i32 };
    (Int32, true) => { Option<i32> };
    (Int64, false) => { i64 };
    (Int64, true) => { Option<i64> };
    (UInt64, true) => { Option<u64> };
    (Boolean, true) => { Option<bool> };
    (KStack, true) => { Option<Vec<u64>> };
    (UStack, true) => { Option<Vec<UFrame>> };
    (KStackSymbols, true) => { Option<Vec<Option<Ksym>>> };
    (Args, true) => { Option<Vec<i64>> };
    (Stack, true) => { Option<Vec<Frame>> };
}

/// Field `$f` of `$rows` as its column's array, by the table's type and nullability.
macro_rules! field_array {
    ($rows:ident, $f:ident, Time, false) => {
        Arc::new(
            TimestampNanosecondArray::from_iter_values($rows.iter().map(|r| r.$f))
                .with_timezone("UTC"),
        )
    };
    ($rows:ident, $f:ident, Time, true) => {
        Arc::new(
            TimestampNanosecondArray::from($rows.iter().map(|r| r.$f).collect::<Vec<_>>())
                .with_timezone("UTC"),
        )
    };
    ($rows:ident, $f:ident, Utf8, false) => {
        strings($rows, |r| Some(r.$f.as_str()))
    };
    ($rows:ident, $f:ident, Utf8, true) => {
        strings($rows, |r| r.$f.as_deref())
    };
    ($rows:ident, $f:ident, Int32, false) => {
        i32s($rows, |r| Some(r.$f))
    };
    ($rows:ident, $f:ident, Int32, true) => {
        i32s($rows, |r| r.$f)
    };
    ($rows:ident, $f:ident, Int64, false) => {
        i64s($rows, |r| Some(r.$f))
    };
    ($rows:ident, $f:ident, Int64, true) => {
        i64s($rows, |r| r.$f)
    };
    ($rows:ident, $f:ident, UInt64, true) => {
        u64s($rows, |r| r.$f)
    };
    ($rows:ident, $f:ident, Boolean, true) => {
        Arc::new(BooleanArray::from(
            $rows.iter().map(|r| r.$f).collect::<Vec<_>>(),
        ))
    };
    ($rows:ident, $f:ident, KStack, true) => {
        kstack_array(&$rows.iter().map(|r| r.$f.as_deref()).collect::<Vec<_>>())
    };
    ($rows:ident, $f:ident, UStack, true) => {
        ustack_array(&$rows.iter().map(|r| r.$f.as_deref()).collect::<Vec<_>>())
    };
    ($rows:ident, $f:ident, KStackSymbols, true) => {
        kstack_symbols_array(&$rows.iter().map(|r| r.$f.as_deref()).collect::<Vec<_>>())
    };
    ($rows:ident, $f:ident, Args, true) => {
        args_array($rows)
    };
    ($rows:ident, $f:ident, Stack, true) => {
        stack_array(&$rows.iter().map(|r| r.$f.as_deref()).collect::<Vec<_>>())
    };
    // The store's fingerprint is computed from `stack`, not held by a fixture row.
    ($rows:ident, $f:ident, StackId, true) => {
        return None
    };
}

/// [`Row`] and [`column`] from the column table (`stacks_stream::with_columns`): a field per
/// column but the store's `stack_id`, of the column's type.
macro_rules! fixture_rows {
    ($($konst:ident $field:ident: $ty:ident, $null:tt, $unit:expr, $stage:ident, $doc:literal;)*) => {
        fixture_rows!(@fields [] $($field: $ty, $null, $doc;)*);

        /// The column `name` of `rows`, when `name` is a contract column.
        fn column(name: &str, rows: &[Row]) -> Option<ArrayRef> {
            let a: ArrayRef = match name {
                $(col::$konst => field_array!(rows, $field, $ty, $null),)*
                _ => return None,
            };
            Some(a)
        }
    };
    (@fields [$($done:tt)*]) => {
        /// One row with every column of the contract (but the store's `stack_id`); `None` is
        /// null. `time` is in ns since the epoch. Generated from the column table: its
        /// fields are the columns, in schema order, with their docs.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Row {
            $($done)*
        }
    };
    (@fields [$($done:tt)*] $field:ident: StackId, $null:tt, $doc:literal; $($rest:tt)*) => {
        fixture_rows!(@fields [$($done)*] $($rest)*);
    };
    (@fields [$($done:tt)*] $field:ident: $ty:ident, $null:tt, $doc:literal; $($rest:tt)*) => {
        fixture_rows!(@fields [$($done)* #[doc = concat!("`", stringify!($field), "`. ", $doc)] pub $field: field_type!($ty, $null),] $($rest)*);
    };
}

stacks_stream::with_columns!(fixture_rows);

impl Row {
    /// The stack as frame names, leaf first ([`Frame::name`]). `None` for no stack.
    pub fn names(&self) -> Option<Vec<String>> {
        self.stack
            .as_ref()
            .map(|s| s.iter().map(Frame::name).collect())
    }
}

impl Frame {
    /// The frame's name as every stacks tool shows it ([`stacks_stream::frames::Frame::name`]):
    /// the function, else e.g. `[module file name+0xoffset]`.
    pub fn name(&self) -> String {
        stacks_stream::frames::Frame {
            function: self.function.as_deref().filter(|f| !f.is_empty()),
            file: self.file.as_deref(),
            line: self.line.map_or(0, i64::from),
            column: self.column.map_or(0, i64::from),
            inlined: self.inlined,
            kernel: self.kernel,
            module: self.module.as_deref().filter(|m| !m.is_empty()),
            build_id: self.build_id.as_deref(),
            offset: self.offset,
            addr: self.addr,
            symbol: self.symbol.as_deref(),
        }
        .name()
        .into_owned()
    }
}

fn element(list: &DataType) -> FieldRef {
    match list {
        DataType::List(f) => f.clone(),
        other => panic!("not a list type: {other}"),
    }
}

fn struct_fields(list: &DataType) -> arrow_schema::Fields {
    match element(list).data_type() {
        DataType::Struct(fields) => fields.clone(),
        other => panic!("not a struct: {other}"),
    }
}

fn strings<'a, T: 'a>(items: &'a [T], get: impl Fn(&'a T) -> Option<&'a str>) -> ArrayRef {
    Arc::new(StringArray::from(items.iter().map(get).collect::<Vec<_>>()))
}

fn u64s<T>(items: &[T], get: impl Fn(&T) -> Option<u64>) -> ArrayRef {
    Arc::new(UInt64Array::from(items.iter().map(get).collect::<Vec<_>>()))
}

fn i32s<T>(items: &[T], get: impl Fn(&T) -> Option<i32>) -> ArrayRef {
    Arc::new(Int32Array::from(items.iter().map(get).collect::<Vec<_>>()))
}

fn i64s<T>(items: &[T], get: impl Fn(&T) -> Option<i64>) -> ArrayRef {
    Arc::new(Int64Array::from(items.iter().map(get).collect::<Vec<_>>()))
}

/// The `args` column of `rows`.
fn args_array(rows: &[Row]) -> ArrayRef {
    let DataType::List(field) = stacks_stream::args_type() else {
        unreachable!("args is a list")
    };
    let mut b = arrow_array::builder::ListBuilder::new(arrow_array::builder::Int64Builder::new())
        .with_field(field);
    for r in rows {
        match &r.args {
            Some(a) => {
                b.values().append_slice(a);
                b.append(true);
            }
            None => b.append_null(),
        }
    }
    Arc::new(b.finish())
}

fn bools<T>(items: &[T], get: impl Fn(&T) -> bool) -> ArrayRef {
    Arc::new(BooleanArray::from(
        items.iter().map(get).collect::<Vec<_>>(),
    ))
}

/// A list column of `list` type: one list per entry of `lists` (`None` = null), the elements
/// built by `values` from all of them in order.
fn list<T>(
    list: &DataType,
    lists: &[Option<&[T]>],
    values: impl FnOnce(Vec<&T>) -> ArrayRef,
) -> ArrayRef {
    let items: Vec<&T> = lists.iter().flatten().flat_map(|l| l.iter()).collect();
    let nulls = lists
        .iter()
        .any(Option::is_none)
        .then(|| NullBuffer::from(lists.iter().map(Option::is_some).collect::<Vec<_>>()));
    Arc::new(ListArray::new(
        element(list),
        OffsetBuffer::<i32>::from_lengths(lists.iter().map(|l| l.map_or(0, <[T]>::len))),
        values(items),
        nulls,
    ))
}

/// A `stack` column of the contract's type; `None` entries are null stacks.
pub fn stack_array(stacks: &[Option<&[Frame]>]) -> ArrayRef {
    list(&stacks_stream::stack_type(), stacks, |f| {
        let columns: Vec<ArrayRef> = vec![
            strings(&f, |f| f.function.as_deref()),
            strings(&f, |f| f.file.as_deref()),
            Arc::new(UInt32Array::from(
                f.iter().map(|f| f.line).collect::<Vec<_>>(),
            )),
            Arc::new(UInt32Array::from(
                f.iter().map(|f| f.column).collect::<Vec<_>>(),
            )),
            bools(&f, |f| f.inlined),
            bools(&f, |f| f.kernel),
            strings(&f, |f| f.module.as_deref()),
            strings(&f, |f| f.build_id.as_deref()),
            u64s(&f, |f| f.offset),
            u64s(&f, |f| Some(f.addr)),
            strings(&f, |f| f.error.as_deref()),
            strings(&f, |f| f.symbol.as_deref()),
            strings(&f, |f| f.reason.as_deref()),
        ];
        Arc::new(StructArray::new(
            stacks_stream::frame_fields(),
            columns,
            None,
        ))
    })
}

fn ustack_array(stacks: &[Option<&[UFrame]>]) -> ArrayRef {
    let ty = stacks_stream::ustack_type();
    let fields = struct_fields(&ty);
    list(&ty, stacks, |f| {
        let columns: Vec<ArrayRef> = vec![
            u64s(&f, |f| Some(f.addr)),
            strings(&f, |f| f.module.as_deref()),
            strings(&f, |f| f.build_id.as_deref()),
            u64s(&f, |f| f.offset),
            strings(&f, |f| f.error.as_deref()),
            strings(&f, |f| f.symbol.as_deref()),
            // Interpreted frames' file and line: none in the fixtures.
            strings(&f, |_| None),
            Arc::new(UInt32Array::from(vec![None::<u32>; f.len()])),
        ];
        Arc::new(StructArray::new(fields, columns, None))
    })
}

fn kstack_symbols_array(lists: &[Option<&[Option<Ksym>]>]) -> ArrayRef {
    let ty = stacks_stream::kstack_symbols_type();
    let fields = struct_fields(&ty);
    list(&ty, lists, |s| {
        // A symbol not in kallsyms is a null element (its fields hold placeholders).
        let columns: Vec<ArrayRef> = vec![
            strings(&s, |s| Some(s.as_ref().map_or("", |k| k.symbol.as_str()))),
            u64s(&s, |s| Some(s.as_ref().map_or(0, |k| k.offset))),
            strings(&s, |s| s.as_ref().and_then(|k| k.module.as_deref())),
        ];
        let nulls = NullBuffer::from(s.iter().map(|s| s.is_some()).collect::<Vec<_>>());
        Arc::new(StructArray::new(fields, columns, Some(nulls)))
    })
}

fn kstack_array(stacks: &[Option<&[u64]>]) -> ArrayRef {
    list(&stacks_stream::kstack_type(), stacks, |a| {
        Arc::new(UInt64Array::from_iter_values(a.into_iter().copied()))
    })
}

/// `rows` as a batch of `schema` (the raw or symbolized schema, or any schema of contract
/// columns), through `stacks_stream::batch_by_name`.
pub fn batch(schema: &SchemaRef, rows: &[Row]) -> RecordBatch {
    let columns: Vec<(&str, ArrayRef)> = schema
        .fields()
        .iter()
        .map(|f| {
            let name = f.name().as_str();
            let c = column(name, rows)
                .unwrap_or_else(|| panic!("`{name}` is not a column of the fixture rows"));
            (name, c)
        })
        .collect();
    stacks_stream::batch_by_name(schema.clone(), rows.len(), columns).expect("fixture batch")
}

/// How an [`Encoder`] gives out keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Each stack column its own dictionary of its distinct stacks.
    PerColumn,
    /// As stacks-record writes: `kstack`, `ustack` and `kstack_symbols` share one key per
    /// distinct (kstack, ustack, kstack_symbols) triple (an entry is null in a column where
    /// the triple has no stack, and a row's key is null where its column is null); `stack`
    /// has its own.
    SharedRaw,
}

/// Rows to batches of one stream with every stack column of the schema dictionary-encoded:
/// the dictionaries only grow, so a key means the same stack in every batch of the stream.
pub struct Encoder {
    plain: SchemaRef,
    encoded: SchemaRef,
    keys: Keys,
    /// Per dictionary (a stack column, or `raw` for the shared raw columns): the key of each
    /// distinct stack seen, by its debug text.
    seen: HashMap<&'static str, HashMap<String, i32>>,
    dicts: HashMap<String, StackDictionary>,
}

impl Encoder {
    /// Batches of `schema` (plain or encoded; the contract's columns) with stack columns
    /// dictionary-encoded as `keys` says.
    pub fn new(schema: &SchemaRef, keys: Keys) -> Self {
        let plain = Arc::new(dict::decoded_schema(schema));
        let encoded = Arc::new(dict::encoded_schema(&plain));
        Encoder {
            plain,
            encoded,
            keys,
            seen: HashMap::new(),
            dicts: HashMap::new(),
        }
    }

    /// The schema of the batches (stack columns dictionary-encoded).
    pub fn schema(&self) -> SchemaRef {
        self.encoded.clone()
    }

    /// The next batch of the stream.
    pub fn batch(&mut self, rows: &[Row]) -> RecordBatch {
        let plain = batch(&self.plain, rows);
        let mut columns = plain.columns().to_vec();
        for (i, f) in self.plain.fields().iter().enumerate() {
            let name = f.name().as_str();
            if !dict::is_stack_column(name) {
                continue;
            }
            let (group, text): (&'static str, fn(&Row) -> String) = match (self.keys, name) {
                (Keys::SharedRaw, col::KSTACK | col::USTACK | col::KSTACK_SYMBOLS) => {
                    ("raw", |r| {
                        format!("{:?}", (&r.kstack, &r.ustack, &r.kstack_symbols))
                    })
                }
                (_, col::KSTACK) => (col::KSTACK, |r| format!("{:?}", r.kstack)),
                (_, col::USTACK) => (col::USTACK, |r| format!("{:?}", r.ustack)),
                (_, col::KSTACK_SYMBOLS) => {
                    (col::KSTACK_SYMBOLS, |r| format!("{:?}", r.kstack_symbols))
                }
                _ => (col::STACK, |r| format!("{:?}", r.stack)),
            };
            let null = |r: &Row| match name {
                col::KSTACK => r.kstack.is_none(),
                col::USTACK => r.ustack.is_none(),
                col::KSTACK_SYMBOLS => r.kstack_symbols.is_none(),
                _ => r.stack.is_none(),
            };
            // Keys of the group, new entries added in key order (each group's columns add the
            // same new rows, so their dictionaries stay aligned).
            let seen = self.seen.entry(group).or_default();
            let before = seen.len();
            let mut new: Vec<Row> = Vec::new();
            let mut keys: Vec<Option<i32>> = Vec::with_capacity(rows.len());
            let mut added: HashMap<String, i32> = HashMap::new();
            let shared = group == "raw";
            for r in rows {
                let absent = if shared {
                    r.kstack.is_none() && r.ustack.is_none() && r.kstack_symbols.is_none()
                } else {
                    null(r)
                };
                if absent {
                    keys.push(None);
                    continue;
                }
                let t = text(r);
                let key = match seen.get(&t).or_else(|| added.get(&t)) {
                    Some(&k) => k,
                    None => {
                        let k = (before + new.len()) as i32;
                        added.insert(t, k);
                        new.push(r.clone());
                        k
                    }
                };
                keys.push((!null(r)).then_some(key));
            }
            let d = self
                .dicts
                .entry(name.to_string())
                .or_insert_with(|| StackDictionary::new(f.data_type()));
            let entries = column(name, &new).expect("a stack column of the fixture rows");
            d.extend(entries.as_ref()).expect("stack dictionary");
            assert_eq!(d.len(), before + new.len(), "{name}: dictionaries aligned");
            columns[i] = d.column(Int32Array::from(keys)).expect("dictionary column");
            // Shared raw columns: the group's keys are recorded after its last column.
            let last_of_group = !shared
                || !self.plain.fields()[i + 1..].iter().any(|f| {
                    matches!(
                        f.name().as_str(),
                        col::KSTACK | col::USTACK | col::KSTACK_SYMBOLS
                    )
                });
            if last_of_group {
                self.seen.entry(group).or_default().extend(added);
            }
        }
        RecordBatch::try_new(self.encoded.clone(), columns).expect("encoded fixture batch")
    }
}

/// Variants of `batch` (stack columns dictionary-encoded, e.g. by [`Encoder`]) with one
/// broken or odd dictionary each, as a foreign writer or a fuzzer could make them: row 0's key
/// past the end of the dictionary, negative, or on a null entry. Built without validation;
/// readers must refuse the first two and take the last as a null stack, without a panic.
pub fn broken_dictionaries(batch: &RecordBatch) -> Vec<(String, RecordBatch)> {
    let mut out = Vec::new();
    for (i, f) in batch.schema().fields().iter().enumerate() {
        let Some(d) = batch
            .column(i)
            .as_dictionary_opt::<arrow_array::types::Int32Type>()
        else {
            continue;
        };
        if d.is_empty() {
            continue;
        }
        let len = d.values().len() as i32;
        let mut with_null = StackDictionary::new(d.values().data_type());
        with_null.extend(d.values().as_ref()).expect("entries");
        with_null
            .extend(arrow_array::new_null_array(d.values().data_type(), 1).as_ref())
            .expect("null entry");
        for (what, key, values) in [
            ("key past the end", len + 3, d.values().clone()),
            ("negative key", -1, d.values().clone()),
            ("key of a null entry", len, with_null.values().clone()),
        ] {
            let mut keys: Vec<Option<i32>> = d.keys().iter().collect();
            keys[0] = Some(key);
            // SAFETY: deliberately unchecked; no code here reads through the keys.
            let broken = unsafe {
                arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::new_unchecked(
                    Int32Array::from(keys),
                    values,
                )
            };
            let mut columns = batch.columns().to_vec();
            columns[i] = Arc::new(broken);
            let b = RecordBatch::try_new(batch.schema(), columns).expect("broken batch");
            out.push((format!("{}: {what}", f.name()), b));
        }
    }
    out
}

/// Each row's `stack` with every frame field, plain or dictionary-encoded; `None` for a null
/// stack.
pub fn read_frames(batches: &[RecordBatch]) -> Vec<Option<Vec<Frame>>> {
    let mut out = Vec::new();
    for b in batches {
        let entries =
            Entries::new(b.column_by_name(col::STACK).expect("stack column")).expect("stack");
        let stack = entries.values().as_list::<i32>();
        for row in 0..b.num_rows() {
            let Some(entry) = entries.entry(row) else {
                out.push(None);
                continue;
            };
            let v = stack.value(entry);
            let s = v.as_struct();
            let text = |name: &str, i: usize| {
                s.column_by_name(name).and_then(|c| {
                    let c = c.as_string::<i32>();
                    c.is_valid(i).then(|| c.value(i).to_string())
                })
            };
            let u64s = |name: &str, i: usize| {
                let c = s.column_by_name(name)?.as_primitive::<UInt64Type>();
                c.is_valid(i).then(|| c.value(i))
            };
            let u32s = |name: &str, i: usize| {
                let c = s.column_by_name(name)?.as_primitive::<UInt32Type>();
                c.is_valid(i).then(|| c.value(i))
            };
            let flag = |name: &str, i: usize| {
                s.column_by_name(name)
                    .expect("frame flag")
                    .as_boolean()
                    .value(i)
            };
            out.push(Some(
                (0..s.len())
                    .map(|i| Frame {
                        function: text("function", i),
                        file: text("file", i),
                        line: u32s("line", i),
                        column: u32s("column", i),
                        inlined: flag("inlined", i),
                        kernel: flag("kernel", i),
                        module: text("module", i),
                        build_id: text("build_id", i),
                        offset: u64s("offset", i),
                        addr: u64s("addr", i).expect("addr is never null"),
                        error: text("error", i),
                        symbol: text("symbol", i),
                        reason: text("reason", i),
                    })
                    .collect(),
            ));
        }
    }
    out
}

/// Each row's `stack` as (function, is kernel frame) pairs; empty for a null stack.
pub fn stack_functions(batches: &[RecordBatch]) -> Vec<Vec<(Option<String>, bool)>> {
    read_frames(batches)
        .into_iter()
        .map(|s| {
            s.unwrap_or_default()
                .into_iter()
                .map(|f| (f.function, f.kernel))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every column of the column table (but the store's `stack_id`) is a field of [`Row`],
    /// built with the table's type.
    #[test]
    fn rows_have_every_column_of_the_table() {
        use stacks_stream::table::{COLUMNS, Stage};
        let rows = [Row::default()];
        for c in COLUMNS.iter().filter(|c| c.stage != Stage::Stored) {
            let a = column(c.name, &rows)
                .unwrap_or_else(|| panic!("no testkit Row field for column `{}`", c.name));
            assert_eq!(a.data_type(), &c.ty.data_type(), "column `{}`", c.name);
        }
    }

    #[test]
    fn rows_round_trip_through_a_symbolized_batch() {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let resolved = Frame {
            function: Some("f".into()),
            kernel: true,
            addr: 1,
            ..Frame::default()
        };
        let unresolved = Frame {
            module: Some("/usr/lib/libc.so.6".into()),
            offset: Some(0x1a),
            addr: 2,
            ..Frame::default()
        };
        let ksym = Ksym {
            symbol: "s".into(),
            offset: 4,
            module: None,
        };
        let rows = vec![
            Row {
                kind: "profile".into(),
                kstack: Some(vec![1, 2]),
                kstack_symbols: Some(vec![None, Some(ksym)]),
                stack: Some(vec![resolved.clone(), unresolved.clone()]),
                ..Row::default()
            },
            Row {
                kind: "lost".into(),
                ..Row::default()
            },
        ];
        let b = batch(&schema, &rows);
        assert_eq!(b.num_rows(), 2);
        assert_eq!(
            read_frames(std::slice::from_ref(&b)),
            vec![Some(vec![resolved, unresolved]), None]
        );
        assert_eq!(
            rows[0].names(),
            Some(vec!["f".to_string(), "[libc.so.6+0x1a]".to_string()])
        );
        let symbols = b
            .column_by_name(col::KSTACK_SYMBOLS)
            .expect("kstack_symbols")
            .as_list::<i32>()
            .value(0);
        assert!(symbols.is_null(0) && symbols.is_valid(1));
        assert!(b.column_by_name(col::USTACK).expect("ustack").is_null(0));
    }

    #[test]
    fn encoded_batches_share_growing_dictionaries() {
        let schema = Arc::new(stacks_stream::symbolized_schema(Default::default()));
        let frame = |f: &str| Frame {
            function: Some(f.into()),
            addr: 7,
            ..Frame::default()
        };
        let row = |k: Option<Vec<u64>>, s: Option<Vec<Frame>>| Row {
            kind: "profile".into(),
            kstack: k,
            stack: s,
            ..Row::default()
        };
        let a = row(Some(vec![1]), Some(vec![frame("a")]));
        let b = row(None, Some(vec![frame("b")]));
        let none = row(None, None);
        for keys in [Keys::PerColumn, Keys::SharedRaw] {
            let mut e = Encoder::new(&schema, keys);
            let first = e.batch(&[a.clone(), none.clone(), a.clone()]);
            let second = e.batch(&[b.clone(), a.clone()]);
            let plain = [
                batch(&schema, &[a.clone(), none.clone(), a.clone()]),
                batch(&schema, &[b.clone(), a.clone()]),
            ];
            assert_eq!(
                read_frames(&[first.clone(), second.clone()]),
                read_frames(&plain)
            );
            let stack = Entries::new(second.column_by_name(col::STACK).unwrap()).unwrap();
            assert!(stack.is_dictionary());
            assert_eq!(
                stack.values().len(),
                2,
                "{keys:?}: one entry per distinct stack"
            );
            assert_eq!((stack.entry(0), stack.entry(1)), (Some(1), Some(0)));
            let k1 = Entries::new(first.column_by_name(col::KSTACK).unwrap()).unwrap();
            let k2 = Entries::new(second.column_by_name(col::KSTACK).unwrap()).unwrap();
            assert_eq!(
                (k1.entry(0), k1.entry(1), k1.entry(2)),
                (Some(0), None, Some(0))
            );
            assert_eq!(k2.entry(0), None, "{keys:?}: a null kstack has a null key");
            assert_eq!(k2.entry(1), Some(0));
            let u = Entries::new(second.column_by_name(col::USTACK).unwrap()).unwrap();
            let expected = match keys {
                Keys::PerColumn => 0,
                Keys::SharedRaw => 1,
            };
            assert_eq!(u.values().len(), expected, "{keys:?}: ustack entries");
        }
    }
}
