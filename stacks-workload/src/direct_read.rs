//! The `direct-read` workload: `read_direct` reads an exact number of bytes of a file with
//! O_DIRECT, bypassing the page cache, so every byte read is a block read of known size. The
//! file is created first (`prepare_file`) when missing or of the wrong size.

use std::alloc::Layout;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{sys, write};

/// Alignment of the buffer, file offsets and lengths for O_DIRECT.
const ALIGN: usize = 4096;

#[derive(clap::Args)]
pub(crate) struct DirectReadArgs {
    /// MiB to read (the file's size).
    #[arg(long, default_value_t = 32)]
    mib: u64,
    /// File to read; created with this size when missing or of another size.
    #[arg(long, value_name = "FILE")]
    path: std::path::PathBuf,
    /// Bytes per read(2), in KiB (a multiple of 4).
    #[arg(long, default_value_t = 1024)]
    chunk_kib: usize,
}

/// A heap buffer aligned for O_DIRECT, freed on drop.
struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

impl AlignedBuf {
    fn new(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len, ALIGN).context("buffer layout")?;
        // SAFETY: the layout has a non-zero size (checked by the callers' argument checks).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            bail!("cannot allocate {len} bytes");
        }
        Ok(Self { ptr, layout })
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Writes the file afresh: `bytes` bytes, fsynced (through [`write::write_file`]).
#[inline(never)]
pub(crate) fn prepare_file(path: &Path, bytes: u64, chunk: usize) -> Result<()> {
    write::remove_existing(path)?;
    let (written, _) = write::write_file(path, bytes, chunk)?;
    if written != bytes {
        bail!("{}: wrote {written} bytes, not {bytes}", path.display());
    }
    Ok(())
}

/// Flushes the file and drops its pages from the page cache (fsync, then fadvise DONTNEED).
fn drop_from_cache(path: &Path) -> Result<()> {
    let c = sys::cpath(path)?;
    let fd = sys::open(&c, libc::O_RDONLY | libc::O_CLOEXEC, 0)
        .with_context(|| format!("{}", path.display()))?;
    let synced = sys::fsync(fd);
    // SAFETY: fd is open. posix_fadvise returns the error number instead of setting errno.
    let advised = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    let _ = sys::close(fd);
    synced.with_context(|| format!("{}: fsync", path.display()))?;
    if advised != 0 {
        let e = std::io::Error::from_raw_os_error(advised);
        bail!("{}: posix_fadvise: {e}", path.display());
    }
    Ok(())
}

/// The error for EINVAL from an O_DIRECT open or read.
fn no_direct(path: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: O_DIRECT is not supported here (EINVAL); use a file on a disk-backed filesystem",
        path.display()
    )
}

/// Opens `path` with O_DIRECT and reads exactly `bytes` bytes with `read` system calls of at
/// most `chunk` bytes into an aligned buffer. Returns (bytes read, read calls).
#[inline(never)]
pub(crate) fn read_direct(path: &Path, bytes: u64, chunk: usize) -> Result<(u64, u64)> {
    let buf = AlignedBuf::new(chunk)?;
    let c = sys::cpath(path)?;
    let fd = match sys::open(&c, libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Err(no_direct(path)),
        Err(e) => bail!("{}: {e}", path.display()),
    };
    let result = read_all_fd(fd, &buf, path, bytes, chunk);
    // A read-only descriptor: nothing to lose on close.
    let _ = sys::close(fd);
    result
}

/// The body of [`read_direct`]: the reads on an open O_DIRECT descriptor. Inlined, so the system
/// calls are made in `read_direct`'s own frame.
#[inline(always)]
fn read_all_fd(
    fd: libc::c_int,
    buf: &AlignedBuf,
    path: &Path,
    bytes: u64,
    chunk: usize,
) -> Result<(u64, u64)> {
    let (mut read, mut calls) = (0u64, 0u64);
    while read < bytes {
        if !read.is_multiple_of(ALIGN as u64) {
            bail!(
                "{}: short O_DIRECT read left offset {read} unaligned",
                path.display()
            );
        }
        let want = chunk.min((bytes - read) as usize);
        // SAFETY: the buffer holds `chunk` >= `want` bytes and nothing else refers to it.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.ptr, want) };
        let result = sys::read(fd, dst);
        calls += 1;
        let n = match result {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EINVAL) => return Err(no_direct(path)),
                _ => bail!("{}: read: {e}", path.display()),
            },
        };
        if n == 0 {
            bail!(
                "{}: end of file after {read} of {bytes} bytes",
                path.display()
            );
        }
        read += n as u64;
    }
    Ok((read, calls))
}

/// The whole `direct-read` workload on the calling thread; returns the report.
pub(crate) fn direct_read_workload(path: &Path, bytes: u64, chunk: usize) -> Result<Value> {
    if !chunk.is_multiple_of(ALIGN) || !bytes.is_multiple_of(ALIGN as u64) {
        bail!("--chunk-kib must be a multiple of 4 (O_DIRECT needs 4096-byte alignment)");
    }
    let tid = sys::tid();
    let prepared = match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == bytes => false,
        Ok(m) if !m.is_file() => bail!("{}: not a regular file", path.display()),
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
    };
    if prepared {
        prepare_file(path, bytes, chunk)?;
    }
    drop_from_cache(path)?;
    let (read, calls) = read_direct(path, bytes, chunk)?;
    let abs = std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?;
    Ok(json!({
        "workload": "direct-read",
        "tid": tid,
        "bytes": read,
        "read_calls": calls,
        "prepared": prepared,
        "path": abs.to_string_lossy(),
    }))
}

pub(crate) fn run(a: &DirectReadArgs) -> Result<Value> {
    let bytes = sys::mib_bytes(a.mib, "--mib")?;
    let chunk = sys::kib_bytes(a.chunk_kib, "--chunk-kib")?;
    direct_read_workload(&a.path, bytes, chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepares_once_then_reads_exact_bytes() {
        let path =
            std::env::temp_dir().join(format!("stacks-workload-direct-{}", std::process::id()));
        let bytes = 2 * sys::MIB;
        let first = direct_read_workload(&path, bytes, 256 * 1024);
        let first = match first {
            Err(e) if format!("{e}").contains("O_DIRECT is not supported") => {
                let _ = std::fs::remove_file(&path);
                eprintln!("skipped: {e}");
                return;
            }
            r => r.unwrap(),
        };
        let second = direct_read_workload(&path, bytes, 256 * 1024).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(first["prepared"], true);
        assert_eq!(second["prepared"], false);
        assert_eq!(second["bytes"], bytes);
        assert_eq!(second["read_calls"], 8);
    }
}
