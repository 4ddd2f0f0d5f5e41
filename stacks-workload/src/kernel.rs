//! The `kernel` workload: spends its time inside the kernel, reading /dev/zero in large chunks,
//! so a profile with kernel stacks must show the read path (`ksys_read`, `vfs_read`, …).

use std::fs::File;
use std::io::Read;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

#[derive(clap::Args)]
pub(crate) struct KernelArgs {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Bytes per read(2).
    #[arg(long, default_value_t = 1 << 20)]
    chunk: usize,
}

/// Reads /dev/zero until the time is up. Kept out of line so it is its own frame.
#[inline(never)]
pub(crate) fn read_zero(file: &mut File, buf: &mut [u8], budget: Duration) -> Result<(u64, u64)> {
    let start = Instant::now();
    let (mut reads, mut bytes) = (0u64, 0u64);
    while start.elapsed() < budget {
        let n = file.read(buf).context("reading /dev/zero")?;
        reads += 1;
        bytes += n as u64;
    }
    Ok((reads, bytes))
}

pub(crate) fn run(a: &KernelArgs) -> Result<serde_json::Value> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) || a.chunk == 0 {
        bail!("--seconds and --chunk must be positive");
    }
    let mut file = File::open("/dev/zero").context("opening /dev/zero")?;
    let mut buf = vec![1u8; a.chunk];
    let start = Instant::now();
    let (reads, bytes) = read_zero(&mut file, &mut buf, Duration::from_secs_f64(a.seconds))?;
    Ok(serde_json::json!({
        "workload": "kernel",
        "pid": std::process::id(),
        "wall_ns": start.elapsed().as_nanos() as u64,
        "reads": reads,
        "bytes": bytes,
    }))
}
