//! Turns raw batches into symbolized ones: reads `kstack`/`ustack`, resolves every distinct
//! address once, and appends the `stack` column (kernel frames leaf→root, then user frames).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, ListBuilder, StringBuilder, StructBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, StructArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use stacks_stream::{ContractError, col, uframe};

use crate::resolve::{ModuleKey, Resolver, SymFrame, lookup_addr};

/// Column positions validated once per stream.
pub struct Layout {
    kstack: usize,
    kstack_error: usize,
    ustack: usize,
    ustack_error: usize,
    /// Input columns kept in the output (all but an existing `stack`).
    keep: Vec<usize>,
    pub output: SchemaRef,
}

impl Layout {
    pub fn new(
        input: &Schema,
        name: &str,
        metadata: HashMap<String, String>,
    ) -> Result<Self, ContractError> {
        let why = "raw stacks stream from stacks-record";
        let kstack = stacks_stream::require_column(
            input,
            name,
            col::KSTACK,
            &stacks_stream::kstack_type(),
            why,
        )?;
        let ustack = stacks_stream::require_column(
            input,
            name,
            col::USTACK,
            &stacks_stream::ustack_type(),
            why,
        )?;
        let kstack_error =
            stacks_stream::require_column(input, name, col::KSTACK_ERROR, &DataType::Int32, why)?;
        let ustack_error =
            stacks_stream::require_column(input, name, col::USTACK_ERROR, &DataType::Int32, why)?;
        let keep: Vec<usize> = (0..input.fields().len())
            .filter(|&i| input.field(i).name() != col::STACK)
            .collect();
        let mut fields: Vec<Field> = keep
            .iter()
            .map(|&i| input.field(i).as_ref().clone())
            .collect();
        fields.push(Field::new(col::STACK, stacks_stream::stack_type(), true));
        Ok(Layout {
            kstack,
            kstack_error,
            ustack,
            ustack_error,
            keep,
            output: Arc::new(Schema::new_with_metadata(fields, metadata)),
        })
    }
}

/// The user frames of one row, as columns of the ustack struct.
struct UCols<'a> {
    addr: &'a arrow_array::UInt64Array,
    module: &'a arrow_array::StringArray,
    build_id: &'a arrow_array::StringArray,
    offset: &'a arrow_array::UInt64Array,
    error: &'a arrow_array::StringArray,
}

fn ucols(s: &StructArray) -> UCols<'_> {
    UCols {
        addr: s
            .column_by_name(uframe::ADDR)
            .expect("validated")
            .as_primitive::<UInt64Type>(),
        module: s
            .column_by_name(uframe::MODULE)
            .expect("validated")
            .as_string::<i32>(),
        build_id: s
            .column_by_name(uframe::BUILD_ID)
            .expect("validated")
            .as_string::<i32>(),
        offset: s
            .column_by_name(uframe::OFFSET)
            .expect("validated")
            .as_primitive::<UInt64Type>(),
        error: s
            .column_by_name(uframe::ERROR)
            .expect("validated")
            .as_string::<i32>(),
    }
}

fn errno_text(errno: i32) -> String {
    let e = std::io::Error::from_raw_os_error(-errno);
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

/// Module name of kernel frames outside loadable modules (as perf names it).
pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// Builds the `stack` list column.
struct StackBuilder {
    list: ListBuilder<StructBuilder>,
}

/// Location identity of a frame, from the input.
struct Place<'a> {
    kernel: bool,
    module: Option<&'a str>,
    build_id: Option<&'a str>,
    offset: Option<u64>,
    addr: u64,
}

impl StackBuilder {
    fn new(capacity: usize) -> Self {
        let DataType::List(field) = stacks_stream::stack_type() else {
            unreachable!()
        };
        let DataType::Struct(fields) = field.data_type().clone() else {
            unreachable!()
        };
        StackBuilder {
            list: ListBuilder::with_capacity(StructBuilder::from_fields(fields, 0), capacity)
                .with_field(field),
        }
    }

    /// Append one frame; field positions follow `stacks_stream::frame_fields()`.
    fn frame(&mut self, s: &SymFrame, p: &Place<'_>) {
        let b = self.list.values();
        macro_rules! f {
            ($i:expr, $t:ty) => {
                b.field_builder::<$t>($i).expect("stack frame field")
            };
        }
        f!(0, StringBuilder).append_option(s.function.as_deref());
        f!(1, StringBuilder).append_option(s.file.as_deref());
        f!(2, UInt32Builder).append_option(s.line);
        f!(3, UInt32Builder).append_option(s.column);
        f!(4, BooleanBuilder).append_value(s.inlined);
        f!(5, BooleanBuilder).append_value(p.kernel);
        let module = p.module.or(s.module.as_deref());
        let module = match module {
            None if p.kernel => Some(KERNEL_MODULE),
            m => m,
        };
        f!(6, StringBuilder).append_option(module);
        f!(7, StringBuilder).append_option(p.build_id);
        f!(8, UInt64Builder).append_option(p.offset);
        f!(9, UInt64Builder).append_value(p.addr);
        f!(10, StringBuilder).append_option(s.error.as_deref());
        b.append(true);
    }

