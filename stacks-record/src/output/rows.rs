//! Builds raw-schema Arrow record batches from decoded events, the stack columns
//! dictionary-encoded (each row a key into the recording's [`StackTable`]).

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampNanosecondBuilder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};
use stacks_stream::col;
use stacks_stream::table::{self, ColumnType, Stage};

use crate::output::stack_table::{Renumbered, StackRef, StackTable};

/// One output row before it is appended.
pub(crate) struct Row<'a> {
    pub time_ns: i64,
    pub kind: &'a str,
    pub pid: i32,
    pub tid: i32,
    pub comm: &'a str,
    pub thread: &'a str,
    /// The thread's cgroup path; `None` when not known.
    pub cgroup: Option<&'a str>,
    pub cpu: i32,
    pub value: i64,
    /// The row's stacks (keys from [`RowBuilder::stacks`]); default: none.
    pub stacks: StackRef,
    /// When a stack could not be captured: the negative errno.
    pub kstack_error: Option<i32>,
    pub ustack_error: Option<i32>,
    /// How the user stack was unwound: `fp`, `dwarf` or `dwarf+fp`; `None`: no user stack.
    pub ustack_unwind: Option<&'static str>,
    /// Whether the user stack ends before its root; `None`: not known.
    pub ustack_truncated: Option<bool>,
    pub extra: Extra,
}

/// The kind-specific columns (all nullable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    pub duration: Option<i64>,
    pub count: Option<i64>,
    pub state: Option<&'static str>,
    pub waker: Option<i32>,
    pub wakee: Option<i32>,
    /// `state`: the switch-out of the off-CPU interval the thread is in (ns, the recording's
    /// clock, as `time`).
    pub offcpu_since: Option<i64>,
    pub op: Option<&'static str>,
    pub syscall: Option<&'static str>,
    pub fd: Option<i32>,
    pub path: Option<String>,
    pub dev: Option<String>,
    pub protocol: Option<&'static str>,
    /// Shared text: the converter formats each socket address once.
    pub local: Option<std::rc::Rc<str>>,
    pub remote: Option<std::rc::Rc<str>>,
    pub rss: Option<i64>,
    pub child: Option<i32>,
    pub errno: Option<i32>,
    pub exit_code: Option<i32>,
    pub cause: Option<String>,
    /// A probe's name (shared: one text per probe).
    pub probe: Option<std::rc::Rc<str>>,
    pub args: Option<Vec<i64>>,
    /// `uring`: how the request ran.
    pub mode: Option<&'static str>,
    /// `block`: the io_uring submitter an io-wq worker issued the request for.
    pub submitter: Option<i32>,
    /// The `tracing` span the thread was in (tracing-stacks).
    pub span: Option<crate::process::spans::SpanLabel>,
    /// The asyncio task the thread ran (CPython 3.14+).
    pub task: Option<crate::process::python::TaskLabel>,
}

/// Accumulates rows column by column: one builder per raw column of the column table
/// (`stacks_stream::table`), in its order, of its type.
pub(crate) struct RowBuilder {
    schema: SchemaRef,
    /// The recording host (the stream's `stacks.host`), on every row.
    host: Option<String>,
    stacks: StackTable,
    refs: Vec<StackRef>,
    columns: Vec<(&'static str, Builder)>,
    rows: usize,
}

/// The builder of one column, by its type in the column table.
enum Builder {
    Time(TimestampNanosecondBuilder),
    Utf8(StringBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    UInt64(UInt64Builder),
    Boolean(BooleanBuilder),
    Args(ListBuilder<Int64Builder>),
    /// A stack column: its keys are the rows' [`StackRef`]s, its dictionary the stack table.
    Stack,
}

impl Builder {
    fn new(ty: ColumnType) -> Self {
        match ty {
            ColumnType::Time => {
                Builder::Time(TimestampNanosecondBuilder::new().with_timezone("UTC"))
            }
            ColumnType::Utf8 => Builder::Utf8(StringBuilder::new()),
            ColumnType::Int32 => Builder::Int32(Int32Builder::new()),
            ColumnType::Int64 => Builder::Int64(Int64Builder::new()),
            ColumnType::UInt64 => Builder::UInt64(UInt64Builder::new()),
            ColumnType::Boolean => Builder::Boolean(BooleanBuilder::new()),
            ColumnType::Args => Builder::Args(args_builder()),
            ColumnType::KStack
            | ColumnType::UStack
            | ColumnType::KStackSymbols
            | ColumnType::Stack
            | ColumnType::StackId => Builder::Stack,
        }
    }

