//! Crash-safe Parquet output. Each file is written as `.<name>.tmp` next to its final name;
//! when complete it is closed, fsynced, renamed and its directory fsynced, so a reader of the
//! directory only ever sees whole `*.parquet` files. A [`Packer`] splits a stream of batches
//! into such files of at most `max_rows` rows.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::error::PackError;
use crate::fsutil::{Owner, parent_dir, sync_dir};
use crate::naming::Namer;

/// How many names to try before giving up when candidates already exist.
const NAME_ATTEMPTS: usize = 1000;

/// One output file being written under its temporary name.
struct PartFile {
    tmp: PathBuf,
    dest: PathBuf,
    writer: Option<ArrowWriter<File>>,
    rows: u64,
    done: bool,
}

impl PartFile {
    /// Create `.<name>.tmp` beside `dest`. Fails if the temporary name already exists.
    fn create(
        dest: PathBuf,
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

    fn write(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        let writer = self.writer.as_mut().ok_or_else(|| {
            PackError::write_io(&self.tmp, io::Error::other("file already closed"))
        })?;
        writer
            .write(batch)
            .map_err(|e| PackError::write(&self.tmp, e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
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

/// What a packer wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub rows: u64,
    pub files: u64,
    pub bytes: u64,
    pub paths: Vec<PathBuf>,
}

/// Splits batches into Parquet files of at most `max_rows` rows (use `u64::MAX` for one file).
pub struct Packer {
    target: Target,
    schema: SchemaRef,
    props: WriterProperties,
    max_rows: u64,
    owner: Option<Owner>,
    current: Option<PartFile>,
    summary: Summary,
}

impl Packer {
    /// `max_rows` is clamped to at least 1.
    pub fn new(
        target: Target,
        schema: SchemaRef,
        props: WriterProperties,
        max_rows: u64,
        owner: Option<Owner>,
    ) -> Self {
        Self {
            target,
            schema,
            props,
            max_rows: max_rows.max(1),
            owner,
            current: None,
            summary: Summary::default(),
        }
    }

    /// Rows accepted so far (including the file in progress).
    pub fn rows(&self) -> u64 {
        self.summary.rows + self.current.as_ref().map_or(0, |c| c.rows)
    }

    /// Write a batch, finishing and starting files as `max_rows` is reached.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        let total = batch.num_rows();
        let mut offset = 0;
        while offset < total {
            if self.current.is_none() {
                self.current = Some(self.open()?);
            }
            let Some(part) = self.current.as_mut() else {
                break;
            };
            let room = usize::try_from(self.max_rows - part.rows).unwrap_or(usize::MAX);
            let take = room.min(total - offset);
            if take == total {
                part.write(batch)?;
            } else {
                part.write(&batch.slice(offset, take))?;
            }
            offset += take;
            if part.rows >= self.max_rows {
                self.close_current()?;
            }
        }
        Ok(())
    }

    /// Finish the file in progress. In single-file mode a stream without rows still gets
    /// a valid, empty file carrying the schema.
    pub fn finish(mut self) -> Result<Summary, PackError> {
        if self.current.is_none()
            && self.summary.files == 0
            && matches!(self.target, Target::File(_))
        {
            self.current = Some(self.open()?);
        }
        self.close_current()?;
        Ok(std::mem::take(&mut self.summary))
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
        Ok(())
    }

    fn open(&mut self) -> Result<PartFile, PackError> {
        let owner = self.owner.as_ref();
        match &mut self.target {
            Target::File(path) => PartFile::create(path.clone(), &self.schema, &self.props, owner),
            Target::Dir { dir, namer } => {
                for _ in 0..NAME_ATTEMPTS {
                    let dest = dir.join(namer.next(SystemTime::now()));
                    if fs::symlink_metadata(&dest).is_ok() {
                        continue;
                    }
                    match PartFile::create(dest, &self.schema, &self.props, owner) {
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
