//! OTLP profiles back into stacks rows: an `ExportProfilesServiceRequest` (ours, or any
//! sender's) becomes a batch of symbolized rows (`stacks.stage = symbolized`), one row per event
//! of every sample. The receiver (`--listen`) and `--decode` share it.
//!
//! - A profile's sample type names the kind of its rows: the value type of a registered kind
//!   (`cpu/nanoseconds` → `profile`, `offcpu/nanoseconds` → `switch`, …) gives rows of that
//!   kind, whose `count` comes from the kind's count profile of the same scope (`samples/count`,
//!   matched by sample identity and event); a count profile alone gives rows of its kind, CPU
//!   samples (`samples/count`, as the OpenTelemetry profiler sends them) then weigh the profile's
//!   period each; any other sample type gives rows of a kind named after it.
//! - Locations become frames (function, file, line, column, module, build id, file offset;
//!   inlined lines as several frames, inlinee first; `profile.frame.type` `kernel` marks kernel
//!   frames); a location without lines is an unresolved frame.
//! - Resource and sample attributes fill `host`, `pid`, `comm`, `tid`, `thread`, `cpu`,
//!   `cgroup`, `span_name` (their semantic conventions, [`crate::semconv`]) and any row column
//!   named as the attribute; a link fills `trace_id` and `span_id`.
//!
//! Every index is checked: a request referring outside its dictionary, or whose samples break
//! the spec's shapes, is refused whole with a [`Malformed`] naming the field.

use std::collections::HashMap;
use std::fmt::{self, Display};
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt64Builder,
};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StructArray, UInt32Array};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, SchemaRef};
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use stacks_stream::frames::{
    JIT_MODULE, KERNEL_MODULE, NO_STACK_FRAME, PYTHON_MODULE, SHORT_OFFCPU_FRAME,
};
use stacks_stream::{Unresolved, col, frame_fields, kind, kinds, meta, stage};

use crate::semconv;

/// Why a request was refused, one value per cause (the receiver counts them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// The body is not an `ExportProfilesServiceRequest` (truncated, not protobuf).
    Protobuf,
    /// A content type or encoding the receiver does not take.
    ContentType,
    /// A gzip body that does not inflate, or inflates past the limit.
    Encoding,
    /// An index outside its table.
    Index,
    /// A sample, link or value type the spec does not allow.
    Shape,
    /// The body is larger than the receiver takes.
    TooLarge,
}

impl Cause {
    /// Every cause, in the order the receiver reports them.
    pub const ALL: [Cause; 6] = [
        Cause::Protobuf,
        Cause::ContentType,
        Cause::Encoding,
        Cause::Index,
        Cause::Shape,
        Cause::TooLarge,
    ];

    /// The name the summary and the docs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Protobuf => "protobuf",
            Cause::ContentType => "content_type",
            Cause::Encoding => "encoding",
            Cause::Index => "index",
            Cause::Shape => "shape",
            Cause::TooLarge => "too_large",
        }
    }
}

/// A request refused: its cause and what is wrong, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct Malformed {
    pub cause: Cause,
    pub detail: String,
}

impl Malformed {
    pub fn new(cause: Cause, detail: impl Into<String>) -> Self {
        Self {
            cause,
            detail: detail.into(),
        }
    }
}

fn index_error(what: &dyn Display, index: i64, table: &str, len: usize) -> Malformed {
    Malformed::new(
        Cause::Index,
        format!("{what} {index} is outside {table} ({len} entries)"),
    )
}

/// The schema of the rows made: symbolized rows, `stack` a plain list (each request's stacks
/// are its own dictionary; the stream needs none across requests).
pub fn schema() -> SchemaRef {
    let mut md = HashMap::new();
    stacks_stream::stamp(
        &mut md,
        "stacks-otlp",
        env!("CARGO_PKG_VERSION"),
        stage::SYMBOLIZED,
    );
    md.insert(
        meta::SCHEMA_VERSION.into(),
        stacks_stream::SCHEMA_VERSION.into(),
    );
    Arc::new(stacks_stream::symbolized_schema(md))
}

