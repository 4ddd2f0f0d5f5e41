//! The `stack_table` table: one row per distinct `stack_id` of the store, with its frames and
//! `folded`, `leaf` and `depth`, gathered from the stacks files of samples/stacks pairs and from
//! the stacks inline in first-layout files. Built when a query scans it, and then only with
//! the columns the query reads; its memory is one copy of each distinct stack.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray, FixedSizeBinaryArray, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::Statistics;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::TableType;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::memory::{LazyBatchGenerator, LazyMemoryExec};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use parking_lot::RwLock;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection};

use stacks_store::frames::{self, FrameLookup};
use stacks_store::stack_col;
use stacks_stream::col;
use stacks_stream::stack_key::stack_keys;

/// Name of the table.
pub const NAME: &str = "stack_table";

/// The stack columns, in the order the table has them.
pub const STACK_COLUMNS: [&str; 4] = [col::STACK, col::KSTACK, col::USTACK, col::KSTACK_SYMBOLS];

/// Where distinct stacks are read from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A stacks file of the pair layout: `stack_id`, stack columns, `folded`, `leaf`, `depth`,
    /// one row per stack.
    Stacks(PathBuf),
    /// A stacks file of `stack_id` and `frame_ids`, one row per stack, and the frames file
    /// those ids refer to.
    Framed { stacks: PathBuf, frames: PathBuf },
    /// A first-layout file with its `stack_id`: stacks repeat, one per row.
    Inline(PathBuf),
    /// A first-layout file with a `stack` but no `stack_id`: the id is computed from `stack`.
    Unkeyed(PathBuf),
}

impl Source {
    fn path(&self) -> &PathBuf {
        match self {
            Source::Stacks(p) | Source::Inline(p) | Source::Unkeyed(p) => p,
            Source::Framed { stacks, .. } => stacks,
        }
    }
}

/// The table; see the module documentation.
#[derive(Debug)]
pub struct StackTable {
    shared: Arc<Shared>,
}

/// What scans of the table share: its sources and what was built from them.
#[derive(Debug)]
struct Shared {
    schema: SchemaRef,
    sources: Vec<Source>,
    /// At most this many stacks (the rows of its sources), for the planner.
    estimate: usize,
    /// What was built, by projection (a query may scan the table more than once).
    built: Mutex<HashMap<Vec<usize>, Vec<RecordBatch>>>,
}

