//! Arrow IPC stream input and output for stdin/stdout or paths, with the checks every tool
//! shares: refuse binary output to a terminal, detect non-Arrow and truncated input, flush
//! every batch so live pipelines see data.
//!
//! Input is checked message by message before Arrow decodes it (buffers inside their body,
//! body and uncompressed sizes that fit), because the Arrow reader trusts those numbers and
//! panics or tries a huge allocation on a corrupt stream; anything it still panics on is
//! caught and reported as an invalid stream, so no tool ever dies on its input.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow_array::RecordBatch;
use arrow_ipc::CompressionType;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::{ArrowError, SchemaRef};

use crate::ContractError;

/// Arrow IPC continuation marker that starts every encapsulated message.
const CONTINUATION: [u8; 4] = [0xff; 4];

/// A reader that remembers whether it ever hit end-of-file. Arrow's stream reader treats EOF
/// at a message boundary as a normal end, so this is how a missing end-of-stream marker (an
/// upstream tool that died) is told apart from a complete stream.
struct EofWatch<R> {
    inner: R,
    hit_eof: Arc<AtomicBool>,
}

impl<R: Read> Read for EofWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.hit_eof.store(true, Ordering::Relaxed);
        }
        Ok(n)
    }
}

/// Prepends already-consumed bytes to a reader.
struct Prefixed<R> {
    prefix: Vec<u8>,
    pos: usize,
    inner: R,
}

impl<R: Read> Read for Prefixed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.len());
            buf[..n].copy_from_slice(&self.prefix[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

/// Largest uncompressed size accepted for one compressed buffer: far beyond any real batch,
/// small enough that a corrupt length cannot ask the decompressor for exabytes.
const MAX_UNCOMPRESSED: i64 = 1 << 32;

/// Why a message was refused before Arrow saw it (carried inside an `io::Error`).
#[derive(Debug)]
struct BadMessage(String);

impl std::fmt::Display for BadMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadMessage {}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, BadMessage(msg))
}

/// Reads whole IPC messages from `inner`, checks what the Arrow reader takes on trust, and
/// hands the bytes on. A message whose metadata or body is cut short is reported as such
/// (`UnexpectedEof`) instead of being handed on: the reader would allocate the announced
/// length first, and a corrupt length can announce gigabytes.
struct Checked<R> {
    inner: R,
    pending: Vec<u8>,
    pos: usize,
    /// After the end-of-stream marker: bytes pass through unchecked (the reader stops there).
    passthrough: bool,
    /// Messages read so far (for error messages).
    messages: u64,
}