/// Parse a serialized request, refusing what is not one.
pub fn parse(body: &[u8]) -> Result<ExportProfilesServiceRequest, Malformed> {
    use prost::Message;
    ExportProfilesServiceRequest::decode(body).map_err(|e| {
        Malformed::new(
            Cause::Protobuf,
            format!("not an OTLP ExportProfilesServiceRequest: {e}"),
        )
    })
}

/// One decoded frame.
#[derive(Debug, Clone, Default)]
struct Frame {
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    column: Option<u32>,
    inlined: bool,
    kernel: bool,
    module: Option<String>,
    build_id: Option<String>,
    offset: Option<u64>,
    addr: u64,
    error: Option<String>,
    symbol: Option<String>,
    reason: Option<&'static str>,
}

/// A value of an attribute, as a row column takes it.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Str(String),
    Int(i64),
}

impl Val {
    fn of(value: Option<&AnyValue>) -> Option<Val> {
        match value?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(Val::Str(s.clone())),
            any_value::Value::IntValue(i) => Some(Val::Int(*i)),
            any_value::Value::BoolValue(b) => Some(Val::Str(b.to_string())),
            any_value::Value::DoubleValue(d) => Some(Val::Str(d.to_string())),
            _ => None,
        }
    }

    fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::Str(s) => s.parse().ok(),
        }
    }

    fn string(&self) -> String {
        match self {
            Val::Int(i) => i.to_string(),
            Val::Str(s) => s.clone(),
        }
    }
}

/// Row columns an attribute never fills: they come from the profile itself.
const NOT_FROM_ATTRIBUTES: [&str; 10] = [
    col::TIME,
    col::KIND,
    col::VALUE,
    col::COUNT,
    col::DURATION,
    col::KSTACK,
    col::USTACK,
    col::KSTACK_SYMBOLS,
    col::STACK,
    col::ARGS,
];

/// The row column attribute `key` fills: its semantic convention's, or the column of that name.
fn column_of(key: &str, columns: &HashMap<String, usize>) -> Option<usize> {
    let name = match key {
        semconv::HOST_NAME => col::HOST,
        semconv::PROCESS_PID => col::PID,
        semconv::PROCESS_EXECUTABLE_NAME => col::COMM,
        semconv::THREAD_ID => col::TID,
        semconv::THREAD_NAME => col::THREAD,
        semconv::CPU_LOGICAL_NUMBER => col::CPU,
        semconv::CGROUP => col::CGROUP,
        semconv::SPAN_NAME => col::SPAN_NAME,
        k if NOT_FROM_ATTRIBUTES.contains(&k) => return None,
        k => k,
    };
    columns.get(name).copied()
}

/// A column of rows being built.
enum Builder {
    Time(TimestampNanosecondBuilder),
    Str(StringBuilder),
    I32(Int32Builder),
    I64(Int64Builder),
    U64(UInt64Builder),
    Bool(BooleanBuilder),
}

impl Builder {
    fn of(dt: &DataType) -> Option<Self> {
        Some(match dt {
            DataType::Timestamp(..) => Builder::Time(TimestampNanosecondBuilder::new()),
            DataType::Utf8 => Builder::Str(StringBuilder::new()),
            DataType::Int32 => Builder::I32(Int32Builder::new()),
            DataType::Int64 => Builder::I64(Int64Builder::new()),
            DataType::UInt64 => Builder::U64(UInt64Builder::new()),
            DataType::Boolean => Builder::Bool(BooleanBuilder::new()),
            _ => return None,
        })
    }

    fn append(&mut self, v: Option<&Val>) {
        match self {
            Builder::Time(b) => b.append_option(v.and_then(Val::int)),
            Builder::Str(b) => b.append_option(v.map(Val::string)),
            Builder::I32(b) => {
                b.append_option(v.and_then(Val::int).and_then(|i| i32::try_from(i).ok()))
            }
            Builder::I64(b) => b.append_option(v.and_then(Val::int)),
            Builder::U64(b) => b.append_option(v.and_then(Val::int).map(|i| i as u64)),
            Builder::Bool(b) => b.append_option(v.map(|v| v.string() == "true")),
        }
    }

