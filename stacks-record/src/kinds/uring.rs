//! `uring`: io_uring requests of the targets from submission to completion: the opcode, bytes,
//! latency, errno, descriptor and path, how the request ran (inline, io-wq, poll, SQPOLL) and
//! the submitter's stacks at submission (bpf/kinds/uring.bpf.h; a `d` one arrives apart, in a
//! `STACKS_EV_URING_USTACK` record the converter pairs with the request). With MIN, requests completed
//! sooner are summed in the kernel (a row a second per submitter, op, how, error, descriptor,
//! file and log2 latency bucket, `count` requests, no stack).

use anyhow::{Context as _, Result};
use stacks_stream::kind;

use super::{AggKey, AggSums, Context, Decoded, Effects, EventKind, Run, Setup, Taken};
use crate::kernel::abi::OpenStacksMaps;
use crate::kernel::abi::types::{rodata, stacks_uring};
use crate::kernel::event::{Header, Kind as RecordKind, RawEvent, info_members};
use crate::kernel::tables;
use crate::output::rows::Extra;
use crate::process::fdnames::file_name;
use crate::spec::{EventSpec, KindArgs};

info_members!(stacks_uring);

pub(crate) struct Uring;

impl EventKind for Uring {
    fn aggregated_why(&self) -> &'static str {
        "shorter than MIN"
    }

    fn retunes(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        kind::URING
    }

    fn programs(&self) -> &'static [&'static str] {
        &[
            "on_uring_submit",
            "on_uring_async",
            "on_uring_poll",
            "on_uring_complete",
            "on_uring_wait",
        ]
    }

    /// Its programs when `-e` names it; the waits for completions only with `switch` too
    /// (they link requests to the waiter's off-CPU interval).
    fn loads(&self, program: &str, spec: &EventSpec) -> bool {
        spec.get(kind::URING).is_some()
            && (program != "on_uring_wait" || spec.get(kind::SWITCH).is_some())
    }

    /// Only user stacks (the submitter's, at submission).
    fn kstack_cached(&self) -> bool {
        false
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.uring_stacks = on.map_or(0, |u| u.stacks.mask());
    }

    /// The in-flight slots (`uring_slots`: 1,024 records with room for stacks, 5.6 MiB
    /// preallocated) only when `uring` takes stacks; one otherwise.
    fn size_maps(&self, maps: &mut OpenStacksMaps<'_>, on: Option<&KindArgs>) -> Result<()> {
        if on.is_none_or(|u| u.stacks.mask() == 0) {
            maps.uring_slots
                .set_max_entries(1)
                .context("sizing uring's in-flight slots")?;
        }
        Ok(())
    }

    /// MIN, written in the BPF object's .bss (control.bpf.h) once loaded and again when it
    /// changes in place (`--control`).
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup.on(self).map(|on| {
            super::run::ArgGlobals::boxed(&on, &[(super::run::arg, |b| &mut b.uring_min_ns)])
        }))
    }

    /// Requests shorter than MIN (not for a backed-up ring buffer: every request longer than
    /// MIN is a row of its own).
    fn aggregates(&self) -> bool {
        true
    }

    /// A group of folded requests: `how` carries FOLDED, `request` their bytes (a sum that
    /// may not fit `res`), `res` the group's error.
    fn aggregated(
        &self,
        key: &AggKey,
        sums: &AggSums,
        h: Header,
        frames: [&[u8]; 2],
        out: &mut Vec<u8>,
    ) -> bool {
        let info = stacks_uring {
            latency_ns: sums.latency_ns,
            request: sums.bytes,
            res: -key.error,
            fd: key.fd,
            opcode: (key.op & 0xff) as u8,
            how: ((key.op >> 8) & 0x7f) as u8 | FOLDED,
            fixed: ((key.op >> 16) & 1) as u8,
            pad: 0,
            waiter: 0,
            waiter_off_ts: 0,
            file: sums.file,
        };
        tables::assemble(out, h, info, frames[0], frames[1]);
        true
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_URING]
    }

    fn parts(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_URING_USTACK]
    }

    /// A `d` user stack taken at submission is kept for its request's record.
    fn effects(&self, record: RecordKind) -> Effects {
        Effects {
            taken: match record {
                RecordKind::STACKS_EV_URING_USTACK => Taken::StackApart,
                _ => Taken::Row,
            },
            ..Effects::default()
        }
    }

    fn apart_request(&self, e: &RawEvent<'_>) -> Option<u64> {
        Some(e.info::<stacks_uring>().request)
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let u: stacks_uring = e.info();
        let (op, moves_bytes, has_fd) = OPS
            .get(usize::from(u.opcode))
            .copied()
            .unwrap_or(("other", false, false));
        // A fixed file's `fd` is its index in the ring's table, not a descriptor to look up.
        let fd = if u.fixed != 0 { -1 } else { u.fd };
        let path = (u.file.inode != 0)
            .then(|| file_name(cx.files, e.h.pid, fd, &u.file))
            .flatten();
        let folded = u.how & FOLDED != 0;
        let bytes = if folded {
            i64::try_from(u.request).unwrap_or(i64::MAX)
        } else {
            i64::from(u.res.max(0))
        };
        Some(Decoded {
            kind: kind::URING,
            value: if moves_bytes && u.res >= 0 { bytes } else { 0 },
            extra: Extra {
                duration: Some(u.latency_ns as i64),
                count: Some(i64::from(e.h.count)),
                op: Some(op),
                fd: has_fd.then_some(u.fd),
                errno: (u.res < 0).then_some(-u.res),
                path,
                wakee: (u.waiter != 0).then_some(u.waiter as i32),
                offcpu_since: (u.waiter_off_ts != 0).then_some(u.waiter_off_ts as i64),
                mode: Some(match u.how & !FOLDED {
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

/// In `how`: a record of folded requests (shorter than MIN), summed in the kernel.
const FOLDED: u8 = 0x80;

/// (name, whether a positive result is bytes moved, whether the SQE's `fd` names its file: the
/// kernel's `needs_file`, io_uring/opdef.c) by IORING_OP_* value (the kernel's `enum
/// io_uring_op`, include/uapi/linux/io_uring.h).
const OPS: [(&str, bool, bool); 63] = [
    ("nop", false, false),
    ("readv", true, true),
    ("writev", true, true),
    ("fsync", false, true),
    ("read_fixed", true, true),
    ("write_fixed", true, true),
    ("poll_add", false, true),
    ("poll_remove", false, false),
    ("sync_file_range", false, true),
    ("sendmsg", true, true),
    ("recvmsg", true, true),
    ("timeout", false, false),
    ("timeout_remove", false, false),
    ("accept", false, true),
    ("async_cancel", false, false),
    ("link_timeout", false, false),
    ("connect", false, true),
    ("fallocate", false, true),
    ("openat", false, false),
    ("close", false, false),
    ("files_update", false, false),
    ("statx", false, false),
    ("read", true, true),
    ("write", true, true),
    ("fadvise", false, true),
    ("madvise", false, false),
    ("send", true, true),
    ("recv", true, true),
    ("openat2", false, false),
    ("epoll_ctl", false, true),
    ("splice", true, true),
    ("provide_buffers", false, false),
    ("remove_buffers", false, false),
    ("tee", true, true),
    ("shutdown", false, true),
    ("renameat", false, false),
    ("unlinkat", false, false),
    ("mkdirat", false, false),
    ("symlinkat", false, false),
    ("linkat", false, false),
    ("msg_ring", false, true),
    ("fsetxattr", false, true),
    ("setxattr", false, false),
    ("fgetxattr", false, true),
    ("getxattr", false, false),
    ("socket", false, false),
    ("uring_cmd", false, true),
    ("send_zc", true, true),
    ("sendmsg_zc", true, true),
    ("read_multishot", true, true),
    ("waitid", false, false),
    ("futex_wait", false, false),
    ("futex_wake", false, false),
    ("futex_waitv", false, false),
    ("fixed_fd_install", false, true),
    ("ftruncate", false, true),
    ("bind", false, true),
    ("listen", false, true),
    ("recv_zc", true, true),
    ("epoll_wait", false, true),
    ("readv_fixed", true, true),
    ("writev_fixed", true, true),
    ("pipe", false, false),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcode names are the kernel's (bpf/vmlinux.h's `enum io_uring_op`), lower case.
    #[test]
    fn op_names_are_the_kernels() {
        let path = stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("../bpf/vmlinux.h");
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
                Some((
                    n.trim(),
                    v.trim().trim_end_matches(',').parse::<usize>().ok()?,
                ))
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
