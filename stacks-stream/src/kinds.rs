//! The registry of event kinds: for each value of the `kind` column, what it is, which
//! columns its rows fill, the unit of `value`, the pprof sample types stacks-pprof makes of it,
//! how stacks-trace draws it, the bundled queries about it, and how `stacks-record -e` asks
//! for it. Every tool reads this table instead of keeping its own list, so a new kind is a new
//! entry here plus its BPF program and row conversion in stacks-record.

use crate::schema::{col, kind};

/// What a number measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Nanoseconds,
    Bytes,
    Count,
}

impl Unit {
    /// The short name query results use in their `unit` column: `ns`, `bytes`, `count`.
    pub const fn short(self) -> &'static str {
        match self {
            Unit::Nanoseconds => "ns",
            Unit::Bytes => "bytes",
            Unit::Count => "count",
        }
    }

    /// The unit of a pprof sample type: `nanoseconds`, `bytes`, `count`.
    pub const fn pprof(self) -> &'static str {
        match self {
            Unit::Nanoseconds => "nanoseconds",
            Unit::Bytes => "bytes",
            Unit::Count => "count",
        }
    }
}

/// A pprof sample type: its name and unit (`cpu/nanoseconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleType {
    pub name: &'static str,
    pub unit: Unit,
}

/// How stacks-trace draws rows of a kind (Chrome Trace Event Format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// An instant `cpu sample` on the thread's track, with its stack.
    CpuSample,
    /// Off-CPU slices on the thread's track, on-CPU slices between them; rows folding short
    /// intervals as instants.
    Sched,
    /// A counter per process.
    Counter,
    /// Asynchronous slices (several may be in flight), category the kind.
    Async,
    /// Slices on the thread's IO lane, which may straddle its on/off-CPU slices.
    Io,
    /// An instant on the thread's track named after the kind, category `process`.
    Process,
    /// Slices on the thread's state lane, one per run of consecutive samples in the same
    /// state, system call and file, category `state`.
    State,
    /// A global instant `lost events`.
    Lost,
    /// An instant on the thread's track named after the row's `probe`, with its stack, hit
    /// count and arguments, category `probe`.
    Probe,
    /// Slices on the thread's span lane named after the row's span, nested as the spans were.
    Span,
}

/// The argument of a recordable kind in `-e NAME[:STACKS][:ARG]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arg {
    /// How the help names it (`HZ`).
    pub name: &'static str,
    /// Its default, as written in `-e`.
    pub default: &'static str,
    /// What it sets.
    pub meaning: &'static str,
    /// How `-e` reads it.
    pub grammar: ArgGrammar,
}

/// The forms of a `-e` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgGrammar {
    /// A frequency in Hz, from 1 to `max`.
    Hz { max: u32 },
    /// A duration (`0`, `250us`, `1ms`: a bare number other than 0 is refused).
    Duration,
    /// Every Nth event, N from 1 to `max`.
    Every { max: u32 },
}

/// Where rows of a kind come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Recorded when `stacks-record -e` names it: `NAME[:STACKS][:ARG]`.
    Event {
        /// The stacks captured when `STACKS` is not given (`u`, `k` or `uk`).
        stacks: &'static str,
        arg: Option<Arg>,
        /// What `-e` help says the event records.
        help: &'static str,
    },
    /// Recorded when `stacks-record -e` names a probe, in one of these forms.
    Probes(&'static [ProbeForm]),
    /// Recorded for every traced process, whatever `-e` says.
    Always,
    /// Written by the recorder when the kernel could not hand events over.
    Recorder,
}

/// One way of naming a probe in `-e` (`tp:CATEGORY:NAME[:STACKS][:count]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeForm {
    /// The spec's first field (`tp`).
    pub prefix: &'static str,
    /// The fields after it that name the probe (`CATEGORY:NAME`).
    pub fields: &'static str,
    /// The stacks captured when `STACKS` is not given.
    pub stacks: &'static str,
    /// What `-e` help says it probes.
    pub help: &'static str,
}

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

