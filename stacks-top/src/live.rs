//! Live mode: a thread reads the symbolized stream on stdin, splits each batch into samples
//! rows and the distinct stacks they reference (as stacks-pack does), and keeps the rows of
//! the last `--keep`; the screen takes a snapshot of them at each refresh.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use stacks_stream::col;
use stacks_stream::io::InputStream;
use stacks_stream::store::StackSplitter;

use crate::view::Ns;

/// Rows are gathered into batches of at least this many before they are kept (the recorder
/// sends many small batches; a table of thousands of tiny batches queries slowly).
const GATHER_ROWS: usize = 32 * 1024;

/// A batch of samples rows, the last time in it, and its rows and time range per kind.
struct Kept {
    last: Ns,
    batch: RecordBatch,
    kinds: Vec<KindSpan>,
}

/// Rows of one kind and the time they cover.
#[derive(Debug, Clone)]
pub struct KindSpan {
    pub kind: String,
    pub rows: i64,
    pub first: Ns,
    pub last: Ns,
}

/// What the reader thread shares with the screen.
struct Shared {
    kept: VecDeque<Kept>,
    /// Rows read but not yet gathered into a kept batch.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    stacks: Vec<RecordBatch>,
    /// Rows read so far.
    rows: u64,
    ended: bool,
    error: Option<String>,
}

/// The rows of a live stream at one moment.
pub struct Snapshot {
    pub samples_schema: SchemaRef,
    pub samples: Vec<RecordBatch>,
    pub stacks_schema: SchemaRef,
    pub stacks: Vec<RecordBatch>,
    /// Rows and time range per kind (`lost` left out), most rows first.
    pub kinds: Vec<KindSpan>,
    /// Rows read so far (unchanged: nothing new to show).
    pub rows: u64,
}

/// The reader of stdin and its rows.
pub struct Live {
    shared: Arc<Mutex<Shared>>,
    samples_schema: SchemaRef,
    stacks_schema: SchemaRef,
    keep_ns: Ns,
}

impl Live {
    /// Start reading stdin (refused on a terminal); fails at once when stdin is not a
    /// symbolized stacks stream.
    pub fn start(keep_ns: Ns) -> Result<Self> {
        let input = stacks_stream::cli::open_tool_input(crate::TOOL, None)?;
        let schema = input.schema();
        if schema.field_with_name(col::STACK).is_err() {
            bail!(
                "{}: a stream without a `stack` column (raw rows?): pipe stacks-record through \
                 stacks-symbolize first",
                input.name()
            );
        }
        let splitter = StackSplitter::new(&schema)?;
        let samples_schema = Arc::clone(splitter.samples_schema());
        let stacks_schema = Arc::clone(splitter.stacks_schema());
        let shared = Arc::new(Mutex::new(Shared {
            kept: VecDeque::new(),
            pending: Vec::new(),
            pending_rows: 0,
            stacks: Vec::new(),
            rows: 0,
            ended: false,
            error: None,
        }));
        let for_thread = Arc::clone(&shared);
        let schema_for_thread = Arc::clone(&samples_schema);
        std::thread::Builder::new()
            .name("stacks-top-read".into())
            .spawn(move || {
                let result = read(input, splitter, &for_thread, keep_ns, &schema_for_thread);
                let mut s = lock(&for_thread);
                s.ended = true;
                if let Err(e) = result {
                    s.error = Some(format!("{e:#}"));
                }
            })?;
        Ok(Live {
            shared,
            samples_schema,
            stacks_schema,
            keep_ns,
        })
    }

    /// The source as the header names it.
    pub fn label(&self) -> String {
        let s = lock(&self.shared);
        let state = if s.ended { "ended" } else { "live" };
        format!(
            "stdin ({state}, {} rows read, last {} kept)",
            s.rows,
            crate::fmt::duration(self.keep_ns)
        )
    }

