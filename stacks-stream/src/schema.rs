//! Arrow schemas of the stacks stream family (raw and symbolized rows), column names and
//! stream metadata keys. `docs/format.md` is the prose version of this file.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};

use crate::ContractError;
use crate::table::{self, Column, ColumnType, Stage};

/// Version of the row schema. Bumped when a column changes meaning or type; adding a nullable
/// column does not bump it. Readers refuse streams with a newer major version. Version 2: the
/// stack columns may be dictionary-encoded ([`crate::dict`]); version 1 streams, whose stack
/// columns are plain lists, read the same.
pub const SCHEMA_VERSION: &str = "2";

/// Stream (schema) metadata keys.
pub mod meta {
    /// What every stacks key starts with: the keys other stores (Parquet key/value metadata)
    /// carry over.
    pub const PREFIX: &str = "stacks.";

    /// Row schema version, see [`super::SCHEMA_VERSION`].
    pub const SCHEMA_VERSION: &str = "stacks.schema_version";
    /// Which stage produced the stream: `raw`, `symbolized` or `query`.
    pub const STAGE: &str = "stacks.stage";
    /// Host name of the recording machine.
    pub const HOST: &str = "stacks.host";
    /// `uname -r` of the recording machine.
    pub const KERNEL_RELEASE: &str = "stacks.kernel_release";
    /// `/proc/sys/kernel/random/boot_id` at recording time.
    pub const BOOT_ID: &str = "stacks.boot_id";
    /// The event specification the recorder ran with (`-e`), normalized.
    pub const EVENTS: &str = "stacks.events";
    /// `<tool> <version>` of the recorder.
    pub const TOOL_VERSION: &str = "stacks.tool_version";
    /// How the `time` column was derived.
    pub const CLOCK: &str = "stacks.clock";
    /// Recording start, ns since the Unix epoch.
    pub const START_NS: &str = "stacks.start_ns";
    /// The recording host's vDSO image (the kernel's, in every process), as lowercase hex:
    /// user frames in it name module `[vdso]` and its build id, and stacks-symbolize reads
    /// their functions from it.
    pub const VDSO: &str = "stacks.vdso";
    /// Tools the stream passed through, comma-separated (`stacks-record 0.1.0,stacks-symbolize 0.1.0`).
    pub const TOOLS: &str = "stacks.tools";
    /// The value column a profile of this stream opens on (pprof's default sample type): set
    /// by stacks-query from a query's `-- default-value:` line, e.g. `bytes` for `vfs-write`.
    pub const DEFAULT_VALUE: &str = "stacks.default_value";

    /// The recording facts a profile or a trace shows, by the name it shows them under: the
    /// comments of stacks-pprof's and stacks-otlp's profiles, the `otherData` of
    /// stacks-trace's JSON.
    pub const SHOWN: &[(&str, &str)] = &[
        ("host", HOST),
        ("kernel", KERNEL_RELEASE),
        ("events", EVENTS),
        ("tools", TOOLS),
    ];

    /// Whether `key` is a stacks key ([`PREFIX`]): what stacks-pack and stacks-query carry
    /// from a stream into Parquet key/value metadata and back.
    pub fn is_stacks_key(key: &str) -> bool {
        key.starts_with(PREFIX)
    }
}

/// Stage names used in [`meta::STAGE`].
pub mod stage {
    pub const RAW: &str = "raw";
    pub const SYMBOLIZED: &str = "symbolized";
    pub const QUERY: &str = "query";
}

pub use crate::table::col;

/// Field names inside `kstack_symbols` elements (kernel symbols resolved at record time).
pub mod ksym {
    pub const SYMBOL: &str = "symbol";
    pub const OFFSET: &str = "offset";
    pub const MODULE: &str = "module";
}