impl StackTable {
    /// A table over `sources`, with the stack columns of `stack_types` (name, plain type; those
    /// of [`STACK_COLUMNS`] some file has).
    pub fn new(sources: Vec<Source>, stack_types: &[(String, DataType)]) -> Self {
        let mut fields = vec![Field::new(
            col::STACK_ID,
            stacks_stream::stack_id_type(),
            false,
        )];
        for name in STACK_COLUMNS {
            if let Some((_, dt)) = stack_types.iter().find(|(n, _)| n == name) {
                fields.push(Field::new(name, dt.clone(), true));
            }
        }
        fields.push(Field::new(stack_col::FOLDED, DataType::Utf8, true));
        fields.push(Field::new(stack_col::LEAF, DataType::Utf8, true));
        fields.push(Field::new(stack_col::DEPTH, DataType::Int32, true));
        let estimate = sources
            .iter()
            .filter_map(|s| {
                let file = File::open(s.path()).ok()?;
                let b = ParquetRecordBatchReaderBuilder::try_new(file).ok()?;
                usize::try_from(b.metadata().file_metadata().num_rows()).ok()
            })
            .sum();
        StackTable {
            shared: Arc::new(Shared {
                schema: Arc::new(Schema::new(fields)),
                sources,
                estimate,
                built: Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl Shared {
    /// The distinct stacks with the columns `projection` names, in batches.
    fn build(&self, projection: &[usize]) -> Result<Vec<RecordBatch>> {
        if let Some(done) = self.built.lock().expect("not poisoned").get(projection) {
            return Ok(done.clone());
        }
        let schema = Arc::new(self.schema.project(projection)?);
        let mut seen: HashSet<[u8; 16], ahash::RandomState> = HashSet::default();
        let mut out = Vec::new();
        for source in &self.sources {
            read_source(source, &schema, &mut seen, &mut out).map_err(|e| {
                DataFusionError::Execution(format!(
                    "{}: reading its stacks: {e}",
                    source.path().display()
                ))
            })?;
        }
        self.built
            .lock()
            .expect("not poisoned")
            .insert(projection.to_vec(), out.clone());
        Ok(out)
    }
}

#[async_trait]
impl TableProvider for StackTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.shared.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let all: Vec<usize> = (0..self.shared.schema.fields().len()).collect();
        let projection = projection.unwrap_or(&all).clone();
        let schema = Arc::new(self.shared.schema.project(&projection)?);
        // Built when the plan first asks for a batch, not while planning: a query whose
        // samples match nothing (the join's build side is empty) never reads a stack.
        let generator = Lazy {
            shared: Arc::clone(&self.shared),
            projection,
            batches: None,
            next: 0,
        };
        let lazy = LazyMemoryExec::try_new(schema, vec![Arc::new(RwLock::new(generator))])?;
        Ok(Arc::new(Estimated {
            inner: Arc::new(lazy),
            rows: self.shared.estimate,
        }))
    }
}

/// The lazy source with the row count the planner needs to make `stack_table` the side a
/// join collects (an upper bound: the rows of its files, before deduplication).
#[derive(Debug)]
struct Estimated {
    inner: Arc<dyn ExecutionPlan>,
    rows: usize,
}

impl DisplayAs for Estimated {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{NAME} (at most {} stacks): ", self.rows)?;
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for Estimated {
    fn name(&self) -> &str {
        "StackTableExec"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.inner.execute(partition, context)
    }

    fn partition_statistics(&self, _partition: Option<usize>) -> Result<Arc<Statistics>> {
        let schema = self.inner.schema();
        Ok(Arc::new(Statistics {
            num_rows: Precision::Inexact(self.rows),
            total_byte_size: Precision::Absent,
            column_statistics: Statistics::unknown_column(&schema),
        }))
    }
}

/// Batches of the table, built on the first request.
#[derive(Debug)]
struct Lazy {
    shared: Arc<Shared>,
    projection: Vec<usize>,
    batches: Option<Vec<RecordBatch>>,
    next: usize,
}

impl std::fmt::Display for Lazy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{NAME}: {} sources", self.shared.sources.len())
    }
}

impl LazyBatchGenerator for Lazy {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn generate_next_batch(&mut self) -> Result<Option<RecordBatch>> {
        if self.batches.is_none() {
            self.batches = Some(self.shared.build(&self.projection)?);
        }
        let batches = self.batches.as_ref().expect("built");
        let batch = batches.get(self.next).cloned();
        self.next += 1;
        Ok(batch)
    }

    fn reset_state(&self) -> Arc<RwLock<dyn LazyBatchGenerator>> {
        Arc::new(RwLock::new(Lazy {
            shared: Arc::clone(&self.shared),
            projection: self.projection.clone(),
            batches: None,
            next: 0,
        }))
    }
}

/// The rows of `path` holding the first occurrence of a `stack_id` not in `seen`, read from
/// that column alone; `None` when there are none.
fn unseen_rows(
    path: &std::path::Path,
    seen: &HashSet<[u8; 16], ahash::RandomState>,
) -> Result<Option<RowSelection>, String> {
    let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| e.to_string())?;
    let id = builder
        .schema()
        .index_of(col::STACK_ID)
        .map_err(|_| format!("no `{}` column", col::STACK_ID))?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), [id]);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(65536)
        .build()
        .map_err(|e| e.to_string())?;
    let mut here: HashSet<[u8; 16], ahash::RandomState> = HashSet::default();
    let mut filters = Vec::new();
    let mut any = false;
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        let ids = batch
            .column(0)
            .as_fixed_size_binary_opt()
            .filter(|a| a.value_length() == 16)
            .ok_or_else(|| format!("`stack_id` of type {}", batch.column(0).data_type()))?;
        let keep: BooleanArray = (0..ids.len())
            .map(|r| {
                let new = ids.is_valid(r) && {
                    let id: [u8; 16] = ids.value(r).try_into().expect("16 bytes");
                    !seen.contains(&id) && here.insert(id)
                };
                any |= new;
                Some(new)
            })
            .collect();
        filters.push(keep);
    }
    Ok(any.then(|| RowSelection::from_filters(&filters)))
}

