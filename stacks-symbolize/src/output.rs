//! The output stream, written straight to the file descriptor. `std::io::Stdout` is line
//! buffered: it scans every byte for a newline, which for gigabytes of Arrow buffers cost a
//! fifth of the run, so stdout is used through a duplicate of fd 1 instead.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsFd;
use std::path::Path;

use anyhow::{Context, Result};
use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, SchemaRef};

/// An Arrow IPC stream writer on a file or stdout; every batch is flushed so the next tool
/// sees it at once.
pub struct Output {
    writer: StreamWriter<BufWriter<File>>,
    name: String,
}

/// Keep the I/O error itself in the chain, so a closed pipe is recognized as one.
fn io_err(e: ArrowError) -> anyhow::Error {
    match e {
        ArrowError::IoError(_, source) => anyhow::Error::new(source),
        other => anyhow::Error::new(other),
    }
}

impl Output {
    /// `path` (`-` or `None`: stdout, refused when it is a terminal).
    pub fn open(path: Option<&Path>, schema: &SchemaRef) -> Result<Self> {
        let (file, name) = match path {
            Some(p) if p.as_os_str() != "-" => (
                File::create(p).with_context(|| p.display().to_string())?,
                p.display().to_string(),
            ),
            _ => {
                if stacks_stream::cli::stdout_is_tty() {
                    return Err(stacks_stream::ContractError::BinaryToTty.into());
                }
                let fd = std::io::stdout()
                    .as_fd()
                    .try_clone_to_owned()
                    .context("stdout")?;
                (File::from(fd), "stdout".to_string())
            }
        };
        let writer = StreamWriter::try_new(BufWriter::with_capacity(1 << 20, file), schema)
            .map_err(io_err)
            .with_context(|| name.clone())?;
        Ok(Output { writer, name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Write one batch and flush it through.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.writer.write(batch).map_err(io_err)?;
        self.writer.flush().map_err(io_err)?;
        Ok(())
    }

    /// Flush what was written but leave the stream without its end-of-stream marker, so the
    /// reader reports it truncated (the input broke off).
    pub fn abandon(mut self) -> Result<()> {
        self.writer.get_mut().flush()?;
        Ok(())
    }

    /// The end-of-stream marker; without it readers see a truncated stream.
    pub fn finish(mut self) -> Result<()> {
        self.writer.finish().map_err(io_err)?;
        self.writer.get_mut().flush()?;
        Ok(())
    }
}