    fn finish(self, dt: &DataType) -> ArrayRef {
        match self {
            Builder::Time(mut b) => Arc::new(b.finish().with_data_type(dt.clone())),
            Builder::Str(mut b) => Arc::new(b.finish()),
            Builder::I32(mut b) => Arc::new(b.finish()),
            Builder::I64(mut b) => Arc::new(b.finish()),
            Builder::U64(mut b) => Arc::new(b.finish()),
            Builder::Bool(mut b) => Arc::new(b.finish()),
        }
    }
}

/// The frames of distinct stacks, as the `stack` column's values.
#[derive(Default)]
struct StackColumn {
    frames: Vec<Frame>,
    offsets: Vec<i32>,
}

impl StackColumn {
    fn push(&mut self, frames: &[Frame]) -> u32 {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.frames.extend_from_slice(frames);
        self.offsets.push(self.frames.len() as i32);
        (self.offsets.len() - 2) as u32
    }

    /// The `stack` column of rows holding `keys` (an index into the stacks pushed, null: none).
    fn column(self, keys: Vec<Option<u32>>) -> Result<ArrayRef, arrow_schema::ArrowError> {
        let fields = frame_fields();
        let f = &self.frames;
        let strs = |get: fn(&Frame) -> Option<&str>| -> ArrayRef {
            Arc::new(arrow_array::StringArray::from_iter(f.iter().map(get)))
        };
        let columns: Vec<ArrayRef> = vec![
            strs(|x| x.function.as_deref()),
            strs(|x| x.file.as_deref()),
            Arc::new(
                f.iter()
                    .map(|x| x.line)
                    .collect::<arrow_array::UInt32Array>(),
            ),
            Arc::new(
                f.iter()
                    .map(|x| x.column)
                    .collect::<arrow_array::UInt32Array>(),
            ),
            Arc::new(arrow_array::BooleanArray::from_iter(
                f.iter().map(|x| Some(x.inlined)),
            )),
            Arc::new(arrow_array::BooleanArray::from_iter(
                f.iter().map(|x| Some(x.kernel)),
            )),
            strs(|x| x.module.as_deref()),
            strs(|x| x.build_id.as_deref()),
            Arc::new(
                f.iter()
                    .map(|x| x.offset)
                    .collect::<arrow_array::UInt64Array>(),
            ),
            Arc::new(
                f.iter()
                    .map(|x| Some(x.addr))
                    .collect::<arrow_array::UInt64Array>(),
            ),
            strs(|x| x.error.as_deref()),
            strs(|x| x.symbol.as_deref()),
            strs(|x| x.reason),
        ];
        let values = StructArray::try_new(fields.clone(), columns, None)?;
        let mut offsets = self.offsets;
        if offsets.is_empty() {
            offsets.push(0);
        }
        let DataType::List(item) = stacks_stream::stack_type() else {
            unreachable!("the stack type is a list")
        };
        let stacks = ListArray::try_new(
            item,
            OffsetBuffer::new(offsets.into()),
            Arc::new(values),
            None,
        )?;
        let keys = UInt32Array::from(keys);
        arrow_select::take::take(&stacks, &keys, None)
    }
}

/// What one request's dictionary resolves to, cached per index.
struct Dictionary<'a> {
    d: &'a otlp::ProfilesDictionary,
    locations: HashMap<i32, Vec<Frame>>,
    /// OTLP stack index → index in the stack column (None: no stack).
    stacks: HashMap<i32, Option<u32>>,
    column: StackColumn,
    build_id_key: Option<i32>,
    frame_type_key: Option<i32>,
}

