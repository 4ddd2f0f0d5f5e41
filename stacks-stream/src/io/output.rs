//! Writing: where output goes ([`Sink`]: stdout through a duplicate of fd 1, or a file) and
//! [`OutputStream`], an Arrow IPC stream flushed batch by batch whose errors name the
//! destination.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsFd;
use std::path::Path;

use arrow_array::RecordBatch;
use arrow_ipc::CompressionType;
use arrow_ipc::writer::{DictionaryHandling, IpcWriteOptions, StreamWriter};
use arrow_schema::{ArrowError, SchemaRef};

use crate::ContractError;

/// Where output goes: the writer and the name its errors use (`stdout` or the path).
pub struct Sink {
    pub writer: Box<dyn Write + Send>,
    pub name: String,
}

/// stdout, written straight to the file descriptor. `std::io::Stdout` is line buffered: it
/// scans every byte for a newline, which for gigabytes of Arrow buffers cost a fifth of a
/// stacks-symbolize run, so stdout is used through a duplicate of fd 1 instead (callers
/// buffer). A terminal is not refused here: see [`open_sink`].
pub fn stdout_sink() -> Result<Sink, ContractError> {
    let name = "stdout".to_string();
    let fd = io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| ContractError::Io {
            path: name.clone(),
            source,
        })?;
    Ok(Sink {
        writer: Box::new(File::from(fd)),
        name,
    })
}

/// `path`, created (or truncated).
fn file_sink(path: &Path) -> Result<Sink, ContractError> {
    let name = path.display().to_string();
    let f = File::create(path).map_err(|source| ContractError::Io {
        path: name.clone(),
        source,
    })?;
    Ok(Sink {
        writer: Box::new(f),
        name,
    })
}

/// Whether `path` names stdout (`None` or `-`) rather than a file.
fn is_stdout(path: Option<&Path>) -> bool {
    path.is_none_or(|p| p.as_os_str() == "-")
}

/// Whether output to `path` (stdout for `None`/`-`) goes into a pipe or a socket: read by
/// another process as it is written, not kept.
pub fn writes_to_pipe(path: Option<&Path>) -> bool {
    is_stdout(path) && crate::sys::stdout_is_pipe()
}

/// Create the output for binary data: `path` (or stdout for `None`/`-`). Refuses a terminal.
pub fn open_sink(path: Option<&Path>) -> Result<Sink, ContractError> {
    match path {
        Some(p) if !is_stdout(path) => file_sink(p),
        _ => {
            if crate::sys::stdout_is_tty() {
                return Err(ContractError::BinaryToTty);
            }
            stdout_sink()
        }
    }
}

/// Create the output for text: `path` (or stdout for `None`/`-`, a terminal included).
pub fn open_text_sink(path: Option<&Path>) -> Result<Sink, ContractError> {
    match path {
        Some(p) if !is_stdout(path) => file_sink(p),
        _ => stdout_sink(),
    }
}

type Out = BufWriter<Box<dyn Write + Send>>;

/// The IPC writer: stacks streams (stack columns dictionary-encoded) through
/// [`super::StackStreamWriter`], any other through Arrow's.
enum Writer {
    Arrow(StreamWriter<Out>),
    Stacks(super::StackStreamWriter<Out>),
}

/// An Arrow IPC stream being written; every batch is flushed so downstream sees it at once.
/// Errors name the destination.
pub struct OutputStream {
    writer: Writer,
    name: String,
    rows: u64,
}

/// Open an Arrow IPC stream writer on `path` or stdout (refusing a terminal).
pub fn open_output(path: Option<&Path>, schema: &SchemaRef) -> Result<OutputStream, ContractError> {
    open_output_with(path, schema, false)
}

/// As [`open_output`]; with `compress`, record batch buffers are zstd-compressed (an IPC
/// format feature every Arrow reader understands), for streams that are large and highly
/// repetitive, such as the recorder's raw stacks.
pub fn open_output_with(
    path: Option<&Path>,
    schema: &SchemaRef,
    compress: bool,
) -> Result<OutputStream, ContractError> {
    OutputStream::new(open_sink(path)?, schema, compress)
}

fn arrow_to_io(name: &str, e: ArrowError) -> ContractError {
    match e {
        ArrowError::IoError(_, source) => ContractError::Io {
            path: name.into(),
            source,
        },
        other => ContractError::Invalid {
            input: name.into(),
            detail: other.to_string(),
        },
    }
}

impl OutputStream {
    /// An Arrow IPC stream writer on `sink` (see [`open_output_with`] for `compress`).
    pub fn new(sink: Sink, schema: &SchemaRef, compress: bool) -> Result<Self, ContractError> {
        let Sink { writer, name } = sink;
        // Stack dictionaries only grow (see crate::dict): each batch sends its new entries.
        let mut options =
            IpcWriteOptions::default().with_dictionary_handling(DictionaryHandling::Delta);
        if compress {
            options = options
                .try_with_compression(Some(CompressionType::ZSTD))
                .map_err(|e| arrow_to_io(&name, e))?;
        }
        let out = BufWriter::with_capacity(1 << 20, writer);
        let writer = if super::StackStreamWriter::<Out>::suits(schema) {
            super::StackStreamWriter::try_new(out, schema, options).map(Writer::Stacks)
        } else {
            StreamWriter::try_new_with_options(out, schema, options).map(Writer::Arrow)
        }
        .map_err(|e| arrow_to_io(&name, e))?;
        Ok(OutputStream {
            writer,
            name,
            rows: 0,
        })
    }

    /// Where the stream goes (`stdout` or the path), as errors name it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Write one batch and flush it through to the file descriptor.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ContractError> {
        match &mut self.writer {
            Writer::Arrow(w) => w.write(batch).and_then(|_| w.flush()),
            Writer::Stacks(w) => w
                .write(batch)
                .and_then(|_| w.get_mut().flush().map_err(ArrowError::from)),
        }
        .map_err(|e| arrow_to_io(&self.name, e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Write the end-of-stream marker and flush. Without it, readers report a truncated stream.
    pub fn finish(mut self) -> Result<u64, ContractError> {
        match &mut self.writer {
            Writer::Arrow(w) => w.finish().and_then(|_| w.flush()),
            Writer::Stacks(w) => w
                .finish()
                .and_then(|_| w.get_mut().flush().map_err(ArrowError::from)),
        }
        .map_err(|e| arrow_to_io(&self.name, e))?;
        Ok(self.rows)
    }

    /// Flush what was written but leave the stream without its end-of-stream marker, so the
    /// reader reports it truncated (the input broke off).
    pub fn abandon(mut self) -> Result<u64, ContractError> {
        match &mut self.writer {
            Writer::Arrow(w) => w.get_mut().flush(),
            Writer::Stacks(w) => w.get_mut().flush(),
        }
        .map_err(|source| ContractError::Io {
            path: self.name.clone(),
            source,
        })?;
        Ok(self.rows)
    }
}
