//! The mount table (`/proc/PID/mountinfo`, text the kernel makes without asking any file
//! system) and the one test of which file systems a tool must not walk into: FUSE, served by a
//! process that may be a traced program itself and may never answer (opening a file there, or
//! only looking a name up in it, then waits for good). The recorder checks the paths of a
//! traced process against that process's table ([`on_fuse`]); stacks-symbolize opens the paths
//! a stream names in its own view, one component at a time, each checked by the mount it
//! landed on before anything is looked up in it ([`open_off_fuse`]). docs/threat-model.md.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};
use std::sync::Mutex;

mod of_process;
pub use of_process::{forget_idle, on_fuse};

/// One line of a mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The mount's id (`mnt_id` of `/proc/PID/fdinfo/N`).
    pub id: u32,
    /// Where it is mounted, unescaped.
    pub point: String,
    /// Its file system type (`ext4`, `fuse.sshfs`, …).
    pub fstype: String,
}

/// The mounts of a `mountinfo` text, in its order (a later mount over the same point hides
/// an earlier one); lines that do not parse are skipped.
pub fn parse(mountinfo: &str) -> impl Iterator<Item = Mount> + '_ {
    mountinfo.lines().filter_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        let mut fields = head.split(' ');
        let id = fields.next()?.parse().ok()?;
        let point = fields.nth(3)?;
        let fstype = tail.split(' ').next()?;
        // Mount points escape spaces, tabs, newlines and backslashes in octal.
        let point = point
            .replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\012", "\n")
            .replace("\\134", "\\");
        Some(Mount {
            id,
            point,
            fstype: fstype.to_string(),
        })
    })
}

/// Whether a file system type is FUSE's (`fuse`, `fuse.NAME`, `fuseblk`): its files are served
/// by a process. `fusectl`, the kernel's own control file system, is not.
pub fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype == "fuseblk" || fstype.starts_with("fuse.")
}

/// Whether `path` lies on a FUSE mount by a `mountinfo` text: the type of the mount whose
/// mount point is the longest prefix of `path` (whole components). The path is taken as it
/// is written: a symbolic link in it is not seen.
pub fn fuse_in(mountinfo: &str, path: &str) -> bool {
    fuse_among(parse(mountinfo), path)
}

/// [`fuse_in`] over mounts already parsed, in their table's order.
fn fuse_among<M: std::borrow::Borrow<Mount>>(
    mounts: impl IntoIterator<Item = M>,
    path: &str,
) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for m in mounts {
        let m = m.borrow();
        let under = m.point == "/"
            || path == m.point
            || path
                .strip_prefix(m.point.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        // A later mount over the same point hides the earlier one.
        if under && best.is_none_or(|(len, _)| m.point.len() >= len) {
            best = Some((m.point.len(), is_fuse(&m.fstype)));
        }
    }
    best.is_some_and(|(_, fuse)| fuse)
}

