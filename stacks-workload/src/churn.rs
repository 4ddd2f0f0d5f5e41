//! The `churn` workload: a busy host's process and thread turnover for SECONDS — spawner
//! threads each starting one short-lived process after another (`/bin/sh -c` running a few
//! commands, so every process maps the shell and libc and runs a while), a thread that starts
//! short-lived threads (function `churn_thread_work`), and a steady CPU burner (`burn_heavy`).
//! What the recorder's per-process state and every stage's memory must survive: pids, threads
//! and processes seen once, never again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::cpu::burn_heavy;

#[derive(clap::Args)]
pub(crate) struct ChurnArgs {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Threads each starting one short-lived process after another.
    #[arg(long, default_value_t = 2)]
    spawners: u32,
    /// Short-lived threads started per second (0: none).
    #[arg(long, default_value_t = 200)]
    threads_per_sec: u32,
    /// Run a thread burning CPU the whole time.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    burn: bool,
}

/// What each short-lived process runs: a builtin loop and two commands, so it lives a few
/// milliseconds, execs twice and maps a few libraries.
const CHILD_SCRIPT: &str =
    "i=0; while [ $i -lt 200 ]; do i=$((i+1)); done; /bin/true; exec cat /dev/null";

/// A short-lived thread's work: about 50 µs of CPU.
#[inline(never)]
fn churn_thread_work() -> u64 {
    burn_heavy(1, 2_000)
}

pub(crate) fn run(a: &ChurnArgs) -> Result<Value> {
    let stop = Arc::new(AtomicBool::new(false));
    let procs = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..a.spawners {
        let (stop, procs, failed) = (stop.clone(), procs.clone(), failed.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("spawner-{i}"))
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let status = std::process::Command::new("/bin/sh")
                            .args(["-c", CHILD_SCRIPT])
                            .stdin(std::process::Stdio::null())
                            .stdout(std::process::Stdio::null())
                            .status();
                        match status {
                            Ok(s) if s.success() => procs.fetch_add(1, Ordering::Relaxed),
                            _ => failed.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
                .context("starting a spawner thread")?,
        );
    }
    if a.burn {
        let stop = stop.clone();
        handles.push(
            std::thread::Builder::new()
                .name("burner".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::black_box(burn_heavy(1, 40_000));
                    }
                })
                .context("starting the burner thread")?,
        );
    }
    let threads = Arc::new(AtomicU64::new(0));
    if a.threads_per_sec > 0 {
        let (stop, threads) = (stop.clone(), threads.clone());
        let period = Duration::from_secs_f64(1.0 / f64::from(a.threads_per_sec));
        handles.push(
            std::thread::Builder::new()
                .name("thread-spawner".into())
                .spawn(move || {
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let t = std::thread::Builder::new()
                            .name("short-lived".into())
                            .spawn(|| std::hint::black_box(churn_thread_work()));
                        if let Ok(t) = t {
                            let _ = t.join();
                            threads.fetch_add(1, Ordering::Relaxed);
                        }
                        next += period;
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        } else {
                            next = now;
                        }
                    }
                })
                .context("starting the thread spawner")?,
        );
    }
    std::thread::sleep(Duration::from_secs_f64(a.seconds.max(0.0)));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    Ok(json!({
        "workload": "churn",
        "seconds": start.elapsed().as_secs_f64(),
        "processes": procs.load(Ordering::Relaxed),
        "failed_processes": failed.load(Ordering::Relaxed),
        "threads": threads.load(Ordering::Relaxed),
    }))
}
