//! Module files held open while they are symbolized, so that blazesym and the Go table reader
//! read the very file that was checked: the file is opened once, checked ([`elf::read_file`])
//! and handed to them as `/proc/self/fd/N`, never by its path again (a process may have
//! replaced the file at the path since). blazesym maps the files it reads, and a mapped file
//! truncated by its owner faults the reader (`SIGBUS`): a file another user may write (owned
//! by neither root nor the user running stacks-symbolize, or writable by its group or others)
//! is read from a private sealed copy in memory instead, up to [`COPY_MAX`] bytes
//! (docs/threat-model.md).

use std::fs::{File, Metadata};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::elf::{self, ElfError};

/// Largest file of another user copied to be read; a larger one is not symbolized.
pub const COPY_MAX: u64 = 1 << 30;

/// A checked module file, open for as long as this lives.
#[derive(Debug)]
pub struct Pinned {
    file: File,
    /// The file's name for blazesym: `/proc/self/fd/N`.
    path: PathBuf,
    /// Bytes copied into memory (0: read in place).
    pub copied: u64,
}

impl Pinned {
    /// The path that opens this very file (while it is held).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// Whether a user other than root and the one running this may write the file (and so
/// truncate it while it is mapped).
fn others_may_write(meta: &Metadata) -> bool {
    // SAFETY: no arguments, cannot fail.
    let me = unsafe { libc::geteuid() };
    (meta.uid() != 0 && meta.uid() != me) || meta.mode() & 0o022 != 0
}

/// Open the module file at `path`, copy it when another user may write it, and check what
/// will be read.
pub fn pin(path: &Path) -> Result<Pinned, ElfError> {
    let name = path.display().to_string();
    let io = |source| ElfError::Io {
        path: name.clone(),
        source,
    };
    let file = elf::open(path)?;
    let meta = file.metadata().map_err(io)?;
    let (file, copied) = if meta.is_file() && others_may_write(&meta) {
        if meta.len() > COPY_MAX {
            return Err(ElfError::Unsupported {
                path: name,
                what: "writable by another user and over 1 GiB, not copied to be read",
            });
        }
        let copy = sealed_copy(&file, meta.len()).map_err(io)?;
        let len = copy.metadata().map_err(io)?.len();
        (copy, len)
    } else {
        (file, 0)
    };
    // Checked as read: a file truncated while it was copied is checked short.
    elf::read_file(&file, &name)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Ok(Pinned { file, path, copied })
}

/// A copy of the first `len` bytes of `file` in an anonymous memory file, sealed against any
/// change.
fn sealed_copy(file: &File, len: u64) -> std::io::Result<File> {
    use std::io::Read;
    // SAFETY: a NUL-terminated name and flags.
    let fd = unsafe {
        libc::memfd_create(
            c"stacks-symbolize".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made, owned by nobody else.
    let mut copy = unsafe { File::from_raw_fd(fd) };
    std::io::copy(&mut file.take(len), &mut copy)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: a valid descriptor and integer seals.
    if unsafe { libc::fcntl(copy.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pinned file is read through its descriptor: replacing the file at its path changes
    /// nothing read; a copy is sealed and the same bytes.
    #[test]
    fn the_file_read_is_the_file_checked() {
        let dir = std::env::temp_dir().join(format!("stacks-pin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("module");
        std::fs::copy("/proc/self/exe", &path).unwrap();
        let want = crate::elf::read(&path).unwrap().build_id;
        let pinned = pin(&path).unwrap();
        assert_eq!(pinned.copied, 0, "our own file is read in place");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"not an ELF file").unwrap();
        let through = File::open(pinned.path()).unwrap();
        let through = crate::elf::read_file(&through, "pinned").unwrap();
        assert_eq!(through.build_id, want);

        let exe = File::open("/proc/self/exe").unwrap();
        let len = exe.metadata().unwrap().len();
        let copy = sealed_copy(&exe, len).unwrap();
        assert_eq!(copy.metadata().unwrap().len(), len);
        // SAFETY: a valid descriptor.
        assert_eq!(
            unsafe { libc::ftruncate(copy.as_raw_fd(), 0) },
            -1,
            "sealed"
        );
        assert_eq!(crate::elf::read_file(&copy, "copy").unwrap().build_id, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn files_others_may_write_are_told_apart() {
        let meta = std::fs::metadata("/proc/self/exe").unwrap();
        assert!(!others_may_write(&meta));
        let dir = std::env::temp_dir().join(format!("stacks-pin-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shared");
        std::fs::write(&path, b"x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(others_may_write(&std::fs::metadata(&path).unwrap()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
