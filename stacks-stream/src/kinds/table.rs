//! The table of event kinds: every kind's entry in [`ALL`] and the probe spellings of `-e`
//! ([`PROBE_FORMS`]). What each field means is in the types of [`super`].

use super::{
    Arg, ArgGrammar, KFUNC, Kind, Lane, Loss, ProbeForm, Ring, SampleType, Sampling, Source, Top,
    UFUNC, Unit,
};
use crate::schema::col;

/// The probe spellings of `-e`, each recording rows of kind `probe`.
pub const PROBE_FORMS: [ProbeForm; 4] = [
    ProbeForm {
        prefix: "tp",
        fields: "CATEGORY:NAME",
        stacks: "uk",
        help: "a kernel tracepoint, attached by name through BTF (no tracefs); args = its \
               fields as the tracepoint passes them.",
    },
    ProbeForm {
        prefix: "uprobe",
        fields: "PATH:SYMBOL",
        stacks: "u",
        help: "entry of function SYMBOL (.symtab or .dynsym) of the executable or library PATH \
               (a name like libc.so.6 is looked up in the targets' maps, then the loader's \
               paths); args = the first six integer arguments.",
    },
    ProbeForm {
        prefix: "uretprobe",
        fields: "PATH:SYMBOL",
        stacks: "u",
        help: "return of that function; args = [the return value].",
    },
    ProbeForm {
        prefix: "usdt",
        fields: "PATH:PROVIDER:NAME",
        stacks: "u",
        help: "a USDT probe of PATH (semaphores are set); args = the probe's arguments.",
    },
];

const fn sample(name: &'static str, unit: Unit) -> SampleType {
    SampleType { name, unit }
}

