//! Builds raw-schema Arrow record batches from decoded events.

use std::sync::Arc;

use arrow_array::builder::{
    Int32Builder, Int64Builder, ListBuilder, StringBuilder, StructBuilder,
    TimestampNanosecondBuilder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};

use crate::normalize::UserFrame;

/// One output row before it is appended.
pub struct Row<'a> {
    pub time_ns: i64,
    pub kind: &'a str,
    pub pid: i32,
    pub tid: i32,
    pub comm: &'a str,
    pub thread: &'a str,
    pub cpu: i32,
    pub value: i64,
    /// `None`: not requested; `Some(Err(errno))`: capture failed.
    pub kstack: Option<Result<&'a [u64], i32>>,
    pub ustack: Option<Result<&'a [UserFrame], i32>>,
    /// Kernel symbols of `kstack` (same positions); `None` when not resolved.
    pub ksyms: Option<&'a [Option<KernelSymbol>]>,
    pub extra: Extra,
}

/// A kernel address's symbol as the recorder resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSymbol {
    pub symbol: String,
    pub offset: u64,
    pub module: Option<String>,
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
    pub local: Option<String>,
    pub remote: Option<String>,
    pub rss: Option<i64>,
    pub child: Option<i32>,
    pub errno: Option<i32>,
    pub exit_code: Option<i32>,
    pub cause: Option<String>,
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
    cpu: Int32Builder,
    value: Int64Builder,
    kstack: ListBuilder<UInt64Builder>,
    kstack_error: Int32Builder,
    ustack: ListBuilder<StructBuilder>,
    ustack_error: Int32Builder,
    ksyms: ListBuilder<StructBuilder>,
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
    rows: usize,
}

fn list_field(dt: &DataType) -> Arc<Field> {
    match dt {
        DataType::List(f) => f.clone(),
        other => unreachable!("stack columns are lists, found {other}"),
    }
}

impl RowBuilder {
    pub fn new(schema: SchemaRef) -> Self {
        let kfield = list_field(
            schema
                .field_with_name("kstack")
                .expect("kstack")
                .data_type(),
        );
        let ufield = list_field(
            schema
                .field_with_name("ustack")
                .expect("ustack")
                .data_type(),
        );
        let DataType::Struct(ufields) = ufield.data_type().clone() else {
            unreachable!("ustack elements are structs")
        };
        let sfield = list_field(
            schema
                .field_with_name("kstack_symbols")
                .expect("kstack_symbols")
                .data_type(),
        );
        let DataType::Struct(sfields) = sfield.data_type().clone() else {
            unreachable!("kstack_symbols elements are structs")
        };
        Self {
            time: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            kind: StringBuilder::new(),
            pid: Int32Builder::new(),
            tid: Int32Builder::new(),
            comm: StringBuilder::new(),
            thread: StringBuilder::new(),
            cpu: Int32Builder::new(),
            value: Int64Builder::new(),
            kstack: ListBuilder::new(UInt64Builder::new()).with_field(kfield),
            kstack_error: Int32Builder::new(),
            ustack: ListBuilder::new(StructBuilder::from_fields(ufields, 0)).with_field(ufield),
            ustack_error: Int32Builder::new(),
            ksyms: ListBuilder::new(StructBuilder::from_fields(sfields, 0)).with_field(sfield),
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
            rows: 0,
            schema,
        }
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
        self.cpu.append_value(r.cpu);
        self.value.append_value(r.value);
        match r.kstack {
            None => {
                self.kstack.append_null();
                self.kstack_error.append_null();
            }
            Some(Err(e)) => {
                self.kstack.append(true);
                self.kstack_error.append_value(e);
            }
            Some(Ok(frames)) => {
                self.kstack.values().append_slice(frames);
                self.kstack.append(true);
                self.kstack_error.append_null();
            }
        }
        match r.ustack {
            None => {
                self.ustack.append_null();
                self.ustack_error.append_null();
            }
            Some(Err(e)) => {
                self.ustack.append(true);
                self.ustack_error.append_value(e);
            }
            Some(Ok(frames)) => {
                let s = self.ustack.values();
                for f in frames {
                    s.field_builder::<UInt64Builder>(0)
                        .expect("addr")
                        .append_value(f.addr);
                    s.field_builder::<StringBuilder>(1)
                        .expect("module")
                        .append_option(f.module.as_deref());
                    s.field_builder::<StringBuilder>(2)
                        .expect("build_id")
                        .append_option(f.build_id.as_deref());
                    s.field_builder::<UInt64Builder>(3)
                        .expect("offset")
                        .append_option(f.offset);
                    s.field_builder::<StringBuilder>(4)
                        .expect("error")
                        .append_option(f.error.as_deref());
                    s.append(true);
                }
                self.ustack.append(true);
                self.ustack_error.append_null();
            }
        }
        match r.ksyms {
            None => self.ksyms.append_null(),
            Some(syms) => {
                let s = self.ksyms.values();
                for sym in syms {
                    match sym {
                        Some(k) => {
                            s.field_builder::<StringBuilder>(0)
                                .expect("symbol")
                                .append_value(&k.symbol);
                            s.field_builder::<UInt64Builder>(1)
                                .expect("offset")
                                .append_value(k.offset);
                            s.field_builder::<StringBuilder>(2)
                                .expect("module")
                                .append_option(k.module.as_deref());
                            s.append(true);
                        }
                        None => {
                            s.field_builder::<StringBuilder>(0)
                                .expect("symbol")
                                .append_value("");
                            s.field_builder::<UInt64Builder>(1)
                                .expect("offset")
                                .append_value(0);
                            s.field_builder::<StringBuilder>(2)
                                .expect("module")
                                .append_null();
                            s.append(false);
                        }
                    }
                }
                self.ksyms.append(true);
            }
        }
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
        self.rows += 1;
    }

