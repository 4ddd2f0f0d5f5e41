//! One file pair being written: each half ([`PartFile`]) under a temporary name until it is
//! complete, then fsynced and renamed into place, the stacks file first ([`Pair::finalize`]);
//! the pair remembers the stack ids its samples use, so its stacks file holds exactly those.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::PathBuf;

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use stacks_stream::store::{self, StackId};
use stacks_stream::sys::SudoOwner as Owner;

use crate::error::PackError;
use crate::fsutil::{parent_dir, sync_dir};
use crate::sink::{STACKS_CHUNK, SharedSplitter, lock};

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

    /// Write `batch` as one complete row group.
    pub(crate) fn write_group(&mut self, batch: &RecordBatch) -> Result<(), PackError> {
        let tmp = self.tmp.clone();
        let writer = self.writer()?;
        writer.write(batch).map_err(|e| PackError::write(&tmp, e))?;
        writer.flush().map_err(|e| PackError::write(&tmp, e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
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
    }

    /// Write the stacks file (the distinct ids of the samples, sorted by id) and make it
    /// visible, then make the samples file visible. Returns (bytes of both, stacks written).
    pub(crate) fn finalize(
        self,
        splitter: &SharedSplitter,
        schema: &SchemaRef,
        props: &WriterProperties,
        owner: Option<&Owner>,
    ) -> Result<(u64, u64), PackError> {
        let Pair { samples, ids } = self;
        let mut ids: Vec<StackId> = ids.into_iter().collect();
        ids.sort_unstable();
        let dest = store::stacks_path(&samples.dest);
        let mut stacks = PartFile::create(dest, samples.partition.clone(), schema, props, owner)?;
        for chunk in ids.chunks(STACKS_CHUNK) {
            let rows = lock(splitter).stacks(chunk).map_err(|e| PackError::Write {
                path: stacks.tmp.display().to_string(),
                detail: e.to_string(),
            })?;
            stacks.write(&rows)?;
        }
        let stacks_bytes = stacks.finalize()?;
        let samples_bytes = samples.finalize()?;
        Ok((stacks_bytes + samples_bytes, ids.len() as u64))
    }
}
