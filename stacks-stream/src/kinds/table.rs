//! The table of event kinds: every kind's entry in [`ALL`] and the probe spellings of `-e`
//! ([`PROBE_FORMS`]). What each field means is in the types of [`super`].

use super::{
    Arg, ArgGrammar, KFUNC, Kind, Lane, ProbeForm, Ring, SampleType, Sampling, Source, Top, UFUNC,
    Unit,
};
use crate::schema::{col, kind};

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

/// Every kind this version knows, in the order `stacks-pprof --kind all` converts them.
pub const ALL: &[Kind] = &[
    Kind {
        name: kind::PROFILE,
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Rate,
    },
    Kind {
        name: kind::SWITCH,
        description: "an off-CPU interval of a thread (switch-out to switch-in); value = ns off CPU",
        columns: &[col::DURATION, col::COUNT, col::STATE, col::WAKER],
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::WAKE,
        description: "the waker of a kept off-CPU interval, at the wakeup; value = ns the \
                      woken thread had been off CPU",
        columns: &[col::DURATION, col::COUNT, col::WAKEE],
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
            arg: None,
            help: "with switch: who woke each off-CPU interval of at least its MIN (a task, or \
                   [irq], [softirq], [timer]) and the waker's stacks then; value = ns the \
                   woken thread had waited.",
        },
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::RSS,
        description: "RSS growth of a process (kmem:rss_stat), sampled; value = bytes grown",
        columns: &[col::COUNT, col::OP, col::RSS],
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
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::BLOCK,
        description: "a block IO request; value = bytes",
        columns: &[
            col::DURATION,
            col::COUNT,
            col::OP,
            col::DEV,
            col::ERRNO,
            col::SUBMITTER,
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
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::VFS,
        description: "a file read/write system call; value = bytes transferred",
        columns: &[
            col::DURATION,
            col::COUNT,
            col::OP,
            col::SYSCALL,
            col::FD,
            col::PATH,
            col::ERRNO,
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
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::NET,
        description: "a TCP/UDP send or receive; value = bytes transferred",
        columns: &[
            col::COUNT,
            col::OP,
            col::PROTOCOL,
            col::LOCAL,
            col::REMOTE,
            col::ERRNO,
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
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::URING,
        description: "an io_uring request, submission to completion; value = bytes transferred",
        columns: &[
            col::DURATION,
            col::COUNT,
            col::OP,
            col::FD,
            col::PATH,
            col::ERRNO,
            col::MODE,
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
            letters: "u",
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
        ring: Some(Ring::Io),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::STATE,
        description: "a thread's state at a sampling pass; value = the sampling period in ns \
                      (sum = thread-seconds)",
        columns: &[
            col::DURATION,
            col::COUNT,
            col::STATE,
            col::SYSCALL,
            col::FD,
            col::PATH,
            col::PROTOCOL,
            col::LOCAL,
            col::REMOTE,
            col::OFFCPU_SINCE,
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Passes,
    },
    Kind {
        name: kind::PROBE,
        description: "hits of a probe (tracepoint, uprobe, uretprobe, USDT); value = hits",
        columns: &[col::COUNT, col::PROBE, col::ARGS],
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
        ring: Some(Ring::Probes),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::SPAN,
        description: "a thread's time in a `tracing` span, enter to exit (tracing-stacks); \
                      value = ns in the span",
        columns: &[col::DURATION],
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::ALLOC,
        description: "a sampled allocation (value = the bytes it stands for) or the free of a \
                      sampled pointer (value 0), from libstacks_alloc.so",
        columns: &[col::COUNT, col::OP, col::ARGS],
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
        ring: Some(Ring::Probes),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::EXEC,
        description: "a traced process called exec; value = 1",
        columns: &[col::PATH],
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::FORK,
        description: "a traced process forked; value = 1",
        columns: &[col::CHILD],
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::EXIT,
        description: "a traced process exited; value = 1",
        columns: &[col::EXIT_CODE],
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
        ring: Some(Ring::Samples),
        sampling: Sampling::Event,
    },
    Kind {
        name: kind::LOST,
        description: "events the kernel side could not deliver, per CPU and cause; value = how many",
        columns: &[col::CAUSE],
        stacks: false,
        unit: Unit::Count,
        count: None,
        value: sample("lost", Unit::Count),
        lane: Lane::Lost,
        top: None,
        source: Source::Recorder,
        ring: None,
        sampling: Sampling::Event,
    },
];