impl<'a> Dictionary<'a> {
    fn new(d: &'a otlp::ProfilesDictionary) -> Self {
        let key = |k: &str| d.string_table.iter().position(|s| s == k).map(|i| i as i32);
        Self {
            d,
            locations: HashMap::new(),
            stacks: HashMap::new(),
            column: StackColumn::default(),
            build_id_key: key(semconv::BUILD_ID_GNU),
            frame_type_key: key(semconv::FRAME_TYPE),
        }
    }

    fn str(&self, i: i32, what: &dyn Display) -> Result<&'a str, Malformed> {
        usize::try_from(i)
            .ok()
            .and_then(|u| self.d.string_table.get(u))
            .map(String::as_str)
            .ok_or_else(|| index_error(what, i.into(), "string_table", self.d.string_table.len()))
    }

    fn attribute(
        &self,
        i: i32,
        what: &dyn Display,
    ) -> Result<&'a otlp::KeyValueAndUnit, Malformed> {
        usize::try_from(i)
            .ok()
            .and_then(|u| self.d.attribute_table.get(u))
            .ok_or_else(|| {
                index_error(
                    what,
                    i.into(),
                    "attribute_table",
                    self.d.attribute_table.len(),
                )
            })
    }

    /// The string value of attribute `key` among `indices`.
    fn attribute_str(
        &self,
        indices: &[i32],
        key: Option<i32>,
        what: &dyn Display,
    ) -> Result<Option<&'a str>, Malformed> {
        let Some(key) = key else { return Ok(None) };
        for &i in indices {
            let a = self.attribute(i, what)?;
            if a.key_strindex == key
                && let Some(AnyValue {
                    value: Some(any_value::Value::StringValue(s)),
                }) = &a.value
            {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    /// The frames of location `i`, inlinee first.
    fn location(&mut self, i: i32) -> Result<&[Frame], Malformed> {
        if !self.locations.contains_key(&i) {
            let frames = self.make_location(i)?;
            self.locations.insert(i, frames);
        }
        Ok(&self.locations[&i])
    }

    fn make_location(&self, i: i32) -> Result<Vec<Frame>, Malformed> {
        let d = self.d;
        let what = format_args!("location_table[{i}]");
        let l = usize::try_from(i)
            .ok()
            .and_then(|u| d.location_table.get(u))
            .ok_or_else(|| {
                index_error(
                    &"a stack's location index",
                    i.into(),
                    "location_table",
                    d.location_table.len(),
                )
            })?;
        let mapping = match l.mapping_index {
            0 => None,
            m => Some(
                usize::try_from(m)
                    .ok()
                    .and_then(|u| d.mapping_table.get(u))
                    .ok_or_else(|| {
                        index_error(
                            &format_args!("{what}.mapping_index"),
                            m.into(),
                            "mapping_table",
                            d.mapping_table.len(),
                        )
                    })?,
            ),
        };
        let frame_type = self.attribute_str(
            &l.attribute_indices,
            self.frame_type_key,
            &format_args!("{what}.attribute_indices"),
        )?;
        let (module, build_id) = match mapping {
            Some(m) => {
                let name = self.str(
                    m.filename_strindex,
                    &format_args!("mapping_table[{}].filename_strindex", l.mapping_index),
                )?;
                let build_id = self.attribute_str(
                    &m.attribute_indices,
                    self.build_id_key,
                    &format_args!("mapping_table[{}].attribute_indices", l.mapping_index),
                )?;
                (
                    Some(name).filter(|n| !n.is_empty()),
                    build_id.filter(|b| !b.is_empty()),
                )
            }
            None => (None, None),
        };
        let kernel = frame_type == Some("kernel")
            || module.is_some_and(|m| m == KERNEL_MODULE || m.starts_with("[kernel"));
        let module = match (module, frame_type) {
            (Some(m), _) => Some(m.to_string()),
            (None, _) if kernel => Some(KERNEL_MODULE.to_string()),
            (None, Some("cpython")) => Some(PYTHON_MODULE.to_string()),
            (None, Some("jit")) => Some(JIT_MODULE.to_string()),
            (None, _) => None,
        };
        // A user frame's file offset: its address within the mapping, as the mapping says
        // (stacks-otlp writes file offsets with a mapping from 0 at offset 0).
        let offset = match mapping {
            Some(m) if !kernel && l.address >= m.memory_start => {
                Some(l.address - m.memory_start + m.file_offset)
            }
            _ => None,
        };
        let base = Frame {
            kernel,
            module,
            build_id: build_id.map(str::to_string),
            offset,
            addr: l.address,
            ..Frame::default()
        };
        if l.lines.is_empty() {
            return Ok(vec![Frame {
                error: Some("the profile names no function at this address".into()),
                reason: Some(Unresolved::NoSymbol.as_str()),
                ..base
            }]);
        }
        let last = l.lines.len() - 1;
        let mut frames = Vec::with_capacity(l.lines.len());
        for (n, line) in l.lines.iter().enumerate() {
            let f = usize::try_from(line.function_index)
                .ok()
                .and_then(|u| d.function_table.get(u))
                .ok_or_else(|| {
                    index_error(
                        &format_args!("{what}.lines[{n}].function_index"),
                        line.function_index.into(),
                        "function_table",
                        d.function_table.len(),
                    )
                })?;
            let fwhat = line.function_index;
            let name = self.str(
                f.name_strindex,
                &format_args!("function_table[{fwhat}].name_strindex"),
            )?;
            let system = self.str(
                f.system_name_strindex,
                &format_args!("function_table[{fwhat}].system_name_strindex"),
            )?;
            let file = self.str(
                f.filename_strindex,
                &format_args!("function_table[{fwhat}].filename_strindex"),
            )?;
            let positive = |v: i64| u32::try_from(v).ok().filter(|&v| v > 0);
            frames.push(Frame {
                function: Some(name).filter(|s| !s.is_empty()).map(str::to_string),
                file: Some(file).filter(|s| !s.is_empty()).map(str::to_string),
                line: positive(line.line),
                column: positive(line.column),
                inlined: n < last,
                symbol: Some(system)
                    .filter(|s| !s.is_empty() && *s != name)
                    .map(str::to_string),
                ..base.clone()
            });
        }
        Ok(frames)
    }

    /// The stack column index of OTLP stack `i` (None: no stack, or only a marker the
    /// profile added for rows without one).
    fn stack(&mut self, i: i32) -> Result<Option<u32>, Malformed> {
        if let Some(&s) = self.stacks.get(&i) {
            return Ok(s);
        }
        let d = self.d;
        let stack = usize::try_from(i)
            .ok()
            .and_then(|u| d.stack_table.get(u))
            .ok_or_else(|| {
                index_error(
                    &"a sample's stack_index",
                    i.into(),
                    "stack_table",
                    d.stack_table.len(),
                )
            })?;
        let mut frames = Vec::new();
        for &l in &stack.location_indices {
            frames.extend_from_slice(self.location(l)?);
        }
        let marker = |f: &Frame| {
            f.module.is_none()
                && f.addr == 0
                && matches!(
                    f.function.as_deref(),
                    Some(NO_STACK_FRAME | SHORT_OFFCPU_FRAME)
                )
        };
        let key = match frames.as_slice() {
            [] => None,
            [only] if marker(only) => None,
            _ => Some(self.column.push(&frames)),
        };
        self.stacks.insert(i, key);
        Ok(key)
    }
}

/// Where in a request a profile or sample is, written out only for an error.
#[derive(Debug, Clone, Copy)]
struct Path {
    r: usize,
    s: usize,
    p: Option<usize>,
    i: Option<usize>,
}

impl Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "resource_profiles[{}].scope_profiles[{}]",
            self.r, self.s
        )?;
        if let Some(p) = self.p {
            write!(f, ".profiles[{p}]")?;
        }
        if let Some(i) = self.i {
            write!(f, ".samples[{i}]")?;
        }
        Ok(())
    }
}