/// One event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// The `kind` column's value.
    pub name: &'static str,
    /// One line saying what a row is.
    pub description: &'static str,
    /// The nullable columns its rows fill (beyond `time` … `value`, which every row has).
    pub columns: &'static [&'static str],
    /// Whether its rows carry stacks (when requested).
    pub stacks: bool,
    /// The unit of `value`.
    pub unit: Unit,
    /// The pprof sample type counting its events, for kinds whose `value` is not a count.
    pub count: Option<SampleType>,
    /// The pprof sample type of `value`.
    pub value: SampleType,
    /// How stacks-trace draws it.
    pub lane: Lane,
    /// The bundled stacks-query queries about it (besides [`ANY_KIND_QUERIES`]).
    pub queries: &'static [&'static str],
    pub source: Source,
}

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
        queries: &["cpu", "cpu-functions"],
        source: Source::Event {
            stacks: "uk",
            arg: Some(Arg {
                name: "HZ",
                default: "99",
                meaning: "samples per second, 1-10000",
                grammar: ArgGrammar::Hz { max: 10_000 },
            }),
            help: "CPU samples (cpu-clock), value = period ns.",
        },
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
        queries: &["offcpu", "offcpu-states"],
        source: Source::Event {
            stacks: "uk",
            arg: Some(Arg {
                name: "MIN",
                default: "1ms",
                meaning: "shorter intervals are folded per thread and state (no stack, time kept)",
                grammar: ArgGrammar::Duration,
            }),
            help: "off-CPU intervals with the switch-out stack, state and waker.",
        },
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
        queries: &["rss-growth"],
        source: Source::Event {
            stacks: "u",
            arg: Some(Arg {
                name: "N",
                default: "29",
                meaning: "a row every Nth growth event per process",
                grammar: ArgGrammar::Every { max: 1_000_000 },
            }),
            help: "RSS growth in the thread whose memory grew, value = bytes grown.",
        },
    },
    Kind {
        name: kind::BLOCK,
        description: "a block IO request; value = bytes",
        columns: &[col::DURATION, col::COUNT, col::OP, col::DEV, col::ERRNO],
        stacks: true,
        unit: Unit::Bytes,
        count: Some(sample("block_requests", Unit::Count)),
        value: sample("block", Unit::Bytes),
        lane: Lane::Async,
        queries: &["block-bytes", "block-latency"],
        source: Source::Event {
            stacks: "uk",
            arg: None,
            help: "block IO requests: bytes, issue-to-completion latency, submitter's stacks.",
        },
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
        queries: &["vfs-read", "vfs-write"],
        source: Source::Event {
            stacks: "u",
            arg: None,
            help: "read/write system calls (read, write, pread64, pwrite64, readv, writev, \
                   preadv, pwritev, preadv2, pwritev2): bytes, latency, fd, path.",
        },
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
        queries: &["net"],
        source: Source::Event {
            stacks: "u",
            arg: None,
            help: "TCP and UDP sends and receives (IPv4, IPv6): bytes, addresses.",
        },
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
        ],
        stacks: true,
        unit: Unit::Nanoseconds,
        count: Some(sample("state_samples", Unit::Count)),
        value: sample("wall", Unit::Nanoseconds),
        lane: Lane::State,
        queries: &["thread-states", "process-states", "state-stacks", "stuck"],
        source: Source::Event {
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
        queries: &["stackcount"],
        source: Source::Probes(&PROBE_FORMS),
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
        queries: &["stuck-spans"],
        source: Source::Event {
            stacks: "u",
            arg: None,
            help: "each entry of a `tracing` span in programs using tracing-stacks (its USDT \
                   probes): one row from enter to exit, stacks at the enter; value = ns.",
        },
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
        queries: &[],
        source: Source::Always,
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
        queries: &[],
        source: Source::Always,
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
        queries: &[],
        source: Source::Always,
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
        queries: &[],
        source: Source::Recorder,
    },
];

/// Bundled stacks-query queries that take any kind (a `kind` parameter).
pub const ANY_KIND_QUERIES: [&str; 5] = [
    "timeline",
    "top-processes",
    "top-threads",
    "spans",
    "span-wait",
];

/// The kind called `name`; `None` for a kind this version does not know.
pub fn get(name: &str) -> Option<&'static Kind> {
    ALL.iter().find(|k| k.name == name)
}

/// The names of every kind, in [`ALL`]'s order.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|k| k.name)
}

/// The kinds `stacks-record -e` can ask for.
pub fn recordable() -> impl Iterator<Item = &'static Kind> {
    ALL.iter()
        .filter(|k| matches!(k.source, Source::Event { .. }))
}

/// The unit of `value` of rows of `kind`; a count for kinds this version does not know.
pub fn unit(kind: &str) -> Unit {
    get(kind).map_or(Unit::Count, |k| k.unit)
}

