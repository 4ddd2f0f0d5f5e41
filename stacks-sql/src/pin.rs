//! The files of a directory store held open while this process reads them, so that a set
//! deleted under a running query or screen (stacks-pack's retention, a user cleaning up) is
//! still read whole: the files are opened once when the store is listed, and every later
//! read goes through `/proc/self/fd/N`, which opens the file held even once it is unlinked.
//! A set already gone when the store is listed is skipped with a warning by the caller.
//! Without `/proc`, or past the limit of open files, paths are read as they are.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, Once};

/// Open files by path, for the life of the process (a store is listed once per process).
static PINNED: LazyLock<Mutex<HashMap<PathBuf, File>>> = LazyLock::new(Default::default);

/// Where this process sees its open files.
const FD_DIR: &str = "/proc/self/fd";

/// Hold `path` open: `Ok(true)` when it is held (or was already), `Ok(false)` when it does
/// not exist (any more); other failures to open are the caller's to report when it reads.
pub fn pin(path: &Path) -> io::Result<bool> {
    raise_open_files_limit();
    let mut pinned = PINNED.lock().unwrap_or_else(|p| p.into_inner());
    if pinned.contains_key(path) {
        return Ok(true);
    }
    match File::open(path) {
        Ok(f) => {
            pinned.insert(path.to_path_buf(), f);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The path to read `path` by: its held file when it is pinned, else `path` itself.
pub fn path(path: &Path) -> PathBuf {
    let pinned = PINNED.lock().unwrap_or_else(|p| p.into_inner());
    match pinned.get(path) {
        Some(f) if Path::new(FD_DIR).is_dir() => Path::new(FD_DIR).join(f.as_raw_fd().to_string()),
        _ => path.to_path_buf(),
    }
}

/// A store of many sets holds three files a set open: allow as many as the hard limit.
fn raise_open_files_limit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a valid pointer to an rlimit.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_file_is_read_after_it_is_deleted() {
        let dir = std::env::temp_dir().join(format!("stacks-sql-pin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.parquet");
        std::fs::write(&file, b"held").unwrap();
        assert!(pin(&file).unwrap());
        std::fs::remove_file(&file).unwrap();
        let held = path(&file);
        assert_ne!(held, file);
        assert_eq!(std::fs::read(&held).unwrap(), b"held");
        assert!(!pin(&dir.join("gone.parquet")).unwrap());
        assert_eq!(path(&dir.join("gone.parquet")), dir.join("gone.parquet"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
