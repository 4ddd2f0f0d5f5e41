//! The `state` event's driver: the thread that runs the thread-state task iterator HZ times a
//! second.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use libbpf_rs::Link;

use super::abi::StacksSkel;

/// The `state` event's driver: a thread running the thread-state task iterator HZ times a
/// second (each run is one pass over every task; the BPF side stamps its rows with the pass's
/// start) until [`StateSampler::stop`].
pub(crate) struct StateSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    /// The iterator's link: outlives the thread (stopped first, see Drop).
    _link: Link,
}

impl StateSampler {
    /// Start sampling every `period_ns` (read at each pass: it may change while sampling).
    pub(crate) fn start(skel: &StacksSkel<'_>, period_ns: Arc<AtomicU64>) -> Result<Self> {
        let link = skel
            .progs
            .sample_states
            .attach_iter_with_opts(libbpf_rs::IterOpts::None)
            .context("attaching the thread-state task iterator")?;
        let link_fd = link.as_fd().as_raw_fd();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("state-sampler".into())
            .spawn(move || sample_passes(link_fd, &period_ns, &flag))
            .context("starting the thread-state sampler thread")?;
        Ok(Self {
            stop,
            thread: Some(thread),
            _link: link,
        })
    }

    /// Stop after the pass in progress; an error of the sampling thread is returned.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.halt()
    }

    fn halt(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the thread-state sampler thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for StateSampler {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// Run the iterator of link `link_fd` every `period_ns` until `stop`; late passes are skipped,
/// not run in a burst.
fn sample_passes(link_fd: i32, period_ns: &AtomicU64, stop: &AtomicBool) -> Result<()> {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let period = Duration::from_nanos(period_ns.load(Ordering::Relaxed).max(1));
        // SAFETY: link_fd is the iterator link's fd, kept open by StateSampler until this
        // thread has ended.
        let fd = unsafe { libbpf_rs::libbpf_sys::bpf_iter_create(link_fd) };
        if fd < 0 {
            bail!(
                "starting a thread-state pass: {}",
                std::io::Error::from_raw_os_error(-fd)
            );
        }
        // SAFETY: the kernel just returned this fd to us.
        let mut pass = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        std::io::copy(&mut pass, &mut std::io::sink()).context("running a thread-state pass")?;
        next += period;
        let now = Instant::now();
        if next <= now {
            let behind = (now - next).as_nanos() / period.as_nanos().max(1) + 1;
            next += period * u32::try_from(behind).unwrap_or(u32::MAX);
        }
        std::thread::sleep(next - now);
    }
    Ok(())
}
