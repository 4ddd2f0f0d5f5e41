//! Builds raw-schema Arrow record batches from decoded events, the stack columns
//! dictionary-encoded (each row a key into the recording's [`StackTable`]).

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampNanosecondBuilder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, SchemaRef};

use crate::output::stack_table::{StackRef, StackTable};

/// One output row before it is appended.
pub struct Row<'a> {
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
pub struct Extra {
    pub duration: Option<i64>,
    pub count: Option<i64>,
    pub state: Option<&'static str>,
    pub waker: Option<i32>,
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
    /// The `tracing` span the thread was in (tracing-stacks).
    pub span: Option<crate::process::spans::SpanLabel>,
}

/// Accumulates rows column by column.
pub struct RowBuilder {
    schema: SchemaRef,
    time: TimestampNanosecondBuilder,
    kind: StringBuilder,
    pid: Int32Builder,
    tid: Int32Builder,
    comm: StringBuilder,
    thread: StringBuilder,
    /// The recording host (the stream's `stacks.host`), on every row.
    host: Option<String>,
    host_col: StringBuilder,
    cgroup: StringBuilder,
    cpu: Int32Builder,
    value: Int64Builder,
    stacks: StackTable,
    refs: Vec<StackRef>,
    kstack_error: Int32Builder,
    ustack_error: Int32Builder,
    ustack_unwind: StringBuilder,
    ustack_truncated: BooleanBuilder,
    duration: Int64Builder,
    count: Int64Builder,
    state: StringBuilder,
    waker: Int32Builder,
    op: StringBuilder,
    syscall: StringBuilder,
    fd: Int32Builder,
    path: StringBuilder,
    dev: StringBuilder,
    protocol: StringBuilder,
    local: StringBuilder,
    remote: StringBuilder,
    rss: Int64Builder,
    child: Int32Builder,
    errno: Int32Builder,
    exit_code: Int32Builder,
    cause: StringBuilder,
    probe: StringBuilder,
    args: ListBuilder<Int64Builder>,
    span_id: UInt64Builder,
    parent_span_id: UInt64Builder,
    span_name: StringBuilder,
    trace_id: StringBuilder,
    rows: usize,
}

impl RowBuilder {
    /// A builder of batches of the raw schema `schema` with its stack columns
    /// dictionary-encoded ([`Self::schema`]).
    pub fn new(schema: SchemaRef) -> Result<Self, ArrowError> {
        let schema = Arc::new(stacks_stream::dict::encoded_schema(&schema));
        Ok(Self {
            stacks: StackTable::new(&schema)?,
            refs: Vec::new(),
            time: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            kind: StringBuilder::new(),
            pid: Int32Builder::new(),
            tid: Int32Builder::new(),
            comm: StringBuilder::new(),
            thread: StringBuilder::new(),
            host: schema.metadata().get(stacks_stream::meta::HOST).cloned(),
            host_col: StringBuilder::new(),
            cgroup: StringBuilder::new(),
            cpu: Int32Builder::new(),
            value: Int64Builder::new(),
            kstack_error: Int32Builder::new(),
            ustack_error: Int32Builder::new(),
            ustack_unwind: StringBuilder::new(),
            ustack_truncated: BooleanBuilder::new(),
            duration: Int64Builder::new(),
            count: Int64Builder::new(),
            state: StringBuilder::new(),
            waker: Int32Builder::new(),
            op: StringBuilder::new(),
            syscall: StringBuilder::new(),
            fd: Int32Builder::new(),
            path: StringBuilder::new(),
            dev: StringBuilder::new(),
            protocol: StringBuilder::new(),
            local: StringBuilder::new(),
            remote: StringBuilder::new(),
            rss: Int64Builder::new(),
            child: Int32Builder::new(),
            errno: Int32Builder::new(),
            exit_code: Int32Builder::new(),
            cause: StringBuilder::new(),
            probe: StringBuilder::new(),
            args: args_builder(),
            span_id: UInt64Builder::new(),
            parent_span_id: UInt64Builder::new(),
            span_name: StringBuilder::new(),
            trace_id: StringBuilder::new(),
            rows: 0,
            schema,
        })
    }

    /// The schema of the batches: the raw schema, stack columns dictionary-encoded.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Distinct captured stacks so far (entries of each stack dictionary).
    pub fn distinct_stacks(&self) -> usize {
        self.stacks.len()
    }

