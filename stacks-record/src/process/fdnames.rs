//! Naming what a system call's file descriptor stands for, as `vfs`, `net` and `state` rows
//! show it: a file's path (the kernel's walk, completed from /proc), a pipe or socket as /proc
//! names it, a socket's `addr:port` ends, each address formatted once.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::kernel::abi::types::{stacks_file, stacks_net_addrs};
use crate::kernel::event::{FileType, NetFamily, NetProtocol, c_bytes};

/// `STACKS_PATH_SAME` (bpf/stacks.h).
const STACKS_PATH_SAME: u32 = 2;

/// The path the BPF side walked up from the file's dentry (leaf first, NUL separated, the
/// first `path_len` bytes of `path`) as text: absolute when the walk reached the root,
/// `…/`-prefixed when it stopped short; `None` when there was nothing (not a file).
fn kernel_path(v: &stacks_file) -> KernelPath {
    let payload = c_bytes(&v.path);
    let complete = v.path_complete != 0;
    let mut names: Vec<String> = Vec::new();
    let mut rest = &payload[..(v.path_len as usize).min(payload.len())];
    while !rest.is_empty() {
        match rest.iter().position(|&b| b == 0) {
            Some(end) => {
                names.push(String::from_utf8_lossy(&rest[..end]).into_owned());
                rest = &rest[end + 1..];
            }
            // Cut off by the payload's end: not a whole name.
            None => return KernelPath::Partial(join(&names, "…")),
        }
    }
    if names.is_empty() {
        return KernelPath::None;
    }
    if complete {
        KernelPath::Complete(join(&names, ""))
    } else {
        KernelPath::Partial(join(&names, "…"))
    }
}

/// The whole path the BPF side walked for `v`; `None` when the walk did not reach the root.
pub(crate) fn walked_path(v: &stacks_file) -> Option<String> {
    match kernel_path(v) {
        KernelPath::Complete(p) => Some(p),
        KernelPath::Partial(_) | KernelPath::None => None,
    }
}

fn join(leaf_first: &[String], prefix: &str) -> String {
    let mut s = String::from(prefix);
    for n in leaf_first.iter().rev() {
        s.push('/');
        s.push_str(n);
    }
    s
}

/// A path as the kernel side could walk it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum KernelPath {
    Complete(String),
    Partial(String),
    None,
}

/// The `protocol`, `local` and `remote` columns of a socket (no remote when unconnected).
pub(crate) type SocketEnds = (
    Option<&'static str>,
    Option<std::rc::Rc<str>>,
    Option<std::rc::Rc<str>>,
);

pub(crate) fn socket_ends(
    family: NetFamily,
    protocol: NetProtocol,
    a: &stacks_net_addrs,
    addrs: &mut SockAddrs,
) -> SocketEnds {
    (
        Some(if protocol == NetProtocol::STACKS_NET_TCP {
            "tcp"
        } else {
            "udp"
        }),
        Some(addrs.text(family, &a.local, a.local_port)),
        (a.remote_port != 0).then(|| addrs.text(family, &a.remote, a.remote_port)),
    )
}

/// The text of socket addresses, each formatted once.
#[derive(Default)]
pub(crate) struct SockAddrs(HashMap<(bool, [u8; 16], u16), std::rc::Rc<str>, ahash::RandomState>);

impl SockAddrs {
    /// Most addresses remembered; past it the cache starts over (a server sees many peers).
    const MAX: usize = 1 << 16;

    pub(crate) fn text(
        &mut self,
        family: NetFamily,
        addr: &[u8; 16],
        port: u16,
    ) -> std::rc::Rc<str> {
        let key = (family == NetFamily::STACKS_NET_INET, *addr, port);
        if let Some(t) = self.0.get(&key) {
            return std::rc::Rc::clone(t);
        }
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        let t: std::rc::Rc<str> = sockaddr(family, addr, port).into();
        self.0.insert(key, std::rc::Rc::clone(&t));
        t
    }
}

/// `addr:port`, or `[addr]:port` for IPv6.
pub(crate) fn sockaddr(family: NetFamily, addr: &[u8; 16], port: u16) -> String {
    if family == NetFamily::STACKS_NET_INET {
        let ip = Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]);
        format!("{ip}:{port}")
    } else {
        format!("[{}]:{port}", Ipv6Addr::from(*addr))
    }
}

