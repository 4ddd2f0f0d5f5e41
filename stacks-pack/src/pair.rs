//! One file set being written: each file ([`PartFile`]) under a temporary name until it is
//! complete, then fsynced and renamed into place, the frames file first, then the stacks
//! file, then the samples file ([`Pair::finalize`]); the set remembers the stack ids its
//! samples use, so its stacks file holds exactly those, and its frames file their frames.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use stacks_store::frames;
use stacks_store::{StackId, StackSplitter};
use stacks_stream::sys::SudoOwner as Owner;

use crate::error::PackError;
use crate::fsutil::{parent_dir, sync_dir};
use crate::levels::{FileFormat, Levels};

/// Stacks written to a stacks file per batch (bounds the copy of stacks made at a time).
pub(crate) const STACKS_CHUNK: usize = 4096;

/// The splitter shared by the thread that reads (and splits) and the one that writes.
pub(crate) type SharedSplitter = Arc<Mutex<StackSplitter>>;

/// The splitter, even if a thread panicked while holding it (its state stays consistent:
/// stacks are only added once complete).
pub(crate) fn lock(splitter: &SharedSplitter) -> MutexGuard<'_, StackSplitter> {
    splitter.lock().unwrap_or_else(|p| p.into_inner())
}

/// One output file being written under its temporary name.
pub(crate) struct PartFile {
    pub(crate) tmp: PathBuf,
    pub(crate) dest: PathBuf,
    writer: Option<ArrowWriter<File>>,
    pub(crate) rows: u64,
    /// The partition directory (relative to the output directory) this file belongs to.
    pub(crate) partition: Option<String>,
    done: bool,
}

impl PartFile {
    /// Create `.<name>.tmp` beside `dest`. Fails if the temporary name already exists.
    pub(crate) fn create(
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

    /// End the row group in progress (nothing when none is).
    pub(crate) fn end_group(&mut self) -> Result<(), PackError> {
        let tmp = self.tmp.clone();
        let writer = self.writer()?;
        writer.flush().map_err(|e| PackError::write(&tmp, e))
    }

    /// Write `batch`; row groups are cut by the writer properties.
    pub(crate) fn write(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        let tmp = self.tmp.clone();
        let writer = self.writer()?;
        writer.write(batch).map_err(|e| PackError::write(&tmp, e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Bytes written so far (complete row groups).
    pub(crate) fn bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.bytes_written() as u64)
    }

    /// Close, fsync, rename into place, fsync the directory. Returns the file's size.
    pub(crate) fn finalize(mut self) -> Result<u64, PackError> {
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

/// The samples file being written, and the stacks its rows use.
pub(crate) struct Pair {
    pub(crate) samples: PartFile,
    pub(crate) ids: HashSet<StackId, BuildId>,
    /// Its rows and events by kind (what is lost if the set cannot be finished).
    pub(crate) kinds: crate::outage::Tally,
}

/// Hashing for stack ids: they are already uniform 128-bit hashes, so folding their bytes
/// into 64 bits is enough (no need to hash them again).
#[derive(Default, Clone, Copy)]
pub(crate) struct BuildId;

impl std::hash::BuildHasher for BuildId {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`BuildId`].
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(b);
        }
    }
}

/// Add the stack ids of `rows` (samples rows) to `ids`.
pub(crate) fn note_ids(ids: &mut HashSet<StackId, BuildId>, rows: &RecordBatch) {
    let Some(col) = rows
        .column_by_name(stacks_stream::col::STACK_ID)
        .and_then(|c| c.as_fixed_size_binary_opt())
    else {
        return;
    };
    for i in 0..col.len() {
        if col.is_valid(i)
            && let Ok(id) = <StackId>::try_from(col.value(i))
        {
            ids.insert(id);
        }
    }
}

impl Pair {
    /// Remember the stack ids of `rows` (samples rows).
    pub(crate) fn note_ids(&mut self, rows: &RecordBatch) {
        note_ids(&mut self.ids, rows);
        crate::outage::tally(rows, &mut self.kinds);
    }

    /// Write the stacks file (the distinct ids of the samples) and, for framed levels, the
    /// frames file of their frames; make the frames file visible, then the stacks file, then
    /// the samples file. Returns (bytes of all, stacks written).
    pub(crate) fn finalize(
        self,
        splitter: &SharedSplitter,
        levels: &Levels,
        owner: Option<&Owner>,
    ) -> Result<(u64, u64), PackError> {
        let Pair { samples, ids, .. } = self;
        let mut ids: Vec<StackId> = ids.into_iter().collect();
        ids.sort_unstable();
        let count = ids.len() as u64;
        let part = |dest: PathBuf, format: &FileFormat| {
            PartFile::create(
                dest,
                samples.partition.clone(),
                &format.schema,
                &format.props,
                owner,
            )
        };
        let failed = |file: &PartFile| {
            let path = file.tmp.display().to_string();
            move |e: arrow_schema::ArrowError| PackError::Write {
                path,
                detail: e.to_string(),
            }
        };
        let mut bytes = 0;
        match levels {
            Levels::Whole { stacks: format } => {
                let mut stacks = part(stacks_store::stacks_path(&samples.dest), format)?;
                for chunk in ids.chunks(STACKS_CHUNK) {
                    let rows = lock(splitter).stacks(chunk).map_err(failed(&stacks))?;
                    stacks.write(&rows)?;
                }
                bytes += stacks.finalize()?;
            }
            Levels::Framed {
                stacks: stacks_format,
                frames: frames_format,
            } => {
                let mut frames = part(stacks_store::frames_path(&samples.dest), frames_format)?;
                let mut stacks = part(stacks_store::stacks_path(&samples.dest), stacks_format)?;
                // The parts are taken under the lock, the files built after it.
                let parts = lock(splitter).framed_parts(&ids).map_err(failed(&stacks))?;
                let set = frames::set_id(stacks_store::base_name(&samples.dest));
                // The frames' rows are written a batch at a time as they are made.
                let mut written = Ok(());
                let stack_rows = parts
                    .finish(
                        set,
                        &frames_format.schema,
                        &stacks_format.schema,
                        STACKS_CHUNK,
                        |rows| {
                            written = frames.write(&rows);
                            written.as_ref().map(|_| ()).map_err(|e| {
                                arrow_schema::ArrowError::ExternalError(e.to_string().into())
                            })
                        },
                    )
                    .map_err(failed(&frames));
                written?;
                let stack_rows = stack_rows?;
                for rows in &stack_rows {
                    stacks.write(rows)?;
                }
                bytes += frames.finalize()?;
                bytes += stacks.finalize()?;
            }
        }
        bytes += samples.finalize()?;
        Ok((bytes, count))
    }
}
