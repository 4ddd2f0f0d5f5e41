//! The registry of event kinds: for each value of the `kind` column, what it is, which
//! columns its rows fill, the unit of `value`, the pprof sample types stacks-pprof makes of it,
//! how stacks-trace draws it, how stacks-top weighs and groups it, and how `stacks-record -e`
//! asks for it. Every tool reads this table instead of keeping its own list, so a new kind is a
//! new entry in [`ALL`] (`table.rs`) plus its BPF program and row conversion in stacks-record;
//! the tests of `consumers.rs` fail when a document or explore's `kinds.json` lacks it, and
//! stacks-sql's when no bundled query is about it.

#[cfg(test)]
mod consumers;

/// Makes the registry from `CONST => Kind { … },` entries: [`ALL`], in their order, and a
/// constant of each kind's name in [`names`] (re-exported as `crate::kind`).
macro_rules! kinds {
    ($($konst:ident => $kind:expr,)*) => {
        $(const $konst: Kind = $kind;)*

        /// Every kind this version knows, in the order `stacks-pprof --kind all` converts them.
        pub const ALL: &[Kind] = &[$($konst),*];

        /// The `kind` column's value of each kind of [`ALL`].
        pub mod names {
            $(
                #[doc = concat!("The name of kind `", stringify!($konst), "` (lower case).")]
                pub const $konst: &str = super::$konst.name;
            )*
        }
    };
}

mod table;

pub use table::{ALL, PROBE_FORMS, names};

#[cfg(test)]
use crate::kind;

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
    /// A size in bytes, from `min` up (`524288`, `64K`, `1M`: powers of 1024).
    Size { min: u64 },
}

/// The ring buffer a kind's records go through in stacks-record: its class of kinds, so a flood
/// of one class never takes the room of another's records. The agent's CPU budget sheds by it
/// too (docs/agent.md): `Io` kinds lose their stacks, then stop, before the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// CPU, off-CPU and state samples, the process lifecycle, spans.
    Samples,
    /// File, socket, block and io_uring IO, RSS growth: summed or lost first under load.
    Io,
    /// Probes and allocations.
    Probes,
}

/// How a kind's rows come: one per event, or sampled. The agent's CPU budget keeps sampled
/// kinds to the end at a quarter of their rate; stacks-top and explore divide a sampled-in-
/// passes kind's thread time by the time its passes observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// A row per event (or per folded or aggregated events).
    Event,
    /// Sampled at a rate (`HZ`) on a clock: a row stands for a period.
    Rate,
    /// Sampled in passes over every thread at a rate (`HZ`): a row stands for a period of
    /// the time the passes observed.
    Passes,
    /// One event in N taken at random (`N`, an [`ArgGrammar::Every`] argument): a row stands
    /// for N events, its `count`, and its `value` and `duration` are theirs (N times the one
    /// taken), so sums estimate the events' totals at any N.
    OneIn,
    /// A row per event at least MIN long (the kind's argument, an [`ArgGrammar::Duration`]),
    /// shorter ones folded (their count and time kept), and of those at least MIN, 1 in N
    /// taken at random at the event's start (`n`, a second argument `NAME:STACKS:MIN:N`,
    /// an [`ArgGrammar::Every`]), before its stacks are: a kept row stands for N events, its
    /// `count`, and its `value` is theirs (N times its own), while its `duration` stays its
    /// own (a span of time in a timeline), so sums estimate the events' totals at any N.
    KeptOneIn { n: Arg },
}

/// A cause of `lost` rows a kind counts as its own (`WHY:KIND`, `crate::lost`) besides
/// `ring_buffer_full`, which every kind with a [`Ring`] counts. The recorder's kernel side
/// counts each by record kind (`enum stacks_drop` in bpf/stacks.h), so a kind's cause needs no
/// line of its own anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Its table of events in flight or per process was full (`map_full`).
    MapFull,
}

impl Loss {
    /// The cause's `WHY` part.
    pub const fn why(self) -> &'static str {
        match self {
            Loss::MapFull => "map_full",
        }
    }
}

/// Where rows of a kind come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Recorded when `stacks-record -e` names it: `NAME[:STACKS][:ARG]`.
    Event {
        /// The stacks captured when `STACKS` is not given (`u`, `k` or `uk`).
        stacks: &'static str,
        /// The stack letters `STACKS` may use, of `u` (user, frame pointers), `k` (kernel) and
        /// `d` (user, CFI); `n` (none) is always allowed.
        letters: &'static str,
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

/// One event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// The `kind` column's value.
    pub name: &'static str,
    /// One line saying what a row is.
    pub description: &'static str,
    /// The nullable columns its rows fill (beyond `time` … `value`, which every row has), each
    /// with what it holds on this kind's rows: docs/format.md's text after the column's own
    /// (`crate::table::doc`); empty when the column's own text says it all.
    pub columns: &'static [(&'static str, &'static str)],
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
    /// How stacks-top shows it; `None`: never shown (`lost`).
    pub top: Option<Top>,
    pub source: Source,
    /// The causes of `lost` rows it counts besides `ring_buffer_full`.
    pub losses: &'static [Loss],
    /// The ring buffer its records go through in stacks-record; `None`: the recorder writes
    /// its rows itself (`lost`).
    pub ring: Option<Ring>,
    pub sampling: Sampling,
}

