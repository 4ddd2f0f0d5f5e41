//! Reading: [`InputStream`], an Arrow IPC stream from stdin, a file or any byte source, whose
//! errors name the input and tell a non-Arrow, truncated or corrupt stream apart.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_schema::{ArrowError, SchemaRef};

use super::checked::{
    BadMessage, CONTINUATION, Checked, EofWatch, Prefixed, decoder_failed, guarded,
};
use crate::ContractError;

pub(super) type Inner =
    StreamReader<io::BufReader<Checked<EofWatch<Prefixed<Box<dyn Read + Send>>>>>>;

/// An Arrow IPC stream being read, with errors that name the input.
pub struct InputStream {
    name: String,
    reader: Inner,
    hit_eof: Arc<AtomicBool>,
    done: bool,
}

/// Open `path` (or stdin for `None` or `-`) as an Arrow IPC stream.
pub fn open_input(path: Option<&Path>) -> Result<InputStream, ContractError> {
    match path {
        None => InputStream::new("stdin", Box::new(io::stdin())),
        Some(p) if p.as_os_str() == "-" => InputStream::new("stdin", Box::new(io::stdin())),
        Some(p) => {
            let name = p.display().to_string();
            let file = File::open(p).map_err(|source| ContractError::Io {
                path: name.clone(),
                source,
            })?;
            InputStream::new(&name, Box::new(file))
        }
    }
}

impl InputStream {
    /// Wrap any byte source; `name` is used in error messages.
    pub fn new(name: &str, mut source: Box<dyn Read + Send>) -> Result<Self, ContractError> {
        let mut head = Vec::with_capacity(8);
        let mut buf = [0u8; 8];
        while head.len() < 8 {
            match source.read(&mut buf[..8 - head.len()]) {
                Ok(0) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ContractError::Io {
                        path: name.into(),
                        source,
                    });
                }
            }
        }
        if head.is_empty() {
            return Err(ContractError::Empty { input: name.into() });
        }
        // The start of a stream cut short: the continuation marker, or part of it, then EOF.
        let marker = head.len().min(CONTINUATION.len());
        if head.len() < 8 && head[..marker] == CONTINUATION[..marker] {
            return Err(ContractError::Truncated { input: name.into() });
        }
        if head.len() < 8 || head[..4] != CONTINUATION {
            return Err(ContractError::NotArrow {
                input: name.into(),
                start: describe_start(&head),
            });
        }
        let hit_eof = Arc::new(AtomicBool::new(false));
        let watched = Checked::new(EofWatch {
            inner: Prefixed {
                prefix: head,
                pos: 0,
                inner: source,
            },
            hit_eof: hit_eof.clone(),
        });
        let reader = guarded(|| StreamReader::try_new_buffered(watched, None))
            .map_err(|what| decoder_failed(name, what))?
            .map_err(|e| classify(name, e, hit_eof.load(Ordering::Relaxed)))?;
        Ok(Self {
            name: name.into(),
            reader,
            hit_eof,
            done: false,
        })
    }

    /// The name used in messages (`stdin` or the path).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream schema, with its metadata.
    pub fn schema(&self) -> SchemaRef {
        self.reader.schema()
    }

    /// The next batch, `None` at a proper end of stream, an error for a truncated or corrupt one.
    pub fn next_batch(&mut self) -> Result<Option<RecordBatch>, ContractError> {
        if self.done {
            return Ok(None);
        }
        let next = match guarded(|| self.reader.next()) {
            Ok(next) => next,
            Err(what) => {
                self.done = true;
                return Err(decoder_failed(&self.name, what));
            }
        };
        match next {
            Some(Ok(b)) => Ok(Some(b)),
            Some(Err(e)) => {
                self.done = true;
                Err(classify(
                    &self.name,
                    e,
                    self.hit_eof.load(Ordering::Relaxed),
                ))
            }
            None => {
                self.done = true;
                if self.hit_eof.load(Ordering::Relaxed) {
                    Err(ContractError::Truncated {
                        input: self.name.clone(),
                    })
                } else {
                    Ok(None)
                }
            }
        }
    }
}

impl Iterator for InputStream {
    type Item = Result<RecordBatch, ContractError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

pub(super) fn describe_start(head: &[u8]) -> String {
    let printable = head
        .iter()
        .all(|b| b.is_ascii_graphic() || *b == b' ' || *b == b'\n' || *b == b'\t');
    if head.starts_with(b"PAR1") {
        "PAR1, a Parquet file: read it with stacks-query".into()
    } else if head.starts_with(b"ARROW1") {
        "ARROW1, an Arrow IPC *file*, not a stream".into()
    } else if printable {
        format!("text {:?}", String::from_utf8_lossy(head))
    } else {
        let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        format!("bytes {}", hex.join(" "))
    }
}

pub(super) fn classify(name: &str, e: ArrowError, hit_eof: bool) -> ContractError {
    let eof = matches!(&e, ArrowError::IoError(_, io) if io.kind() == io::ErrorKind::UnexpectedEof);
    if eof || hit_eof {
        return ContractError::Truncated { input: name.into() };
    }
    if let ArrowError::IoError(_, io) = &e
        && let Some(why) = io.get_ref().and_then(|e| e.downcast_ref::<BadMessage>())
    {
        return ContractError::Invalid {
            input: name.into(),
            detail: why.to_string(),
        };
    }
    if let ArrowError::IoError(_, io) = e {
        return ContractError::Io {
            path: name.into(),
            source: io,
        };
    }
    ContractError::Invalid {
        input: name.into(),
        detail: e.to_string().replace('\n', " "),
    }
}
