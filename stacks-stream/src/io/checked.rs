//! The hardened reader under every input stream: IPC messages checked before the Arrow reader
//! trusts their lengths, end-of-file watched (a missing end-of-stream marker is a truncated
//! stream), and panics inside the Arrow decoder caught and turned into errors.

use std::cell::{Cell, RefCell};
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ContractError;

/// Arrow IPC continuation marker that starts every encapsulated message.
pub(super) const CONTINUATION: [u8; 4] = [0xff; 4];

/// A reader that remembers whether it ever hit end-of-file. Arrow's stream reader treats EOF
/// at a message boundary as a normal end, so this is how a missing end-of-stream marker (an
/// upstream tool that died) is told apart from a complete stream.
pub(super) struct EofWatch<R> {
    pub(super) inner: R,
    pub(super) hit_eof: Arc<AtomicBool>,
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
pub(super) struct Prefixed<R> {
    pub(super) prefix: Vec<u8>,
    pub(super) pos: usize,
    pub(super) inner: R,
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
pub(super) const MAX_UNCOMPRESSED: i64 = 1 << 32;

/// Most bytes reserved ahead for one message (a larger one still grows as it arrives).
const MAX_RESERVE: usize = 256 << 20;

/// Message buffer capacity kept between messages; a larger buffer is freed.
const KEEP_CAPACITY: usize = 4 << 20;

/// Why a message was refused before Arrow saw it (carried inside an `io::Error`).
#[derive(Debug)]
pub(super) struct BadMessage(String);

impl std::fmt::Display for BadMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadMessage {}

pub(super) fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, BadMessage(msg))
}

/// Reads whole IPC messages from `inner`, checks what the Arrow reader takes on trust, and
/// hands the bytes on. A message whose metadata or body is cut short is reported as such
/// (`UnexpectedEof`) instead of being handed on: the reader would allocate the announced
/// length first, and a corrupt length can announce gigabytes.
pub(super) struct Checked<R> {
    inner: R,
    pending: Vec<u8>,
    pos: usize,
    /// After the end-of-stream marker: bytes pass through unchecked (the reader stops there).
    passthrough: bool,
    /// Messages read so far (for error messages).
    messages: u64,
}

impl<R: Read> Checked<R> {
    pub(super) fn new(inner: R) -> Self {
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
        // Room for all of it at once (a doubling Vec would hold up to twice a large
        // dictionary message), capped so a corrupt length cannot reserve much.
        self.pending
            .reserve_exact(usize::try_from(n).unwrap_or(usize::MAX).min(MAX_RESERVE));
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
            if self.pending.capacity() > KEEP_CAPACITY {
                // Arrow has its own copy of the large message just read: do not keep a
                // second one's worth of memory for the rest of the stream.
                self.pending = Vec::new();
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
pub(super) fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
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

pub(super) fn decoder_failed(name: &str, what: String) -> ContractError {
    ContractError::Invalid {
        input: name.into(),
        detail: format!("the Arrow decoder failed on it: {what}"),
    }
}
