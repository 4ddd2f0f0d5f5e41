//! The `spans` workload: a loop of `tracing` spans with known CPU, sleep and IO, labelled for
//! stacks-record by the tracing-stacks layer. Per iteration: a `burn` span spinning 30 ms of
//! CPU, a `nap` span sleeping 20 ms, 10 ms of spinning in no span, `outer { inner { 5 ms };
//! 5 ms }`, and an `io` span writing IO_KIB KiB to FILE and fsyncing it. Each phase's CPU time is
//! measured on the thread's CPU clock and reported per span name; with `--tokio` the same loop
//! runs as a task of a two-worker tokio runtime (each phase an instrumented future; the nap is
//! a timer, so the worker parks outside any span).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tracing::Instrument;
use tracing_subscriber::prelude::*;

use crate::sys;

const MS: u64 = 1_000_000;

#[derive(clap::Args)]
pub(crate) struct SpansArgs {
    /// Run for about this long (whole iterations).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// The file the `io` span writes and fsyncs (created or truncated each iteration).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// KiB the `io` span writes per iteration.
    #[arg(long, default_value_t = 1024)]
    io_kib: usize,
    /// Run the loop as a task of a tokio runtime with two worker threads (`spans-worker`).
    #[arg(long)]
    tokio: bool,
    /// Wait until this file exists before starting (up to a minute).
    #[arg(long, value_name = "PATH")]
    start_file: Option<PathBuf>,
    /// Also start thread `stuck`, which after 300 ms (time for a tracer to attach) enters span
    /// `stuck` and blocks reading an empty pipe until the process exits (function
    /// `wait_forever`).
    #[arg(long)]
    stuck: bool,
}

/// Enters span `stuck` and blocks in `read` on a pipe nobody writes to, until the process exits.
#[inline(never)]
fn wait_forever() -> Result<()> {
    let mut fds = [0; 2];
    // SAFETY: pipe fills the two descriptors.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(sys::errno()).context("pipe");
    }
    std::thread::sleep(Duration::from_millis(300));
    let _entered = tracing::info_span!("stuck").entered();
    let mut buf = [0u8; 1];
    loop {
        match sys::read(fds[0], &mut buf) {
            Err(e) if sys::interrupted(&e) => continue,
            other => {
                other.context("read")?;
                return Ok(());
            }
        }
    }
}

/// What the loop did, by its own clocks.
#[derive(Default)]
struct Truth {
    iterations: u64,
    /// Exclusive CPU time per span name (`none`: outside any span).
    burn_ns: u64,
    none_ns: u64,
    outer_ns: u64,
    inner_ns: u64,
    /// Wall time inside the `nap` spans.
    nap_wall_ns: u64,
    io_bytes: u64,
    /// Threads that ran the loop (the tokio workers that polled it).
    tids: Vec<i32>,
}

impl Truth {
    fn saw_thread(&mut self) {
        let t = sys::tid();
        if !self.tids.contains(&t) {
            self.tids.push(t);
        }
    }
}

/// CPU time `f` takes on this thread, added to `into`.
fn timed<T>(into: &mut u64, f: impl FnOnce() -> T) -> T {
    let c0 = sys::thread_cpu_ns();
    let r = f();
    *into += sys::thread_cpu_ns() - c0;
    r
}

/// Writes `kib` KiB of non-zero bytes to a fresh `path` in 64 KiB writes, then fsyncs it.
#[inline(never)]
fn write_and_sync(path: &Path, kib: usize) -> Result<u64> {
    let c = sys::cpath(path)?;
    let fd = sys::open(&c, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 64 << 10];
    let mut state = 1;
    sys::fill_nonzero(&mut buf, &mut state);
    let mut left = kib << 10;
    let mut written = 0u64;
    while left > 0 {
        let n = sys::write(fd, &buf[..left.min(buf.len())]).context("write")?;
        left -= n;
        written += n as u64;
    }
    sys::fsync(fd).context("fsync")?;
    sys::close(fd).context("close")?;
    Ok(written)
}

