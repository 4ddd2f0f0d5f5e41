//! The `sleep` workload: one thread named `sleeper` sleeps a known number of fixed intervals,
//! one interruptible `nanosleep` each in `sleep_interval`, so off-CPU recording has an exact
//! count of sleeps and a measured total to compare against (its wall time, and its time off
//! CPU: the wall time less the thread's CPU time).

use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::sys;

/// The name of the sleeping thread (its `comm`).
pub(crate) const THREAD: &str = "sleeper";

#[derive(clap::Args)]
pub(crate) struct SleepArgs {
    /// Number of intervals to sleep.
    #[arg(long, default_value_t = 50)]
    count: u64,
    /// Length of one interval, in milliseconds.
    #[arg(long, default_value_t = 20)]
    ms: u64,
}

/// Sleeps `ms` milliseconds in one `nanosleep` system call (interruptible, state S). Only a signal
/// could split it; the remainder is then slept so the interval stays whole.
#[inline(never)]
pub(crate) fn sleep_interval(ms: u64) -> Result<()> {
    let mut req = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    loop {
        let mut rem = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match sys::nanosleep(&req, &mut rem) {
            Ok(()) => return Ok(()),
            Err(e) if sys::interrupted(&e) => req = rem,
            Err(e) => bail!("nanosleep: {e}"),
        }
    }
}

/// Starts the `sleeper` thread: `count` intervals of `ms` ms; it returns the sleep report.
pub(crate) fn spawn_sleeper(count: u64, ms: u64) -> Result<JoinHandle<Result<Value>>> {
    if count == 0 || ms == 0 {
        bail!("--count and --ms must be positive");
    }
    sys::spawn_named(THREAD, move || {
        let tid = sys::tid();
        let switches_before = voluntary_switches();
        let cpu_before = sys::thread_cpu_ns();
        let start = Instant::now();
        for _ in 0..count {
            sleep_interval(ms)?;
        }
        let slept_ns = start.elapsed().as_nanos() as u64;
        // What the loop ran on CPU (the system calls' entry and exit): the rest of its wall
        // time, `off_cpu_ns`, is the thread's exact time off CPU.
        let cpu_ns = sys::thread_cpu_ns() - cpu_before;
        // A sleep whose timer fired before the thread got to block (it was held on CPU, e.g.
        // by the hypervisor) never left the CPU: the kernel's own count of times this thread
        // blocked is the ground truth for off-CPU intervals.
        let blocked = voluntary_switches() - switches_before;
        Ok(json!({
            "workload": "sleep",
            "tid": tid,
            "count": count,
            "ms": ms,
            "slept_ns": slept_ns,
            "cpu_ns": cpu_ns,
            "off_cpu_ns": slept_ns.saturating_sub(cpu_ns),
            "blocked": blocked,
        }))
    })
}

/// This thread's voluntary context switches so far (`getrusage(RUSAGE_THREAD)`).
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage writes only the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage; RUSAGE_THREAD is valid for the calling thread.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_nvcsw
}

pub(crate) fn run(a: &SleepArgs) -> Result<Value> {
    sys::join_named(THREAD, spawn_sleeper(a.count, a.ms)?)
}