/// Paths the kernel walked, by (dentry, mount): the inode and the path.
type WalkedPaths = HashMap<(u64, u64), (u64, KernelPath), ahash::RandomState>;

/// File paths of (pid, fd), from `/proc/PID/fd/FD` while it still names the same inode the
/// kernel reported; else the kernel's file name (last path component).
#[derive(Default)]
pub(crate) struct FileNames {
    cache: HashMap<(u32, i32), (u64, String), ahash::RandomState>,
    /// The paths the kernel walked, by (dentry, mnt): a `vfs` record of a file sent before
    /// comes without its path (`STACKS_PATH_SAME`); this generation's and the previous one's.
    walked: [WalkedPaths; 2],
    /// The path generation (`path_gen` of the BPF side): bumped when `walked` starts over, for
    /// the recorder to write to the kernel, whose entries of older generations then miss.
    pub(crate) generation: u32,
    /// Records whose path was not walked again and not found among those kept.
    pub(crate) unknown_paths: u64,
}

impl FileNames {
    /// Most walked paths kept per generation; past it a new generation starts (the kernel's
    /// table of paths sent holds 8192).
    const WALKED_MAX: usize = 1 << 15;

    /// The path the kernel walked for `v`, or the one it walked before for the same file
    /// (`STACKS_PATH_SAME`).
    fn kernel_path(&mut self, v: &stacks_file) -> KernelPath {
        let key = (v.dentry, v.mnt);
        if v.path_complete == STACKS_PATH_SAME {
            for g in &self.walked {
                if let Some((ino, p)) = g.get(&key)
                    && *ino == v.inode
                {
                    return p.clone();
                }
            }
            self.unknown_paths += 1;
            return KernelPath::None;
        }
        let p = kernel_path(v);
        if v.dentry != 0 {
            if self.walked[0].len() >= Self::WALKED_MAX {
                self.walked[1] = std::mem::take(&mut self.walked[0]);
                self.generation = self.generation.wrapping_add(1);
            }
            self.walked[0].insert(key, (v.inode, p.clone()));
        }
        p
    }

    fn path(&mut self, pid: u32, fd: i32, ino: u64, kernel: KernelPath) -> Option<String> {
        let fallback = match kernel {
            KernelPath::Complete(p) => return Some(p),
            KernelPath::Partial(p) => Some(p),
            KernelPath::None => None,
        };
        if let Some((cached_ino, path)) = self.cache.get(&(pid, fd))
            && *cached_ino == ino
        {
            return Some(path.clone());
        }
        let link = format!("/proc/{pid}/fd/{fd}");
        // The link is read as text, and the descriptor's inode from its fdinfo: no path from
        // the traced process is followed, and no file system is asked (a `stat` through the
        // link would ask a FUSE server, which may be the process itself and never answer).
        if let (Ok(target), Some(fd_ino)) = (std::fs::read_link(&link), fd_inode(pid, fd))
            && fd_ino == ino
        {
            let path = target.to_string_lossy().into_owned();
            self.cache.insert((pid, fd), (ino, path.clone()));
            return Some(path);
        }
        fallback
    }

    pub(crate) fn forget(&mut self, pid: u32) {
        self.cache.retain(|(p, _), _| *p != pid);
    }
}

/// The inode number of `pid`'s descriptor `fd`, from the `ino:` line of its
/// `/proc/PID/fdinfo/FD` (the kernel's text, Linux 5.14 and later).
fn fd_inode(pid: u32, fd: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    fdinfo_inode(&text)
}

/// The `ino:` value of an fdinfo text.
fn fdinfo_inode(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("ino:"))?
        .trim()
        .parse()
        .ok()
}