impl<R: Read> Checked<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            pos: 0,
            passthrough: false,
            messages: 0,
        }
    }

    /// Append up to `n` bytes of input to `pending`; returns how many arrived.
    fn take(&mut self, n: u64) -> io::Result<usize> {
        let before = self.pending.len();
        (&mut self.inner).take(n).read_to_end(&mut self.pending)?;
        Ok(self.pending.len() - before)
    }

    /// Load the next message into `pending` (empty at the end of input).
    fn next_message(&mut self) -> io::Result<()> {
        if self.take(4)? < 4 {
            return Ok(());
        }
        if self.pending[..4] == CONTINUATION && self.take(4)? < 4 {
            return Ok(());
        }
        let n = self.pending.len();
        let len = i32::from_le_bytes(self.pending[n - 4..n].try_into().expect("4 bytes"));
        if len == 0 {
            self.passthrough = true;
            return Ok(());
        }
        let index = self.messages;
        self.messages += 1;
        if len < 0 {
            return Err(bad(format!(
                "message {index} has a negative metadata length ({len})"
            )));
        }
        let meta_start = self.pending.len();
        if self.take(len as u64)? < len as usize {
            // Said here: the reader would first allocate (and zero) the announced length.
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("message {index}: metadata cut short"),
            ));
        }
        let Ok(message) = arrow_ipc::root_as_message(&self.pending[meta_start..]) else {
            return Ok(()); // the reader reports unreadable metadata itself
        };
        let body_len = message.bodyLength();
        if body_len < 0 {
            return Err(bad(format!(
                "message {index} has a negative body length ({body_len})"
            )));
        }
        let batch = message
            .header_as_record_batch()
            .or_else(|| message.header_as_dictionary_batch().and_then(|d| d.data()));
        let mut buffers = Vec::new();
        let mut compressed = false;
        if let Some(batch) = batch {
            compressed = batch.compression().is_some();
            for (i, b) in batch.buffers().into_iter().flatten().enumerate() {
                let (offset, length) = (b.offset(), b.length());
                let inside = offset >= 0
                    && length >= 0
                    && offset
                        .checked_add(length)
                        .is_some_and(|end| end <= body_len);
                if !inside {
                    return Err(bad(format!(
                        "message {index}: buffer {i} (offset {offset}, length {length}) lies outside the {body_len}-byte body"
                    )));
                }
                buffers.push((offset as usize, length as usize));
            }
        }
        let body_start = self.pending.len();
        if self.take(body_len as u64)? < body_len as usize {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("message {index}: body cut short"),
            ));
        }
        if compressed {
            let body = &self.pending[body_start..];
            for (i, (offset, length)) in buffers.into_iter().enumerate() {
                if length < 8 {
                    continue;
                }
                let size = i64::from_le_bytes(body[offset..offset + 8].try_into().expect("8"));
                if size != -1 && !(0..=MAX_UNCOMPRESSED).contains(&size) {
                    return Err(bad(format!(
                        "message {index}: compressed buffer {i} claims an uncompressed size of {size} bytes"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.pending.len() {
            if self.passthrough {
                return self.inner.read(buf);
            }
            self.pending.clear();
            self.pos = 0;
            self.next_message()?;
            if self.pending.is_empty() {
                return Ok(0);
            }
        }
        let n = (self.pending.len() - self.pos).min(buf.len());
        buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

thread_local! {
    /// Set while this thread runs the Arrow reader under [`guarded`].
    static DECODING: Cell<bool> = const { Cell::new(false) };
    /// The message of a panic caught there.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Run the Arrow reader, turning a panic inside it into an error: a corrupt stream must end a
/// tool with its one-line error, not a backtrace. The panic hook is wrapped (once) so that a
/// panic caught here prints nothing; panics anywhere else are reported as before.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DECODING.with(Cell::get) {
                let what = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                CAUGHT.with(|c| *c.borrow_mut() = Some(what));
            } else {
                previous(info);
            }
        }));
    });
    DECODING.with(|d| d.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    DECODING.with(|d| d.set(false));
    result.map_err(|_| {
        CAUGHT
            .with(|c| c.borrow_mut().take())
            .unwrap_or_else(|| "panic".into())
            .replace('\n', " ")
    })
}

fn decoder_failed(name: &str, what: String) -> ContractError {
    ContractError::Invalid {
        input: name.into(),
        detail: format!("the Arrow decoder failed on it: {what}"),
    }
}

type Inner = StreamReader<io::BufReader<Checked<EofWatch<Prefixed<Box<dyn Read + Send>>>>>>;

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

fn describe_start(head: &[u8]) -> String {
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

fn classify(name: &str, e: ArrowError, hit_eof: bool) -> ContractError {
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

/// Where binary output goes.
pub enum Sink {
    Stdout,
    File(String),
}

/// An Arrow IPC stream being written; every batch is flushed so downstream sees it at once.
pub struct OutputStream {
    writer: StreamWriter<BufWriter<Box<dyn Write + Send>>>,
    rows: u64,
}

/// Create the output for binary data: `path` (or stdout for `None`/`-`). Refuses a terminal.
pub fn open_sink(path: Option<&Path>) -> Result<(Box<dyn Write + Send>, Sink), ContractError> {
    match path {
        Some(p) if p.as_os_str() != "-" => {
            let name = p.display().to_string();
            let f = File::create(p).map_err(|source| ContractError::Io {
                path: name.clone(),
                source,
            })?;
            Ok((Box::new(f), Sink::File(name)))
        }
        _ => {
            if crate::cli::stdout_is_tty() {
                return Err(ContractError::BinaryToTty);
            }
            Ok((Box::new(io::stdout()), Sink::Stdout))
        }
    }
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
    let (w, sink) = open_sink(path)?;
    let name = match sink {
        Sink::Stdout => "stdout".to_string(),
        Sink::File(n) => n,
    };
    let mut options = IpcWriteOptions::default();
    if compress {
        options = options
            .try_with_compression(Some(CompressionType::ZSTD))
            .map_err(|e| arrow_to_io(&name, e))?;
    }
    let writer =
        StreamWriter::try_new_with_options(BufWriter::with_capacity(1 << 16, w), schema, options)
            .map_err(|e| arrow_to_io(&name, e))?;
    Ok(OutputStream { writer, rows: 0 })
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
    /// Write one batch and flush it through to the file descriptor.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ContractError> {
        self.writer
            .write(batch)
            .map_err(|e| arrow_to_io("stdout", e))?;
        self.writer.flush().map_err(|e| arrow_to_io("stdout", e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Write the end-of-stream marker and flush. Without it, readers report a truncated stream.
    pub fn finish(mut self) -> Result<u64, ContractError> {
        self.writer.finish().map_err(|e| arrow_to_io("stdout", e))?;
        self.writer.flush().map_err(|e| arrow_to_io("stdout", e))?;
        Ok(self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    fn stream_bytes(finish: bool) -> Vec<u8> {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![1, 2]))])
                .unwrap();
        let mut buf = Vec::new();
        {
            let mut w = StreamWriter::try_new(&mut buf, &schema).unwrap();
            w.write(&batch).unwrap();
            w.write(&batch).unwrap();
            if finish {
                w.finish().unwrap();
            }
        }
        buf
    }

    fn read_all(bytes: Vec<u8>) -> Result<usize, ContractError> {
        let mut s = InputStream::new("test", Box::new(io::Cursor::new(bytes)))?;
        let mut rows = 0;
        while let Some(b) = s.next_batch()? {
            rows += b.num_rows();
        }
        Ok(rows)
    }

    #[test]
    fn complete_stream_reads() {
        assert_eq!(read_all(stream_bytes(true)).unwrap(), 4);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = stream_bytes(true);
        for cut in 0..full.len() {
            let err = read_all(full[..cut].to_vec()).unwrap_err();
            let msg = err.to_string();
            let expected = if cut == 0 { "empty" } else { "truncated" };
            assert!(msg.contains(expected), "cut at {cut}: {msg}");
        }
    }

    #[test]
    fn raw_and_symbolized_schemas_round_trip_with_metadata() {
        use crate::schema::{meta, raw_schema, stage, stamp, symbolized_schema};
        use arrow_array::new_empty_array;
        let dir = std::env::temp_dir().join(format!("stacks-stream-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (i, make) in [raw_schema, symbolized_schema].into_iter().enumerate() {
            let mut md = std::collections::HashMap::new();
            stamp(&mut md, "t", "1", stage::RAW);
            md.insert(meta::HOST.into(), "h".into());
            let schema = Arc::new(make(md));
            let columns = schema
                .fields()
                .iter()
                .map(|f| new_empty_array(f.data_type()))
                .collect();
            let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
            let path = dir.join(format!("{i}.arrow"));
            let mut out = open_output_with(Some(&path), &schema, i == 1).unwrap();
            out.write(&batch).unwrap();
            out.finish().unwrap();
            let mut input = open_input(Some(&path)).unwrap();
            assert_eq!(input.schema(), schema);
            assert_eq!(input.schema().metadata()[meta::HOST], "h");
            assert_eq!(input.next_batch().unwrap().unwrap().num_rows(), 0);
            assert!(input.next_batch().unwrap().is_none());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn buffer_outside_its_body_is_refused_by_name() {
        // Found by the stream_pprof fuzzer: the Arrow reader panicked slicing this buffer.
        let bytes = stacks_testkit::fuzz_case("stream_pprof-buffer-outside-body.arrow");
        let err = read_all(bytes).unwrap_err().to_string();
        assert!(
            err.contains("invalid Arrow stream") && err.contains("outside"),
            "{err}"
        );
    }

    /// `bytes` with the body length of its first record batch message replaced by `len`.
    fn with_body_length(bytes: &[u8], len: i64) -> Vec<u8> {
        let mut out = bytes.to_vec();
        let mut pos = 0;
        loop {
            let meta_len = i32::from_le_bytes(out[pos + 4..pos + 8].try_into().unwrap()) as usize;
            let meta = &out[pos + 8..pos + 8 + meta_len];
            let message = arrow_ipc::root_as_message(meta).unwrap();
            let body = message.bodyLength();
            if message.header_as_record_batch().is_some() {
                let needle = body.to_le_bytes();
                let at = meta.windows(8).position(|w| w == needle).unwrap();
                let at = pos + 8 + at;
                out[at..at + 8].copy_from_slice(&len.to_le_bytes());
                return out;
            }
            pos += 8 + meta_len + body as usize;
        }
    }

    #[test]
    fn absurd_lengths_are_refused_before_allocating() {
        // Found by the stream_trace fuzzer: 1.1 GB and 11 s to say "truncated" about 777 bytes.
        let mut huge_meta = CONTINUATION.to_vec();
        huge_meta.extend((1_191_185_208i32).to_le_bytes());
        huge_meta.extend([0u8; 64]);
        let start = std::time::Instant::now();
        let err = read_all(huge_meta).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        let full = stream_bytes(true);
        let err = read_all(with_body_length(&full, 1 << 50))
            .unwrap_err()
            .to_string();
        assert!(err.contains("truncated"), "{err}");
        let err = read_all(with_body_length(&full, -8))
            .unwrap_err()
            .to_string();
        assert!(err.contains("negative body length"), "{err}");
        let mut negative_meta = CONTINUATION.to_vec();
        negative_meta.extend((-5i32).to_le_bytes());
        let err = read_all(negative_meta).unwrap_err().to_string();
        assert!(err.contains("negative metadata length"), "{err}");
    }

    #[test]
    fn decoder_panics_become_errors() {
        assert_eq!(guarded(|| 5), Ok(5));
        let caught: Result<(), String> = guarded(|| panic!("slice out of\nrange"));
        assert_eq!(caught, Err("slice out of range".to_string()));
        let err = decoder_failed("stdin", "boom".into()).to_string();
        assert!(err.starts_with("stdin: invalid Arrow stream: "), "{err}");
    }

    #[test]
    fn garbage_is_named() {
        let err = read_all(b"hello world\n".to_vec()).unwrap_err();
        assert!(err.to_string().contains("not an Arrow IPC stream"), "{err}");
        let err = read_all(b"PAR1xxxxxxxx".to_vec()).unwrap_err();
        assert!(err.to_string().contains("Parquet"), "{err}");
        let err = read_all(Vec::new()).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
