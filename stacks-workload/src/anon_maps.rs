//! The `anon-maps` workload: an allocator's traffic, with no code ever mapped. For SECONDS,
//! `map_anon_chunk` maps KIB KiB of anonymous read-write memory (a system call of its own,
//! as large `malloc` chunks are), writes one byte to each page and unmaps it; every BATCH
//! chunks the thread spins ~0.5 ms (`burn_between_maps`) and naps 1 ms, so that a recording
//! has CPU samples and switches of it throughout.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::sys;

#[derive(clap::Args)]
pub(crate) struct AnonMapsArgs {
    /// How long to map and unmap, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// KiB of one mapping (a multiple of 4).
    #[arg(long, default_value_t = 256)]
    kib: usize,
    /// Mappings between two naps.
    #[arg(long, default_value_t = 20)]
    batch: u64,
}

/// Maps `len` bytes of fresh anonymous read-write memory, writes each 4096-byte page once and
/// unmaps it.
#[inline(never)]
fn map_anon_chunk(len: usize) -> Result<()> {
    let base = sys::mmap_anon(
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )
    .with_context(|| format!("mmap of {len} bytes"))?;
    for off in (0..len).step_by(crate::touch::PAGE) {
        // SAFETY: `off` < `len`, inside the writable mapping just made.
        unsafe { base.add(off).write_volatile(1) };
    }
    // SAFETY: base/len are the mapping made above, not used after this.
    if unsafe { libc::munmap(base.cast(), len) } != 0 {
        bail!("munmap: {}", sys::errno());
    }
    Ok(())
}

/// CPU between two batches of mappings, for the CPU samples to land in.
#[inline(never)]
fn burn_between_maps() -> u64 {
    sys::spin_cpu_ns(500_000)
}

pub(crate) fn run(a: &AnonMapsArgs) -> Result<Value> {
    if a.kib == 0
        || !a.kib.is_multiple_of(4)
        || a.batch == 0
        || a.seconds.is_nan()
        || a.seconds <= 0.0
    {
        bail!("--kib must be a positive multiple of 4, --batch and --seconds positive");
    }
    let len = a.kib * 1024;
    let until = Duration::from_secs_f64(a.seconds);
    let start = Instant::now();
    let mut maps = 0u64;
    let mut naps = 0u64;
    while start.elapsed() < until {
        for _ in 0..a.batch {
            map_anon_chunk(len)?;
            maps += 1;
        }
        std::hint::black_box(burn_between_maps());
        crate::sleep::sleep_interval(1)?;
        naps += 1;
    }
    Ok(json!({
        "workload": "anon-maps",
        "pid": std::process::id(),
        "tid": sys::tid(),
        "maps": maps,
        "naps": naps,
        "kib": a.kib,
        "seconds": start.elapsed().as_secs_f64(),
    }))
}
