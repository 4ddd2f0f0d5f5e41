//! The `contention` workload: more runnable threads than this machine has CPUs, each off CPU
//! for different reasons — two CPU hogs (runnable, waiting for a CPU), a pipe ping-pong pair
//! (sleeping in `read`, woken by each other thousands of times a second) and a writer that
//! fsyncs (uninterruptible IO) — for SECONDS. Each thread reports its own wall time and CPU
//! time (the kernel's `CLOCK_THREAD_CPUTIME_ID`, the scheduler's sum_exec_runtime) between two
//! points where it was running, so `wall - cpu` is exactly its time off CPU in between.

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::sys;

#[derive(clap::Args)]
pub(crate) struct ContentionArgs {
    /// How long every thread runs.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Directory for the writer's file.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// This thread's time waiting on a run queue so far, ns (field 2 of
/// /proc/thread-self/schedstat: the scheduler's run-queue clock, which unlike the CPU-time
/// clock keeps the time the hypervisor stole).
fn run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Runs `work` until `until` and reports the thread's wall and CPU time around it, and the
/// read/write system calls and bytes `work` reports for each call (`vfs_calls`, `vfs_bytes`).
fn measured(
    name: &str,
    until: Instant,
    start: &Barrier,
    work: impl FnMut() -> Result<(u64, u64)>,
) -> Result<Value> {
    let mut work = work;
    start.wait();
    let tid = sys::tid();
    // The window is tight around the work, the schedstat reads (system calls that can leave
    // the CPU) outside it: the realtime edges a recording is cut at are the wall clock's.
    let wait0 = run_delay_ns();
    let (start_ns, wall0, cpu0) = (sys::realtime_ns(), Instant::now(), sys::thread_cpu_ns());
    let (mut calls, mut bytes) = (0u64, 0u64);
    while Instant::now() < until {
        let (c, b) = work()?;
        calls += c;
        bytes += b;
    }
    let (cpu1, wall_ns, end_ns) = (
        sys::thread_cpu_ns(),
        wall0.elapsed().as_nanos() as u64,
        sys::realtime_ns(),
    );
    let wait1 = run_delay_ns();
    let cpu_ns = cpu1 - cpu0;
    Ok(json!({
        "thread": name,
        "tid": tid,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "wall_ns": wall_ns,
        "cpu_ns": cpu_ns,
        "off_cpu_ns": wall_ns.saturating_sub(cpu_ns),
        "run_delay_ns": wait1 - wait0,
        "vfs_calls": calls,
        "vfs_bytes": bytes,
    }))
}

/// Spins without a system call.
#[inline(never)]
pub(crate) fn spin() -> Result<()> {
    let mut x = 0u64;
    for i in 0..100_000u64 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    std::hint::black_box(x);
    Ok(())
}

/// One byte over `tx`, then one back on `rx`: two system calls, two bytes.
#[inline(never)]
fn ping_pong(tx: libc::c_int, rx: libc::c_int) -> Result<(u64, u64)> {
    let mut b = [0u8; 1];
    let sent = sys::write(tx, b"x")?;
    if sys::read(rx, &mut b)? != 1 {
        bail!("pipe closed");
    }
    Ok((2, sent as u64 + 1))
}

pub(crate) fn pipe() -> Result<(libc::c_int, libc::c_int)> {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two fds into the array it is given.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", sys::errno());
    }
    Ok((fds[0], fds[1]))
}

pub(crate) fn run(a: &ContentionArgs) -> Result<Value> {
    if !(a.seconds > 0.0 && a.seconds < 3600.0) {
        bail!("--seconds must be between 0 and 3600");
    }
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("stacks-workload-contention-{}", std::process::id()));
    let file = sys::open(
        &sys::cpath(&path)?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
        0o600,
    )?;
    let (ping_rx, ping_tx) = pipe()?;
    let (pong_rx, pong_tx) = pipe()?;
    let start = Arc::new(Barrier::new(4));
    let until = Instant::now() + Duration::from_secs_f64(a.seconds) + Duration::from_millis(50);
    let mut threads = Vec::new();
    for name in ["hog-1", "hog-2"] {
        let b = start.clone();
        threads.push((
            name,
            sys::spawn_named(name, move || {
                measured(name, until, &b, || spin().map(|()| (0, 0)))
            })?,
        ));
    }
    let b = start.clone();
    threads.push((
        "ping",
        sys::spawn_named("ping", move || {
            measured("ping", until, &b, || ping_pong(ping_tx, pong_rx))
        })?,
    ));
    // The pong side answers until the ping side stops (its last read then sees EOF).
    let pong = sys::spawn_named("pong", move || {
        let mut b = [0u8; 1];
        let (mut calls, mut bytes) = (0u64, 0u64);
        loop {
            let n = sys::read(ping_rx, &mut b)?;
            calls += 1;
            bytes += n as u64;
            if n != 1 {
                break;
            }
            bytes += sys::write(pong_tx, b"y")? as u64;
            calls += 1;
        }
        Ok(json!({ "thread": "pong", "tid": sys::tid(), "vfs_calls": calls, "vfs_bytes": bytes }))
    })?;
    let b = start.clone();
    let buf = vec![0x5au8; 256 * 1024];
    threads.push((
        "writer",
        sys::spawn_named("writer", move || {
            let mut n = 0u64;
            measured("writer", until, &b, || {
                let written = sys::write(file, &buf)?;
                sys::fsync(file)?;
                // From the start again every 64 MiB: a long run does not fill the disk.
                n += 1;
                if n.is_multiple_of(256) {
                    sys::rewind(file)?;
                }
                Ok((1, written as u64))
            })
        })?,
    ));
    let mut reports = Vec::new();
    for (name, t) in threads {
        reports.push(sys::join_named(name, t)?);
    }
    sys::close(ping_tx)?;
    let pong = sys::join_named("pong", pong)?;
    for fd in [ping_rx, pong_rx, pong_tx, file] {
        let _ = sys::close(fd);
    }
    let _ = std::fs::remove_file(&path);
    Ok(json!({ "workload": "contention", "threads": reports, "pong": pong }))
}
