//! Errors of the packer. Every message names the path or input it is about, on one line.
//! The I/O cause is part of the message (fields are named `err`, not `source`, so the
//! `tool: error: a: b` chain printed at the binary edge does not repeat it).

use std::io;
use std::path::Path;

use parquet::errors::ParquetError;

/// What can go wrong while packing a stream into Parquet files.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error(transparent)]
    Contract(#[from] stacks_stream::ContractError),
    #[error("cannot open {path}: {err}")]
    Open { path: String, err: io::Error },
    #[error("{path}: exists and is not a directory")]
    NotADirectory { path: String },
    #[error("cannot create directory {path}: {err}")]
    CreateDir { path: String, err: io::Error },
    #[error("cannot write to directory {path}: {err}")]
    NotWritable { path: String, err: io::Error },
    #[error("cannot create {path}: {err}")]
    Create { path: String, err: io::Error },
    #[error("cannot find a free file name in {path} (every candidate exists)")]
    NoFreeName { path: String },
    #[error("writing {path}: {detail}")]
    Write { path: String, detail: String },
    #[error("syncing {path} to disk: {err}")]
    Sync { path: String, err: io::Error },
    #[error("renaming {from} to {to}: {err}")]
    Rename {
        from: String,
        to: String,
        err: io::Error,
    },
    #[error("{input}: this schema cannot be stored as Parquet: {detail}")]
    Schema { input: String, detail: String },
}

impl PackError {
    /// A Parquet writer error on `path`, with I/O causes shown plainly (no `External:` prefix).
    pub fn write(path: &Path, err: ParquetError) -> Self {
        PackError::Write {
            path: path.display().to_string(),
            detail: parquet_detail(&err),
        }
    }

    /// The OS error number behind this error, if an I/O error caused it (a Parquet writer's
    /// is known by its message, `… (os error N)`).
    pub fn errno(&self) -> Option<i32> {
        match self {
            PackError::Open { err, .. }
            | PackError::CreateDir { err, .. }
            | PackError::NotWritable { err, .. }
            | PackError::Create { err, .. }
            | PackError::Sync { err, .. }
            | PackError::Rename { err, .. } => err.raw_os_error(),
            PackError::Write { detail, .. } => {
                let (_, tail) = detail.rsplit_once("(os error ")?;
                tail.strip_suffix(')')?.parse().ok()
            }
            _ => None,
        }
    }

    /// An I/O error while writing `path`.
    pub(crate) fn write_io(path: &Path, err: io::Error) -> Self {
        PackError::Write {
            path: path.display().to_string(),
            detail: err.to_string(),
        }
    }
}

/// The message of a Parquet error, one line, without the crate's `External:` wrapping of
/// I/O errors (so a full disk reads `No space left on device (os error 28)`).
pub(crate) fn parquet_detail(err: &ParquetError) -> String {
    let text = match err {
        ParquetError::External(inner) => inner.to_string(),
        other => other.to_string(),
    };
    text.replace('\n', " ")
}
