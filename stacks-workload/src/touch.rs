//! The `touch` workload: `touch_memory` maps fresh anonymous memory and writes one byte to every
//! 4096-byte page, so RSS (anon) grows by an exact amount in that function; the memory stays
//! mapped for a while so a recorder sees the process holding it.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::sys;

/// The page size the workload touches by.
pub(crate) const PAGE: usize = 4096;

#[derive(clap::Args)]
pub(crate) struct TouchArgs {
    /// MiB of anonymous memory to map and touch.
    #[arg(long, default_value_t = 256)]
    mib: u64,
    /// How long to keep the memory mapped after touching it, in milliseconds.
    #[arg(long, default_value_t = 200)]
    hold_ms: u64,
}

/// An anonymous private mapping, unmapped on drop.
pub(crate) struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value alone.
unsafe impl Send for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping made by touch_memory and not unmapped since.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Maps `bytes` bytes of fresh anonymous private memory (no MAP_POPULATE, no huge pages) and writes
/// one byte to each 4096-byte page, faulting every page in. Returns the mapping and the pages
/// touched.
#[inline(never)]
pub(crate) fn touch_memory(bytes: usize) -> Result<(Mapping, u64)> {
    let base = sys::mmap_anon(
        bytes,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    )
    .with_context(|| format!("mmap of {bytes} bytes"))?;
    let mapping = Mapping {
        ptr: base.cast(),
        len: bytes,
    };
    // Base pages only, even where transparent huge pages are always on: one fault per page.
    // SAFETY: advice on the mapping just made, whose contents do not matter yet.
    unsafe { sys::madvise(base, bytes, libc::MADV_NOHUGEPAGE) }
        .context("madvise(MADV_NOHUGEPAGE)")?;
    let mut pages = 0u64;
    for off in (0..bytes).step_by(PAGE) {
        // SAFETY: `off` < `bytes`, inside the writable mapping.
        unsafe { base.add(off).write_volatile(1) };
        pages += 1;
    }
    Ok((mapping, pages))
}

/// The whole `touch` workload on the calling thread: touch, hold `hold`, report, unmap.
pub(crate) fn touch_workload(bytes: u64, hold: Duration) -> Result<Value> {
    if !bytes.is_multiple_of(PAGE as u64) {
        bail!("the size must be a multiple of {PAGE} bytes");
    }
    let len = usize::try_from(bytes)?;
    let tid = sys::tid();
    let (mapping, pages) = touch_memory(len)?;
    std::thread::sleep(hold);
    let report = json!({
        "workload": "touch",
        "tid": tid,
        "bytes": bytes,
        "pages": pages,
    });
    drop(mapping);
    Ok(report)
}

pub(crate) fn run(a: &TouchArgs) -> Result<Value> {
    let bytes = sys::mib_bytes(a.mib, "--mib")?;
    touch_workload(bytes, Duration::from_millis(a.hold_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touches_every_page() {
        let report = touch_workload(3 * sys::MIB, Duration::ZERO).unwrap();
        assert_eq!(report["pages"], 3 * 256);
        assert_eq!(report["bytes"], 3 * sys::MIB);
    }
}