    fn finish(&mut self) -> Option<ArrayRef> {
        Some(match self {
            Builder::Time(b) => Arc::new(b.finish()),
            Builder::Utf8(b) => Arc::new(b.finish()),
            Builder::Int32(b) => Arc::new(b.finish()),
            Builder::Int64(b) => Arc::new(b.finish()),
            Builder::UInt64(b) => Arc::new(b.finish()),
            Builder::Boolean(b) => Arc::new(b.finish()),
            Builder::Args(b) => Arc::new(b.finish()),
            Builder::Stack => return None,
        })
    }
}

/// Appends one row's values to the builders, column after column in the table's order.
struct Writer<'a> {
    columns: &'a mut [(&'static str, Builder)],
    at: usize,
}

impl Writer<'_> {
    /// The builder of the next column, which must be `name`.
    fn next(&mut self, name: &str) -> &mut Builder {
        let (column, b) = &mut self.columns[self.at];
        debug_assert_eq!(
            *column, name,
            "Row::write is out of the column table's order"
        );
        self.at += 1;
        b
    }

    fn time(&mut self, name: &str, ns: i64) {
        if let Builder::Time(b) = self.next(name) {
            b.append_value(ns);
        }
    }

    fn time_opt(&mut self, name: &str, ns: Option<i64>) {
        if let Builder::Time(b) = self.next(name) {
            b.append_option(ns);
        }
    }

    fn str(&mut self, name: &str, v: Option<&str>) {
        if let Builder::Utf8(b) = self.next(name) {
            b.append_option(v);
        }
    }

    fn i32(&mut self, name: &str, v: Option<i32>) {
        if let Builder::Int32(b) = self.next(name) {
            b.append_option(v);
        }
    }

    fn i64(&mut self, name: &str, v: Option<i64>) {
        if let Builder::Int64(b) = self.next(name) {
            b.append_option(v);
        }
    }

    fn u64(&mut self, name: &str, v: Option<u64>) {
        if let Builder::UInt64(b) = self.next(name) {
            b.append_option(v);
        }
    }

    fn bool(&mut self, name: &str, v: Option<bool>) {
        if let Builder::Boolean(b) = self.next(name) {
            b.append_option(v);
        }
    }

    fn args(&mut self, name: &str, v: Option<&[i64]>) {
        if let Builder::Args(b) = self.next(name) {
            match v {
                Some(args) => {
                    b.values().append_slice(args);
                    b.append(true);
                }
                None => b.append_null(),
            }
        }
    }

    /// A stack column: written at finish from the rows' stack keys.
    fn stack(&mut self, name: &str) {
        self.next(name);
    }
}

