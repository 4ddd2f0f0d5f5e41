//! SIGTERM handling: the handler only sets a flag. The input reader checks it, and because
//! the handler is installed without `SA_RESTART`, a read blocked on an idle pipe returns
//! `EINTR` and the reader ends the input there, so the packer finishes its current file.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Install the SIGTERM handler.
pub(crate) fn install_sigterm() -> io::Result<()> {
    stacks_stream::sys::catch_signals(&[libc::SIGTERM])
}

/// Whether SIGTERM has been received.
pub(crate) fn terminated() -> bool {
    stacks_stream::sys::signal_caught()
}

/// A byte source that reports end-of-file once SIGTERM has arrived, and records in `cut`
/// that the end was ours, so the resulting "truncated stream" is not an upstream failure.
pub(crate) struct StopOnTerm<R> {
    inner: R,
    cut: Arc<AtomicBool>,
}

impl<R> StopOnTerm<R> {
    pub(crate) fn new(inner: R, cut: Arc<AtomicBool>) -> Self {
        Self { inner, cut }
    }
}

impl<R: Read> Read for StopOnTerm<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if terminated() {
                self.cut.store(true, Ordering::SeqCst);
                return Ok(0);
            }
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_data_through_until_terminated() {
        let cut = Arc::new(AtomicBool::new(false));
        let mut r = StopOnTerm::new(&b"abc"[..], cut.clone());
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        assert!(!cut.load(Ordering::SeqCst));
    }
}
