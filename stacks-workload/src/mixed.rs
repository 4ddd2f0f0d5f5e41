//! The `mixed` workload: CPU, sleep, file write, memory and TCP at once, each in its own named
//! thread, through the same functions and reports as the single workloads, so a recording of
//! every resource kind can be checked per thread against one report.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::{cpu, sleep, sys, tcp, touch, write};

/// Interval of the sleeper, ms.
const SLEEP_MS: u64 = 20;
/// Bytes written with fsync to DIR/mixed.dat.
const WRITE_BYTES: u64 = 16 * sys::MIB;
/// Bytes per write(2).
const WRITE_CHUNK: usize = 1 << 20;
/// Bytes of anonymous memory touched.
const TOUCH_BYTES: u64 = 64 * sys::MIB;
/// How long the touched memory stays mapped.
const TOUCH_HOLD: Duration = Duration::from_millis(200);
/// Bytes each way over TCP (IPv4).
const TCP_BYTES: u64 = 4 * sys::MIB;
/// Bytes per send(2)/recv(2).
const TCP_CHUNK: usize = 64 * 1024;

/// File name of the written file inside DIR.
pub(crate) const WRITE_FILE: &str = "mixed.dat";

#[derive(clap::Args)]
pub(crate) struct MixedArgs {
    /// Directory for the written file (mixed.dat); disk-backed to see block IO.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// How long the CPU burn and the sleeper run, in seconds.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

pub(crate) fn run(a: &MixedArgs) -> Result<Value> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        bail!("--seconds must be positive");
    }
    if !a.dir.is_dir() {
        bail!("{}: not a directory", a.dir.display());
    }
    let cpu_args = cpu::CpuArgs::heavy_only(a.seconds)?;
    let sleeps = ((a.seconds * 1000.0 / SLEEP_MS as f64).round() as u64).max(1);
    let path = a.dir.join(WRITE_FILE);

    let burn = sys::spawn_named("burn", move || cpu::run(&cpu_args))?;
    let sleeper = sleep::spawn_sleeper(sleeps, SLEEP_MS)?;
    let writer = sys::spawn_named("writer", move || {
        write::write_workload(&path, WRITE_BYTES, WRITE_CHUNK)
    })?;
    let toucher = sys::spawn_named("toucher", || touch::touch_workload(TOUCH_BYTES, TOUCH_HOLD))?;
    let tcp = sys::spawn_named("tcp-client", || {
        tcp::tcp_exchange(false, TCP_BYTES, TCP_CHUNK)
    })?;

    // Join all before failing, so no thread is left running behind an error.
    let results = [
        ("sleep", sys::join_named(sleep::THREAD, sleeper)),
        ("write", sys::join_named("writer", writer)),
        ("touch", sys::join_named("toucher", toucher)),
        ("tcp", sys::join_named("tcp-client", tcp)),
        ("cpu", sys::join_named("burn", burn)),
    ];
    let mut report = json!({ "workload": "mixed" });
    for (key, result) in results {
        report[key] = result?;
    }
    Ok(report)
}