impl Row<'_> {
    /// Its values, column by column in the column table's order.
    fn write(&self, w: &mut Writer<'_>, host: Option<&str>) {
        let x = &self.extra;
        let span = x.span.as_ref();
        w.time(col::TIME, self.time_ns);
        w.str(col::KIND, Some(self.kind));
        w.i32(col::PID, Some(self.pid));
        w.i32(col::TID, Some(self.tid));
        w.str(col::COMM, Some(self.comm));
        w.str(col::THREAD, Some(self.thread));
        w.str(col::HOST, host);
        w.str(col::CGROUP, self.cgroup);
        w.u64(col::SPAN_ID, span.map(|s| s.id));
        w.u64(col::PARENT_SPAN_ID, span.and_then(|s| s.parent));
        w.str(col::SPAN_NAME, span.and_then(|s| s.name.as_deref()));
        w.str(col::TRACE_ID, span.map(|s| &*s.trace_id));
        w.str(col::TASK, x.task.as_ref().map(|t| &*t.name));
        w.str(col::TASK_CHAIN, x.task.as_ref().map(|t| &*t.chain));
        w.i32(col::CPU, Some(self.cpu));
        w.i64(col::VALUE, Some(self.value));
        w.stack(col::KSTACK);
        w.i32(col::KSTACK_ERROR, self.kstack_error);
        w.stack(col::USTACK);
        w.i32(col::USTACK_ERROR, self.ustack_error);
        w.str(col::USTACK_UNWIND, self.ustack_unwind);
        w.bool(col::USTACK_TRUNCATED, self.ustack_truncated);
        w.stack(col::KSTACK_SYMBOLS);
        w.i64(col::DURATION, x.duration);
        w.i64(col::COUNT, x.count);
        w.str(col::STATE, x.state);
        w.i32(col::WAKER, x.waker);
        w.i32(col::WAKEE, x.wakee);
        w.time_opt(col::OFFCPU_SINCE, x.offcpu_since);
        w.str(col::OP, x.op);
        w.str(col::SYSCALL, x.syscall);
        w.i32(col::FD, x.fd);
        w.str(col::PATH, x.path.as_deref());
        w.str(col::DEV, x.dev.as_deref());
        w.str(col::PROTOCOL, x.protocol);
        w.str(col::LOCAL, x.local.as_deref());
        w.str(col::REMOTE, x.remote.as_deref());
        w.i64(col::RSS, x.rss);
        w.i32(col::CHILD, x.child);
        w.i32(col::ERRNO, x.errno);
        w.i32(col::EXIT_CODE, x.exit_code);
        w.str(col::CAUSE, x.cause.as_deref());
        w.str(col::PROBE, x.probe.as_deref());
        w.args(col::ARGS, x.args.as_deref());
        w.str(col::MODE, x.mode);
        w.i32(col::SUBMITTER, x.submitter);
    }
}

impl RowBuilder {
    /// A builder of batches of the raw schema `schema` with its stack columns
    /// dictionary-encoded ([`Self::schema`]).
    pub(crate) fn new(schema: SchemaRef) -> Result<Self, ArrowError> {
        let schema = Arc::new(stacks_stream::dict::encoded_schema(&schema));
        Ok(Self {
            stacks: StackTable::new(&schema)?,
            refs: Vec::new(),
            host: schema.metadata().get(stacks_stream::meta::HOST).cloned(),
            columns: table::of_stage(Stage::Raw)
                .map(|c| (c.name, Builder::new(c.ty)))
                .collect(),
            rows: 0,
            schema,
        })
    }

    /// The schema of the batches: the raw schema, stack columns dictionary-encoded.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Distinct captured stacks so far (entries of each stack dictionary).
    pub(crate) fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// The recording's captured stacks, for the keys of the rows pushed.
    pub(crate) fn stacks(&mut self) -> &mut StackTable {
        &mut self.stacks
    }

    pub(crate) fn len(&self) -> usize {
        self.rows
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub(crate) fn push(&mut self, r: &Row<'_>) {
        let mut w = Writer {
            columns: &mut self.columns,
            at: 0,
        };
        r.write(&mut w, self.host.as_deref());
        debug_assert_eq!(w.at, self.columns.len(), "Row::write misses columns");
        self.refs.push(r.stacks);
        self.rows += 1;
    }

    /// Take the accumulated rows as a batch (the builder is left empty; the stack
    /// dictionaries keep every entry, so later batches only add to them).
    #[cfg(test)]
    pub(crate) fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        Ok(self.finish_pinned(&[])?.0)
    }

    /// As [`Self::finish`]; when the stack dictionaries start over, they keep the entries of
    /// `pinned` too, and the new key of each kept entry is returned (see
    /// [`StackTable::columns_pinned`]).
    pub(crate) fn finish_pinned(
        &mut self,
        pinned: &[i32],
    ) -> Result<(RecordBatch, Option<Renumbered>), ArrowError> {
        stacks_stream::sys::release_free_memory_now_and_then();
        let n = self.rows;
        let (stacks, renumbered) = self.stacks.columns_pinned(&self.refs, pinned)?;
        self.refs.clear();
        let mut columns: Vec<(&str, ArrayRef)> = stacks.into_iter().collect();
        for (name, b) in &mut self.columns {
            if let Some(array) = b.finish() {
                columns.push((*name, array));
            }
        }
        self.rows = 0;
        let batch = stacks_stream::batch_by_name(self.schema.clone(), n, columns)?;
        Ok((batch, renumbered))
    }
}

