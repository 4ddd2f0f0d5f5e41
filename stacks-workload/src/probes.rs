//! The `probes` workload: exactly N calls of the C-ABI function `stacks_workload_probed`,
//! M firings of the USDT probes `stacks_workload:fired` and `stacks_workload:tick` (with a
//! semaphore: it fires only while a tracer has set it), K forks and S `getppid` system calls,
//! all from the main thread, so probe counts have exact expected values.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::sys;

#[derive(clap::Args)]
pub(crate) struct ProbesArgs {
    /// Calls of `stacks_workload_probed`.
    #[arg(long, default_value_t = 1000)]
    calls: u64,
    /// Firings of each USDT probe (`stacks_workload:fired`, `stacks_workload:tick`).
    #[arg(long, default_value_t = 100)]
    usdt: u64,
    /// Forks (each child exits at once).
    #[arg(long, default_value_t = 10)]
    forks: u64,
    /// `getppid` system calls, after the rest (for the cost of a tracepoint per hit).
    #[arg(long, default_value_t = 0)]
    syscalls: u64,
    /// Wait until this file exists before starting (up to a minute), so a tracer can attach
    /// to the running process first.
    #[arg(long, value_name = "PATH")]
    start_file: Option<std::path::PathBuf>,
}

/// The probed function: returns `2 * i + 1`, so a return probe can check each value.
#[unsafe(no_mangle)]
#[inline(never)]
pub(crate) extern "C" fn stacks_workload_probed(i: u64, tag: u64) -> u64 {
    std::hint::black_box(tag);
    2 * i + 1
}

/// Calls the probed function `n` times; returns the sum of its results.
#[inline(never)]
fn call_probed(n: u64) -> u64 {
    (0..n).fold(0u64, |acc, i| {
        acc.wrapping_add(stacks_workload_probed(std::hint::black_box(i), 0x5eed))
    })
}

/// Fires the USDT probes `stacks_workload:fired(i, m)` (no semaphore) and
/// `stacks_workload:tick(i, m)` (a semaphore: it fires only while a tracer has set it) `m`
/// times each; returns how many firings of `tick` a tracer saw enabled.
#[inline(never)]
fn fire_usdt(m: u64) -> u64 {
    let mut enabled = 0;
    for i in 0..m {
        probe::probe!(stacks_workload, fired, i, m);
        if probe::probe_lazy!(stacks_workload, tick, i, m) {
            enabled += 1;
        }
    }
    enabled
}

/// Forks `k` children that exit at once, and reaps them.
#[inline(never)]
fn fork_children(k: u64) -> Result<()> {
    for _ in 0..k {
        let pid = sys::fork_exiting_child().context("fork")?;
        let mut status = 0;
        // SAFETY: waits for our own child; status is a valid out pointer.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
            bail!("waitpid {pid}: {}", sys::errno());
        }
    }
    Ok(())
}

/// Makes `n` `getppid` system calls.
#[inline(never)]
fn make_syscalls(n: u64) -> Result<()> {
    for _ in 0..n {
        sys::getppid().context("getppid")?;
    }
    Ok(())
}

pub(crate) fn run(a: &ProbesArgs) -> Result<Value> {
    if let Some(path) = &a.start_file {
        sys::wait_for_file(path)?;
    }
    let sum = call_probed(a.calls);
    let usdt_enabled = fire_usdt(a.usdt);
    fork_children(a.forks)?;
    make_syscalls(a.syscalls)?;
    Ok(json!({
        "workload": "probes",
        "pid": std::process::id(),
        "calls": a.calls,
        "call_sum": sum,
        "usdt": a.usdt,
        "usdt_enabled": usdt_enabled,
        "forks": a.forks,
        "syscalls": a.syscalls,
    }))
}
