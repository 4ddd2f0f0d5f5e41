//! Turns decoded kernel records into raw rows: user frames normalized, kernel frames named,
//! kind-specific fields (state, op, addresses, paths…) decoded, per-kind counts kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::MetadataExt;

use stacks_stream::{kind, state};

use crate::event::{self, KernelUserFrame, RawEvent, cstr};
use crate::modules::{ModuleIndex, build_id_hex};
use crate::normalize::{UserFrame, UserNormalizer};
use crate::rows::{Extra, KernelSymbol, Row, RowBuilder};

/// Resolves kernel addresses to symbols at record time.
pub trait KernelNames {
    fn name(&self, addr: u64) -> Option<KernelSymbol>;
}

/// What the summary line reports.
#[derive(Default)]
pub struct Counts {
    pub by_kind: BTreeMap<&'static str, u64>,
    pub lost: u64,
    pub kstack_errors: u64,
    pub ustack_errors: u64,
    pub malformed: u64,
    pub pids: HashSet<u32>,
}

/// Per-recording conversion state.
pub struct Converter {
    pub norm: UserNormalizer,
    pub counts: Counts,
    files: FileNames,
    modules: ModuleIndex,
    /// Kernel-reported build ids already turned into (hex, file).
    build_ids: HashMap<[u8; 20], (String, Option<String>)>,
    ksyms: Option<Box<dyn KernelNames>>,
    ksym_cache: HashMap<u64, Option<KernelSymbol>>,
    offset_ns: i64,
}

impl Converter {
    pub fn new(offset_ns: i64, ksyms: Option<Box<dyn KernelNames>>) -> Self {
        Self {
            norm: UserNormalizer::default(),
            counts: Counts::default(),
            files: FileNames::default(),
            modules: {
                let mut m = ModuleIndex::default();
                // Libraries the recorder maps itself (libc, ld.so) are usually the ones the
                // traced programs map too.
                m.learn_process(std::process::id());
                m
            },
            build_ids: HashMap::new(),
            ksyms,
            ksym_cache: HashMap::new(),
            offset_ns,
        }
    }

