//! `convoy`: a lock convoy whose wakers are known. THREADS threads each take one mutex ROUNDS
//! times and hold it while they burn HOLD_MS of CPU; every wait for the lock is ended by the
//! thread that released it, from `convoy_release`. Each thread reports its time waiting in
//! `convoy_lock` by its own clocks, the ground truth of what `offwake` and `critical-path` say.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::sys;
use crate::wakers::Clock;

#[derive(clap::Args)]
pub(crate) struct ConvoyArgs {
    /// Threads contending for the lock (`convoy-N`).
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Times each thread takes the lock.
    #[arg(long, default_value_t = 50)]
    rounds: u32,
    /// CPU time a thread burns while it holds the lock, ms (its own CPU clock).
    #[arg(long, default_value_t = 2)]
    hold_ms: u64,
}

/// Take the lock (a waiter blocks here, in the futex, until a holder releases it).
#[inline(never)]
fn convoy_lock(lock: &Mutex<u64>) -> MutexGuard<'_, u64> {
    lock.lock().unwrap_or_else(|e| e.into_inner())
}

/// The work done while holding the lock.
#[inline(never)]
fn convoy_hold(ns: u64) -> u64 {
    sys::spin_cpu_ns(ns)
}

/// Release the lock: the futex wake of a waiter happens here.
#[inline(never)]
fn convoy_release(guard: MutexGuard<'_, u64>) {
    drop(guard);
}

pub(crate) fn convoy(a: &ConvoyArgs) -> Result<Value> {
    if a.threads < 2 || a.threads > 64 {
        bail!("--threads must be between 2 and 64");
    }
    if a.rounds == 0 || a.rounds > 1_000_000 {
        bail!("--rounds must be between 1 and 1000000");
    }
    if a.hold_ms > 10_000 {
        bail!("--hold-ms must be at most 10000");
    }
    let lock = Arc::new(Mutex::new(0u64));
    let (rounds, hold_ns) = (a.rounds, a.hold_ms * 1_000_000);
    let mut handles = Vec::new();
    for i in 0..a.threads {
        let lock = lock.clone();
        let name = format!("convoy-{i}");
        handles.push(sys::spawn_named(&name.clone(), move || {
            let clock = Clock::start();
            let (mut wait_ns, mut wait_cpu_ns, mut hold_cpu_ns) = (0u64, 0u64, 0u64);
            for _ in 0..rounds {
                // The wall clock (vDSO, no system call) tightly around the lock only: a
                // preemption at the return of the CPU clock's system call is not a wait for
                // the lock, and is outside this window (but inside the CPU clock's, where it
                // adds nothing).
                let cpu = sys::thread_cpu_ns();
                let t = Instant::now();
                let mut guard = convoy_lock(&lock);
                wait_ns += t.elapsed().as_nanos() as u64;
                wait_cpu_ns += sys::thread_cpu_ns() - cpu;
                let cpu = sys::thread_cpu_ns();
                convoy_hold(hold_ns);
                hold_cpu_ns += sys::thread_cpu_ns() - cpu;
                *guard += 1;
                convoy_release(guard);
            }
            Ok(clock.report(
                &name,
                json!({
                    "rounds": rounds,
                    "lock_wait_ns": wait_ns,
                    "lock_wait_cpu_ns": wait_cpu_ns,
                    "hold_cpu_ns": hold_cpu_ns,
                }),
            ))
        })?);
    }
    let mut reports = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        reports.push(sys::join_named(&format!("convoy-{i}"), h)?);
    }
    let taken = *lock.lock().unwrap_or_else(|e| e.into_inner());
    Ok(json!({ "workload": "convoy", "taken": taken, "threads": reports }))
}