// Every kind, in the order `stacks-pprof --kind all` converts them: each entry
// `CONST => Kind { … }` makes its entry of `ALL` and the name constant `kind::CONST`
// (`crate::kind`), so a new kind is one entry here.
kinds! {
    PROFILE => Kind {
        name: "profile",
        description: "a CPU sample (perf cpu-clock); value = the sampling period",
        columns: &[],
        stacks: true,
        unit: Unit::Nanoseconds,
        count: Some(sample("samples", Unit::Count)),
        value: sample("cpu", Unit::Nanoseconds),
        lane: Lane::CpuSample,
        top: Some(Top {
            thread_ns: Some(col::VALUE),
            latency: false,
            group: &[col::COMM, col::THREAD, UFUNC],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "uk",
            arg: Some(Arg {
                name: "HZ",
                default: "99",
                meaning: "samples per second, 1-10000",
                grammar: ArgGrammar::Hz { max: 10_000 },
            }),
            help: "CPU samples (cpu-clock), value = period ns.",
        },
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::Rate,
    },
    SWITCH => Kind {
        name: "switch",
        description: "an off-CPU interval of a thread (switch-out to switch-in); value = ns off \
                      CPU, times the intervals the row stands for",
        columns: &[
            (col::DURATION, "off-CPU time"),
            (col::COUNT, "the intervals a folded row stands for (those shorter than MIN); a kept interval's row, N of `switch:STACKS:MIN:N` (1 in N taken)"),
            (col::STATE, "how the thread left the CPU: `runnable` (preempted or yielded), `sleeping` (S), `uninterruptible` (D, usually IO), `idle`, `stopped`, `other`"),
            (col::WAKER, "tid of the thread that woke it, when a wakeup by a task was seen (null: none seen, or an interrupt, softirq or timer woke it: its `wake` row says which)"),
        ],
        stacks: true,
        unit: Unit::Nanoseconds,
        count: Some(sample("intervals", Unit::Count)),
        value: sample("offcpu", Unit::Nanoseconds),
        lane: Lane::Sched,
        top: Some(Top {
            thread_ns: Some(col::VALUE),
            latency: true,
            group: &[col::STATE, col::COMM, KFUNC],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "uk",
            arg: Some(Arg {
                name: "MIN",
                default: "1ms",
                meaning: "shorter intervals are folded per thread and state (no stack, time kept)",
                grammar: ArgGrammar::Duration,
            }),
            help: "off-CPU intervals with the switch-out stack, state and waker.",
        },
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::KeptOneIn {
            n: Arg {
                name: "N",
                default: "1",
                meaning: "stacks taken at 1 switch-out in N, at random; of the intervals of at \
                          least MIN, those taken are rows standing for N (count N, value N \
                          times their own), the others make none",
                grammar: ArgGrammar::Every { max: 1_000_000 },
            },
        },
    },
    WAKE => Kind {
        name: "wake",
        description: "the waker of a kept off-CPU interval, at the wakeup; value = ns the \
                      woken thread had been off CPU, times the wakeups the row stands for",
        columns: &[
            (col::DURATION, "the ns the woken thread had waited, times `count`"),
            (col::COUNT, "the wakeups the row stands for: N of `wake:STACKS:N` (1 in N taken)"),
            (col::WAKEE, "tid of the thread it woke, whose `switch` row is the one with that `tid` whose interval holds the wakeup: `time` ≤ the wake row's `time` ≤ `time` + `duration`"),
        ],
        stacks: true,
        unit: Unit::Nanoseconds,
        count: Some(sample("wakeups", Unit::Count)),
        value: sample("waited", Unit::Nanoseconds),
        lane: Lane::Sched,
        top: Some(Top {
            thread_ns: None,
            latency: true,
            group: &[col::COMM, KFUNC],
        }),
        source: Source::Event {
            letters: "uk",
            stacks: "k",
            arg: Some(Arg {
                name: "N",
                default: "1",
                meaning: "a row for 1 wakeup in N, taken at random, standing for N (its count)",
                grammar: ArgGrammar::Every { max: 1_000_000 },
            }),
            help: "with switch: who woke each off-CPU interval of at least its MIN (a task, or \
                   [irq], [softirq], [timer]) and the waker's stacks then; value = ns the \
                   woken thread had waited.",
        },
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::OneIn,
    },
    RSS => Kind {
        name: "rss",
        description: "RSS growth of a process (kmem:rss_stat), sampled; value = bytes grown",
        columns: &[
            (col::COUNT, "the growth events a sampled row stands for"),
            (col::OP, "the counter that grew, `anon`, `file`, `shmem`, `swap`"),
            (col::RSS, "the process's resident bytes (anon + file + shmem) after the change"),
        ],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("rss_events", Unit::Count)),
        value: sample("rss_growth", Unit::Bytes),
        lane: Lane::Counter,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::COMM, UFUNC],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "u",
            arg: Some(Arg {
                name: "N",
                default: "29",
                meaning: "a row every Nth growth event per process",
                grammar: ArgGrammar::Every { max: 1_000_000 },
            }),
            help: "RSS growth in the thread whose memory grew, value = bytes grown.",
        },
        losses: &[Loss::MapFull],
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    BLOCK => Kind {
        name: "block",
        description: "a block IO request; value = bytes",
        columns: &[
            (col::DURATION, "issue → completion"),
            (col::COUNT, ""),
            (col::OP, "`read`, `write`, `flush`, `discard`, `other`"),
            (col::DEV, "device `major:minor`"),
            (col::ERRNO, ""),
            (col::SUBMITTER, "for a request an io_uring worker (`iou-wrk`) issued on behalf of an io_uring request, the tid that submitted that request, recorded with `-e uring`; the row's user stack is then the submitter's at its submission (with `uring:u`), its kernel stack the worker's"),
        ],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("block_requests", Unit::Count)),
        value: sample("block", Unit::Bytes),
        lane: Lane::Async,
        top: Some(Top {
            thread_ns: Some(col::DURATION),
            latency: true,
            group: &[col::COMM, col::OP, col::DEV],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "uk",
            arg: None,
            help: "block IO requests: bytes, issue-to-completion latency, submitter's stacks.",
        },
        losses: &[Loss::MapFull],
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    VFS => Kind {
        name: "vfs",
        description: "a file read/write system call; value = bytes transferred",
        columns: &[
            (col::DURATION, "time in the system call"),
            (col::COUNT, "the calls the kernel aggregated"),
            (col::OP, "`read`, `write`"),
            (col::SYSCALL, "the system call (`read`, `pwrite64`, `writev`, `preadv2`, …)"),
            (col::FD, "the file descriptor"),
            (col::PATH, "the file's path, walked up from the file's dentry in BPF across mount points (absolute, as seen from the initial mount namespace; `…/`-prefixed when longer than 12 components or 128 bytes, then completed from `/proc/PID/fd` when the file is still open); `pipe:[inode]` / `socket:[inode]` for those"),
            (col::ERRNO, "the error of a failed call (positive errno); its `value` is 0"),
        ],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("vfs_calls", Unit::Count)),
        value: sample("vfs", Unit::Bytes),
        lane: Lane::Io,
        top: Some(Top {
            thread_ns: Some(col::DURATION),
            latency: true,
            group: &[col::COMM, col::OP, col::SYSCALL, col::PATH],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "u",
            arg: None,
            help: "read/write system calls (read, write, pread64, pwrite64, readv, writev, \
                   preadv, pwritev, preadv2, pwritev2): bytes, latency, fd, path.",
        },
        losses: &[],
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    NET => Kind {
        name: "net",
        description: "a TCP/UDP send or receive; value = bytes transferred",
        columns: &[
            (col::COUNT, "the calls the kernel aggregated"),
            (col::OP, "`send`, `recv`"),
            (col::PROTOCOL, "`tcp` or `udp`"),
            (col::LOCAL, "local `addr:port` (`[addr]:port` for IPv6)"),
            (col::REMOTE, "remote `addr:port`; null when the socket has no peer (unconnected UDP)"),
            (col::ERRNO, "the error of a failed call (positive errno); its `value` is 0"),
        ],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("net_calls", Unit::Count)),
        value: sample("net", Unit::Bytes),
        lane: Lane::Io,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::COMM, col::OP, col::PROTOCOL, col::REMOTE],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "u",
            arg: None,
            help: "TCP and UDP sends and receives (IPv4, IPv6): bytes, addresses.",
        },
        losses: &[],
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    URING => Kind {
        name: "uring",
        description: "an io_uring request, submission to completion; value = bytes transferred",
        columns: &[
            (col::DURATION, "submission → completion"),
            (col::COUNT, ""),
            (col::OP, "the request's opcode in lower case (`read`, `write`, `readv`, `read_fixed`, `send`, `recv`, `accept`, `fsync`, `openat`, `timeout`, …)"),
            (col::FD, "the request's descriptor, or for a registered (fixed) file its index in the ring's table"),
            (col::PATH, "as `vfs`'s, for the request's file at its completion"),
            (col::ERRNO, "the error of a failed request, as its completion gave it"),
            (col::MODE, "how the request ran: `inline` (issued in the submitting call), `async` (handed to an io-wq worker, `iou-wrk`), `poll` (armed, issued when its file was ready), `sqpoll` (submitted by the ring's SQPOLL thread, `iou-sqp`)"),
            (col::WAKEE, "with `switch` recorded too, the thread that waited in `io_uring_enter` for completions of the ring (`min_complete`) when this one was among those it waited for"),
            (col::OFFCPU_SINCE, "with `switch` recorded too, the off-CPU interval of the wait that counted it (`wakee`'s): the `time` of that thread's `switch` row (none when the interval was shorter than `switch`'s MIN, folded, or not among the 1 in N taken); null when the waiter had not left the CPU"),
        ],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("uring_requests", Unit::Count)),
        value: sample("uring", Unit::Bytes),
        lane: Lane::Async,
        top: Some(Top {
            thread_ns: None,
            latency: true,
            group: &[col::COMM, col::OP, col::PATH],
        }),
        source: Source::Event {
            letters: "ud",
            stacks: "u",
            arg: Some(Arg {
                name: "MIN",
                default: "0",
                meaning: "requests completed sooner are summed per submitter, op, file and \
                          latency bucket (no stack; count, bytes and time kept)",
                grammar: ArgGrammar::Duration,
            }),
            help: "io_uring requests (read, write, send, recv, fsync, …) from submission to \
                   completion: bytes, latency, errno, fd, path, how it ran (inline, async, \
                   poll, sqpoll); stacks of the submitter at submission.",
        },
        losses: &[Loss::MapFull],
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    STATE => Kind {
        name: "state",
        description: "a thread's state at a sampling pass; value = the sampling period in ns \
                      (sum = thread-seconds)",
        columns: &[
            (col::DURATION, "how long the thread has waited in `syscall` so far: since it last left the CPU, which it did in that call (the whole call for one that blocked once; the current wait of one that blocked more than once); null when it has not left the CPU since the recording started"),
            (col::COUNT, ""),
            (col::STATE, "the same values as `switch`'s, plus `running` (on a CPU), `runnable` meaning ready but not on a CPU"),
            (col::SYSCALL, "the system call the thread is in (any call, named as on this architecture: `clock_nanosleep`, `futex`, `read`, …), null when in none"),
            (col::FD, "the descriptor the thread's system call is on, for calls whose first argument is one (the read/write, sync, socket, `ioctl`, `flock`, `getdents64`, `epoll_wait` families)"),
            (col::PATH, "as `vfs`'s, for the file behind `fd`, read from the thread's fd table at the sampling pass"),
            (col::PROTOCOL, "as `net`'s, when `fd` is a TCP/UDP socket"),
            (col::LOCAL, "as `net`'s, when `fd` is a TCP/UDP socket"),
            (col::REMOTE, "as `net`'s, when `fd` is a TCP/UDP socket"),
            (col::OFFCPU_SINCE, "with `switch` recorded too, when a thread off CPU at the pass left the CPU, which is the `time` of the `switch` row of the interval it is in, when it has one (and, with `wake`, the wake row that ended that interval has `time` − `duration` / `count` = this); null for a running thread, without `switch`, or for an interval that began before the recording"),
        ],
        stacks: true,
        unit: Unit::Nanoseconds,
        count: Some(sample("state_samples", Unit::Count)),
        value: sample("wall", Unit::Nanoseconds),
        lane: Lane::State,
        top: Some(Top {
            thread_ns: Some(col::VALUE),
            latency: true,
            group: &[col::STATE, col::COMM, col::SYSCALL, col::PATH],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "uk",
            arg: Some(Arg {
                name: "HZ",
                default: "20",
                meaning: "sampling passes per second, 1-100",
                grammar: ArgGrammar::Hz { max: 100 },
            }),
            help: "every live thread's state HZ times a second (running, runnable, sleeping, \
                   uninterruptible…), its system call, time in it and file or socket, off-CPU \
                   stacks; \
                   value = period ns.",
        },
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::Passes,
    },
    PROBE => Kind {
        name: "probe",
        description: "hits of a probe (tracepoint, uprobe, uretprobe, USDT); value = hits",
        columns: &[
            (col::COUNT, "the hits a counting probe's row stands for"),
            (col::PROBE, "the probe as `-e` named it, without its stacks and `count` options (`tp:sched:sched_process_fork`, `uprobe:/usr/bin/app:parse`)"),
            (col::ARGS, "the hit's arguments as 64-bit integers (pointers and unsigned values wrap): a tracepoint's fields as it passes them (as many as its BTF prototype has), a uprobe's first six integer argument registers, a uretprobe's return value, a USDT probe's arguments; null on rows of counting probes"),
        ],
        stacks: true,
        unit: Unit::Count,
        count: None,
        value: sample("hits", Unit::Count),
        lane: Lane::Probe,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::PROBE, col::COMM],
        }),
        source: Source::Probes(&PROBE_FORMS),
        losses: &[],
        ring: Some(Ring::Probes),
        sampling: Sampling::Event,
    },
    SPAN => Kind {
        name: "span",
        description: "a thread's time in a `tracing` span, enter to exit (tracing-stacks); \
                      value = ns in the span",
        columns: &[
            (col::DURATION, ""),
        ],
        stacks: true,
        unit: Unit::Nanoseconds,
        count: Some(sample("span_entries", Unit::Count)),
        value: sample("span", Unit::Nanoseconds),
        lane: Lane::Span,
        top: Some(Top {
            thread_ns: Some(col::DURATION),
            latency: true,
            group: &[col::COMM, col::SPAN_NAME],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "u",
            arg: None,
            help: "each entry of a `tracing` span in programs using tracing-stacks (its USDT \
                   probes): one row from enter to exit, stacks at the enter; value = ns.",
        },
        // The ring of the process lifecycle records: a span left just before its process
        // exits is read before the exit, which ends the spans still entered.
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    ALLOC => Kind {
        name: "alloc",
        description: "a sampled allocation (value = the bytes it stands for) or the free of a \
                      sampled pointer (value 0), from libstacks_alloc.so",
        columns: &[
            (col::COUNT, ""),
            (col::OP, "`alloc` (a sampled allocation) or `free` (of a sampled pointer)"),
            (col::ARGS, "[the block's address, its size in bytes]"),
        ],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("alloc_events", Unit::Count)),
        value: sample("alloc_space", Unit::Bytes),
        lane: Lane::Probe,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::COMM, col::OP, UFUNC],
        }),
        source: Source::Event {
            letters: "ukd",
            stacks: "u",
            arg: Some(Arg {
                name: "INTERVAL",
                default: "512K",
                meaning: "mean bytes between samples in a `--` command (set in its \
                          STACKS_ALLOC_INTERVAL), 1 or more",
                grammar: ArgGrammar::Size { min: 1 },
            }),
            help: "allocations sampled by bytes in processes running libstacks_alloc.so (a \
                   `--` command gets it in LD_PRELOAD): op alloc (value = bytes it stands for, \
                   args = [address, size]) or free of a sampled pointer; stacks at the \
                   allocation.",
        },
        // Samples are rare by design, but a program allocating gigabytes a second at a small
        // interval can flood: never the samples ring.
        losses: &[],
        ring: Some(Ring::Probes),
        sampling: Sampling::Event,
    },
    EXEC => Kind {
        name: "exec",
        description: "a traced process called exec; value = 1",
        columns: &[
            (col::PATH, "the executed file as passed to exec"),
        ],
        stacks: false,
        unit: Unit::Count,
        count: None,
        value: sample("exec", Unit::Count),
        lane: Lane::Process,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::COMM, col::PATH],
        }),
        source: Source::Always,
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    FORK => Kind {
        name: "fork",
        description: "a traced process forked; value = 1",
        columns: &[
            (col::CHILD, "the new process's pid"),
        ],
        stacks: false,
        unit: Unit::Count,
        count: None,
        value: sample("fork", Unit::Count),
        lane: Lane::Process,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::COMM],
        }),
        source: Source::Always,
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    EXIT => Kind {
        name: "exit",
        description: "a traced process exited; value = 1",
        columns: &[
            (col::EXIT_CODE, "the exit status in wait(2) encoding"),
        ],
        stacks: false,
        unit: Unit::Count,
        count: None,
        value: sample("exit", Unit::Count),
        lane: Lane::Process,
        top: Some(Top {
            thread_ns: None,
            latency: false,
            group: &[col::COMM, col::EXIT_CODE],
        }),
        source: Source::Always,
        losses: &[],
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    LOST => Kind {
        name: "lost",
        description: "events the kernel side could not deliver, per CPU and cause; value = how many",
        columns: &[
            (col::CAUSE, "why the events were not delivered, `WHY:KIND` (see the `lost` kind below)"),
        ],
        stacks: false,
        unit: Unit::Count,
        count: None,
        value: sample("lost", Unit::Count),
        lane: Lane::Lost,
        top: None,
        source: Source::Recorder,
        losses: &[],
        ring: None,
        sampling: Sampling::Event,
    },
}