    /// The recording's captured stacks, for the keys of the rows pushed.
    pub fn stacks(&mut self) -> &mut StackTable {
        &mut self.stacks
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    pub fn push(&mut self, r: &Row<'_>) {
        self.time.append_value(r.time_ns);
        self.kind.append_value(r.kind);
        self.pid.append_value(r.pid);
        self.tid.append_value(r.tid);
        self.comm.append_value(r.comm);
        self.thread.append_value(r.thread);
        self.host_col.append_option(self.host.as_deref());
        self.cgroup.append_option(r.cgroup);
        self.cpu.append_value(r.cpu);
        self.value.append_value(r.value);
        self.refs.push(r.stacks);
        self.kstack_error.append_option(r.kstack_error);
        self.ustack_error.append_option(r.ustack_error);
        self.ustack_unwind.append_option(r.ustack_unwind);
        self.ustack_truncated.append_option(r.ustack_truncated);
        let x = &r.extra;
        self.duration.append_option(x.duration);
        self.count.append_option(x.count);
        self.state.append_option(x.state);
        self.waker.append_option(x.waker);
        self.op.append_option(x.op);
        self.syscall.append_option(x.syscall);
        self.fd.append_option(x.fd);
        self.path.append_option(x.path.as_deref());
        self.dev.append_option(x.dev.as_deref());
        self.protocol.append_option(x.protocol);
        self.local.append_option(x.local.as_deref());
        self.remote.append_option(x.remote.as_deref());
        self.rss.append_option(x.rss);
        self.child.append_option(x.child);
        self.errno.append_option(x.errno);
        self.exit_code.append_option(x.exit_code);
        self.cause.append_option(x.cause.as_deref());
        self.probe.append_option(x.probe.as_deref());
        match &x.args {
            Some(args) => {
                self.args.values().append_slice(args);
                self.args.append(true);
            }
            None => self.args.append_null(),
        }
        let span = x.span.as_ref();
        self.span_id.append_option(span.map(|s| s.id));
        self.parent_span_id
            .append_option(span.and_then(|s| s.parent));
        self.span_name
            .append_option(span.and_then(|s| s.name.as_deref()));
        self.trace_id.append_option(span.map(|s| &*s.trace_id));
        self.rows += 1;
    }

    /// Take the accumulated rows as a batch (the builder is left empty; the stack
    /// dictionaries keep every entry, so later batches only add to them).
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let n = self.rows;
        let [kstack, ustack, ksyms] = self.stacks.columns(&self.refs)?;
        self.refs.clear();
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("time", Arc::new(self.time.finish())),
            ("kind", Arc::new(self.kind.finish())),
            ("pid", Arc::new(self.pid.finish())),
            ("tid", Arc::new(self.tid.finish())),
            ("comm", Arc::new(self.comm.finish())),
            ("thread", Arc::new(self.thread.finish())),
            ("host", Arc::new(self.host_col.finish())),
            ("cgroup", Arc::new(self.cgroup.finish())),
            ("span_id", Arc::new(self.span_id.finish())),
            ("parent_span_id", Arc::new(self.parent_span_id.finish())),
            ("span_name", Arc::new(self.span_name.finish())),
            ("trace_id", Arc::new(self.trace_id.finish())),
            ("cpu", Arc::new(self.cpu.finish())),
            ("value", Arc::new(self.value.finish())),
            kstack,
            ("kstack_error", Arc::new(self.kstack_error.finish())),
            ustack,
            ("ustack_error", Arc::new(self.ustack_error.finish())),
            ("ustack_unwind", Arc::new(self.ustack_unwind.finish())),
            ("ustack_truncated", Arc::new(self.ustack_truncated.finish())),
            ksyms,
            ("duration", Arc::new(self.duration.finish())),
            ("count", Arc::new(self.count.finish())),
            ("state", Arc::new(self.state.finish())),
            ("waker", Arc::new(self.waker.finish())),
            ("op", Arc::new(self.op.finish())),
            ("syscall", Arc::new(self.syscall.finish())),
            ("fd", Arc::new(self.fd.finish())),
            ("path", Arc::new(self.path.finish())),
            ("dev", Arc::new(self.dev.finish())),
            ("protocol", Arc::new(self.protocol.finish())),
            ("local", Arc::new(self.local.finish())),
            ("remote", Arc::new(self.remote.finish())),
            ("rss", Arc::new(self.rss.finish())),
            ("child", Arc::new(self.child.finish())),
            ("errno", Arc::new(self.errno.finish())),
            ("exit_code", Arc::new(self.exit_code.finish())),
            ("cause", Arc::new(self.cause.finish())),
            ("probe", Arc::new(self.probe.finish())),
            ("args", Arc::new(self.args.finish())),
        ];
        self.rows = 0;
        stacks_stream::batch_by_name(self.schema.clone(), n, columns)
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