/// The kind of rows a sample type gives, and what it is to that kind.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    /// The `value` of rows of this kind.
    Value(String),
    /// The event count of a registered kind.
    Count(&'static str),
}

fn role(name: &str, unit: &str) -> Role {
    for k in kinds::ALL {
        if k.value.name == name && k.value.unit.pprof() == unit {
            return Role::Value(k.name.to_string());
        }
        if let Some(c) = k.count
            && c.name == name
            && c.unit.pprof() == unit
        {
            return Role::Count(k.name);
        }
    }
    Role::Value(if name.is_empty() {
        "samples".to_string()
    } else {
        name.to_string()
    })
}

/// One event of a sample: its time and value.
fn events(
    s: &otlp::Sample,
    profile_time: u64,
    what: &dyn Display,
) -> Result<Vec<(u64, i64)>, Malformed> {
    match (s.values.len(), s.timestamps_unix_nano.len()) {
        (0, 0) => Err(Malformed::new(
            Cause::Shape,
            format!("{what} has neither values nor timestamps"),
        )),
        (0, _) => Ok(s.timestamps_unix_nano.iter().map(|&t| (t, 1)).collect()),
        (_, 0) => Ok(s.values.iter().map(|&v| (profile_time, v)).collect()),
        (v, t) if v == t => Ok(s
            .timestamps_unix_nano
            .iter()
            .copied()
            .zip(s.values.iter().copied())
            .collect()),
        (v, t) => Err(Malformed::new(
            Cause::Shape,
            format!("{what} has {v} values and {t} timestamps (the spec wants as many)"),
        )),
    }
}