    /// A frame standing for a stack that could not be captured, so the failure stays visible.
    fn missed(&mut self, kernel: bool, errno: i32) {
        let what = if kernel { "kernel" } else { "user" };
        let text = format!("[missed {what} stack: {}]", errno_text(errno));
        let s = SymFrame {
            function: Some(text),
            ..SymFrame::unresolved(format!("{what} stack capture failed: errno {}", -errno))
        };
        self.frame(
            &s,
            &Place {
                kernel,
                module: None,
                build_id: None,
                offset: None,
                addr: 0,
            },
        );
    }
}

/// Symbolize one batch.
pub fn symbolize_batch(
    batch: &RecordBatch,
    layout: &Layout,
    resolver: &mut Resolver,
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let kstack: &ListArray = batch.column(layout.kstack).as_list::<i32>();
    let ustack: &ListArray = batch.column(layout.ustack).as_list::<i32>();
    let kerr = batch
        .column(layout.kstack_error)
        .as_primitive::<Int32Type>();
    let uerr = batch
        .column(layout.ustack_error)
        .as_primitive::<Int32Type>();
    let uvalues = ustack.values().as_struct();
    let u = ucols(uvalues);
    let kvalues = kstack.values().as_primitive::<UInt64Type>();

    // Pass 1: every distinct address of this batch, resolved in one call per module.
    let mut kaddrs = Vec::new();
    let mut per_module: HashMap<ModuleKey, Vec<u64>> = HashMap::new();
    for row in 0..batch.num_rows() {
        if kstack.is_valid(row) {
            let (start, end) = offsets(kstack, row);
            for (i, j) in (start..end).enumerate() {
                kaddrs.push(lookup_addr(i, kvalues.value(j)));
            }
        }
        if ustack.is_valid(row) {
            let (start, end) = offsets(ustack, row);
            for (i, j) in (start..end).enumerate() {
                if u.module.is_valid(j) && u.offset.is_valid(j) {
                    let key = module_key(&u, j);
                    per_module
                        .entry(key)
                        .or_default()
                        .push(lookup_addr(i, u.offset.value(j)));
                }
            }
        }
    }
    resolver.prefetch_kernel(&mut kaddrs);
    for (module, mut offs) in per_module {
        resolver.prefetch_user(&module, &mut offs);
    }

    // Pass 2: build the stack column.
    let mut out = StackBuilder::new(batch.num_rows());
    for row in 0..batch.num_rows() {
        if kstack.is_null(row) && ustack.is_null(row) {
            out.list.append_null();
            continue;
        }
        if kerr.is_valid(row) {
            out.missed(true, kerr.value(row));
        } else if kstack.is_valid(row) {
            let (start, end) = offsets(kstack, row);
            for (i, j) in (start..end).enumerate() {
                let addr = kvalues.value(j);
                let place = Place {
                    kernel: true,
                    module: None,
                    build_id: None,
                    offset: None,
                    addr,
                };
                for s in resolver.kernel(lookup_addr(i, addr)).iter() {
                    out.frame(s, &place);
                }
            }
        }
        if uerr.is_valid(row) {
            out.missed(false, uerr.value(row));
        } else if ustack.is_valid(row) {
            let (start, end) = offsets(ustack, row);
            for (i, j) in (start..end).enumerate() {
                let place = Place {
                    kernel: false,
                    module: u.module.is_valid(j).then(|| u.module.value(j)),
                    build_id: u.build_id.is_valid(j).then(|| u.build_id.value(j)),
                    offset: u.offset.is_valid(j).then(|| u.offset.value(j)),
                    addr: u.addr.value(j),
                };
                if u.module.is_valid(j) && u.offset.is_valid(j) {
                    let frames =
                        resolver.user(&module_key(&u, j), lookup_addr(i, u.offset.value(j)));
                    for s in frames.iter() {
                        out.frame(s, &place);
                    }
                } else {
                    let why = if u.error.is_valid(j) {
                        u.error.value(j).to_string()
                    } else {
                        "address was not normalized at record time".to_string()
                    };
                    out.frame(&SymFrame::unresolved(why), &place);
                }
            }
        }
        out.list.append(true);
    }
    let mut columns: Vec<ArrayRef> = layout
        .keep
        .iter()
        .map(|&i| batch.column(i).clone())
        .collect();
    columns.push(Arc::new(out.list.finish()));
    RecordBatch::try_new(layout.output.clone(), columns)
}

fn offsets(list: &ListArray, row: usize) -> (usize, usize) {
    let o = list.value_offsets();
    (o[row] as usize, o[row + 1] as usize)
}

fn module_key(u: &UCols<'_>, j: usize) -> ModuleKey {
    ModuleKey {
        path: u.module.value(j).to_string(),
        build_id: u
            .build_id
            .is_valid(j)
            .then(|| u.build_id.value(j).to_string()),
    }
}