/// One iteration on this thread.
fn iteration(a: &SpansArgs, t: &mut Truth) -> Result<()> {
    timed(&mut t.burn_ns, || {
        tracing::info_span!("burn").in_scope(|| sys::spin_cpu_ns(30 * MS))
    });
    let w0 = Instant::now();
    tracing::info_span!("nap").in_scope(|| std::thread::sleep(Duration::from_millis(20)));
    t.nap_wall_ns += w0.elapsed().as_nanos() as u64;
    timed(&mut t.none_ns, || sys::spin_cpu_ns(10 * MS));
    let (inner, outer) = (&mut t.inner_ns, &mut t.outer_ns);
    tracing::info_span!("outer").in_scope(|| {
        timed(inner, || {
            tracing::info_span!("inner").in_scope(|| sys::spin_cpu_ns(5 * MS))
        });
        timed(outer, || sys::spin_cpu_ns(5 * MS));
    });
    t.io_bytes += tracing::info_span!("io").in_scope(|| write_and_sync(&a.file, a.io_kib))?;
    t.iterations += 1;
    Ok(())
}

/// One iteration as instrumented futures (polled by whichever worker runs the task).
async fn iteration_async(a: &SpansArgs, t: &mut Truth) -> Result<()> {
    async {
        t.saw_thread();
        timed(&mut t.burn_ns, || sys::spin_cpu_ns(30 * MS));
    }
    .instrument(tracing::info_span!("burn"))
    .await;
    let w0 = Instant::now();
    tokio::time::sleep(Duration::from_millis(20))
        .instrument(tracing::info_span!("nap"))
        .await;
    t.nap_wall_ns += w0.elapsed().as_nanos() as u64;
    t.saw_thread();
    timed(&mut t.none_ns, || sys::spin_cpu_ns(10 * MS));
    async {
        async { timed(&mut t.inner_ns, || sys::spin_cpu_ns(5 * MS)) }
            .instrument(tracing::info_span!("inner"))
            .await;
        timed(&mut t.outer_ns, || sys::spin_cpu_ns(5 * MS));
    }
    .instrument(tracing::info_span!("outer"))
    .await;
    t.io_bytes += async { write_and_sync(&a.file, a.io_kib) }
        .instrument(tracing::info_span!("io"))
        .await?;
    t.iterations += 1;
    Ok(())
}

pub(crate) fn run(a: SpansArgs) -> Result<Value> {
    tracing_subscriber::registry()
        .with(tracing_stacks::layer())
        .try_init()
        .context("installing the tracing subscriber")?;
    if let Some(path) = &a.start_file {
        sys::wait_for_file(path)?;
    }
    let until = Duration::from_secs_f64(a.seconds);
    let stuck = a.stuck;
    if stuck {
        // Not joined: it ends with the process.
        let _ = sys::spawn_named("stuck", wait_forever)?;
    }
    let t = if a.tokio {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("spans-worker")
            .enable_time()
            .build()
            .context("starting the tokio runtime")?;
        rt.block_on(async move {
            tokio::spawn(async move {
                let mut t = Truth::default();
                let start = Instant::now();
                while start.elapsed() < until {
                    iteration_async(&a, &mut t).await?;
                }
                Ok::<_, anyhow::Error>(t)
            })
            .await
            .context("the spans task")?
        })?
    } else {
        let h = sys::spawn_named("spans", move || {
            let mut t = Truth::default();
            t.saw_thread();
            let start = Instant::now();
            while start.elapsed() < until {
                iteration(&a, &mut t)?;
            }
            Ok(t)
        })?;
        sys::join_named("spans", h)?
    };
    Ok(json!({
        "workload": "spans",
        "pid": std::process::id(),
        "tids": t.tids,
        "iterations": t.iterations,
        "cpu_ns": {
            "burn": t.burn_ns,
            "none": t.none_ns,
            "outer": t.outer_ns,
            "inner": t.inner_ns,
        },
        "nap_wall_ns": t.nap_wall_ns,
        "io_bytes": t.io_bytes,
        "stuck": stuck,
    }))
}