/// A sample's identity (stack, attributes, link), to match a kind's count with its value.
type SampleKey = (i32, Vec<i32>, i32);

fn sample_key(s: &otlp::Sample) -> SampleKey {
    let mut a = s.attribute_indices.clone();
    a.sort_unstable();
    (s.stack_index, a, s.link_index)
}

/// Rows being built from one request.
struct Rows {
    schema: SchemaRef,
    builders: Vec<Option<Builder>>,
    by_name: HashMap<String, usize>,
    stacks: Vec<Option<u32>>,
    /// The row's values, column by column (reset per sample).
    current: Vec<Option<Val>>,
    n: usize,
}

impl Rows {
    fn new(schema: SchemaRef) -> Self {
        let builders: Vec<Option<Builder>> = schema
            .fields()
            .iter()
            .map(|f| {
                (f.name() != col::STACK)
                    .then(|| Builder::of(f.data_type()))
                    .flatten()
            })
            .collect();
        let by_name = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| builders[*i].is_some())
            .map(|(i, f)| (f.name().clone(), i))
            .collect();
        let current = vec![None; schema.fields().len()];
        Self {
            schema,
            builders,
            by_name,
            stacks: Vec::new(),
            current,
            n: 0,
        }
    }

    fn set(&mut self, name: &str, v: Option<Val>) {
        if let Some(&i) = self.by_name.get(name) {
            self.current[i] = v;
        }
    }

    fn push(&mut self, stack: Option<u32>) {
        for (b, v) in self.builders.iter_mut().zip(&self.current) {
            if let Some(b) = b {
                b.append(v.as_ref());
            }
        }
        self.stacks.push(stack);
        self.n += 1;
    }

    fn finish(self, column: StackColumn) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let mut stack = Some(column.column(self.stacks)?);
        let n = self.n;
        let columns: Vec<ArrayRef> = self
            .builders
            .into_iter()
            .zip(self.schema.fields())
            .map(|(b, f)| match b {
                Some(b) => b.finish(f.data_type()),
                None if f.name() == col::STACK => stack
                    .take()
                    .unwrap_or_else(|| arrow_array::new_null_array(f.data_type(), n)),
                // The raw stack columns and `args`: none in a profile.
                None => arrow_array::new_null_array(f.data_type(), n),
            })
            .collect();
        RecordBatch::try_new(self.schema, columns)
    }
}