    /// Take the accumulated rows as a batch (the builder is left empty).
    pub fn finish(&mut self) -> RecordBatch {
        let n = self.rows;
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("time", Arc::new(self.time.finish())),
            ("kind", Arc::new(self.kind.finish())),
            ("pid", Arc::new(self.pid.finish())),
            ("tid", Arc::new(self.tid.finish())),
            ("comm", Arc::new(self.comm.finish())),
            ("thread", Arc::new(self.thread.finish())),
            ("cpu", Arc::new(self.cpu.finish())),
            ("value", Arc::new(self.value.finish())),
            ("kstack", Arc::new(self.kstack.finish())),
            ("kstack_error", Arc::new(self.kstack_error.finish())),
            ("ustack", Arc::new(self.ustack.finish())),
            ("ustack_error", Arc::new(self.ustack_error.finish())),
            ("kstack_symbols", Arc::new(self.ksyms.finish())),
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
        ];
        self.rows = 0;
        stacks_stream::batch_by_name(self.schema.clone(), n, columns)
            .expect("row builder columns match the raw schema")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;
    use std::collections::HashMap;

    #[test]
    fn builds_raw_schema_batches() {
        let schema = Arc::new(stacks_stream::raw_schema(HashMap::new()));
        let mut b = RowBuilder::new(schema.clone());
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
        b.push(&Row {
            time_ns: 1,
            kind: "profile",
            pid: 1,
            tid: 2,
            comm: "a",
            thread: "b",
            cpu: 0,
            value: 10,
            kstack: Some(Ok(&[1, 2, 3])),
            ustack: Some(Ok(&uf)),
            ksyms: Some(&ks),
            extra: Extra {
                duration: Some(5),
                state: Some("sleeping"),
                ..Extra::default()
            },
        });
        b.push(&Row {
            time_ns: 2,
            kind: "profile",
            pid: 1,
            tid: 2,
            comm: "a",
            thread: "b",
            cpu: 1,
            value: 10,
            kstack: None,
            ustack: Some(Err(-14)),
            ksyms: None,
            extra: Extra::default(),
        });
        let batch = b.finish();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), schema);
        let k = batch.column_by_name("kstack").unwrap();
        assert!(k.is_valid(0) && k.is_null(1));
        let ue = batch.column_by_name("ustack_error").unwrap();
        assert!(ue.is_null(0) && ue.is_valid(1));
        let d = batch.column_by_name("duration").unwrap();
        assert!(d.is_valid(0) && d.is_null(1));
        let k = batch.column_by_name("kstack_symbols").unwrap();
        assert!(k.is_valid(0) && k.is_null(1));
        assert!(b.is_empty());
    }
}
