//! File-system helpers for durable output: create the output directory (remembering what
//! was created), check it is writable, fsync directories. (Files created under sudo are
//! handed back to the invoking user by `stacks_stream::sys::SudoOwner`.)

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::PackError;

/// `path`'s parent directory, `.` for a bare relative name.
pub(crate) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Create `dir` and any missing parents. Returns the directories that were created,
/// outermost first; each new entry is fsynced into its parent.
pub(crate) fn create_dir_tracked(dir: &Path) -> Result<Vec<PathBuf>, PackError> {
    let name = || dir.display().to_string();
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(Vec::new()),
        Ok(_) => return Err(PackError::NotADirectory { path: name() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(PackError::CreateDir {
                path: name(),
                err: source,
            });
        }
    }
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(p) = cur {
        if p.as_os_str().is_empty() || fs::symlink_metadata(p).is_ok() {
            break;
        }
        missing.push(p.to_path_buf());
        cur = p.parent();
    }
    missing.reverse();
    fs::create_dir_all(dir).map_err(|source| PackError::CreateDir {
        path: name(),
        err: source,
    })?;
    for created in &missing {
        sync_dir(&parent_dir(created))?;
    }
    Ok(missing)
}

/// Fail early, before any input is read, if files cannot be created in `dir`.
pub(crate) fn check_writable(dir: &Path) -> Result<(), PackError> {
    let err = |source| PackError::NotWritable {
        path: dir.display().to_string(),
        err: source,
    };
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| err(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let rc = unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) };
    if rc != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    Ok(())
}

/// fsync a directory so entries created or renamed in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), PackError> {
    let sync_err = |source| PackError::Sync {
        path: dir.display().to_string(),
        err: source,
    };
    File::open(dir)
        .map_err(sync_err)?
        .sync_all()
        .map_err(sync_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("stacks-pack-fsutil-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn creates_missing_parents_and_reports_them() {
        let base = scratch("mk");
        let dir = base.join("a/b");
        let created = create_dir_tracked(&dir).unwrap();
        assert_eq!(created, vec![base.clone(), base.join("a"), dir.clone()]);
        assert!(dir.is_dir());
        assert!(create_dir_tracked(&dir).unwrap().is_empty());
        check_writable(&dir).unwrap();
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let base = scratch("file");
        fs::create_dir_all(&base).unwrap();
        let f = base.join("f");
        fs::write(&f, b"x").unwrap();
        let err = create_dir_tracked(&f).unwrap_err().to_string();
        assert!(
            err.contains("not a directory") && err.contains("/f"),
            "{err}"
        );
        let err = create_dir_tracked(&f.join("sub")).unwrap_err().to_string();
        assert!(err.starts_with("cannot create directory"), "{err}");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn parent_of_bare_name_is_dot() {
        assert_eq!(parent_dir(Path::new("x.parquet")), PathBuf::from("."));
        assert_eq!(parent_dir(Path::new("d/x.parquet")), PathBuf::from("d"));
    }
}