/// Append to `out` the stacks of `source` whose id is not in `seen`, with the columns of
/// `want`.
fn read_source(
    source: &Source,
    want: &SchemaRef,
    seen: &mut HashSet<[u8; 16], ahash::RandomState>,
    out: &mut Vec<RecordBatch>,
) -> Result<(), String> {
    let path = source.path();
    let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| e.to_string())?;
    let file_schema = Arc::clone(builder.schema());
    let stored = matches!(source, Source::Stacks(_));
    let wanted = |name: &str| want.field_with_name(name).is_ok();
    let summaries = [stack_col::FOLDED, stack_col::LEAF, stack_col::DEPTH]
        .iter()
        .any(|n| wanted(n));
    let keyed = !matches!(source, Source::Unkeyed(_));
    // A framed source's `stack` is assembled from its `frame_ids` and frames file (read once
    // a stack not seen in an earlier file is found).
    let frames_file = match source {
        Source::Framed { frames, .. } if wanted(col::STACK) || summaries => Some(frames),
        _ => None,
    };
    // The file columns to read.
    let mut read: Vec<&str> = Vec::new();
    if keyed {
        read.push(col::STACK_ID);
    }
    if frames_file.is_some() {
        read.push(frames::FRAME_IDS);
    }
    for f in file_schema.fields() {
        let name = f.name().as_str();
        let needed = (wanted(name) && name != col::STACK_ID)
            || (name == col::STACK && ((!stored && summaries) || !keyed));
        let is_ours = STACK_COLUMNS.contains(&name)
            || (stored && [stack_col::FOLDED, stack_col::LEAF, stack_col::DEPTH].contains(&name));
        if needed && is_ours {
            read.push(name);
        }
    }
    let roots: Vec<usize> = read
        .iter()
        .map(|n| {
            file_schema
                .index_of(n)
                .map_err(|_| format!("no `{n}` column"))
        })
        .collect::<Result<_, _>>()?;
    if !keyed
        && !roots
            .iter()
            .any(|&i| file_schema.field(i).name() == col::STACK)
    {
        return Ok(());
    }
    // Only the rows of stacks not seen in an earlier file are decoded: consecutive files of a
    // store share most of their stacks.
    let mut builder = builder;
    if keyed {
        match unseen_rows(path, seen)? {
            Some(selection) => builder = builder.with_row_selection(selection),
            None => return Ok(()),
        }
    }
    let frames = match frames_file {
        Some(path) => Some(read_frames(path)?),
        None => None,
    };
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(8192)
        .build()
        .map_err(|e| e.to_string())?;
    for batch in reader {
        let mut batch = batch.map_err(|e| e.to_string())?;
        if let Some(lookup) = &frames {
            batch = with_assembled_stack(&batch, lookup)?;
        }
        let ids: FixedSizeBinaryArray = match batch.column_by_name(col::STACK_ID) {
            Some(a) => a
                .as_fixed_size_binary_opt()
                .filter(|a| a.value_length() == 16)
                .ok_or_else(|| format!("`stack_id` of type {}", a.data_type()))?
                .clone(),
            None => {
                let stack = batch.column_by_name(col::STACK).expect("read above");
                let list = stack
                    .as_list_opt::<i32>()
                    .ok_or_else(|| format!("`stack` of type {}", stack.data_type()))?;
                stack_keys(list, batch.num_rows()).map_err(|e| e.to_string())?
            }
        };
        let mut rows: Vec<u32> = Vec::new();
        for row in 0..batch.num_rows() {
            if ids.is_valid(row) {
                let id: [u8; 16] = ids.value(row).try_into().expect("16 bytes");
                if seen.insert(id) {
                    rows.push(row as u32);
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        let take = UInt32Array::from(rows);
        let taken = |a: &ArrayRef| arrow_select::take::take(a.as_ref(), &take, None);
        let stack = match batch.column_by_name(col::STACK) {
            Some(s) if !stored && summaries => Some(taken(s).map_err(|e| e.to_string())?),
            _ => None,
        };
        let sums = match &stack {
            Some(s) => Some(summarize(s, path)?),
            None => None,
        };
        let n = take.len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(want.fields().len());
        for f in want.fields() {
            let name = f.name().as_str();
            let column = if name == col::STACK_ID {
                arrow_select::take::take(&ids, &take, None).map_err(|e| e.to_string())?
            } else if let (Some((folded, leaf, depth)), false) = (&sums, stored) {
                match name {
                    stack_col::FOLDED => Arc::clone(folded),
                    stack_col::LEAF => Arc::clone(leaf),
                    stack_col::DEPTH => Arc::clone(depth),
                    _ => column_of(&batch, name, &taken, f, n)?,
                }
            } else {
                column_of(&batch, name, &taken, f, n)?
            };
            columns.push(column);
        }
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(n));
        let rb = RecordBatch::try_new_with_options(Arc::clone(want), columns, &options)
            .map_err(|e| e.to_string())?;
        out.push(rb);
    }
    Ok(())
}

/// The frames of frames file `path`.
fn read_frames(path: &std::path::Path) -> Result<FrameLookup, String> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| format!("{shown}: cannot open: {e}"))?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| format!("{shown}: {e}"))?;
    let schema = Arc::clone(builder.schema());
    let reader = builder
        .with_batch_size(65536)
        .build()
        .map_err(|e| format!("{shown}: {e}"))?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown}: {e}"))?;
    FrameLookup::new(&schema, &batches).map_err(|e| format!("{shown}: {e}"))
}