/// Field names inside `ustack` elements.
pub mod uframe {
    pub const ADDR: &str = "addr";
    pub const MODULE: &str = "module";
    pub const BUILD_ID: &str = "build_id";
    pub const OFFSET: &str = "offset";
    pub const ERROR: &str = "error";
    /// The name the process published for JIT code (a perf map).
    pub const SYMBOL: &str = "symbol";
    /// An interpreted frame's source file (a Python frame's `co_filename`).
    pub const FILE: &str = "file";
    /// An interpreted frame's source line.
    pub const LINE: &str = "line";
}

/// Field names inside `stack` elements (symbolized frames).
pub mod frame {
    pub const FUNCTION: &str = "function";
    pub const FILE: &str = "file";
    pub const LINE: &str = "line";
    pub const COLUMN: &str = "column";
    pub const INLINED: &str = "inlined";
    pub const KERNEL: &str = "kernel";
    pub const MODULE: &str = "module";
    pub const BUILD_ID: &str = "build_id";
    pub const OFFSET: &str = "offset";
    pub const ADDR: &str = "addr";
    pub const ERROR: &str = "error";
    pub const SYMBOL: &str = "symbol";
    /// Why the frame is unresolved, one of [`crate::Unresolved`]: `error` says it in words.
    pub const REASON: &str = "reason";
    /// Not a stream field: the column of a store's frames file holding the frame's name as
    /// folded stacks show it ([`crate::frames::folded_name`], the one naming rule), so that
    /// readers of the store only join names. Frames files written before it lack it; readers
    /// name their frames then. Assembled frames carrying it are shown by it.
    pub const NAME: &str = "name";
}

/// Type of the `time` column: wall-clock nanoseconds, UTC.
pub fn time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

/// Element type of the `kstack` column.
pub fn kstack_type() -> DataType {
    DataType::List(Arc::new(Field::new("addr", DataType::UInt64, false)))
}

/// Fields of one `kstack_symbols` element: the kallsyms symbol containing the kernel address at
/// the same position in `kstack`, the address's offset into it, and the kernel module (null for
/// the core kernel). The whole element is null when the address was not in kallsyms.
pub(crate) fn ksym_fields() -> Fields {
    Fields::from(vec![
        Field::new(ksym::SYMBOL, DataType::Utf8, false),
        Field::new(ksym::OFFSET, DataType::UInt64, false),
        Field::new(ksym::MODULE, DataType::Utf8, true),
    ])
}

/// Type of the `kstack_symbols` column.
pub fn kstack_symbols_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "symbol",
        DataType::Struct(ksym_fields()),
        true,
    )))
}

/// Fields of one raw user frame.
pub(crate) fn uframe_fields() -> Fields {
    Fields::from(vec![
        Field::new(uframe::ADDR, DataType::UInt64, false),
        Field::new(uframe::MODULE, DataType::Utf8, true),
        Field::new(uframe::BUILD_ID, DataType::Utf8, true),
        Field::new(uframe::OFFSET, DataType::UInt64, true),
        Field::new(uframe::ERROR, DataType::Utf8, true),
        Field::new(uframe::SYMBOL, DataType::Utf8, true),
        Field::new(uframe::FILE, DataType::Utf8, true),
        Field::new(uframe::LINE, DataType::UInt32, true),
    ])
}

/// Type of the `ustack` column.
pub fn ustack_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "frame",
        DataType::Struct(uframe_fields()),
        false,
    )))
}

/// Fields of one symbolized frame.
pub fn frame_fields() -> Fields {
    Fields::from(vec![
        Field::new(frame::FUNCTION, DataType::Utf8, true),
        Field::new(frame::FILE, DataType::Utf8, true),
        Field::new(frame::LINE, DataType::UInt32, true),
        Field::new(frame::COLUMN, DataType::UInt32, true),
        Field::new(frame::INLINED, DataType::Boolean, false),
        Field::new(frame::KERNEL, DataType::Boolean, false),
        Field::new(frame::MODULE, DataType::Utf8, true),
        Field::new(frame::BUILD_ID, DataType::Utf8, true),
        Field::new(frame::OFFSET, DataType::UInt64, true),
        Field::new(frame::ADDR, DataType::UInt64, false),
        Field::new(frame::ERROR, DataType::Utf8, true),
        Field::new(frame::SYMBOL, DataType::Utf8, true),
        Field::new(frame::REASON, DataType::Utf8, true),
    ])
}