impl Kind {
    /// Whether the recorder takes a new `-e` argument of this kind while recording
    /// (`stacks-record --control`), which is what the argument sets: a sampling rate or a
    /// 1-in-N sampling ([`Self::sampling`]), or a MIN (an [`ArgGrammar::Duration`]: shorter
    /// events are folded, their count and time kept). stacks-record's kinds say the same of
    /// themselves, which its tests check.
    pub fn arg_in_place(&self) -> bool {
        let Source::Event { arg: Some(arg), .. } = self.source else {
            return false;
        };
        self.sampling != Sampling::Event || arg.grammar == ArgGrammar::Duration
    }

    /// The second argument of a kind whose kept events are sampled 1 in N
    /// ([`Sampling::KeptOneIn`]): `NAME:STACKS:MIN:N`.
    pub fn one_in_arg(&self) -> Option<Arg> {
        match self.sampling {
            Sampling::KeptOneIn { n } => Some(n),
            _ => None,
        }
    }
}

/// How stacks-top weighs and groups the rows of a kind (docs/top.md, "Kinds"). Whether a row
/// has bytes is its [`Kind::unit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Top {
    /// The column holding the thread-nanoseconds a row stands for, from which stacks-top's and
    /// explore's average active threads are computed (docs/top.md): CPU samples, thread-state
    /// samples and off-CPU intervals carry them in `value`; file IO, block IO and spans in
    /// `duration` (time in flight). `None`: the kind has no thread time.
    pub thread_ns: Option<&'static str>,
    /// Whether `duration` is a latency worth a histogram: time in the call (`vfs`), issue to
    /// completion (`block`), time in the current system call (`state`), off CPU (`switch`), in
    /// the span (`span`).
    pub latency: bool,
    /// The grouping a screen of this kind starts with: row columns, or the top user or kernel
    /// frame ([`UFUNC`], [`KFUNC`]), which stacks-top computes.
    pub group: &'static [&'static str],
}

/// stacks-top's computed column of the innermost user frame.
pub const UFUNC: &str = "ufunc";
/// stacks-top's computed column of the innermost kernel frame.
pub const KFUNC: &str = "kfunc";

/// The kind called `name`; `None` for a kind this version does not know.
pub fn get(name: &str) -> Option<&'static Kind> {
    ALL.iter().find(|k| k.name == name)
}

/// The names of every kind, in [`ALL`]'s order.
pub fn names() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|k| k.name)
}

/// The kinds stacks-top shows, in [`ALL`]'s order, with how it shows them.
pub fn shown() -> impl Iterator<Item = (&'static Kind, &'static Top)> {
    ALL.iter().filter_map(|k| Some((k, k.top.as_ref()?)))
}

/// The kinds `stacks-record -e` can ask for.
pub fn recordable() -> impl Iterator<Item = &'static Kind> {
    ALL.iter()
        .filter(|k| matches!(k.source, Source::Event { .. }))
}

/// The kinds whose records go through `ring` in stacks-record.
pub fn in_ring(ring: Ring) -> impl Iterator<Item = &'static Kind> {
    ALL.iter().filter(move |k| k.ring == Some(ring))
}

/// Whether rows of `kind` are sampled in passes over every thread (their thread time divides
/// by the time the passes observed); false for a kind this version does not know.
pub fn sampled_in_passes(kind: &str) -> bool {
    get(kind).is_some_and(|k| k.sampling == Sampling::Passes)
}

/// The unit of `value` of rows of `kind`; a count for kinds this version does not know.
pub fn unit(kind: &str) -> Unit {
    get(kind).map_or(Unit::Count, |k| k.unit)
}

/// What column `c` holds, as docs/format.md says it: its own text, then what it holds on each
/// kind's rows that says something of it ([`Kind::columns`]), in the registry's order
/// (`` `vfs`: the file descriptor ``), `; `-separated.
pub fn column_doc(c: &crate::table::Column) -> String {
    let own = (!c.doc.is_empty()).then(|| c.doc.to_string());
    let by_kind = ALL.iter().flat_map(|k| {
        k.columns
            .iter()
            .filter(|(name, text)| *name == c.name && !text.is_empty())
            .map(|(_, text)| format!("`{}`: {text}", k.name))
    });
    own.into_iter()
        .chain(by_kind)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `profile` entry's sampling frequency when `-e` names none.
pub const PROFILE_DEFAULT_HZ: u32 = 99;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{col, raw_fields};

    const fn sample(name: &'static str, unit: Unit) -> SampleType {
        SampleType { name, unit }
    }

    #[test]
    fn kinds_are_registered_once_under_their_constants() {
        let mut seen: Vec<&str> = names().collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), ALL.len(), "a kind is registered twice");
        assert_eq!(kind::URING, "uring");
        assert_eq!(kind::PROFILE, ALL[0].name);
        for k in ALL {
            assert_eq!(k.name, k.name.to_lowercase(), "kind names are lower case");
        }
    }

    #[test]
    fn kinds_name_row_columns() {
        let fields = raw_fields();
        let row_columns: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        for k in ALL {
            for (c, _) in k.columns {
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
                ALL.iter().any(|k| k.columns.iter().any(|(f, _)| f == c)),
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
                "profile", "switch", "wake", "rss", "block", "vfs", "net", "uring", "state",
                "span", "alloc"
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
}
