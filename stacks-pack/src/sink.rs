//! Crash-safe Parquet output, as pairs of files: `NAME.samples.parquet` (the rows without
//! their stacks, each with its `stack_id`) and `NAME.stacks.parquet` (each distinct stack of
//! those rows once). Each file is written as `.<name>.tmp` next to its final name; when
//! complete it is closed, fsynced, renamed and its directory fsynced, the stacks file first,
//! so a reader of the directory only ever sees whole files, and every samples file it sees
//! has its stacks. A [`Packer`] splits incoming batches with a [`StackSplitter`] (each
//! distinct stack kept once), buffers the samples rows up to a row group, sorts each row group
//! by `time` (so its statistics are tight and time-range queries prune), routes rows to their
//! partition directory, and starts a new pair when the current one reaches its row, byte or
//! age limit. Memory: the distinct stacks of the pair being written and of the rows buffered
//! (the splitter drops the others when a pair is closed), plus one row group of samples rows
//! (scalars), at most [`crate::MAX_GROUP_BYTES`] of them as Arrow arrays.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::file::properties::WriterProperties;
use stacks_store::{StackId, StackSplitter};

use crate::error::PackError;
use stacks_stream::sys::SudoOwner as Owner;

use crate::fsutil::create_dir_tracked;
use crate::levels::Levels;
use crate::naming::Namer;
use crate::order::{self, TimeColumn};
use crate::pair::{BuildId, Pair, PartFile, SharedSplitter, lock, note_ids};

/// How many names to try before giving up when candidates already exist.
const NAME_ATTEMPTS: usize = 1000;
/// The samples file path of the pair `-o FILE` names: `x.parquet` (or `x`, or
/// `x.samples.parquet`) gives `x.samples.parquet`, whose stacks and frames files are
/// `x.stacks.parquet` and `x.frames.parquet`.
pub fn pair_of(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = name
        .strip_suffix(stacks_store::SAMPLES_SUFFIX)
        .or_else(|| name.strip_suffix(stacks_store::STACKS_SUFFIX))
        .or_else(|| name.strip_suffix(stacks_store::FRAMES_SUFFIX))
        .or_else(|| name.strip_suffix(stacks_store::PARQUET_SUFFIX))
        .unwrap_or(&name);
    file.with_file_name(format!("{base}{}", stacks_store::SAMPLES_SUFFIX))
}

/// Where the packer writes.
#[derive(Debug)]
pub enum Target {
    /// A directory of rotated, uniquely named files.
    Dir { dir: PathBuf, namer: Namer },
    /// Exactly one pair of files (`-o`), named after this path (see [`pair_of`]), each
    /// replaced atomically if it exists (the stacks file first).
    File(PathBuf),
}

/// Hive-style partition directories under the output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Partitioning {
    /// `date=YYYY-MM-DD/` by the UTC date of each row's `time`.
    Date,
    /// `date=YYYY-MM-DD/hour=HH/` by the UTC hour of each row's `time`.
    Hour,
}

/// When the packer starts a new file.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Rows per file (exact, except for the last file).
    pub max_rows: u64,
    /// Bytes per file: a file is finished at the first row-group boundary at or past this.
    pub max_bytes: Option<u64>,
    /// A file is finished at most this long after its first row arrived.
    pub max_age: Option<Duration>,
    /// Rows per row group (each sorted by time).
    pub group_rows: usize,
}

impl Limits {
    /// One unbounded file (`-o`).
    pub fn single_file(group_rows: usize) -> Self {
        Self {
            max_rows: u64::MAX,
            max_bytes: None,
            max_age: None,
            group_rows,
        }
    }
}

/// What a packer wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Samples rows written.
    pub rows: u64,
    /// File pairs written.
    pub files: u64,
    /// Bytes of every file, both halves of each pair.
    pub bytes: u64,
    /// Stacks rows written (each pair's distinct stacks, summed over the pairs).
    pub stacks: u64,
    /// Distinct stacks of the whole stream.
    pub distinct: u64,
    /// Whether `distinct` is an estimate (streams of more than 65,536 distinct stacks; see
    /// `stacks_store::DistinctCount`).
    pub distinct_estimated: bool,
    /// The samples file of each pair (its stacks file is [`stacks_store::stacks_path`] of it).
    pub paths: Vec<PathBuf>,
}