/// The `profile` entry's sampling frequency when `-e` names none.
pub const PROFILE_DEFAULT_HZ: u32 = 99;

/// The CPU sampling period of a `stacks.events` value (the normalized `-e` specification, like
/// `profile:u:99,switch:uk`): 1e9/HZ, HZ being the `profile` entry's last numeric field
/// ([`PROFILE_DEFAULT_HZ`] when it has none). `None` without a `profile` entry.
pub fn profile_period_ns(events: &str) -> Option<i64> {
    let entry = events
        .split(',')
        .map(str::trim)
        .find(|e| e.split(':').next() == Some(kind::PROFILE))?;
    let hz = entry
        .split(':')
        .skip(1)
        .filter_map(|f| f.trim().parse::<u64>().ok())
        .last()
        .filter(|hz| *hz > 0)
        .unwrap_or(u64::from(PROFILE_DEFAULT_HZ));
    i64::try_from(1_000_000_000 / hz).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::raw_fields;

    /// Every `kind::*` constant of schema.rs.
    const SCHEMA_KINDS: &[&str] = &[
        kind::PROFILE,
        kind::PROBE,
        kind::LOST,
        kind::SWITCH,
        kind::RSS,
        kind::BLOCK,
        kind::VFS,
        kind::NET,
        kind::STATE,
        kind::SPAN,
        kind::EXEC,
        kind::FORK,
        kind::EXIT,
    ];

    #[test]
    fn registry_and_schema_constants_name_the_same_kinds() {
        for &k in SCHEMA_KINDS {
            assert!(get(k).is_some(), "schema kind `{k}` is not in the registry");
        }
        for k in names() {
            assert!(
                SCHEMA_KINDS.contains(&k),
                "registry kind `{k}` is not a schema.rs kind constant"
            );
        }
        let mut seen: Vec<&str> = names().collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), ALL.len(), "a kind is registered twice");
    }

    #[test]
    fn kinds_name_row_columns() {
        let fields = raw_fields();
        let row_columns: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        for k in ALL {
            for c in k.columns {
                assert!(row_columns.contains(c), "{}: no row column `{c}`", k.name);
            }
        }
        // Every per-kind column after the stacks is filled by some kind.
        let after_stacks = row_columns
            .iter()
            .skip_while(|c| **c != col::KSTACK_SYMBOLS)
            .skip(1);
        for c in after_stacks {
            assert!(
                ALL.iter().any(|k| k.columns.contains(c)),
                "no kind fills `{c}`"
            );
        }
    }

    #[test]
    fn sample_types_and_units() {
        let profile = get(kind::PROFILE).unwrap();
        assert_eq!(profile.value, sample("cpu", Unit::Nanoseconds));
        assert_eq!(profile.count, Some(sample("samples", Unit::Count)));
        for k in ALL {
            assert_eq!(k.value.unit, k.unit, "{}", k.name);
            assert_eq!(k.count.is_none(), k.unit == Unit::Count, "{}", k.name);
        }
        assert_eq!(unit("vfs").short(), "bytes");
        assert_eq!(unit("switch").pprof(), "nanoseconds");
        assert_eq!(unit("newer-kind"), Unit::Count);
        assert_eq!(
            recordable().map(|k| k.name).collect::<Vec<_>>(),
            [
                "profile", "switch", "rss", "block", "vfs", "net", "state", "span"
            ]
        );
    }

    #[test]
    fn profile_default_rate_is_documented() {
        let Some(Kind {
            source: Source::Event { arg: Some(arg), .. },
            ..
        }) = get(kind::PROFILE)
        else {
            panic!("profile takes HZ");
        };
        assert_eq!(arg.default, PROFILE_DEFAULT_HZ.to_string());
    }

    #[test]
    fn period_from_events() {
        assert_eq!(
            profile_period_ns("profile:u:99,switch:uk"),
            Some(10_101_010)
        );
        assert_eq!(
            profile_period_ns("switch:uk, profile:1000"),
            Some(1_000_000)
        );
        assert_eq!(profile_period_ns("profile"), Some(10_101_010));
        assert_eq!(profile_period_ns("profile:uk"), Some(10_101_010));
        assert_eq!(profile_period_ns("profile:0"), Some(10_101_010));
        assert_eq!(profile_period_ns("switch:uk"), None);
        assert_eq!(profile_period_ns("profiler:5"), None);
    }
}