/// Why [`open_off_fuse`] did not open a file.
#[derive(Debug, thiserror::Error)]
pub enum OffFuseError {
    #[error(
        "{path}: on a FUSE file system ({fstype} at {point}), not opened: its server may never answer"
    )]
    Fuse {
        path: String,
        fstype: String,
        point: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Symbolic links followed in one path at most (the kernel's own limit).
const MAX_LINKS: u32 = 40;

/// Open `path` in this process's own view to read, without blocking (`O_NONBLOCK`: a FIFO
/// opens at once), and never on a FUSE mount: the path is walked one component at a time
/// (`O_PATH`, no link followed by the kernel; symbolic links are read and followed here), and
/// each mount the walk enters (`RESOLVE_NO_XDEV` tells), by its id in `/proc/self/fdinfo`, is
/// checked against this process's mount table before a name is looked up below it. A link into a FUSE mount, or a FUSE file
/// system mounted over a directory of the path since it was named, is refused like a path
/// written on FUSE. The mount table is read again when the kernel says it changed.
pub fn open_off_fuse(path: &Path) -> Result<File, OffFuseError> {
    let shown = || path.display().to_string();
    let io = |source| OffFuseError::Io {
        path: shown(),
        source,
    };
    let mut table = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    let start: &OsStr = if path.is_absolute() {
        "/".as_ref()
    } else {
        ".".as_ref()
    };
    let mut at = open_path(libc::AT_FDCWD, start).map_err(io)?;
    table.check(&at, path)?;
    let mut rest: VecDeque<OsString> = names(path);
    let mut links = 0;
    while let Some(name) = rest.pop_front() {
        // Within the mount of `at` (checked), nothing to check; across a mount point, the
        // mount reached is checked before anything is looked up in it.
        let next = match open_path_here(at.as_raw_fd(), &name) {
            Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                let next = open_path(at.as_raw_fd(), &name).map_err(io)?;
                table.check(&next, path)?;
                next
            }
            next => next.map_err(io)?,
        };
        // SAFETY: a valid descriptor and a `stat` to fill.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(next.as_raw_fd(), &raw mut st) } != 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            links += 1;
            if links > MAX_LINKS {
                return Err(io(std::io::Error::from_raw_os_error(libc::ELOOP)));
            }
            let target = read_link(&next).map_err(io)?;
            let target = Path::new(&target);
            if target.is_absolute() {
                at = open_path(libc::AT_FDCWD, "/".as_ref()).map_err(io)?;
                table.check(&at, path)?;
            }
            for n in names(target).into_iter().rev() {
                rest.push_front(n);
            }
        } else {
            at = next;
        }
    }
    drop(table);
    // The file reached, opened again to read through its descriptor (no name looked up).
    let fd = CString::new(format!("/proc/self/fd/{}", at.as_raw_fd())).expect("no NUL");
    // SAFETY: a NUL-terminated path; the descriptor returned is owned by the `File`.
    let file = unsafe {
        libc::open(
            fd.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if file < 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { File::from_raw_fd(file) })
}

/// The names to walk of `path`, from its root or current directory.
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// `name` below directory `at`, as an `O_PATH` descriptor of the name itself (a link not
/// followed): nothing opened, no file system asked beyond the lookup in `at`.
fn open_path(at: RawFd, name: &OsStr) -> std::io::Result<OwnedFd> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: a NUL-terminated name; the descriptor returned is owned by the `OwnedFd`.
    let fd = unsafe {
        libc::openat(
            at,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// [`open_path`] within the mount of `at` only: `EXDEV` when `name` is a mount point (or `..`
/// of a mount's root), from `openat2(2)`'s `RESOLVE_NO_XDEV`.
fn open_path_here(at: RawFd, name: &OsStr) -> std::io::Result<OwnedFd> {
    let c = CString::new(name.as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: `open_how` is plain integers; zero is "no flags".
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_XDEV | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a directory descriptor, a NUL-terminated name and an `open_how` of the size
    // passed; the descriptor returned is owned by the `OwnedFd`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            at,
            c.as_ptr(),
            &raw const how,
            size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The target of the symbolic link `link` (an `O_PATH` descriptor of it).
fn read_link(link: &OwnedFd) -> std::io::Result<OsString> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a valid descriptor, an empty name (the link itself) and a buffer of its length.
    let n = unsafe {
        libc::readlinkat(
            link.as_raw_fd(),
            c"".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

/// The id of the mount descriptor `fd` is on, from `/proc/self/fdinfo` (the kernel's text:
/// no file system is asked).
fn mount_id(fd: &OwnedFd) -> std::io::Result<u32> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no mnt_id in fdinfo"))
}

/// This process's mount table by mount id, read again when the kernel reports a change
/// (`poll` on `/proc/self/mountinfo`) or names a mount it lacks.
struct Table {
    file: Option<File>,
    mounts: BTreeMap<u32, Mount>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    file: None,
    mounts: BTreeMap::new(),
});

impl Table {
    /// Refuse `fd` (a step of walking `path`) when it is on a FUSE mount.
    fn check(&mut self, fd: &OwnedFd, path: &Path) -> Result<(), OffFuseError> {
        let io = |source| OffFuseError::Io {
            path: path.display().to_string(),
            source,
        };
        let id = mount_id(fd).map_err(io)?;
        if self.file.is_none() || self.changed() || !self.mounts.contains_key(&id) {
            self.read().map_err(io)?;
        }
        // A mount unknown even now (made and gone meanwhile) is refused like FUSE: its type
        // is not known.
        let Some(m) = self.mounts.get(&id) else {
            return Err(io(std::io::Error::other(format!(
                "mount {id} is not in /proc/self/mountinfo"
            ))));
        };
        if is_fuse(&m.fstype) {
            return Err(OffFuseError::Fuse {
                path: path.display().to_string(),
                fstype: m.fstype.clone(),
                point: m.point.clone(),
            });
        }
        Ok(())
    }

    /// Whether the kernel reports a change of the mount table since it was last read.
    fn changed(&self) -> bool {
        self.file.as_ref().is_none_or(changed)
    }

    fn read(&mut self) -> std::io::Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(File::open("/proc/self/mountinfo")?),
        };
        let text = read_again(file)?;
        self.mounts = parse(&text).map(|m| (m.id, m)).collect();
        Ok(())
    }
}

/// Whether the kernel reports a change of the mount table open as `file` (a
/// `/proc/PID/mountinfo`: its namespace's mounts) since it was opened or last polled.
fn changed(file: &File) -> bool {
    let mut p = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: one valid `pollfd`, no waiting.
    let n = unsafe { libc::poll(&raw mut p, 1, 0) };
    n != 0 && p.revents & (libc::POLLPRI | libc::POLLERR) != 0
}

/// The whole text of a mount table open as `file`, read from its start (again, after a
/// [`changed`] that took the change event).
fn read_again(file: &mut File) -> std::io::Result<String> {
    file.rewind()?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 22 0:40 / /tmp rw - tmpfs tmpfs rw
31 30 0:41 / /tmp/fuse\\040dir rw - fuse.sshfs host: rw
32 22 0:42 / /home rw - fuse.rootless x rw
33 32 0:43 / /home rw - ext4 /dev/sdb rw
34 22 0:44 / /media/disk rw - fuseblk /dev/sdc1 rw
35 22 0:45 / /sys/fs/fuse/connections rw - fusectl fusectl rw
";

    #[test]
    fn mounts_parse_with_ids_and_unescaped_points() {
        let m: Vec<Mount> = parse(TEXT).collect();
        assert_eq!(m.len(), 7);
        assert_eq!(
            m[2],
            Mount {
                id: 31,
                point: "/tmp/fuse dir".into(),
                fstype: "fuse.sshfs".into()
            }
        );
        assert_eq!(parse("garbage\n1 2 3\n").count(), 0);
    }

    #[test]
    fn fuse_types() {
        for t in ["fuse", "fuse.sshfs", "fuseblk"] {
            assert!(is_fuse(t), "{t}");
        }
        for t in ["fusectl", "ext4", "tmpfs", "overlay"] {
            assert!(!is_fuse(t), "{t}");
        }
    }

    #[test]
    fn fuse_mounts_are_found_by_the_longest_mount_point() {
        assert!(fuse_in(TEXT, "/tmp/fuse dir/perf-1.map"));
        assert!(fuse_in(TEXT, "/tmp/fuse dir"));
        assert!(fuse_in(TEXT, "/media/disk/lib.so"));
        assert!(!fuse_in(TEXT, "/tmp/fuse dirx/perf-1.map"));
        assert!(!fuse_in(TEXT, "/tmp/perf-1.map"));
        assert!(!fuse_in(TEXT, "/usr/bin/python3"));
        assert!(!fuse_in(TEXT, "/sys/fs/fuse/connections/1/abort"));
        // Mounted over: the later mount is the one seen.
        assert!(!fuse_in(TEXT, "/home/u/lib.so"));
        assert!(!on_fuse(std::process::id(), "/proc/self/exe"));
    }

    /// Files off FUSE open through links, relative paths and `..`, as the kernel would open
    /// them; a missing one is the kernel's error.
    #[test]
    fn files_off_fuse_open_as_by_path() {
        let dir = std::env::temp_dir().join(format!("mounts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), b"hello").unwrap();
        std::os::unix::fs::symlink("a/b", dir.join("rel")).unwrap();
        std::os::unix::fs::symlink(dir.join("a"), dir.join("abs")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        let read = |p: &Path| {
            let mut s = String::new();
            open_off_fuse(p).unwrap().read_to_string(&mut s).unwrap();
            s
        };
        assert_eq!(read(&dir.join("a/b/f")), "hello");
        assert_eq!(read(&dir.join("rel/f")), "hello");
        assert_eq!(read(&dir.join("abs/b/f")), "hello");
        assert_eq!(read(&dir.join("abs/b/../b/./f")), "hello");
        let missing = open_off_fuse(&dir.join("a/none")).unwrap_err();
        assert!(
            matches!(&missing, OffFuseError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{missing}"
        );
        let looped = open_off_fuse(&dir.join("loop/x")).unwrap_err();
        assert!(
            matches!(&looped, OffFuseError::Io { source, .. } if source.raw_os_error() == Some(libc::ELOOP)),
            "{looped}"
        );
        // Through /proc (another mount) too.
        assert!(!read(Path::new("/proc/self/mountinfo")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