/// Defaults of the non-nullable row columns an attribute may not give.
fn fill_required(current: &mut [Option<Val>], by_name: &HashMap<String, usize>) {
    let get =
        |current: &[Option<Val>], name: &str| by_name.get(name).and_then(|&i| current[i].clone());
    let set_default = |current: &mut [Option<Val>], name: &str, v: Val| {
        if let Some(&i) = by_name.get(name)
            && current[i].is_none()
        {
            current[i] = Some(v);
        }
    };
    set_default(current, col::PID, Val::Int(0));
    let pid = get(current, col::PID).unwrap_or(Val::Int(0));
    set_default(current, col::TID, pid);
    set_default(current, col::COMM, Val::Str(String::new()));
    let comm = get(current, col::COMM).unwrap_or(Val::Str(String::new()));
    set_default(current, col::THREAD, comm);
    set_default(current, col::CPU, Val::Int(-1));
}

/// The rows of `request`, or why it is refused. Nothing is returned for a refused request.
pub fn decode(
    request: &ExportProfilesServiceRequest,
    schema: &SchemaRef,
) -> Result<RecordBatch, Malformed> {
    let empty = otlp::ProfilesDictionary::default();
    let d = request.dictionary.as_ref().unwrap_or(&empty);
    let mut dict = Dictionary::new(d);
    let mut rows = Rows::new(Arc::clone(schema));
    let mut columns_of_keys: HashMap<i32, Option<usize>> = HashMap::new();
    for (r, rp) in request.resource_profiles.iter().enumerate() {
        let resource: Vec<(usize, Val)> = rp
            .resource
            .iter()
            .flat_map(|res| &res.attributes)
            .filter_map(|KeyValue { key, value, .. }| {
                let c = column_of(key, &rows.by_name)?;
                Some((c, Val::of(value.as_ref())?))
            })
            .collect();
        for (s, sp) in rp.scope_profiles.iter().enumerate() {
            let what = Path {
                r,
                s,
                p: None,
                i: None,
            };
            let types: Vec<Role> = sp
                .profiles
                .iter()
                .enumerate()
                .map(|(p, profile)| {
                    let t = profile.sample_type.unwrap_or_default();
                    let pw = Path { p: Some(p), ..what };
                    Ok(role(
                        dict.str(
                            t.type_strindex,
                            &format_args!("{pw}.sample_type.type_strindex"),
                        )?,
                        dict.str(
                            t.unit_strindex,
                            &format_args!("{pw}.sample_type.unit_strindex"),
                        )?,
                    ))
                })
                .collect::<Result<_, Malformed>>()?;
            for (p, profile) in sp.profiles.iter().enumerate() {
                let pw = Path { p: Some(p), ..what };
                let (kind, counts) = match &types[p] {
                    Role::Value(k) => {
                        // The kind's count profile in this scope, if any.
                        let count = types.iter().position(|t| *t == Role::Count(kind_name(k)));
                        let counts: HashMap<SampleKey, &otlp::Sample> = count
                            .map(|c| {
                                sp.profiles[c]
                                    .samples
                                    .iter()
                                    .map(|s| (sample_key(s), s))
                                    .collect()
                            })
                            .unwrap_or_default();
                        (k.clone(), Some(counts))
                    }
                    Role::Count(k) => {
                        if types.contains(&Role::Value(k.to_string())) {
                            continue; // read with its value profile
                        }
                        (k.to_string(), None)
                    }
                };
                // A count alone of CPU samples weighs the period each.
                let per_count = (counts.is_none() && kind == kind::PROFILE)
                    .then_some(profile.period)
                    .filter(|&p| p > 0);
                for (i, sample) in profile.samples.iter().enumerate() {
                    let sw = Path { i: Some(i), ..pw };
                    let stack = dict.stack(sample.stack_index)?;
                    rows.current.iter_mut().for_each(|v| *v = None);
                    for (c, v) in &resource {
                        rows.current[*c] = Some(v.clone());
                    }
                    for &a in &sample.attribute_indices {
                        let kv = dict.attribute(a, &format_args!("{sw}.attribute_indices"))?;
                        let c = match columns_of_keys.get(&kv.key_strindex) {
                            Some(&c) => c,
                            None => {
                                let key = dict.str(
                                    kv.key_strindex,
                                    &format_args!("attribute_table[{a}].key_strindex"),
                                )?;
                                let c = column_of(key, &rows.by_name);
                                columns_of_keys.insert(kv.key_strindex, c);
                                c
                            }
                        };
                        if let Some(c) = c {
                            rows.current[c] = Val::of(kv.value.as_ref());
                        }
                    }
                    if sample.link_index != 0 {
                        let link = usize::try_from(sample.link_index)
                            .ok()
                            .and_then(|u| d.link_table.get(u))
                            .ok_or_else(|| {
                                index_error(
                                    &format_args!("{sw}.link_index"),
                                    sample.link_index.into(),
                                    "link_table",
                                    d.link_table.len(),
                                )
                            })?;
                        let (trace, span) = link_ids(link, sample.link_index)?;
                        rows.set(col::TRACE_ID, Some(Val::Str(trace)));
                        rows.set(col::SPAN_ID, Some(Val::Int(span as i64)));
                    }
                    fill_required(&mut rows.current, &rows.by_name);
                    rows.set(col::KIND, Some(Val::Str(kind.clone())));
                    let evs = events(sample, profile.time_unix_nano, &sw)?;
                    let count_events = match &counts {
                        Some(c) => match c.get(&sample_key(sample)) {
                            Some(cs) => {
                                let ce = events(cs, profile.time_unix_nano, &sw)?;
                                (ce.len() == evs.len()).then_some(ce)
                            }
                            None => None,
                        },
                        None => None,
                    };
                    for (e, &(time, value)) in evs.iter().enumerate() {
                        rows.set(col::TIME, Some(Val::Int(time.min(i64::MAX as u64) as i64)));
                        let (value, count) = match (per_count, &count_events, &counts) {
                            (Some(period), _, _) => (value.saturating_mul(period), Some(value)),
                            (None, _, None) => (value, Some(value)),
                            (None, Some(ce), Some(_)) => (value, Some(ce[e].1)),
                            (None, None, Some(_)) => (value, None),
                        };
                        rows.set(col::VALUE, Some(Val::Int(value)));
                        rows.set(col::COUNT, count.map(Val::Int));
                        if duration_is_value(&kind) && stack.is_some() {
                            rows.set(col::DURATION, Some(Val::Int(value)));
                        }
                        rows.push(stack);
                    }
                }
            }
        }
    }
    let column = std::mem::take(&mut dict.column);
    rows.finish(column)
        .map_err(|e| Malformed::new(Cause::Shape, format!("the rows made are invalid: {e}")))
}

