//! `uring`: io_uring requests of the targets from submission to completion: the opcode, bytes,
//! latency, errno, descriptor and path, how the request ran (inline, io-wq, poll, SQPOLL) and
//! the submitter's stacks at submission (bpf/kinds/uring.bpf.h).

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
use crate::kernel::abi::types::{rodata, stacks_uring};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::process::fdnames::file_name;
use crate::spec::KindArgs;

info_members!(stacks_uring);

pub(crate) struct Uring;

impl EventKind for Uring {
    fn name(&self) -> &'static str {
        kind::URING
    }

    fn programs(&self) -> &'static [&'static str] {
        &[
            "on_uring_submit",
            "on_uring_async",
            "on_uring_poll",
            "on_uring_complete",
        ]
    }

    /// Only user stacks (the submitter's, at submission).
    fn kstack_cached(&self) -> bool {
        false
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.uring_stacks = on.map_or(0, |u| u.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_URING]
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let u: stacks_uring = e.info();
        let (op, moves_bytes) = OPS
            .get(usize::from(u.opcode))
            .copied()
            .unwrap_or(("other", false));
        // A fixed file's `fd` is its index in the ring's table, not a descriptor to look up.
        let fd = if u.fixed != 0 { -1 } else { u.fd };
        let path = (u.file.inode != 0)
            .then(|| file_name(cx.files, e.h.pid, fd, &u.file))
            .flatten();
        Some(Decoded {
            kind: kind::URING,
            value: if moves_bytes && u.res > 0 {
                i64::from(u.res)
            } else {
                0
            },
            extra: Extra {
                duration: Some(u.latency_ns as i64),
                count: Some(i64::from(e.h.count)),
                op: Some(op),
                fd: Some(u.fd),
                errno: (u.res < 0).then_some(-u.res),
                path,
                mode: Some(match u.how {
                    0 => "inline",
                    1 => "async",
                    2 => "poll",
                    3 => "sqpoll",
                    _ => "other",
                }),
                ..Extra::default()
            },
        })
    }
}

/// (name, whether a positive result is bytes moved) by IORING_OP_* value (the kernel's
/// `enum io_uring_op`, include/uapi/linux/io_uring.h).
const OPS: [(&str, bool); 63] = [
    ("nop", false),
    ("readv", true),
    ("writev", true),
    ("fsync", false),
    ("read_fixed", true),
    ("write_fixed", true),
    ("poll_add", false),
    ("poll_remove", false),
    ("sync_file_range", false),
    ("sendmsg", true),
    ("recvmsg", true),
    ("timeout", false),
    ("timeout_remove", false),
    ("accept", false),
    ("async_cancel", false),
    ("link_timeout", false),
    ("connect", false),
    ("fallocate", false),
    ("openat", false),
    ("close", false),
    ("files_update", false),
    ("statx", false),
    ("read", true),
    ("write", true),
    ("fadvise", false),
    ("madvise", false),
    ("send", true),
    ("recv", true),
    ("openat2", false),
    ("epoll_ctl", false),
    ("splice", true),
    ("provide_buffers", false),
    ("remove_buffers", false),
    ("tee", true),
    ("shutdown", false),
    ("renameat", false),
    ("unlinkat", false),
    ("mkdirat", false),
    ("symlinkat", false),
    ("linkat", false),
    ("msg_ring", false),
    ("fsetxattr", false),
    ("setxattr", false),
    ("fgetxattr", false),
    ("getxattr", false),
    ("socket", false),
    ("uring_cmd", false),
    ("send_zc", true),
    ("sendmsg_zc", true),
    ("read_multishot", true),
    ("waitid", false),
    ("futex_wait", false),
    ("futex_wake", false),
    ("futex_waitv", false),
    ("fixed_fd_install", false),
    ("ftruncate", false),
    ("bind", false),
    ("listen", false),
    ("recv_zc", true),
    ("epoll_wait", false),
    ("readv_fixed", true),
    ("writev_fixed", true),
    ("pipe", false),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcode names are the kernel's (bpf/vmlinux.h's `enum io_uring_op`), lower case.
    #[test]
    fn op_names_are_the_kernels() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bpf/vmlinux.h");
        let text = std::fs::read_to_string(path).expect("bpf/vmlinux.h");
        let body = text
            .split("enum io_uring_op {")
            .nth(1)
            .and_then(|t| t.split("};").next())
            .expect("enum io_uring_op");
        let mut n = 0;
        for line in body.lines() {
            let Some((name, value)) = line.trim().strip_prefix("IORING_OP_").and_then(|l| {
                let (n, v) = l.split_once('=')?;
                Some((n.trim(), v.trim().trim_end_matches(',').parse::<usize>().ok()?))
            }) else {
                continue;
            };
            if name == "LAST" {
                assert_eq!(value, OPS.len());
                continue;
            }
            assert_eq!(OPS[value].0, name.to_lowercase(), "IORING_OP_{name}");
            n += 1;
        }
        assert_eq!(n, OPS.len());
    }
}
