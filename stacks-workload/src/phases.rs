//! The `phases` workload: two phases of SECONDS each with known thread states, for screens
//! that show threads over time. Phase 1: `spinner` on CPU, `reader-a` and `reader-b` blocked
//! in `read` on an empty pipe (function `block_in_read`), `napper` in nanosleep. Phase 2: the
//! pipe is closed (the readers end) and `spinner-b` spins too; `spinner` and `napper` go on.
//! The main thread waits in `futex` (joining) all along. `--mark FILE` is created when phase
//! 2 starts. The report gives each thread's tid and the phases' wall-clock bounds.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::contention::{pipe, spin};
use crate::sys;

#[derive(clap::Args)]
pub(crate) struct PhasesArgs {
    /// Length of each phase.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// File created when phase 2 starts.
    #[arg(long, value_name = "FILE")]
    mark: Option<PathBuf>,
}

/// Blocks in `read` on `fd` until the pipe's write end closes.
#[inline(never)]
fn block_in_read(fd: libc::c_int) -> Result<()> {
    let mut b = [0u8; 1];
    while sys::read(fd, &mut b)? != 0 {}
    Ok(())
}

/// Spins until `until`.
#[inline(never)]
fn spin_until(until: Instant) -> Result<()> {
    while Instant::now() < until {
        spin()?;
    }
    Ok(())
}

/// Sleeps until `until` in 100 ms nanosleeps.
#[inline(never)]
fn nap_until(until: Instant) {
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

pub(crate) fn run(a: &PhasesArgs) -> Result<Value> {
    if !(a.seconds > 0.0 && a.seconds < 3600.0) {
        bail!("--seconds must be between 0 and 3600");
    }
    let phase = Duration::from_secs_f64(a.seconds);
    let t0 = Instant::now();
    let start_ns = sys::realtime_ns();
    let (second, end) = (t0 + phase, t0 + 2 * phase);
    let (rx, tx) = pipe()?;
    let mut threads = vec![
        sys::spawn_named("spinner", move || spin_until(end).map(|_| sys::tid()))?,
        sys::spawn_named("napper", move || {
            nap_until(end);
            Ok(sys::tid())
        })?,
    ];
    for name in ["reader-a", "reader-b"] {
        threads.push(sys::spawn_named(name, move || {
            block_in_read(rx).map(|_| sys::tid())
        })?);
    }
    nap_until(second);
    sys::close(tx)?;
    let second_ns = sys::realtime_ns();
    if let Some(mark) = &a.mark {
        std::fs::write(mark, b"phase 2\n")?;
    }
    threads.push(sys::spawn_named("spinner-b", move || {
        spin_until(end).map(|_| sys::tid())
    })?);
    let mut tids = Vec::new();
    for (t, name) in
        threads
            .into_iter()
            .zip(["spinner", "napper", "reader-a", "reader-b", "spinner-b"])
    {
        let tid = t
            .join()
            .map_err(|_| anyhow::anyhow!("thread {name} panicked"))??;
        tids.push(json!({"thread": name, "tid": tid}));
    }
    Ok(json!({
        "workload": "phases",
        "threads": tids,
        "start_ns": start_ns,
        "second_ns": second_ns,
        "end_ns": sys::realtime_ns(),
    }))
}