/// Buffers batches into time-sorted row groups and splits them into rotated file pairs.
pub struct Packer {
    target: Target,
    splitter: SharedSplitter,
    /// Samples rows: their schema and writer properties.
    schema: SchemaRef,
    props: WriterProperties,
    /// The stacks (and frames) files' formats.
    levels: Levels,
    limits: Limits,
    partitioning: Option<Partitioning>,
    time: Option<TimeColumn>,
    owner: Option<Owner>,
    current: Option<Pair>,
    /// Samples rows received but not yet in a row group, in arrival order.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// Memory of the buffered rows' arrays.
    pending_bytes: usize,
    /// Samples batches taken (split batches, counted as the splitter counts them).
    taken: u64,
    /// A pair was closed: the splitter may drop the stacks only it used.
    prune_due: bool,
    /// When the first row of the file being filled (open or still buffered) arrived.
    file_started: Option<Instant>,
    /// The rows of a set that could not be finished, by kind.
    unfinished: crate::outage::Tally,
    /// The largest set finished, in bytes.
    largest: u64,
    summary: Summary,
}

impl Packer {
    /// A packer writing rows of stream `schema` (already stamped) to `target`: `props` for the
    /// samples files (see [`crate::writer_properties`]), `levels` for the stacks and frames
    /// files. Partitioning needs a `time` column (checked
    /// by the caller with [`order::time_column`]).
    pub fn new(
        target: Target,
        schema: &SchemaRef,
        props: WriterProperties,
        levels: Levels,
        limits: Limits,
        partitioning: Option<Partitioning>,
        owner: Option<Owner>,
    ) -> Result<Self, PackError> {
        let schema_err = |e: arrow_schema::ArrowError| PackError::Schema {
            input: "the stream".into(),
            detail: e.to_string(),
        };
        let mut splitter = StackSplitter::new(schema).map_err(schema_err)?;
        // The frames layout holds stacks as frame ids from the start: a burst of distinct
        // stacks then costs their distinct frames, not every frame of every stack.
        if matches!(levels, Levels::Framed { .. }) {
            splitter = splitter
                .with_framer(schema)
                .map_err(schema_err)?
                .ok_or_else(|| {
                    schema_err(arrow_schema::ArrowError::SchemaError(
                        "`stack` is not a list of frames".into(),
                    ))
                })?;
        }
        let samples = Arc::clone(splitter.samples_schema());
        let time = order::time_column(&samples);
        Ok(Self {
            target,
            splitter: Arc::new(Mutex::new(splitter)),
            schema: samples,
            props,
            levels,
            limits: Limits {
                max_rows: limits.max_rows.max(1),
                group_rows: limits.group_rows.max(1),
                ..limits
            },
            partitioning,
            time,
            owner,
            current: None,
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            taken: 0,
            prune_due: false,
            file_started: None,
            unfinished: Default::default(),
            largest: 0,
            summary: Summary::default(),
        })
    }

    /// The splitter, for a reading thread to split batches with before [`Self::write_samples`].
    pub fn splitter(&self) -> SharedSplitter {
        Arc::clone(&self.splitter)
    }

    /// Schema of the samples rows [`Self::write_samples`] takes.
    pub fn samples_schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows accepted so far (written, in the file in progress, or buffered).
    pub fn rows(&self) -> u64 {
        self.summary.rows
            + self.current.as_ref().map_or(0, |c| c.samples.rows)
            + self.pending_rows as u64
    }

    /// Give up the set being written and the rows buffered (after a write failed): their
    /// temporary files are removed; returns their rows and events by kind.
    pub(crate) fn abandon(&mut self) -> crate::outage::Tally {
        let mut lost = std::mem::take(&mut self.unfinished);
        if let Some(pair) = self.current.take() {
            crate::outage::merge(&mut lost, pair.kinds);
            // Dropping its samples file removes its temporary file.
        }
        for b in self.pending.drain(..) {
            crate::outage::tally(&b, &mut lost);
        }
        self.pending_rows = 0;
        self.pending_bytes = 0;
        self.file_started = None;
        self.prune_due = true;
        let _ = self.prune();
        lost
    }