/// The registered name of kind `k` (a `'static` one to compare count roles with).
fn kind_name(k: &str) -> &'static str {
    kinds::get(k).map_or("", |k| k.name)
}

/// Kinds whose `value` is their `duration` (off-CPU intervals, wakeups, spans): their rows get
/// it back, so a `switch` row with a stack is an interval, not folded short ones.
fn duration_is_value(k: &str) -> bool {
    matches!(k, kind::SWITCH | kind::WAKE | kind::SPAN)
}

/// A link's trace id as 32 hex digits and its span id, checking their sizes.
fn link_ids(link: &otlp::Link, index: i32) -> Result<(String, u64), Malformed> {
    let trace: [u8; 16] = link.trace_id.as_slice().try_into().map_err(|_| {
        Malformed::new(
            Cause::Shape,
            format!(
                "link_table[{index}].trace_id has {} bytes, expected 16",
                link.trace_id.len()
            ),
        )
    })?;
    let span: [u8; 8] = link.span_id.as_slice().try_into().map_err(|_| {
        Malformed::new(
            Cause::Shape,
            format!(
                "link_table[{index}].span_id has {} bytes, expected 8",
                link.span_id.len()
            ),
        )
    })?;
    Ok((stacks_stream::hex::encode(&trace), u64::from_be_bytes(span)))
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
