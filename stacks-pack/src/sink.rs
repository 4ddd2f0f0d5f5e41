//! Crash-safe Parquet output. Each file is written as `.<name>.tmp` next to its final name;
//! when complete it is closed, fsynced, renamed and its directory fsynced, so a reader of the
//! directory only ever sees whole `*.parquet` files. A [`Packer`] buffers incoming rows up to a
//! row group, sorts each row group by `time` (so its statistics are tight and time-range
//! queries prune), routes rows to their partition directory, and starts a new file when the
//! current one reaches its row, byte or age limit.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::error::PackError;
use stacks_stream::sys::SudoOwner as Owner;

use crate::fsutil::{create_dir_tracked, parent_dir, sync_dir};
use crate::naming::Namer;
use crate::order::{self, TimeColumn};

/// How many names to try before giving up when candidates already exist.
const NAME_ATTEMPTS: usize = 1000;

/// One output file being written under its temporary name.
struct PartFile {
    tmp: PathBuf,
    dest: PathBuf,
    writer: Option<ArrowWriter<File>>,
    rows: u64,
    /// The partition directory (relative to the output directory) this file belongs to.
    partition: Option<String>,
    done: bool,
}

impl PartFile {
    /// Create `.<name>.tmp` beside `dest`. Fails if the temporary name already exists.
    fn create(
        dest: PathBuf,
        partition: Option<String>,
        schema: &SchemaRef,
        props: &WriterProperties,
        owner: Option<&Owner>,
    ) -> Result<Self, PackError> {
        let file_name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = parent_dir(&dest).join(format!(".{file_name}.tmp"));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|source| PackError::Create {
                path: tmp.display().to_string(),
                err: source,
            })?;
        let mut part = PartFile {
            tmp,
            dest,
            writer: None,
            rows: 0,
            partition,
            done: false,
        };
        if let Some(owner) = owner {
            owner.chown_file(&file, &part.tmp);
        }
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props.clone()))
            .map_err(|e| PackError::write(&part.tmp, e))?;
        part.writer = Some(writer);
        Ok(part)
    }

    fn writer(&mut self) -> Result<&mut ArrowWriter<File>, PackError> {
        self.writer
            .as_mut()
            .ok_or_else(|| PackError::write_io(&self.tmp, io::Error::other("file already closed")))
    }

    /// Write `batch` as one complete row group.
    fn write_group(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        let tmp = self.tmp.clone();
        let writer = self.writer()?;
        writer.write(batch).map_err(|e| PackError::write(&tmp, e))?;
        writer.flush().map_err(|e| PackError::write(&tmp, e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Bytes written so far (complete row groups).
    fn bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.bytes_written() as u64)
    }

    /// Close, fsync, rename into place, fsync the directory. Returns the file's size.
    fn finalize(mut self) -> Result<u64, PackError> {
        let writer = self.writer.take().ok_or_else(|| {
            PackError::write_io(&self.tmp, io::Error::other("file already closed"))
        })?;
        let file = writer
            .into_inner()
            .map_err(|e| PackError::write(&self.tmp, e))?;
        let sync_err = |source| PackError::Sync {
            path: self.tmp.display().to_string(),
            err: source,
        };
        file.sync_all().map_err(sync_err)?;
        let bytes = file.metadata().map_err(sync_err)?.len();
        drop(file);
        fs::rename(&self.tmp, &self.dest).map_err(|source| PackError::Rename {
            from: self.tmp.display().to_string(),
            to: self.dest.display().to_string(),
            err: source,
        })?;
        self.done = true;
        sync_dir(&parent_dir(&self.dest))?;
        Ok(bytes)
    }
}