    /// The rows taken that are in no finished set yet, by kind: the set being written, the
    /// rows buffered for it, and those of a set that could not be finished.
    pub(crate) fn unfinished(&self) -> crate::outage::Tally {
        let mut t = self.unfinished.clone();
        if let Some(pair) = &self.current {
            crate::outage::merge(&mut t, pair.kinds.clone());
        }
        for b in &self.pending {
            crate::outage::tally(b, &mut t);
        }
        t
    }

    /// A batch of samples rows split and then dropped (the store is down): taken, so the
    /// splitter may drop its stacks.
    pub(crate) fn discard_samples(&mut self) {
        self.taken += 1;
        self.prune_due = true;
        let _ = self.prune();
    }

    /// The largest set finished so far, in bytes.
    pub(crate) fn largest_set(&self) -> u64 {
        self.largest
    }

    /// File sets finished so far, and their bytes.
    pub fn written(&self) -> (u64, u64) {
        (self.summary.files, self.summary.bytes)
    }

    /// Accept a batch of the stream; complete row groups are sorted and written, files
    /// rotated as needed.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        let samples = lock(&self.splitter)
            .split(batch)
            .map_err(|e| self.arrow_err(e))?;
        self.write_samples(&samples)
    }

    /// Accept samples rows: every batch split by [`Self::splitter`], in order (the splitter
    /// keeps the stacks of batches not taken yet).
    pub(crate) fn write_samples(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        self.taken += 1;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.file_started.is_none() {
            self.file_started = Some(Instant::now());
        }
        stacks_stream::sys::release_free_memory_now_and_then();
        self.pending.push(batch.clone());
        self.pending_rows += batch.num_rows();
        self.pending_bytes += batch.get_array_memory_size();
        loop {
            let room = self.room();
            if self.pending_rows >= room {
                self.flush_group(room)?;
            } else if self.pending_bytes >= crate::MAX_GROUP_BYTES && self.pending_rows > 0 {
                // Wide rows (paths, arguments, span attributes) fill memory long before a
                // row group's rows: the group is cut at its bytes instead.
                self.flush_group(self.pending_rows)?;
            } else {
                break;
            }
        }
        self.prune()
    }

    /// Finish the current file if it has reached its age limit. Call regularly.
    pub fn tick(&mut self, now: Instant) -> Result<(), PackError> {
        match (self.limits.max_age, self.file_started) {
            (Some(age), Some(started)) if now.duration_since(started) >= age => {
                self.flush_all()?;
                self.close_current()?;
                self.prune()
            }
            _ => Ok(()),
        }
    }

    /// After a pair was closed: the splitter drops the stacks that neither the rows buffered
    /// nor the pair being written use (nor batches still on their way), so memory follows
    /// the open file, not the stream.
    fn prune(&mut self) -> Result<(), PackError> {
        if !std::mem::take(&mut self.prune_due) {
            return Ok(());
        }
        let mut buffered: HashSet<StackId, BuildId> = HashSet::default();
        for b in &self.pending {
            note_ids(&mut buffered, b);
        }
        let open = self.current.as_ref().map(|c| &c.ids);
        let live = |id: &StackId| buffered.contains(id) || open.is_some_and(|o| o.contains(id));
        lock(&self.splitter)
            .retain(self.taken, live)
            .map_err(|e| self.arrow_err(e))?;
        stacks_stream::sys::release_free_memory();
        Ok(())
    }

    /// Write what is buffered and finish the file in progress. In single-file mode a stream
    /// without rows still gets a valid, empty file carrying the schema.
    pub fn finish(mut self) -> Result<Summary, PackError> {
        self.flush_all()?;
        if self.current.is_none()
            && self.summary.files == 0
            && matches!(self.target, Target::File(_))
        {
            self.current = Some(self.open(None, None)?);
        }
        self.close_current()?;
        (self.summary.distinct, self.summary.distinct_estimated) = lock(&self.splitter).distinct();
        Ok(std::mem::take(&mut self.summary))
    }

    /// Rows the next row group may hold: the group size, and what fits in the current file.
    fn room(&self) -> usize {
        let in_file = self.current.as_ref().map_or(0, |c| c.samples.rows);
        let left = usize::try_from(self.limits.max_rows - in_file).unwrap_or(usize::MAX);
        self.limits.group_rows.min(left).max(1)
    }

    fn flush_all(&mut self) -> Result<(), PackError> {
        while self.pending_rows > 0 {
            let n = self.room().min(self.pending_rows);
            self.flush_group(n)?;
        }
        Ok(())
    }

    /// Take the first `n` buffered rows (arrival order), sort them by time and write them as
    /// one row group (one per partition they span). The rows are given to the writer a chunk
    /// at a time in time order ([`order::in_order`]), not concatenated and copied whole.
    fn flush_group(&mut self, n: usize) -> Result<(), PackError> {
        let (front, rest) = order::split_front(&self.pending, n);
        self.pending_rows -= front.iter().map(RecordBatch::num_rows).sum::<usize>();
        self.pending = rest;
        self.pending_bytes = self
            .pending
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum();
        let sorted = self
            .time
            .as_ref()
            .and_then(|t| order::time_order(&front, t));
        let mut chunks = order::in_order(&front, sorted.as_deref());
        while let Some(chunk) = chunks.next() {
            let chunk = chunk.map_err(|e| self.arrow_err(e))?;
            let mut parts = self.partitions(&chunk).into_iter();
            while let Some((partition, rows)) = parts.next() {
                if let Err(e) = self.write_rows(partition, &rows) {
                    // The rows not written yet go with the set that failed.
                    for (_, rows) in parts {
                        crate::outage::tally(&rows, &mut self.unfinished);
                    }
                    for chunk in chunks.flatten() {
                        crate::outage::tally(&chunk, &mut self.unfinished);
                    }
                    return Err(e);
                }
            }
        }
        drop(chunks);
        drop(front);
        if let Some(pair) = self.current.as_mut() {
            pair.samples.end_group()?;
        }
        let full = self.current.as_ref().is_some_and(|c| {
            c.samples.rows >= self.limits.max_rows
                || self
                    .limits
                    .max_bytes
                    .is_some_and(|m| c.samples.bytes() >= m)
        });
        if full {
            self.close_current()?;
            if self.pending_rows > 0 {
                self.file_started = Some(Instant::now());
            }
        }
        Ok(())
    }

    /// Rows of one partition, in time order, into the current pair's row group in progress;
    /// a new pair when the partition changes.
    fn write_rows(
        &mut self,
        partition: Option<String>,
        rows: &RecordBatch,
    ) -> Result<(), PackError> {
        let start_secs = self.time.as_ref().and_then(|t| t.first_secs(rows));
        let switch = self
            .current
            .as_ref()
            .is_some_and(|c| c.samples.partition != partition);
        if switch {
            if let Err(e) = self.close_current() {
                crate::outage::tally(rows, &mut self.unfinished);
                return Err(e);
            }
            self.file_started = Some(Instant::now());
        }
        if self.current.is_none() {
            match self.open(partition, start_secs) {
                Ok(pair) => self.current = Some(pair),
                Err(e) => {
                    crate::outage::tally(rows, &mut self.unfinished);
                    return Err(e);
                }
            }
        }
        if let Some(pair) = self.current.as_mut() {
            // Noted first: rows that fail to be written are counted with the set.
            pair.note_ids(rows);
            pair.samples.write(rows)?;
        }
        Ok(())
    }

    /// Sorted rows split into runs of one partition each (all of them when not
    /// partitioning).
    fn partitions(&self, group: &RecordBatch) -> Vec<(Option<String>, RecordBatch)> {
        match (self.partitioning, &self.time, &self.target) {
            (Some(Partitioning::Date), Some(t), Target::Dir { .. }) => t
                .date_runs(group)
                .into_iter()
                .map(|(date, start, len)| (Some(format!("date={date}")), group.slice(start, len)))
                .collect(),
            (Some(Partitioning::Hour), Some(t), Target::Dir { .. }) => t
                .hour_runs(group)
                .into_iter()
                .map(|(path, start, len)| (Some(path), group.slice(start, len)))
                .collect(),
            _ => vec![(None, group.clone())],
        }
    }

    /// An Arrow error while regrouping rows, named after the destination.
    fn arrow_err(&self, e: arrow_schema::ArrowError) -> PackError {
        let path = match &self.target {
            Target::Dir { dir, .. } => dir,
            Target::File(path) => path,
        };
        PackError::Write {
            path: path.display().to_string(),
            detail: e.to_string(),
        }
    }

    fn close_current(&mut self) -> Result<(), PackError> {
        if let Some(mut pair) = self.current.take() {
            let rows = pair.samples.rows;
            let dest = pair.samples.dest.clone();
            let kinds = std::mem::take(&mut pair.kinds);
            let (bytes, stacks) =
                match pair.finalize(&self.splitter, &self.levels, self.owner.as_ref()) {
                    Ok(done) => done,
                    Err(e) => {
                        // Its frames and stacks files may be in place already: a set is whole
                        // or absent.
                        if fs::symlink_metadata(&dest).is_err() {
                            let _ = fs::remove_file(stacks_store::stacks_path(&dest));
                            let _ = fs::remove_file(stacks_store::frames_path(&dest));
                        }
                        crate::outage::merge(&mut self.unfinished, kinds);
                        return Err(e);
                    }
                };
            self.largest = self.largest.max(bytes);
            self.summary.rows += rows;
            self.summary.files += 1;
            self.summary.bytes += bytes;
            self.summary.stacks += stacks;
            self.summary.paths.push(dest);
            self.prune_due = true;
        }
        if self.pending_rows == 0 {
            self.file_started = None;
        }
        Ok(())
    }

    /// Open the next pair's samples file: in `partition` (created if needed), named after
    /// `start_secs` (the first row's time) or, without a time column, the current time.
    fn open(
        &mut self,
        partition: Option<String>,
        start_secs: Option<u64>,
    ) -> Result<Pair, PackError> {
        let samples = self.open_samples(partition, start_secs)?;
        Ok(Pair {
            samples,
            ids: HashSet::default(),
            kinds: Default::default(),
        })
    }

    fn open_samples(
        &mut self,
        partition: Option<String>,
        start_secs: Option<u64>,
    ) -> Result<PartFile, PackError> {
        let owner = self.owner.as_ref();
        match &mut self.target {
            Target::File(path) => {
                PartFile::create(pair_of(path), None, &self.schema, &self.props, owner)
            }
            Target::Dir { dir, namer } => {
                let dir = match &partition {
                    Some(p) => {
                        let sub = dir.join(p);
                        for created in create_dir_tracked(&sub)? {
                            if let Some(owner) = owner {
                                owner.chown_path(&created);
                            }
                        }
                        sub
                    }
                    None => dir.clone(),
                };
                let stamp = start_secs
                    .map(|s| UNIX_EPOCH + Duration::from_secs(s))
                    .unwrap_or_else(SystemTime::now);
                for _ in 0..NAME_ATTEMPTS {
                    let base = namer.next(stamp);
                    let dest = dir.join(format!("{base}{}", stacks_store::SAMPLES_SUFFIX));
                    let taken = |p: &Path| fs::symlink_metadata(p).is_ok();
                    if taken(&dest)
                        || taken(&stacks_store::stacks_path(&dest))
                        || taken(&stacks_store::frames_path(&dest))
                    {
                        continue;
                    }
                    match PartFile::create(
                        dest,
                        partition.clone(),
                        &self.schema,
                        &self.props,
                        owner,
                    ) {
                        Err(PackError::Create { err, .. })
                            if err.kind() == io::ErrorKind::AlreadyExists => {}
                        other => return other,
                    }
                }
                Err(PackError::NoFreeName {
                    path: dir.display().to_string(),
                })
            }
        }
    }
}
