//! The kind-specific fields of a record as row columns: what each kind's value is, its
//! names for the kernel's codes (states, RSS counters, block operations, system calls), and
//! the tracing machinery's frames to drop from kernel stacks.

use stacks_stream::{kind, state};

use crate::bpf::skel::types::{
    stacks_block, stacks_folded, stacks_fork, stacks_net, stacks_off_cpu, stacks_profile,
    stacks_rss,
};
use crate::event::{BlockOp, Header, NetDirection, RssCounter, State, VfsCall};
use crate::fdnames::{SockAddrs, socket_ends};
use crate::rows::{Extra, KernelSymbol};

/// What a record contributes to its row besides ids and stacks.
pub(super) struct Decoded {
    pub kind: &'static str,
    pub value: i64,
    pub extra: Extra,
}

/// A CPU sample: weighs its sampling period.
pub(super) fn profile(p: stacks_profile) -> Decoded {
    Decoded {
        kind: kind::PROFILE,
        value: p.period_ns as i64,
        extra: Extra::default(),
    }
}

/// One off-CPU interval.
pub(super) fn off_cpu(s: stacks_off_cpu) -> Decoded {
    Decoded {
        kind: kind::SWITCH,
        value: s.off_ns as i64,
        extra: Extra {
            duration: Some(s.off_ns as i64),
            count: Some(1),
            state: Some(state_name(s.state)),
            waker: (s.waker > 0).then_some(s.waker as i32),
            ..Extra::default()
        },
    }
}

/// Short off-CPU intervals folded into one row (no duration: they were many).
pub(super) fn folded(h: &Header, f: stacks_folded) -> Decoded {
    Decoded {
        kind: kind::SWITCH,
        value: f.off_ns as i64,
        extra: Extra {
            count: Some(i64::from(h.count)),
            state: Some(state_name(f.state)),
            ..Extra::default()
        },
    }
}

/// RSS growth since the process's previous row.
pub(super) fn rss(h: &Header, r: stacks_rss) -> Decoded {
    Decoded {
        kind: kind::RSS,
        value: r.growth_bytes as i64,
        extra: Extra {
            count: Some(i64::from(h.count)),
            op: Some(rss_counter(r.counter)),
            rss: (r.resident_bytes > 0).then_some(r.resident_bytes as i64),
            ..Extra::default()
        },
    }
}

/// A completed block request.
pub(super) fn block(b: stacks_block) -> Decoded {
    let has_dev = b.dev_major != 0 || b.dev_minor != 0;
    Decoded {
        kind: kind::BLOCK,
        value: b.bytes as i64,
        extra: Extra {
            duration: Some(b.latency_ns as i64),
            count: Some(1),
            op: Some(block_op(b.op)),
            dev: has_dev.then(|| format!("{}:{}", b.dev_major, b.dev_minor)),
            errno: (b.error != 0).then_some(b.error),
            ..Extra::default()
        },
    }
}

/// A TCP or UDP send or receive.
pub(super) fn net(n: stacks_net, addrs: &mut SockAddrs) -> Decoded {
    let (protocol, local, remote) = socket_ends(n.family, n.protocol, &n.addrs, addrs);
    Decoded {
        kind: kind::NET,
        value: n.bytes as i64,
        extra: Extra {
            count: Some(1),
            op: Some(if n.direction == NetDirection::STACKS_NET_SEND {
                "send"
            } else {
                "recv"
            }),
            protocol,
            local,
            remote,
            errno: (n.error != 0).then_some(n.error),
            ..Extra::default()
        },
    }
}

/// A fork: names the child.
pub(super) fn fork(h: &Header, f: stacks_fork) -> Decoded {
    lifecycle(
        kind::FORK,
        h,
        Extra {
            child: Some(f.child_pid as i32),
            ..Extra::default()
        },
    )
}

/// A process lifecycle row: each stands for one event.
pub(super) fn lifecycle(kind: &'static str, h: &Header, extra: Extra) -> Decoded {
    Decoded {
        kind,
        value: i64::from(h.count),
        extra,
    }
}

/// How many leading kernel frames belong to the tracing machinery that ran our BPF program
/// (the program itself, `bpf_trace_run*`, perf's tracepoint glue): the stack the user cares
/// about starts below them.
pub(super) fn tracing_frames(syms: &[Option<KernelSymbol>]) -> usize {
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

/// (syscall, direction) by `enum stacks_vfs_call`.
pub(super) const VFS_CALLS: [(&str, &str); VfsCall::STACKS_VFS_PWRITEV2.0 as usize + 1] = [
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

pub(super) fn state_name(code: State) -> &'static str {
    match code {
        State::STACKS_STATE_RUNNABLE => state::RUNNABLE,
        State::STACKS_STATE_SLEEPING => state::SLEEPING,
        State::STACKS_STATE_UNINTERRUPTIBLE => state::UNINTERRUPTIBLE,
        State::STACKS_STATE_IDLE => state::IDLE,
        State::STACKS_STATE_STOPPED => state::STOPPED,
        State::STACKS_STATE_RUNNING => state::RUNNING,
        _ => state::OTHER,
    }
}

pub(super) fn rss_counter(counter: RssCounter) -> &'static str {
    match counter {
        RssCounter::STACKS_RSS_FILE => "file",
        RssCounter::STACKS_RSS_ANON => "anon",
        RssCounter::STACKS_RSS_SWAP => "swap",
        RssCounter::STACKS_RSS_SHMEM => "shmem",
        _ => "other",
    }
}

pub(super) fn block_op(op: BlockOp) -> &'static str {
    match op {
        BlockOp::STACKS_BLOCK_READ => "read",
        BlockOp::STACKS_BLOCK_WRITE => "write",
        BlockOp::STACKS_BLOCK_FLUSH => "flush",
        BlockOp::STACKS_BLOCK_DISCARD => "discard",
        _ => "other",
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
}
