//! Opening the files a traced process controls (its perf map, the files it maps) as the
//! process itself would see them, and nothing else: the path is resolved with `openat2(2)`
//! inside the process's root (`RESOLVE_IN_ROOT`: an absolute symlink stays in that root; no
//! `/proc` magic links), its last component never followed (`O_NOFOLLOW`), without blocking
//! (`O_NONBLOCK`: a FIFO opens at once, and is then refused), and only a regular file of
//! bounded size is kept. docs/threat-model.md says why.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;

/// `statfs.f_type` of a FUSE file system (linux/magic.h), served by a process that may be the
/// target itself.
const FUSE_SUPER_MAGIC: libc::__fsword_t = 0x6573_5546;

/// Why a file of a traced process was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("{0}: cannot be opened: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: a symbolic link (not followed)")]
    Symlink(String),
    #[error("{0}: not a regular file")]
    NotRegular(String),
    #[error("{0}: on a FUSE file system (its reads may never return)")]
    Fuse(String),
    #[error("{0}: not owned by the process's user")]
    NotOwner(String),
    #[error("{0}: {1} bytes, more than the {2} read")]
    TooLarge(String, u64, u64),
}

#[cfg(test)]
impl Refused {
    /// Whether the file is simply not there (not a refusal).
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, Refused::Io(_, e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Open `path` (absolute, or relative to the root) below `root` (a handle on a process's
/// `/proc/PID/root`) as that process sees it: a regular file of at most `max` bytes, owned by
/// one of `uids` when given.
pub(crate) fn open_in_root(
    root: &File,
    path: &str,
    max: u64,
    uids: Option<&[u32]>,
) -> Result<(File, u64), Refused> {
    let name = || path.to_string();
    let c = CString::new(path.trim_start_matches('/'))
        .map_err(|_| Refused::Io(name(), std::io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: `open_how` is plain integers; zero is "no flags".
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a valid directory descriptor, a NUL-terminated path and an `open_how` of the
    // size passed; the descriptor returned is owned by the `File` made of it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &raw const how,
            size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::ELOOP) {
            Refused::Symlink(name())
        } else {
            Refused::Io(name(), e)
        });
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    let file = unsafe { File::from_raw_fd(fd as i32) };
    checked(file, path, max, uids)
}

/// `file` (opened as `path`) when it is a regular file not on FUSE, of at most `max` bytes,
/// owned by one of `uids` when given.
fn checked(file: File, path: &str, max: u64, uids: Option<&[u32]>) -> Result<(File, u64), Refused> {
    let name = || path.to_string();
    let meta = file.metadata().map_err(|e| Refused::Io(name(), e))?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular(name()));
    }
    // SAFETY: a valid descriptor and a `statfs` to fill.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(file.as_raw_fd(), &raw mut fs) } == 0 && fs.f_type == FUSE_SUPER_MAGIC
    {
        return Err(Refused::Fuse(name()));
    }
    if uids.is_some_and(|u| !u.contains(&meta.uid())) {
        return Err(Refused::NotOwner(name()));
    }
    if meta.len() > max {
        return Err(Refused::TooLarge(name(), meta.len(), max));
    }
    Ok((file, meta.len()))
}

/// A handle on process `pid`'s root directory (`/proc/PID/root`), to open its files in.
pub(crate) fn root_of(pid: u32) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/root"))
}

/// Open file `path` of process `pid` (a path its maps name) in its root, within `max` bytes;
/// never a file on FUSE (see [`on_fuse`]).
pub(crate) fn open_of(pid: u32, path: &str, max: u64) -> Result<(File, u64), Refused> {
    if on_fuse(pid, path) {
        return Err(Refused::Fuse(path.to_string()));
    }
    let root = root_of(pid).map_err(|e| Refused::Io(path.to_string(), e))?;
    open_in_root(&root, path, max, None)
}

/// Whether `path`, as process `pid` sees it, lies on a FUSE mount, from its mount table (the
/// kernel's text, read without asking any file system): opening a file there, or only walking
/// to it, waits for the FUSE server, which may be the process itself and never answer. The one
/// test, shared with stacks-symbolize: `stacks_stream::mounts`.
pub(crate) fn on_fuse(pid: u32, path: &str) -> bool {
    stacks_stream::mounts::on_fuse(pid, path)
}