/// Type of the `stack` column.
pub fn stack_type() -> DataType {
    DataType::List(Arc::new(Field::new(
        "frame",
        DataType::Struct(frame_fields()),
        false,
    )))
}

/// The raw row columns, in order.
pub fn raw_fields() -> Vec<Field> {
    table::of_stage(Stage::Raw).map(Column::field).collect()
}

impl Column {
    /// The column as a schema field.
    pub fn field(&self) -> Field {
        Field::new(self.name, self.ty.data_type(), self.nullable)
    }
}

impl ColumnType {
    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnType::Time => time_type(),
            ColumnType::Utf8 => DataType::Utf8,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::UInt64 => DataType::UInt64,
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::KStack => kstack_type(),
            ColumnType::UStack => ustack_type(),
            ColumnType::KStackSymbols => kstack_symbols_type(),
            ColumnType::Args => args_type(),
            ColumnType::Stack => stack_type(),
            ColumnType::StackId => stack_id_type(),
        }
    }
}

/// Type of the `args` column: a probe's arguments, as the registers or tracepoint fields held
/// them (64-bit integers; pointers and unsigned values wrap).
pub fn args_type() -> DataType {
    DataType::List(Arc::new(Field::new("arg", DataType::Int64, false)))
}

/// `state` values: how a thread left the CPU (`switch`), or what it was doing (`state` rows).
pub mod state {
    /// On a CPU (only `state` rows).
    pub const RUNNING: &str = "running";
    /// Preempted or yielded: it could have kept running (waiting for a CPU); for `state` rows,
    /// ready to run but not on a CPU.
    pub const RUNNABLE: &str = "runnable";
    /// Interruptible sleep (S): waiting for an event, a timer, a lock, input.
    pub const SLEEPING: &str = "sleeping";
    /// Uninterruptible sleep (D): usually waiting for IO.
    pub const UNINTERRUPTIBLE: &str = "uninterruptible";
    /// An idle kernel worker's wait (TASK_IDLE).
    pub const IDLE: &str = "idle";
    /// Stopped or traced.
    pub const STOPPED: &str = "stopped";
    /// Anything else (e.g. exiting).
    pub const OTHER: &str = "other";
}

/// Schema of a raw stream (what `stacks-record` writes).
pub fn raw_schema(metadata: HashMap<String, String>) -> Schema {
    Schema::new_with_metadata(raw_fields(), metadata)
}

/// Schema of a symbolized stream: the raw columns plus `stack`.
pub fn symbolized_schema(metadata: HashMap<String, String>) -> Schema {
    let mut fields = raw_fields();
    fields.extend(table::of_stage(Stage::Symbolized).map(Column::field));
    Schema::new_with_metadata(fields, metadata)
}

/// Build a batch of `schema` from columns given by name; nullable columns not given are all
/// null. For fixtures and converters that only know some of the columns.
pub fn batch_by_name(
    schema: arrow_schema::SchemaRef,
    rows: usize,
    columns: Vec<(&str, arrow_array::ArrayRef)>,
) -> Result<arrow_array::RecordBatch, arrow_schema::ArrowError> {
    let mut by_name: HashMap<&str, arrow_array::ArrayRef> = columns.into_iter().collect();
    let arrays = schema
        .fields()
        .iter()
        .map(|f| {
            by_name
                .remove(f.name().as_str())
                .unwrap_or_else(|| arrow_array::new_null_array(f.data_type(), rows))
        })
        .collect();
    if let Some(extra) = by_name.keys().next() {
        return Err(arrow_schema::ArrowError::SchemaError(format!(
            "column `{extra}` is not in the schema"
        )));
    }
    arrow_array::RecordBatch::try_new(schema, arrays)
}