impl Drop for PartFile {
    /// An unfinished file (error path) leaves no temporary file behind.
    fn drop(&mut self) {
        if !self.done {
            self.writer = None;
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Where the packer writes.
#[derive(Debug)]
pub enum Target {
    /// A directory of rotated, uniquely named files.
    Dir { dir: PathBuf, namer: Namer },
    /// Exactly one file (`-o`), replaced atomically if it exists.
    File(PathBuf),
}

/// Hive-style partition directories under the output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Partitioning {
    /// `date=YYYY-MM-DD/` by the UTC date of each row's `time`.
    Date,
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
    pub rows: u64,
    pub files: u64,
    pub bytes: u64,
    pub paths: Vec<PathBuf>,
}

/// Buffers batches into time-sorted row groups and splits them into rotated Parquet files.
pub struct Packer {
    target: Target,
    schema: SchemaRef,
    props: WriterProperties,
    limits: Limits,
    partitioning: Option<Partitioning>,
    time: Option<TimeColumn>,
    owner: Option<Owner>,
    current: Option<PartFile>,
    /// Rows received but not yet in a row group, in arrival order.
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// When the first row of the file being filled (open or still buffered) arrived.
    file_started: Option<Instant>,
    summary: Summary,
}

impl Packer {
    /// A packer writing `schema` rows to `target`. Partitioning needs a `time` column
    /// (checked by the caller with [`order::time_column`]).
    pub fn new(
        target: Target,
        schema: SchemaRef,
        props: WriterProperties,
        limits: Limits,
        partitioning: Option<Partitioning>,
        owner: Option<Owner>,
    ) -> Self {
        let time = order::time_column(&schema);
        Self {
            target,
            schema,
            props,
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
            file_started: None,
            summary: Summary::default(),
        }
    }

    /// Rows accepted so far (written, in the file in progress, or buffered).
    pub fn rows(&self) -> u64 {
        self.summary.rows + self.current.as_ref().map_or(0, |c| c.rows) + self.pending_rows as u64
    }

    /// Accept a batch; complete row groups are sorted and written, files rotated as needed.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if self.file_started.is_none() {
            self.file_started = Some(Instant::now());
        }
        self.pending.push(batch.clone());
        self.pending_rows += batch.num_rows();
        loop {
            let room = self.room();
            if self.pending_rows < room {
                return Ok(());
            }
            self.flush_group(room)?;
        }
    }

    /// Finish the current file if it has reached its age limit. Call regularly.
    pub fn tick(&mut self, now: Instant) -> Result<(), PackError> {
        match (self.limits.max_age, self.file_started) {
            (Some(age), Some(started)) if now.duration_since(started) >= age => {
                self.flush_all()?;
                self.close_current()
            }
            _ => Ok(()),
        }
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
        Ok(std::mem::take(&mut self.summary))
    }

    /// Rows the next row group may hold: the group size, and what fits in the current file.
    fn room(&self) -> usize {
        let in_file = self.current.as_ref().map_or(0, |c| c.rows);
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
    /// one row group (one per partition they span).
    fn flush_group(&mut self, n: usize) -> Result<(), PackError> {
        let (group, rest) =
            order::split_front(&self.schema, &self.pending, n).map_err(|e| self.arrow_err(e))?;
        self.pending_rows -= group.num_rows();
        self.pending = rest;
        let group = match &self.time {
            Some(t) => order::sort_by_time(&group, t).map_err(|e| self.arrow_err(e))?,
            None => group,
        };
        for (partition, rows) in self.partitions(&group) {
            let start_secs = self.time.as_ref().and_then(|t| t.first_secs(&rows));
            let switch = self
                .current
                .as_ref()
                .is_some_and(|c| c.partition != partition);
            if switch {
                self.close_current()?;
                self.file_started = Some(Instant::now());
            }
            if self.current.is_none() {
                self.current = Some(self.open(partition, start_secs)?);
            }
            if let Some(part) = self.current.as_mut() {
                part.write_group(&rows)?;
            }
        }
        let full = self.current.as_ref().is_some_and(|c| {
            c.rows >= self.limits.max_rows || self.limits.max_bytes.is_some_and(|m| c.bytes() >= m)
        });
        if full {
            self.close_current()?;
            if self.pending_rows > 0 {
                self.file_started = Some(Instant::now());
            }
        }
        Ok(())
    }

    /// The sorted group split into runs of one partition each (the whole group when not
    /// partitioning).
    fn partitions(&self, group: &RecordBatch) -> Vec<(Option<String>, RecordBatch)> {
        match (self.partitioning, &self.time, &self.target) {
            (Some(Partitioning::Date), Some(t), Target::Dir { .. }) => t
                .date_runs(group)
                .into_iter()
                .map(|(date, start, len)| (Some(format!("date={date}")), group.slice(start, len)))
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
        if let Some(part) = self.current.take() {
            let rows = part.rows;
            let dest = part.dest.clone();
            let bytes = part.finalize()?;
            self.summary.rows += rows;
            self.summary.files += 1;
            self.summary.bytes += bytes;
            self.summary.paths.push(dest);
        }
        if self.pending_rows == 0 {
            self.file_started = None;
        }
        Ok(())
    }

    /// Open the next file: in `partition` (created if needed), named after `start_secs` (the
    /// first row's time) or, without a time column, the current time.
    fn open(
        &mut self,
        partition: Option<String>,
        start_secs: Option<u64>,
    ) -> Result<PartFile, PackError> {
        let owner = self.owner.as_ref();
        match &mut self.target {
            Target::File(path) => {
                PartFile::create(path.clone(), None, &self.schema, &self.props, owner)
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
                    let dest = dir.join(namer.next(stamp));
                    if fs::symlink_metadata(&dest).is_ok() {
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
