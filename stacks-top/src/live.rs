//! Live mode: a thread reads the symbolized stream on stdin, splits each batch into samples
//! rows and the distinct stacks they reference (as stacks-pack does), and keeps the rows of
//! the last `--keep` and the stacks those rows use (counted per stack: a stack no kept row
//! uses any more is dropped); the screen takes a snapshot of them at each refresh.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use stacks_store::{StackId, StackSplitter};
use stacks_stream::col;
use stacks_stream::io::InputStream;

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
    /// Rows read and kept that use each stack (pending rows included).
    uses: HashMap<StackId, u32>,
    /// Stacks in `stacks` that no row uses any more.
    dead: usize,
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
            uses: HashMap::default(),
            dead: 0,
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

/// The stack ids of `batch`'s rows (none without a `stack_id` column).
fn stack_ids(batch: &RecordBatch) -> impl Iterator<Item = StackId> + '_ {
    let ids = batch
        .column_by_name(col::STACK_ID)
        .and_then(|c| c.as_fixed_size_binary_opt());
    ids.into_iter().flat_map(|ids| {
        (0..ids.len())
            .filter(|&i| ids.is_valid(i))
            .filter_map(|i| ids.value(i).try_into().ok())
    })
}

/// Dead stacks past which the held stacks are compacted: this many, and as many as are live.
const COMPACT_AFTER: usize = 4096;

/// Read every batch of `input` into `shared`.
fn read(
    mut input: InputStream,
    mut splitter: StackSplitter,
    shared: &Mutex<Shared>,
    keep_ns: Ns,
    schema: &SchemaRef,
) -> Result<()> {
    while let Some(batch) = input.next_batch()? {
        let samples = splitter.split(&batch)?;
        let mut s = lock(shared);
        let mut fresh = Vec::new();
        for id in stack_ids(&samples) {
            let n = s.uses.entry(id).or_insert(0);
            if *n == 0 {
                fresh.push(id);
            }
            *n += 1;
        }
        drop(s);
        fresh.sort_unstable();
        fresh.dedup();
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
        if s.dead >= COMPACT_AFTER && s.dead >= s.uses.len() {
            compact(&mut s)?;
            let Shared { uses, .. } = &*s;
            splitter.retain(splitter.splits(), |id| uses.contains_key(id))?;
        }
    }
    let mut s = lock(shared);
    gather(&mut s, schema, keep_ns)
}

/// Drop the stacks no row uses any more.
fn compact(s: &mut Shared) -> Result<()> {
    let mut kept = Vec::new();
    for batch in &s.stacks {
        let ids = batch
            .column_by_name(col::STACK_ID)
            .map(|c| c.as_fixed_size_binary().clone());
        let Some(ids) = ids else { continue };
        let alive: arrow_array::BooleanArray = (0..ids.len())
            .map(|i| {
                Some(<[u8; 16]>::try_from(ids.value(i)).is_ok_and(|id| s.uses.contains_key(&id)))
            })
            .collect();
        let batch = arrow_select::filter::filter_record_batch(batch, &alive)?;
        if batch.num_rows() > 0 {
            kept.push(batch);
        }
    }
    s.stacks = if kept.len() > 1 {
        vec![arrow_select::concat::concat_batches(
            &kept[0].schema(),
            &kept,
        )?]
    } else {
        kept
    };
    s.dead = 0;
    Ok(())
}

/// Concatenate the pending rows into one kept batch and drop batches older than `keep_ns`
/// before the newest row (and their uses of stacks).
fn gather(s: &mut Shared, schema: &SchemaRef, keep_ns: Ns) -> Result<()> {
    if !s.pending.is_empty() {
        let batch = arrow_select::concat::concat_batches(schema, &s.pending)?;
        s.pending.clear();
        s.pending_rows = 0;
        let kinds = kind_spans(&batch)?;
        if let Some(last) = kinds.iter().map(|k| k.last).max() {
            s.kept.push_back(Kept { last, batch, kinds });
        } else {
            release(s, &batch);
        }
    }
    let newest = s.kept.iter().map(|k| k.last).max().unwrap_or(0);
    while s.kept.front().is_some_and(|k| k.last < newest - keep_ns) {
        if let Some(old) = s.kept.pop_front() {
            release(s, &old.batch);
        }
    }
    Ok(())
}

/// The rows of `batch` are dropped: their stacks are used once less each.
fn release(s: &mut Shared, batch: &RecordBatch) {
    for id in stack_ids(batch) {
        if let Some(n) = s.uses.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                s.uses.remove(&id);
                s.dead += 1;
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use stacks_testkit::rows::{Frame, Row};

    const SEC: i64 = 1_000_000_000;

    /// A long stream whose stacks change every second: the stacks held follow the rows kept
    /// (the last few seconds), not the whole stream, and every kept row's stack is held.
    #[test]
    fn stacks_follow_the_rows_kept() {
        let (seconds, per_second) = (40i64, 5000usize);
        let batches: Vec<RecordBatch> = (0..seconds)
            .map(|t| {
                let rows: Vec<Row> = (0..per_second)
                    .map(|i| Row {
                        time: t * SEC + i as i64,
                        kind: "profile".into(),
                        value: 1,
                        stack: Some(vec![Frame {
                            function: Some(format!("second_{t}_stack_{}", i % 1000)),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    })
                    .collect();
                stacks_testkit::recording::batch(&rows)
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("stacks-top-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stream.arrow");
        let bytes = stacks_testkit::stream_bytes(&batches[0].schema(), &batches, true);
        std::fs::write(&path, bytes).unwrap();
        let input = stacks_stream::open_input(Some(&path)).unwrap();
        let splitter = StackSplitter::new(&input.schema()).unwrap();
        let schema = Arc::clone(splitter.samples_schema());
        let shared = Mutex::new(Shared {
            kept: VecDeque::new(),
            pending: Vec::new(),
            pending_rows: 0,
            stacks: Vec::new(),
            uses: HashMap::new(),
            dead: 0,
            rows: 0,
            ended: false,
            error: None,
        });
        read(input, splitter, &shared, 5 * SEC, &schema).unwrap();
        let s = lock(&shared);
        let held: Vec<StackId> = s.stacks.iter().flat_map(stack_ids).collect();
        let live: std::collections::HashSet<StackId> = s
            .kept
            .iter()
            .map(|k| &k.batch)
            .chain(&s.pending)
            .flat_map(stack_ids)
            .collect();
        // 1,000 stacks a second for 40 s; the rows of the last 5 s (in batches of
        // GATHER_ROWS) use a few thousand: at most as many dead ones are held besides.
        assert!(
            live.len() < 20_000,
            "{} stacks used by kept rows",
            live.len()
        );
        assert!(
            held.len() <= 2 * live.len() + COMPACT_AFTER,
            "{} stacks held for {} used",
            held.len(),
            live.len()
        );
        let held: std::collections::HashSet<StackId> = held.into_iter().collect();
        assert!(live.is_subset(&held), "every kept row's stack is held");
        assert_eq!(s.uses.len(), live.len(), "uses count the kept rows' stacks");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