/// Append `tool` to the `stacks.tools` provenance list and set the stage.
pub fn stamp(metadata: &mut HashMap<String, String>, tool: &str, version: &str, stage: &str) {
    let entry = format!("{tool} {version}");
    let tools = match metadata.get(meta::TOOLS) {
        Some(t) if !t.is_empty() => format!("{t},{entry}"),
        _ => entry,
    };
    metadata.insert(meta::TOOLS.into(), tools);
    metadata.insert(meta::STAGE.into(), stage.into());
    metadata
        .entry(meta::SCHEMA_VERSION.into())
        .or_insert_with(|| SCHEMA_VERSION.into());
}

/// Refuse a stream written with a newer schema version than this build understands.
pub fn check_version(schema: &Schema, input: &str) -> Result<(), ContractError> {
    if let Some(v) = schema.metadata().get(meta::SCHEMA_VERSION) {
        let major = |s: &str| s.split('.').next().and_then(|m| m.parse::<u32>().ok());
        match (major(v), major(SCHEMA_VERSION)) {
            (Some(found), Some(ours)) if found <= ours => {}
            _ => {
                return Err(ContractError::NewerVersion {
                    input: input.into(),
                    found: v.clone(),
                    supported: SCHEMA_VERSION.into(),
                });
            }
        }
    }
    Ok(())
}

/// Refuse a schema that is not a stacks row stream (what stacks-record or stacks-symbolize
/// writes, and what a store holds): it must carry [`meta::SCHEMA_VERSION`] from a version this
/// build reads, a row [`meta::STAGE`] (raw or symbolized, not a query result), every
/// non-nullable row column, and every row column it has with its contract type.
pub fn check_row_stream(schema: &Schema, input: &str) -> Result<(), ContractError> {
    let not = |detail: String| ContractError::NotStacks {
        input: input.into(),
        detail,
    };
    let md = schema.metadata();
    if !md.contains_key(meta::SCHEMA_VERSION) {
        return Err(not(format!(
            "no `{}` metadata (write rows with stacks-record, stacks-symbolize or stacks-query              --format arrow over a store)",
            meta::SCHEMA_VERSION
        )));
    }
    check_version(schema, input)?;
    match md.get(meta::STAGE).map(String::as_str) {
        Some(stage::RAW | stage::SYMBOLIZED) => {}
        Some(other) => {
            return Err(not(format!(
                "its stage is `{other}`, not `{}` or `{}` rows (save a query result with                  stacks-query --format parquet instead)",
                stage::RAW,
                stage::SYMBOLIZED
            )));
        }
        None => return Err(not(format!("no `{}` metadata", meta::STAGE))),
    }
    check_row_columns(schema, input)
}

