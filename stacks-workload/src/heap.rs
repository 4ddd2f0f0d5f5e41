//! `heap-sites`: three allocation sites of known bytes through Rust's global allocator, which is
//! tracing-stacks' `SampledAlloc` in this program (main.rs): `site_small` (SMALL blocks of 48
//! bytes, each freed at once), `site_leak` (LEAK blocks of 4 KiB, kept to the end: a leak),
//! `site_big` (BIG blocks of 1 MiB, each freed at once). The ground truth of `-e alloc` for a
//! Rust program: each site's bytes allocated and kept.

use std::alloc::{Layout, alloc, dealloc};
use std::hint::black_box;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

#[derive(clap::Args)]
pub(crate) struct HeapSitesArgs {
    /// Blocks of 48 bytes site_small allocates and frees.
    #[arg(long, default_value_t = 1_000_000)]
    small: u64,
    /// Blocks of 4 KiB site_leak allocates and keeps.
    #[arg(long, default_value_t = 4_096)]
    leak: u64,
    /// Blocks of 1 MiB site_big allocates and frees.
    #[arg(long, default_value_t = 100)]
    big: u64,
}

/// Allocate a block of `size` bytes through the global allocator and touch it.
fn block(size: usize) -> Result<(*mut u8, Layout)> {
    let layout = Layout::from_size_align(size, 8)?;
    // SAFETY: a layout of non-zero size.
    let p = unsafe { alloc(layout) };
    if p.is_null() {
        bail!("out of memory allocating {size} bytes");
    }
    // SAFETY: p is a fresh block of `size` ≥ 1 bytes.
    unsafe { p.write_volatile(1) };
    Ok((black_box(p), layout))
}

#[inline(never)]
fn site_small(n: u64) -> Result<()> {
    for _ in 0..n {
        let (p, layout) = block(48)?;
        // SAFETY: allocated above with this layout.
        unsafe { dealloc(p, layout) };
    }
    Ok(())
}

#[inline(never)]
fn site_leak(n: u64) -> Result<Vec<(*mut u8, Layout)>> {
    let mut kept = Vec::new();
    kept.try_reserve_exact(n as usize)
        .context("the leak's pointer array")?;
    for _ in 0..n {
        kept.push(block(4096)?);
    }
    Ok(kept)
}

#[inline(never)]
fn site_big(n: u64) -> Result<()> {
    for _ in 0..n {
        let (p, layout) = block(1 << 20)?;
        // SAFETY: allocated above with this layout.
        unsafe { dealloc(p, layout) };
    }
    Ok(())
}

pub(crate) fn run(a: &HeapSitesArgs) -> Result<Value> {
    if a.small > 100_000_000 || a.leak > 1_000_000 || a.big > 100_000 {
        bail!("at most 100000000 small, 1000000 leak and 100000 big blocks");
    }
    site_small(a.small)?;
    let kept = site_leak(a.leak)?;
    site_big(a.big)?;
    let report = json!({
        "workload": "heap-sites",
        "site_small": { "allocated": a.small * 48, "kept": 0 },
        "site_leak": { "allocated": a.leak * 4096, "kept": a.leak * 4096 },
        "site_big": { "allocated": a.big << 20, "kept": 0 },
    });
    // Kept to the end, as a leak is: never freed.
    std::mem::forget(black_box(kept));
    Ok(report)
}