    /// Convert one record, appending at most one row.
    pub fn push(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) {
        let h = &e.h;
        let mut x = Extra::default();
        let kind = match h.kind {
            event::EV_PROFILE => kind::PROFILE,
            event::EV_SWITCH => {
                x.duration = Some(h.duration as i64);
                x.count = Some(1);
                x.state = Some(state_name(h.arg0));
                x.waker = (h.arg1 > 0).then_some(h.arg1);
                kind::SWITCH
            }
            event::EV_SWITCH_FOLDED => {
                x.count = Some(i64::from(h.count));
                x.state = Some(state_name(h.arg0));
                kind::SWITCH
            }
            event::EV_RSS => {
                x.count = Some(i64::from(h.count));
                x.op = Some(rss_counter(h.arg0));
                x.rss = (h.aux > 0).then_some(h.aux as i64);
                kind::RSS
            }
            event::EV_BLOCK => {
                x.duration = Some(h.duration as i64);
                x.count = Some(1);
                x.op = Some(block_op(h.arg0));
                x.dev = (h.aux != 0).then(|| format!("{}:{}", h.aux >> 20, h.aux & 0xfffff));
                x.errno = (h.arg1 != 0).then_some(h.arg1);
                kind::BLOCK
            }
            event::EV_VFS => {
                let call = (h.flags & 0xff) as usize;
                let (syscall, op) = VFS_CALLS.get(call).copied().unwrap_or(("?", "read"));
                x.duration = Some(h.duration as i64);
                x.count = Some(1);
                x.syscall = Some(syscall);
                x.op = Some(op);
                x.fd = Some(h.arg0);
                x.errno = (h.arg1 != 0).then_some(h.arg1);
                x.path = self
                    .files
                    .path(h.pid, h.arg0, h.aux, kernel_path(h.flags, &h.payload))
                    .or_else(|| match (h.flags >> 8) & 0xf {
                        // Pipes and sockets have no path: name them as /proc does.
                        0o1 => Some(format!("pipe:[{}]", h.aux)),
                        0o14 => Some(format!("socket:[{}]", h.aux)),
                        _ => None,
                    });
                kind::VFS
            }
            event::EV_NET => {
                let family = h.flags & 0xffff;
                let proto = (h.flags >> 8) & 0xff;
                let dir = (h.flags >> 16) & 0xff;
                let a = e.net();
                x.count = Some(1);
                x.op = Some(if dir == 0 { "send" } else { "recv" });
                x.protocol = Some(if proto == 6 { "tcp" } else { "udp" });
                x.local = Some(sockaddr(family & 0xff, &a.local, a.local_port));
                x.remote =
                    (a.remote_port != 0).then(|| sockaddr(family & 0xff, &a.remote, a.remote_port));
                x.errno = (h.arg1 != 0).then_some(h.arg1);
                kind::NET
            }
            event::EV_EXEC => {
                self.norm.forget(h.pid);
                self.files.forget(h.pid);
                self.modules.forget(h.pid);
                self.modules.learn_process(h.pid);
                let p = e.str();
                self.modules.learn_file(&p);
                x.path = (!p.is_empty()).then_some(p);
                kind::EXEC
            }
            event::EV_FORK => {
                x.child = Some(h.arg0);
                kind::FORK
            }
            event::EV_EXIT => {
                self.files.forget(h.pid);
                self.modules.forget(h.pid);
                x.exit_code = Some(h.arg0);
                kind::EXIT
            }
            _ => {
                self.counts.malformed += 1;
                return;
            }
        };
        *self.counts.by_kind.entry(kind).or_default() += 1;
        self.counts.pids.insert(h.pid);

        let mut kstack = e.kstack();
        if matches!(kstack, Some(Err(_))) {
            self.counts.kstack_errors += 1;
        }
        let mut ksyms = match (&kstack, &self.ksyms) {
            // Every frame but the first is a return address: name the call (address − 1), so
            // a call that ends a function is not named after the next one.
            (Some(Ok(addrs)), Some(names)) => Some(
                addrs
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        let probe = if i == 0 { *a } else { a.saturating_sub(1) };
                        let mut sym = self
                            .ksym_cache
                            .entry(probe)
                            .or_insert_with(|| names.name(probe))
                            .clone();
                        if let Some(k) = sym.as_mut()
                            && i > 0
                        {
                            k.offset += 1;
                        }
                        sym
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        if let (Some(Ok(addrs)), Some(syms)) = (&mut kstack, &mut ksyms) {
            let skip = tracing_frames(syms);
            addrs.drain(..skip);
            syms.drain(..skip);
        }
        let ustack = match e.ustack() {
            None => None,
            Some(Err(errno)) => {
                self.counts.ustack_errors += 1;
                Some(Err(errno))
            }
            Some(Ok(frames)) => Some(Ok(self.user_frames(h.pid, &frames))),
        };
        if h.kind == event::EV_EXIT {
            // Its last samples are already converted: drop the address cache.
            self.norm.forget(h.pid);
        }
        let (comm, thread) = (cstr(&h.comm), cstr(&h.thread));
        rows.push(&Row {
            time_ns: h.ts as i64 + self.offset_ns,
            kind,
            pid: h.pid as i32,
            tid: h.tid as i32,
            comm: &comm,
            thread: &thread,
            cpu: h.cpu as i32,
            value: h.value as i64,
            kstack: kstack
                .as_ref()
                .map(|r| r.as_ref().map(|v| v.as_slice()).map_err(|e| *e)),
            ustack: ustack
                .as_ref()
                .map(|r| r.as_ref().map(|v| v.as_slice()).map_err(|e| *e)),
            ksyms: ksyms.as_deref(),
            extra: x,
        });
    }

    /// Name the files of kernel-resolved frames; normalize the rest (addresses only) with the
    /// live process's memory map.
    fn user_frames(&mut self, pid: u32, frames: &[KernelUserFrame]) -> Vec<UserFrame> {
        self.modules.learn_process(pid);
        let ips: Vec<u64> = frames
            .iter()
            .filter_map(|f| match f {
                KernelUserFrame::Ip(ip) => Some(*ip),
                KernelUserFrame::Resolved { .. } => None,
            })
            .collect();
        let mut normalized = if ips.is_empty() {
            Vec::new()
        } else {
            self.norm.normalize(pid, &ips)
        }
        .into_iter();
        frames
            .iter()
            .map(|f| match f {
                KernelUserFrame::Resolved { build_id, offset } => {
                    let (id, module) = match self.build_ids.get(build_id) {
                        Some(known) => known.clone(),
                        None => {
                            let id = build_id_hex(build_id);
                            let module = self.modules.path(&id).map(str::to_string);
                            // Only named files are remembered: a later exec may name it.
                            if module.is_some() {
                                self.build_ids
                                    .insert(*build_id, (id.clone(), module.clone()));
                            }
                            (id, module)
                        }
                    };
                    UserFrame {
                        addr: 0,
                        module,
                        build_id: Some(id),
                        offset: Some(*offset),
                        error: None,
                    }
                }
                KernelUserFrame::Ip(ip) => {
                    let f = normalized.next().unwrap_or_else(|| UserFrame {
                        addr: *ip,
                        module: None,
                        build_id: None,
                        offset: None,
                        error: Some("not normalized".into()),
                    });
                    if let (Some(m), Some(id)) = (&f.module, &f.build_id) {
                        self.modules.learn(id, m);
                    }
                    f
                }
            })
            .collect()
    }

    /// A row for RSS growth the kernel side still held at the end (no stacks).
    pub fn push_rss_remainder(
        &mut self,
        rows: &mut RowBuilder,
        time_ns: i64,
        (tgid, growth, events, member): (u32, u64, u32, u32),
    ) {
        let comm = std::fs::read_to_string(format!("/proc/{tgid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_default();
        *self.counts.by_kind.entry(kind::RSS).or_default() += 1;
        rows.push(&Row {
            time_ns,
            kind: kind::RSS,
            pid: tgid as i32,
            tid: tgid as i32,
            comm: &comm,
            thread: &comm,
            cpu: -1,
            value: growth as i64,
            kstack: None,
            ustack: None,
            ksyms: None,
            extra: Extra {
                count: Some(i64::from(events)),
                op: Some(rss_counter(member as i32)),
                ..Extra::default()
            },
        });
    }

    /// The `events: …` part of the summary line.
    pub fn describe_counts(&self) -> String {
        self.counts
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How many leading kernel frames belong to the tracing machinery that ran our BPF program
/// (the program itself, `bpf_trace_run*`, perf's tracepoint glue): the stack the user cares
/// about starts below them.
fn tracing_frames(syms: &[Option<KernelSymbol>]) -> usize {
    let glue = |s: &str| {
        s.starts_with("bpf_trace_run")
            || s.starts_with("__bpf_trace_")
            || s.starts_with("bpf_prog_")
            || s.starts_with("perf_trace_")
            || s.starts_with("trace_call_bpf")
            || s.starts_with("__traceiter_")
            || s.starts_with("__bpf_prog_run")
    };
    let window = syms.len().min(8);
    syms[..window]
        .iter()
        .rposition(|s| s.as_ref().is_some_and(|k| glue(&k.symbol)))
        .map_or(0, |i| i + 1)
}

/// The path the BPF side walked up from the file's dentry (leaf first, NUL separated, the
/// first `flags >> 20` bytes of the payload) as text: absolute when the walk reached the root,
/// `…/`-prefixed when it stopped short; `None` when there was nothing (not a file).
fn kernel_path(flags: u32, payload: &[u8]) -> KernelPath {
    let used = ((flags >> 20) & 0xff) as usize;
    let complete = flags & (1 << 16) != 0;
    let mut names: Vec<String> = Vec::new();
    let mut rest = &payload[..used.min(payload.len())];
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

fn join(leaf_first: &[String], prefix: &str) -> String {
    let mut s = String::from(prefix);
    for n in leaf_first.iter().rev() {
        s.push('/');
        s.push_str(n);
    }
    s
}

/// A path as the kernel side could walk it.
#[derive(Debug, PartialEq, Eq)]
enum KernelPath {
    Complete(String),
    Partial(String),
    None,
}

/// (syscall, direction) by `enum stacks_vfs_call`.
const VFS_CALLS: [(&str, &str); 10] = [
    ("read", "read"),
    ("write", "write"),
    ("pread64", "read"),
    ("pwrite64", "write"),
    ("readv", "read"),
    ("writev", "write"),
    ("preadv", "read"),
    ("pwritev", "write"),
    ("preadv2", "read"),
    ("pwritev2", "write"),
];

fn state_name(code: i32) -> &'static str {
    match code {
        0 => state::RUNNABLE,
        1 => state::SLEEPING,
        2 => state::UNINTERRUPTIBLE,
        3 => state::IDLE,
        4 => state::STOPPED,
        _ => state::OTHER,
    }
}

fn rss_counter(member: i32) -> &'static str {
    match member {
        0 => "file",
        1 => "anon",
        2 => "swap",
        3 => "shmem",
        _ => "other",
    }
}

fn block_op(op: i32) -> &'static str {
    match op {
        0 => "read",
        1 => "write",
        2 => "flush",
        3 => "discard",
        _ => "other",
    }
}

/// `addr:port`, or `[addr]:port` for IPv6.
pub fn sockaddr(family: u32, addr: &[u8; 16], port: u16) -> String {
    if family == 2 {
        let ip = Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]);
        format!("{ip}:{port}")
    } else {
        format!("[{}]:{port}", Ipv6Addr::from(*addr))
    }
}

/// File paths of (pid, fd), from `/proc/PID/fd/FD` while it still names the same inode the
/// kernel reported; else the kernel's file name (last path component).
#[derive(Default)]
struct FileNames {
    cache: HashMap<(u32, i32), (u64, String)>,
}

impl FileNames {
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
        // The link is read as text and stat'ed through the kernel's own fd reference: no path
        // from the traced process is followed.
        if let (Ok(target), Ok(meta)) = (std::fs::read_link(&link), std::fs::metadata(&link))
            && meta.ino() == ino
        {
            let path = target.to_string_lossy().into_owned();
            self.cache.insert((pid, fd), (ino, path.clone()));
            return Some(path);
        }
        fallback
    }

    fn forget(&mut self, pid: u32) {
        self.cache.retain(|(p, _), _| *p != pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_glue_is_dropped_from_kernel_stacks() {
        let k = |s: &str| {
            Some(KernelSymbol {
                symbol: s.into(),
                offset: 0,
                module: None,
            })
        };
        let syms = vec![None, k("bpf_trace_run4"), k("__schedule"), k("schedule")];
        assert_eq!(tracing_frames(&syms), 2);
        assert_eq!(tracing_frames(&[k("vfs_read"), k("ksys_read")]), 0);
        assert_eq!(tracing_frames(&[]), 0);
    }

    #[test]
    fn kernel_paths() {
        let mut p = [0u8; 128];
        p[..14].copy_from_slice(b"a.txt\0dir\0tmp\0");
        let f = |used: u32, complete: bool| (used << 20) | if complete { 1 << 16 } else { 0 };
        assert_eq!(
            kernel_path(f(14, true), &p),
            KernelPath::Complete("/tmp/dir/a.txt".into())
        );
        assert_eq!(
            kernel_path(f(10, false), &p),
            KernelPath::Partial("…/dir/a.txt".into())
        );
        // A name cut off by the end of the payload is dropped.
        assert_eq!(
            kernel_path(f(12, false), &p),
            KernelPath::Partial("…/dir/a.txt".into())
        );
        assert_eq!(kernel_path(f(0, true), &p), KernelPath::None);
    }

    #[test]
    fn socket_addresses() {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(sockaddr(2, &a, 80), "127.0.0.1:80");
        let mut b = [0u8; 16];
        b[15] = 1;
        assert_eq!(sockaddr(10, &b, 443), "[::1]:443");
    }

    #[test]
    fn file_names_come_from_proc_when_the_inode_matches() {
        use std::os::fd::AsRawFd;
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