/// The column part of [`check_row_stream`]: every non-nullable row column present, and every
/// row column present with its contract type (nullability and list element names aside).
/// For stored files, which other writers may have made without the stream metadata.
pub fn check_row_columns(schema: &Schema, input: &str) -> Result<(), ContractError> {
    let mut contract = raw_fields();
    contract.push(Field::new(col::STACK, stack_type(), true));
    contract.push(Field::new(col::STACK_ID, stack_id_type(), true));
    for field in &contract {
        match schema.index_of(field.name()) {
            Ok(i) => {
                let found = schema.field(i).data_type();
                let ok = if field.name() == col::STACK {
                    is_stack_type(found)
                } else {
                    types_match(found, field.data_type())
                };
                if !ok {
                    return Err(ContractError::WrongType {
                        input: input.into(),
                        column: field.name().clone(),
                        found: found.to_string(),
                        expected: field.data_type().to_string(),
                    });
                }
            }
            Err(_) if !field.is_nullable() => {
                return Err(ContractError::MissingColumn {
                    input: input.into(),
                    column: field.name().clone(),
                    why: "every stacks row has it".into(),
                });
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// Require that `schema` has `column` of exactly type `expected`; `why` says what needs it.
pub fn require_column(
    schema: &Schema,
    input: &str,
    column: &str,
    expected: &DataType,
    why: &str,
) -> Result<usize, ContractError> {
    let idx = schema
        .index_of(column)
        .map_err(|_| ContractError::MissingColumn {
            input: input.into(),
            column: column.into(),
            why: why.into(),
        })?;
    let found = schema.field(idx).data_type();
    if !types_match(found, expected) {
        return Err(ContractError::WrongType {
            input: input.into(),
            column: column.into(),
            found: found.to_string(),
            expected: expected.to_string(),
        });
    }
    Ok(idx)
}

/// Structural type equality that ignores nullability and list element names, which differ
/// between writers (Parquet round trips rename list elements to `item` or `element`).
pub(crate) fn types_match(a: &DataType, b: &DataType) -> bool {
    use DataType::*;
    match (a, b) {
        // A dictionary-encoded column holds values of its value type.
        (Dictionary(_, x), y) | (y, Dictionary(_, x)) => types_match(x, y),
        (List(x), List(y)) | (LargeList(x), LargeList(y)) => {
            types_match(x.data_type(), y.data_type())
        }
        (Struct(x), Struct(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(f, g)| f.name() == g.name() && types_match(f.data_type(), g.data_type()))
        }
        (Timestamp(u1, _), Timestamp(u2, _)) => u1 == u2,
        _ => a == b,
    }
}

/// Type of the `stack_id` column stacks-pack adds: a 128-bit stack fingerprint.
pub fn stack_id_type() -> DataType {
    DataType::FixedSizeBinary(16)
}

/// Whether `dt` is a symbolized stack: a list of structs with at least a `function` field
/// (plain, or dictionary-encoded).
pub fn is_stack_type(dt: &DataType) -> bool {
    match value_type(dt) {
        DataType::List(f) | DataType::LargeList(f) => match f.data_type() {
            DataType::Struct(fields) => fields.iter().any(|f| f.name() == frame::FUNCTION),
            _ => false,
        },
        _ => false,
    }
}

/// The value type of a column type: the dictionary's values, else the type itself.
pub fn value_type(dt: &DataType) -> &DataType {
    match dt {
        DataType::Dictionary(_, v) => v,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolized_extends_raw() {
        let raw = raw_schema(HashMap::new());
        let sym = symbolized_schema(HashMap::new());
        assert_eq!(sym.fields().len(), raw.fields().len() + 1);
        for (a, b) in raw.fields().iter().zip(sym.fields().iter()) {
            assert_eq!(a, b);
        }
        assert!(is_stack_type(
            sym.field_with_name(col::STACK).unwrap().data_type()
        ));
        assert!(!is_stack_type(&kstack_type()));
    }

    #[test]
    fn list_element_names_do_not_matter() {
        let renamed = DataType::List(Arc::new(Field::new(
            "element",
            DataType::Struct(frame_fields()),
            true,
        )));
        assert!(types_match(&renamed, &stack_type()));
        assert!(!types_match(&kstack_type(), &stack_type()));
    }

    #[test]
    fn newer_version_refused() {
        let mut m = HashMap::new();
        m.insert(meta::SCHEMA_VERSION.to_string(), "99".to_string());
        let err = check_version(&raw_schema(m), "stdin").unwrap_err();
        assert!(err.to_string().contains("99"), "{err}");
        let mut m = HashMap::new();
        stamp(&mut m, "t", "1", stage::RAW);
        check_version(&raw_schema(m), "stdin").unwrap();
    }

    #[test]
    fn stamp_appends_tools() {
        let mut m = HashMap::new();
        stamp(&mut m, "stacks-record", "0.1.0", stage::RAW);
        stamp(&mut m, "stacks-symbolize", "0.1.0", stage::SYMBOLIZED);
        assert_eq!(m[meta::TOOLS], "stacks-record 0.1.0,stacks-symbolize 0.1.0");
        assert_eq!(m[meta::STAGE], stage::SYMBOLIZED);
    }
}
