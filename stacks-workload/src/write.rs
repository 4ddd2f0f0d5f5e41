//! The `write` workload: `write_file` writes an exact number of non-zero pseudo-random bytes to a
//! fresh file with `write` system calls in fixed chunks, then `fsync`s it, so VFS and block
//! recording have exact byte counts to match.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::sys;

#[derive(clap::Args)]
pub(crate) struct WriteArgs {
    /// MiB to write.
    #[arg(long, default_value_t = 64)]
    mib: u64,
    /// File to write (removed first when it exists).
    #[arg(long, value_name = "FILE")]
    path: std::path::PathBuf,
    /// Bytes per write(2), in KiB.
    #[arg(long, default_value_t = 1024)]
    chunk_kib: usize,
}

/// Removes `path` if it exists, so writing it later frees no old blocks (no truncation).
pub(crate) fn remove_existing(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// Creates (or truncates) `path` and writes exactly `bytes` bytes to it with `write` system
/// calls of at most `chunk` bytes, then `fsync`s and closes it. Returns (bytes, write calls).
#[inline(never)]
pub(crate) fn write_file(path: &Path, bytes: u64, chunk: usize) -> Result<(u64, u64)> {
    let c = sys::cpath(path)?;
    let flags = libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_CLOEXEC;
    let fd = sys::open(&c, flags, 0o644).with_context(|| format!("{}", path.display()))?;
    let result = write_all_fd(fd, path, bytes, chunk);
    let closed = sys::close(fd);
    let (written, calls) = result?;
    closed.with_context(|| format!("{}: close", path.display()))?;
    Ok((written, calls))
}

/// The body of [`write_file`]: the writes and the fsync on an open descriptor. Inlined, so the
/// system calls are made in `write_file`'s own frame.
#[inline(always)]
fn write_all_fd(fd: libc::c_int, path: &Path, bytes: u64, chunk: usize) -> Result<(u64, u64)> {
    let mut buf = vec![0u8; chunk];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let (mut written, mut calls) = (0u64, 0u64);
    while written < bytes {
        let want = chunk.min((bytes - written) as usize);
        sys::fill_nonzero(&mut buf[..want], &mut state);
        let mut off = 0;
        while off < want {
            let result = sys::write(fd, &buf[off..want]);
            calls += 1;
            let n = match result {
                Ok(n) => n,
                Err(e) if sys::interrupted(&e) => continue,
                Err(e) => bail!("{}: write: {e}", path.display()),
            };
            if n == 0 {
                bail!("{}: write wrote nothing", path.display());
            }
            off += n;
            written += n as u64;
        }
    }
    sys::fsync(fd).with_context(|| format!("{}: fsync", path.display()))?;
    Ok((written, calls))
}

/// The whole `write` workload on the calling thread: remove, write, fsync; returns the report.
pub(crate) fn write_workload(path: &Path, bytes: u64, chunk: usize) -> Result<Value> {
    let tid = sys::tid();
    remove_existing(path)?;
    let (written, calls) = write_file(path, bytes, chunk)?;
    if written != bytes {
        bail!("{}: wrote {written} bytes, not {bytes}", path.display());
    }
    let abs = std::fs::canonicalize(path).with_context(|| format!("{}", path.display()))?;
    Ok(json!({
        "workload": "write",
        "tid": tid,
        "bytes": written,
        "write_calls": calls,
        "path": abs.to_string_lossy(),
    }))
}

pub(crate) fn run(a: &WriteArgs) -> Result<Value> {
    let bytes = sys::mib_bytes(a.mib, "--mib")?;
    let chunk = sys::kib_bytes(a.chunk_kib, "--chunk-kib")?;
    write_workload(&a.path, bytes, chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_exact_bytes_of_nonzero_data() {
        let path =
            std::env::temp_dir().join(format!("stacks-workload-write-{}", std::process::id()));
        // 3 MiB + in 768 KiB chunks: the last chunk is partial.
        let bytes = 3 * sys::MIB + 12345;
        let report = write_workload(&path, bytes, 768 * 1024).unwrap();
        let data = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(data.len() as u64, bytes);
        assert!(data.iter().all(|&b| b != 0));
        assert_eq!(report["bytes"], bytes);
        assert_eq!(report["write_calls"], 5);
        assert!(report["path"].as_str().unwrap().starts_with('/'));
    }
}
