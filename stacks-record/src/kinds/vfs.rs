//! `vfs`: read/write-family system calls of the targets from entry to exit: bytes returned,
//! latency, descriptor and path, errors with errno (bpf/kinds/vfs.bpf.h); summed in the kernel
//! while the IO ring buffer is backed up (a row then stands for `count` calls).

use stacks_stream::kind;

use super::{AggKey, AggSums, Context, Decoded, EventKind};
use crate::kernel::abi::types::{rodata, stacks_vfs};
use crate::kernel::event::{Header, Kind as RecordKind, RawEvent, VfsCall, info_members};
use crate::kernel::tables;
use crate::output::rows::Extra;
use crate::process::fdnames::file_name;
use crate::spec::KindArgs;

info_members!(stacks_vfs);

pub(crate) struct Vfs;

impl EventKind for Vfs {
    fn name(&self) -> &'static str {
        kind::VFS
    }

    fn programs(&self) -> &'static [&'static str] {
        &["vfs_enter", "vfs_exit"]
    }

    /// Its kernel stacks are taken in tracepoint programs: served from the cache of unwinds.
    fn kstack_cached(&self) -> bool {
        true
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.vfs_stacks = on.map_or(0, |v| v.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_VFS]
    }

    fn aggregates(&self) -> bool {
        true
    }

    fn aggregated(
        &self,
        key: &AggKey,
        sums: &AggSums,
        h: Header,
        frames: [&[u8]; 2],
        out: &mut Vec<u8>,
    ) -> bool {
        let info = stacks_vfs {
            bytes: sums.bytes,
            latency_ns: sums.latency_ns,
            fd: key.fd,
            error: key.error,
            syscall: VfsCall(key.op),
            pad: 0,
            file: sums.file,
        };
        tables::assemble(out, h, info, frames[0], frames[1]);
        true
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let v: stacks_vfs = e.info();
        let (syscall, op) = VFS_CALLS
            .get(v.syscall.0 as usize)
            .copied()
            .unwrap_or(("?", "read"));
        let path = file_name(cx.files, e.h.pid, v.fd, &v.file);
        Some(Decoded {
            kind: kind::VFS,
            value: v.bytes as i64,
            extra: Extra {
                duration: Some(v.latency_ns as i64),
                count: Some(i64::from(e.h.count)),
                syscall: Some(syscall),
                op: Some(op),
                fd: Some(v.fd),
                errno: (v.error != 0).then_some(v.error),
                path,
                ..Extra::default()
            },
        })
    }
}

/// (syscall, direction) by `enum stacks_vfs_call`.
const VFS_CALLS: [(&str, &str); VfsCall::STACKS_VFS_PWRITEV2.0 as usize + 1] = [
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