/// The path of `pid`'s descriptor `fd`, the kernel's `file`: from /proc while the fd still names
/// the same inode, else as the kernel walked it; pipes and sockets named as /proc names them.
pub(crate) fn file_name(
    files: &mut FileNames,
    pid: u32,
    fd: i32,
    file: &stacks_file,
) -> Option<String> {
    let walked = files.kernel_path(file);
    files
        .path(pid, fd, file.inode, walked)
        .or_else(|| match file.file_type {
            FileType::STACKS_FILE_FIFO => Some(format!("pipe:[{}]", file.inode)),
            FileType::STACKS_FILE_SOCKET => Some(format!("socket:[{}]", file.inode)),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_paths() {
        let mut path = [0i8; 128];
        for (d, s) in path.iter_mut().zip(b"a.txt\0dir\0tmp\0") {
            *d = *s as i8;
        }
        let f = |path_len: u32, complete: bool| stacks_file {
            path,
            path_len,
            path_complete: u32::from(complete),
            ..stacks_file::default()
        };
        assert_eq!(
            kernel_path(&f(14, true)),
            KernelPath::Complete("/tmp/dir/a.txt".into())
        );
        assert_eq!(
            kernel_path(&f(10, false)),
            KernelPath::Partial("…/dir/a.txt".into())
        );
        // A name cut off by the end of the payload is dropped.
        assert_eq!(
            kernel_path(&f(12, false)),
            KernelPath::Partial("…/dir/a.txt".into())
        );
        assert_eq!(kernel_path(&f(0, true)), KernelPath::None);
        assert_eq!(walked_path(&f(14, true)).as_deref(), Some("/tmp/dir/a.txt"));
        assert_eq!(walked_path(&f(10, false)), None);
    }

    #[test]
    fn paths_sent_once_are_kept_by_dentry_and_mount() {
        let mut path = [0i8; 128];
        for (d, s) in path.iter_mut().zip(b"a.txt\0tmp\0") {
            *d = *s as i8;
        }
        let walked = stacks_file {
            path,
            path_len: 10,
            path_complete: 1,
            inode: 7,
            dentry: 0xd0,
            mnt: 0x30,
            ..stacks_file::default()
        };
        let same = |inode, dentry| stacks_file {
            path_complete: STACKS_PATH_SAME,
            inode,
            dentry,
            mnt: 0x30,
            ..stacks_file::default()
        };
        let mut names = FileNames::default();
        let want = KernelPath::Complete("/tmp/a.txt".into());
        assert_eq!(names.kernel_path(&walked), want);
        assert_eq!(names.kernel_path(&same(7, 0xd0)), want);
        // Another inode or another dentry: not the file whose path was sent.
        assert_eq!(names.kernel_path(&same(8, 0xd0)), KernelPath::None);
        assert_eq!(names.kernel_path(&same(7, 0xd8)), KernelPath::None);
        assert_eq!(names.unknown_paths, 2);
        // A new generation keeps the previous one's paths for records already sent.
        for i in 0..FileNames::WALKED_MAX as u64 {
            names.kernel_path(&stacks_file {
                dentry: 0x1000 + i,
                ..walked
            });
        }
        assert_eq!(names.generation, 1);
        assert_eq!(names.kernel_path(&same(7, 0xd0)), want);
    }

    #[test]
    fn socket_addresses() {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(sockaddr(NetFamily::STACKS_NET_INET, &a, 80), "127.0.0.1:80");
        let mut b = [0u8; 16];
        b[15] = 1;
        assert_eq!(sockaddr(NetFamily::STACKS_NET_INET6, &b, 443), "[::1]:443");
    }

    #[test]
    fn fdinfo_names_the_inode() {
        let text = "pos:\t0\nflags:\t0100000\nmnt_id:\t24\nino:\t3\n";
        assert_eq!(fdinfo_inode(text), Some(3));
        assert_eq!(fdinfo_inode("pos:\t0\n"), None);
    }

    #[test]
    fn file_names_come_from_proc_when_the_inode_matches() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("stacks-fn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.bin");
        let f = std::fs::File::create(&path).unwrap();
        let ino = f.metadata().unwrap().ino();
        let mut names = FileNames::default();
        let pid = std::process::id();
        let fd = f.as_raw_fd();
        let partial = || KernelPath::Partial("…/data.bin".into());
        let got = names.path(pid, fd, ino, partial()).unwrap();
        assert_eq!(got, path.to_string_lossy());
        // Another inode behind the same fd number: only the kernel's walk is trusted.
        assert_eq!(
            names.path(pid, fd, ino + 1, partial()).as_deref(),
            Some("…/data.bin")
        );
        assert_eq!(
            names
                .path(pid, fd, ino + 1, KernelPath::Complete("/x".into()))
                .as_deref(),
            Some("/x")
        );
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
