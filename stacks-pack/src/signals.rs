//! SIGTERM handling: the handler only sets a flag. The input reader checks it, and because
//! the handler is installed without `SA_RESTART`, a read blocked on an idle pipe returns
//! `EINTR` and the reader ends the input there, so the packer finishes its current file.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

static TERMINATED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigterm(_sig: libc::c_int) {
    TERMINATED.store(true, Ordering::SeqCst);
}

/// Install the SIGTERM handler.
pub fn install_sigterm() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid starting value; the handler is async-signal-safe
    // (a single atomic store) and lives for the whole program.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGTERM has been received.
pub fn terminated() -> bool {
    TERMINATED.load(Ordering::SeqCst)
}

/// A byte source that reports end-of-file once SIGTERM has arrived, and records in `cut`
/// that the end was ours, so the resulting "truncated stream" is not an upstream failure.
pub struct StopOnTerm<R> {
    inner: R,
    cut: Arc<AtomicBool>,
}

impl<R> StopOnTerm<R> {
    pub fn new(inner: R, cut: Arc<AtomicBool>) -> Self {
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