/// Read at most `max` bytes of file `path` of process `pid` (see [`open_of`]).
pub(crate) fn read_of(pid: u32, path: &str, max: u64) -> Result<Vec<u8>, Refused> {
    use std::io::Read;
    let (file, len) = open_of(pid, path, max)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max)
        .read_to_end(&mut bytes)
        .map_err(|e| Refused::Io(path.to_string(), e))?;
    Ok(bytes)
}

/// Largest symbol, string or note table read of a target's ELF file: object reads a table
/// whole when it parses the file, so a header claiming gigabytes (of a sparse file) would be
/// read into memory.
pub(crate) const ELF_TABLE_MAX: u64 = 256 << 20;

/// Whether the ELF file in `data` has no symbol, string or note table over [`ELF_TABLE_MAX`]
/// bytes (a file that is not a 64-bit ELF file passes: parsing it fails later).
pub(crate) fn elf_tables_bounded<'d, R: object::ReadRef<'d>>(data: R) -> bool {
    use object::elf::{SHT_DYNSYM, SHT_NOTE, SHT_STRTAB, SHT_SYMTAB};
    use object::read::elf::{FileHeader, SectionHeader};
    let Ok(header) = object::elf::FileHeader64::<object::Endianness>::parse(data) else {
        return true;
    };
    let Ok(endian) = header.endian() else {
        return true;
    };
    let Ok(sections) = header.section_headers(endian, data) else {
        return true;
    };
    sections.iter().all(|s| {
        !matches!(
            s.sh_type(endian),
            SHT_SYMTAB | SHT_DYNSYM | SHT_STRTAB | SHT_NOTE
        ) || s.sh_size(endian) <= ELF_TABLE_MAX
    })
}

/// Open `path` of the recorder's own view (an exec'd file's path, a snapshot's) without
/// blocking: a regular file, not on FUSE, of at most `max` bytes.
pub(crate) fn open_plain(
    path: impl AsRef<std::path::Path>,
    max: u64,
) -> Result<(File, u64), Refused> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = path.as_ref();
    let shown = path.display().to_string();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Refused::Io(shown.clone(), e))?;
    checked(file, &shown, max, None)
}

/// The user ids (real, effective, saved, file system) of process `pid`, from its status.
pub(crate) fn uids_of(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|u| u.parse().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files below a directory taken as a root: a regular file is read; an absolute symlink
    /// is refused (not followed out of the root), a FIFO opens without blocking and is
    /// refused, a file too large or of another owner is refused.
    #[test]
    fn only_regular_files_of_the_root_are_opened() {
        let dir = std::env::temp_dir().join(format!("untrusted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        std::fs::write(dir.join("tmp/ok"), b"hello\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("tmp/link")).unwrap();
        std::os::unix::fs::symlink("/tmp/ok", dir.join("tmp/inner")).unwrap();
        let fifo = CString::new(dir.join("tmp/fifo").to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let root = File::open(&dir).unwrap();
        let (_, len) = open_in_root(&root, "/tmp/ok", 100, None).unwrap();
        assert_eq!(len, 6);
        let refused = |p: &str, max: u64, uids: Option<&[u32]>| {
            open_in_root(&root, p, max, uids).err().unwrap()
        };
        assert!(matches!(
            refused("tmp/link", 100, None),
            Refused::Symlink(_)
        ));
        assert!(matches!(
            refused("tmp/inner", 100, None),
            Refused::Symlink(_)
        ));
        assert!(matches!(
            refused("tmp/fifo", 100, None),
            Refused::NotRegular(_)
        ));
        assert!(matches!(
            refused("tmp/ok", 5, None),
            Refused::TooLarge(_, 6, 5)
        ));
        assert!(matches!(
            refused("tmp/ok", 100, Some(&[12345])),
            Refused::NotOwner(_)
        ));
        assert!(refused("tmp/none", 100, None).is_missing());
        // `..` does not leave the root either.
        assert!(refused("../../../../etc/passwd", 1 << 20, None).is_missing());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The mount table of this process has no FUSE mount under its own executable (the
    /// table's parsing and the FUSE test are stacks_stream::mounts' and tested there).
    #[test]
    fn our_own_files_are_not_on_fuse() {
        assert!(!on_fuse(std::process::id(), "/proc/self/exe"));
    }

    #[test]
    fn our_own_uids_are_read() {
        let uids = uids_of(std::process::id()).unwrap();
        // SAFETY: no arguments.
        assert!(uids.contains(&unsafe { libc::geteuid() }));
    }
}