/// `batch` (rows of a framed stacks file) with a `stack` column assembled from its
/// `frame_ids`.
fn with_assembled_stack(batch: &RecordBatch, lookup: &FrameLookup) -> Result<RecordBatch, String> {
    let ids = batch
        .column_by_name(frames::FRAME_IDS)
        .ok_or_else(|| format!("no `{}` column", frames::FRAME_IDS))?;
    let stack = lookup
        .assemble(ids)
        .map_err(|e| format!("its `{}`: {e}", frames::FRAME_IDS))?;
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(col::STACK, stack.data_type().clone(), true));
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(stack));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}

/// Column `name` of the rows `taken` picks from `batch`, cast to `field`'s type; nulls when
/// the file does not have it.
fn column_of(
    batch: &RecordBatch,
    name: &str,
    taken: &dyn Fn(&ArrayRef) -> Result<ArrayRef, arrow_schema::ArrowError>,
    field: &Field,
    n: usize,
) -> Result<ArrayRef, String> {
    match batch.column_by_name(name) {
        Some(a) => {
            let a = taken(a).map_err(|e| e.to_string())?;
            if a.data_type() == field.data_type() {
                Ok(a)
            } else {
                arrow_cast::cast(&a, field.data_type())
                    .map_err(|e| format!("column `{name}` of type {}: {e}", a.data_type()))
            }
        }
        None => Ok(arrow_array::new_null_array(field.data_type(), n)),
    }
}

type Summaries = (ArrayRef, ArrayRef, ArrayRef);

/// `folded`, `leaf` and `depth` of each stack of `stack`, as stacks files have them.
fn summarize(stack: &ArrayRef, path: &std::path::Path) -> Result<Summaries, String> {
    stacks_store::summaries(Some(stack), stack.len())
        .map_err(|e| format!("{}: {e}", path.display()))
}