    /// The rows now (pending rows gathered first); an error of the stream, once.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut s = lock(&self.shared);
        if let Some(e) = s.error.take() {
            bail!("{e}");
        }
        gather(&mut s, &self.samples_schema, self.keep_ns)?;
        Ok(Snapshot {
            samples_schema: Arc::clone(&self.samples_schema),
            samples: s.kept.iter().map(|k| k.batch.clone()).collect(),
            stacks_schema: Arc::clone(&self.stacks_schema),
            stacks: s.stacks.clone(),
            kinds: merge_kinds(s.kept.iter()),
            rows: s.rows,
        })
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read every batch of `input` into `shared`.
fn read(
    mut input: InputStream,
    mut splitter: StackSplitter,
    shared: &Mutex<Shared>,
    keep_ns: Ns,
    schema: &SchemaRef,
) -> Result<()> {
    let mut seen = HashSet::new();
    while let Some(batch) = input.next_batch()? {
        let samples = splitter.split(&batch)?;
        let ids = samples
            .column_by_name(col::STACK_ID)
            .map(|c| c.as_fixed_size_binary().clone());
        let mut fresh = Vec::new();
        if let Some(ids) = ids {
            for i in 0..ids.len() {
                if ids.is_valid(i) {
                    let id: [u8; 16] = ids.value(i).try_into()?;
                    if seen.insert(id) {
                        fresh.push(id);
                    }
                }
            }
        }
        let stacks = (!fresh.is_empty())
            .then(|| splitter.stacks(&fresh))
            .transpose()?;
        let mut s = lock(shared);
        s.rows += batch.num_rows() as u64;
        s.pending_rows += samples.num_rows();
        s.pending.push(samples);
        s.stacks.extend(stacks);
        if s.pending_rows >= GATHER_ROWS {
            gather(&mut s, schema, keep_ns)?;
        }
    }
    let mut s = lock(shared);
    gather(&mut s, schema, keep_ns)
}

/// Concatenate the pending rows into one kept batch and drop batches older than `keep_ns`
/// before the newest row.
fn gather(s: &mut Shared, schema: &SchemaRef, keep_ns: Ns) -> Result<()> {
    if !s.pending.is_empty() {
        let batch = arrow_select::concat::concat_batches(schema, &s.pending)?;
        s.pending.clear();
        s.pending_rows = 0;
        let kinds = kind_spans(&batch)?;
        if let Some(last) = kinds.iter().map(|k| k.last).max() {
            s.kept.push_back(Kept { last, batch, kinds });
        }
    }
    let newest = s.kept.iter().map(|k| k.last).max().unwrap_or(0);
    while s.kept.front().is_some_and(|k| k.last < newest - keep_ns) {
        s.kept.pop_front();
    }
    Ok(())
}

/// Rows and time range of each kind in `batch` (`lost` rows left out).
fn kind_spans(batch: &RecordBatch) -> Result<Vec<KindSpan>> {
    let (Some(kind), Some(time)) = (
        batch.column_by_name(col::KIND),
        batch.column_by_name(col::TIME),
    ) else {
        return Ok(Vec::new());
    };
    let kind = arrow_cast::cast(kind, &arrow_schema::DataType::Utf8)?;
    let kind = kind.as_string::<i32>();
    let Some(time) = time.as_primitive_opt::<TimestampNanosecondType>() else {
        return Ok(Vec::new());
    };
    let mut out: Vec<KindSpan> = Vec::new();
    for i in 0..batch.num_rows() {
        if kind.is_null(i) || time.is_null(i) || kind.value(i) == stacks_stream::kind::LOST {
            continue;
        }
        let (k, t) = (kind.value(i), time.value(i));
        match out.iter_mut().find(|s| s.kind == k) {
            Some(s) => {
                s.rows += 1;
                s.first = s.first.min(t);
                s.last = s.last.max(t);
            }
            None => out.push(KindSpan {
                kind: k.to_string(),
                rows: 1,
                first: t,
                last: t,
            }),
        }
    }
    Ok(out)
}

/// The kinds of `kept`, merged, most rows first.
fn merge_kinds<'a>(kept: impl Iterator<Item = &'a Kept>) -> Vec<KindSpan> {
    let mut out: Vec<KindSpan> = Vec::new();
    for k in kept.flat_map(|k| &k.kinds) {
        match out.iter_mut().find(|s| s.kind == k.kind) {
            Some(s) => {
                s.rows += k.rows;
                s.first = s.first.min(k.first);
                s.last = s.last.max(k.last);
            }
            None => out.push(k.clone()),
        }
    }
    out.sort_by(|a, b| b.rows.cmp(&a.rows).then_with(|| a.kind.cmp(&b.kind)));
    out
}