/// A builder of the `args` column (its element field as the schema names it).
fn args_builder() -> ListBuilder<Int64Builder> {
    let arrow_schema::DataType::List(field) = stacks_stream::args_type() else {
        unreachable!("args is a list")
    };
    ListBuilder::new(Int64Builder::new()).with_field(field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::stack_table::NewStack;
    use crate::process::kallsyms::KernelSymbol;
    use crate::process::normalize::UserFrame;
    use arrow_array::Array;
    use arrow_schema::DataType;
    use std::collections::HashMap;

    #[test]
    fn builds_raw_schema_batches() {
        let raw = stacks_stream::raw_schema(HashMap::new());
        let mut b = RowBuilder::new(Arc::new(raw.clone())).unwrap();
        assert_eq!(
            **b.schema(),
            stacks_stream::dict::encoded_schema(&raw),
            "the raw schema, stacks encoded"
        );
        let uf = vec![UserFrame {
            addr: 0x1000,
            module: Some("/bin/x".into()),
            build_id: Some("abcd".into()),
            offset: Some(0x10),
            error: None,
            symbol: None,
            file: None,
            line: None,
        }];
        let ks = vec![
            Some(KernelSymbol {
                symbol: "vfs_read".into(),
                offset: 4,
                module: None,
            }),
            None,
            Some(KernelSymbol {
                symbol: "ext4_x".into(),
                offset: 0,
                module: Some("ext4".into()),
            }),
        ];
        let stacks = b
            .stacks()
            .key(Some(Ok(&[1, 2, 3])), Some(Ok(&[0])), || NewStack {
                kstack: Some(vec![1, 2, 3]),
                ustack: Some(uf.clone()),
                kstack_symbols: Some(ks.clone()),
            });
        b.push(&Row {
            time_ns: 1,
            kind: "profile",
            pid: 1,
            tid: 2,
            comm: "a",
            thread: "b",
            cgroup: Some("/app.slice"),
            cpu: 0,
            value: 10,
            stacks,
            kstack_error: None,
            ustack_error: None,
            ustack_unwind: None,
            ustack_truncated: None,
            extra: Extra {
                duration: Some(5),
                state: Some("sleeping"),
                ..Extra::default()
            },
        });
        let failed = b.stacks().key(None, Some(Err(-14)), || NewStack {
            ustack: Some(vec![]),
            ..NewStack::default()
        });
        b.push(&Row {
            time_ns: 2,
            kind: "profile",
            pid: 1,
            tid: 2,
            comm: "a",
            thread: "b",
            cgroup: None,
            cpu: 1,
            value: 10,
            stacks: failed,
            kstack_error: None,
            ustack_error: Some(-14),
            ustack_unwind: None,
            ustack_truncated: None,
            extra: Extra::default(),
        });
        let batch = b.finish().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(&batch.schema(), b.schema());
        let k = batch.column_by_name("kstack").unwrap();
        assert!(matches!(k.data_type(), DataType::Dictionary(..)));
        assert!(k.is_valid(0) && k.logical_nulls().unwrap().is_null(1));
        let u = batch.column_by_name("ustack").unwrap();
        assert!(u.logical_nulls().is_none_or(|n| n.null_count() == 0));
        let ue = batch.column_by_name("ustack_error").unwrap();
        assert!(ue.is_null(0) && ue.is_valid(1));
        let d = batch.column_by_name("duration").unwrap();
        assert!(d.is_valid(0) && d.is_null(1));
        let k = batch.column_by_name("kstack_symbols").unwrap();
        assert!(k.is_valid(0) && k.logical_nulls().unwrap().is_null(1));
        assert!(b.is_empty());
        assert_eq!(b.distinct_stacks(), 2);
    }
}
