//! The `-e` grammar, the event specification of every event: `NAME[:STACKS][:ARG]`,
//! comma-separated (kinds, with their defaults and argument grammar from the registry
//! [`crate::kinds`], and probes). The recorder parses `-e` with it, and readers of a stream's
//! `stacks.events` (its normalized form) read it back with it ([`profile_period_ns`]).

use std::fmt;

use crate::kind;
use crate::kinds::{ArgGrammar, Kind, Source};

pub mod probe;

use probe::{MAX_PROBES, Probe, ProbeType};

/// Which stacks an event captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackSel {
    /// `n`: no stacks (the event's own fields only: the cheapest recording).
    None,
    /// `u`: the user stack by frame pointers.
    User,
    /// `k`: the kernel stack.
    Kernel,
    /// `uk`.
    Both,
    /// `d`: the user stack unwound with the mapped files' CFI (a copy of the stack and the
    /// registers, unwound by the recorder; the frame-pointer walk continues it).
    Dwarf,
    /// `dk`.
    DwarfKernel,
}

impl StackSel {
    /// Bit mask understood by the BPF side (`STACKS_WANT_*`).
    pub fn mask(self) -> u32 {
        match self {
            StackSel::None => 0,
            StackSel::User => 1,
            StackSel::Kernel => 2,
            StackSel::Both => 3,
            StackSel::Dwarf => 1 | 4,
            StackSel::DwarfKernel => 1 | 2 | 4,
        }
    }

    pub fn user(self) -> bool {
        !matches!(self, StackSel::Kernel | StackSel::None)
    }

    pub fn kernel(self) -> bool {
        matches!(
            self,
            StackSel::Kernel | StackSel::Both | StackSel::DwarfKernel
        )
    }

    /// Whether the user stack is unwound with CFI (`d`).
    pub fn dwarf(self) -> bool {
        matches!(self, StackSel::Dwarf | StackSel::DwarfKernel)
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "n" => Some(StackSel::None),
            "u" => Some(StackSel::User),
            "k" => Some(StackSel::Kernel),
            "uk" | "ku" => Some(StackSel::Both),
            "d" => Some(StackSel::Dwarf),
            "dk" | "kd" => Some(StackSel::DwarfKernel),
            _ => None,
        }
    }
}

impl StackSel {
    /// The letters it takes of `u`, `k` and `d` (none for `n`).
    pub fn letters(self) -> &'static str {
        match self {
            StackSel::None => "",
            StackSel::User => "u",
            StackSel::Kernel => "k",
            StackSel::Both => "uk",
            StackSel::Dwarf => "d",
            StackSel::DwarfKernel => "dk",
        }
    }
}

impl fmt::Display for StackSel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StackSel::None => "n",
            StackSel::User => "u",
            StackSel::Kernel => "k",
            StackSel::Both => "uk",
            StackSel::Dwarf => "d",
            StackSel::DwarfKernel => "dk",
        })
    }
}

/// An event kind named in `-e`: its registry entry, stacks and argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindArgs {
    /// The registry entry's name (`crate::kind`).
    pub name: &'static str,
    pub stacks: StackSel,
    /// Its argument (a frequency in Hz, a duration in ns, an N), its default when not given;
    /// `None` for a kind that takes none.
    pub arg: Option<u64>,
    /// How the registry reads and writes its argument; `None` for a kind that takes none.
    pub grammar: Option<ArgGrammar>,
    /// N of a kind whose kept events are sampled 1 in N (`NAME:STACKS:MIN:N`,
    /// [`crate::kinds::Sampling::KeptOneIn`]), its default when not given; `None` for a kind
    /// that takes none.
    pub one_in: Option<u64>,
}

impl KindArgs {
    /// The period of a frequency argument in nanoseconds (1e9 / HZ): what one sample stands
    /// for.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / self.arg.unwrap_or(1).max(1)
    }
}

/// A parsed `-e` specification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSpec {
    /// The event kinds asked for, in the registry's order.
    pub kinds: Vec<KindArgs>,
    /// Probes (`tp:`, `uprobe:`, `uretprobe:`, `usdt:`), in the order given: a probe's index
    /// is its BPF cookie.
    pub probes: Vec<Probe>,
}

/// The specification used when `-e` is not given.
pub const DEFAULT_SPEC: &str = "profile:u:99,rss:u:29,switch:uk";

/// Event names this build can record: the registry's recordable kinds.
pub fn event_names() -> Vec<&'static str> {
    crate::kinds::recordable().map(|k| k.name).collect()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("empty event specification")]
    Empty,
    #[error("empty event in `{0}` (a stray comma?)")]
    EmptyToken(String),
    #[error("unknown event `{name}` in `{token}` (available: {available})")]
    UnknownEvent {
        name: String,
        token: String,
        available: String,
    },
    #[error("bad stack selection `{value}` in `{token}`: use u, k, uk, d or dk")]
    BadStacks { value: String, token: String },
    #[error(
        "`{0}`: a counting probe (`:count`) counts by frame-pointer stacks: use u, k or uk, or \
         drop `:count` for d stacks per hit"
    )]
    CountedDwarf(String),
    #[error("bad rate `{value}` in `{token}`: a sampling frequency in Hz from 1 to {max}")]
    BadRate {
        value: String,
        token: String,
        max: u32,
    },
    #[error("bad minimum `{value}` in `{token}`: a duration such as 0, 500us, 1ms or 2s")]
    BadMin { value: String, token: String },
    #[error("bad sampling `{value}` in `{token}`: N (every Nth event), from 1 to 1000000")]
    BadEvery { value: String, token: String },
    #[error("bad size `{value}` in `{token}`: bytes, or with K, M or G (64K, 1M), at least {min}")]
    BadSize {
        value: String,
        token: String,
        min: u64,
    },
    #[error("`{token}`: this event's stacks are {letters} or n")]
    Letters { token: String, letters: String },
    #[error("`{0}` takes no argument: use {1}[:STACKS]")]
    NoArgument(String, String),
    #[error("too many fields in `{0}`: expected NAME[:STACKS][:ARG] (switch: [:MIN[:N]])")]
    TooManyFields(String),
    #[error("event `{0}` given twice")]
    Duplicate(String),
    #[error("bad probe `{token}`: expected {form}")]
    ProbeForm { token: String, form: String },
    #[error("more than {MAX_PROBES} probes")]
    TooManyProbes,
    #[error("`wake` records the wakers of `switch` intervals: add switch (e.g. -e switch,wake)")]
    WakeWithoutSwitch,
}

impl EventSpec {
    /// Parse a comma-separated list of `NAME[:STACKS][:ARG]`.
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
        Self::parse_in(spec, crate::kinds::ALL)
    }

    /// [`Self::parse`] with the kinds of registry `kinds` (this version's is
    /// [`crate::kinds::ALL`]; a test may add made-up kinds to it).
    pub fn parse_in(spec: &str, kinds: &[Kind]) -> Result<Self, SpecError> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(SpecError::Empty);
        }
        let mut out = EventSpec::default();
        for token in spec.split(',') {
            let token = token.trim();
            if token.is_empty() {
                return Err(SpecError::EmptyToken(spec.to_string()));
            }
            if let Some(probe) = Probe::parse(token)? {
                if out.probes.iter().any(|p| p.name() == probe.name()) {
                    return Err(SpecError::Duplicate(probe.name()));
                }
                if out.probes.len() == MAX_PROBES {
                    return Err(SpecError::TooManyProbes);
                }
                out.probes.push(probe);
                continue;
            }
            let k = parse_kind(token, kinds)?;
            if out.get(k.name).is_some() {
                return Err(SpecError::Duplicate(k.name.to_string()));
            }
            out.kinds.push(k);
        }
        if out.get(kind::WAKE).is_some() && out.get(kind::SWITCH).is_none() {
            return Err(SpecError::WakeWithoutSwitch);
        }
        out.kinds
            .sort_by_key(|k| kinds.iter().position(|n| n.name == k.name));
        Ok(out)
    }

    /// Whether a recording of this specification can take `new` while it runs (stacks-record
    /// `--control`, the agent's budget degrading in place): the same kinds with the same
    /// stacks and the same probes, only the arguments of the kinds `retunes` names differing;
    /// else why not.
    pub fn takes_in_place(
        &self,
        new: &EventSpec,
        retunes: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let names = |s: &EventSpec| s.kinds.iter().map(|k| k.name).collect::<Vec<_>>();
        if names(self) != names(new) {
            return Err(format!(
                "it records other kinds ({} instead of {})",
                names(new).join(","),
                names(self).join(",")
            ));
        }
        let probes = |s: &EventSpec| s.probes.iter().map(|p| p.normalized()).collect::<Vec<_>>();
        if probes(self) != probes(new) {
            return Err("it records other probes".into());
        }
        for (a, b) in self.kinds.iter().zip(&new.kinds) {
            if a.stacks != b.stacks {
                return Err(format!("{}: other stacks", a.name));
            }
            if (a.arg != b.arg || a.one_in != b.one_in) && !retunes(a.name) {
                return Err(format!("{}: its argument does not change in place", a.name));
            }
        }
        Ok(())
    }

    /// The entry of kind `name`, when asked for.
    pub fn get(&self, name: &str) -> Option<&KindArgs> {
        self.kinds.iter().find(|k| k.name == name)
    }

    /// The normalized text form, e.g. `profile:uk:99,switch:uk:1ms`: stored in the stream
    /// metadata. A second argument N (`switch:uk:1ms:4`) is written only when it is not 1.
    pub fn normalized(&self) -> String {
        let mut parts: Vec<String> = self
            .kinds
            .iter()
            .map(|k| {
                let mut t = match (k.arg, k.grammar) {
                    (Some(ns), Some(ArgGrammar::Duration)) => {
                        format!("{}:{}:{}", k.name, k.stacks, format_ns(ns))
                    }
                    (Some(bytes), Some(ArgGrammar::Size { .. })) => {
                        format!("{}:{}:{}", k.name, k.stacks, format_size(bytes))
                    }
                    (Some(n), _) => format!("{}:{}:{n}", k.name, k.stacks),
                    (None, _) => format!("{}:{}", k.name, k.stacks),
                };
                if let Some(n) = k.one_in.filter(|n| *n > 1) {
                    t.push_str(&format!(":{n}"));
                }
                t
            })
            .collect();
        parts.extend(self.probes.iter().map(Probe::normalized));
        parts.join(",")
    }

    /// Names of the events requested: the kinds, then the probe types used.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self.kinds.iter().map(|k| k.name).collect();
        for ty in ProbeType::ALL {
            if self.probes.iter().any(|p| p.ty == ty) {
                v.push(ty.prefix());
            }
        }
        v
    }

    /// Whether any requested event captures kernel stacks (only then are kernel symbols
    /// needed: reading /proc/kallsyms costs ~50 ms of CPU at start).
    pub fn wants_kernel_stacks(&self) -> bool {
        self.kinds
            .iter()
            .map(|k| k.stacks)
            .chain(self.probes.iter().map(|p| p.stacks))
            .any(StackSel::kernel)
    }
}

/// The CPU sampling period of a `stacks.events` value (the normalized `-e` specification, like
/// `profile:u:99,switch:uk`): 1e9/HZ of its `profile` entry read by this grammar, the
/// registry's default HZ where the entry is not one this version reads. `None` without a
/// `profile` entry.
pub fn profile_period_ns(events: &str) -> Option<i64> {
    let entry = events
        .split(',')
        .map(str::trim)
        .find(|e| e.split(':').next() == Some(kind::PROFILE))?;
    let hz = parse_kind(entry, crate::kinds::ALL)
        .ok()
        .and_then(|k| k.arg)
        .unwrap_or(u64::from(crate::kinds::PROFILE_DEFAULT_HZ));
    i64::try_from(1_000_000_000 / hz.max(1)).ok()
}

/// One `NAME[:STACKS][:ARG]` token, with the defaults of its entry in registry `kinds`.
fn parse_kind(token: &str, kinds: &[Kind]) -> Result<KindArgs, SpecError> {
    let fields: Vec<&str> = token.split(':').collect();
    let name = fields[0];
    let (stacks, arg, n) = split_fields(token, &fields[1..])?;
    let entry = kinds.iter().find_map(|k| match k.source {
        Source::Event {
            stacks,
            letters,
            arg: spec,
            ..
        } if k.name == name => Some((k.name, stacks, letters, spec, k.one_in_arg())),
        _ => None,
    });
    let Some((name, default_stacks, letters, spec, n_spec)) = entry else {
        return Err(SpecError::UnknownEvent {
            name: name.to_string(),
            token: token.to_string(),
            available: format!(
                "{}, tp:, uprobe:, uretprobe:, usdt:",
                kinds
                    .iter()
                    .filter(|k| matches!(k.source, Source::Event { .. }))
                    .map(|k| k.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    };
    let arg = match (spec, arg) {
        (None, Some(_)) => return Err(SpecError::NoArgument(token.to_string(), name.to_string())),
        (None, None) => None,
        (Some(spec), Some(a)) => Some(parse_arg(spec.grammar, a, token)?),
        (Some(spec), None) => Some(parse_arg(spec.grammar, spec.default, token)?),
    };
    let one_in = match (n_spec, n) {
        (None, Some(_)) => return Err(SpecError::TooManyFields(token.to_string())),
        (None, None) => None,
        (Some(spec), Some(n)) => Some(parse_arg(spec.grammar, n, token)?),
        (Some(spec), None) => Some(parse_arg(spec.grammar, spec.default, token)?),
    };
    let stacks = stacks
        .or_else(|| StackSel::parse(default_stacks))
        .unwrap_or(StackSel::Both);
    if !stacks.letters().chars().all(|c| letters.contains(c)) {
        return Err(SpecError::Letters {
            token: token.to_string(),
            letters: letters
                .chars()
                .map(String::from)
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(KindArgs {
        name,
        stacks,
        arg,
        grammar: spec.map(|a| a.grammar),
        one_in,
    })
}

/// An argument `a` of `token` read by `grammar`.
fn parse_arg(grammar: ArgGrammar, a: &str, token: &str) -> Result<u64, SpecError> {
    match grammar {
        ArgGrammar::Hz { max } => parse_hz(a, token, max).map(u64::from),
        ArgGrammar::Duration => parse_ns(a).ok_or_else(|| SpecError::BadMin {
            value: a.to_string(),
            token: token.to_string(),
        }),
        ArgGrammar::Every { max } => a
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .map(u64::from)
            .ok_or_else(|| SpecError::BadEvery {
                value: a.to_string(),
                token: token.to_string(),
            }),
        ArgGrammar::Size { min } => crate::cli::parse_size(a)
            .ok()
            .filter(|n| *n >= min)
            .ok_or_else(|| SpecError::BadSize {
                value: a.to_string(),
                token: token.to_string(),
                min,
            }),
    }
}

/// The shortest exact text for a size in bytes (`512K`, `1M`, `1000`).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes > 0 && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A sampling frequency from 1 to `max` Hz.
fn parse_hz(a: &str, token: &str, max: u32) -> Result<u32, SpecError> {
    a.parse::<u32>()
        .ok()
        .filter(|hz| (1..=max).contains(hz))
        .ok_or_else(|| SpecError::BadRate {
            value: a.to_string(),
            token: token.to_string(),
            max,
        })
}

/// The fields of a kind's token after its name: stacks, argument, second argument (N).
type Fields<'a> = (Option<StackSel>, Option<&'a str>, Option<&'a str>);

/// Split `[STACKS][:ARG[:N]]`; a first field that is not a stack selection is the argument.
fn split_fields<'a>(token: &str, rest: &[&'a str]) -> Result<Fields<'a>, SpecError> {
    let bad = |s: &str| SpecError::BadStacks {
        value: s.to_string(),
        token: token.to_string(),
    };
    let digit = |x: &str| x.chars().next().is_some_and(|c| c.is_ascii_digit());
    match rest {
        [] => Ok((None, None, None)),
        [x] if digit(x) => Ok((None, Some(*x), None)),
        [x, n] if digit(x) => Ok((None, Some(*x), Some(*n))),
        [s] => Ok((Some(StackSel::parse(s).ok_or_else(|| bad(s))?), None, None)),
        [s, a] => Ok((
            Some(StackSel::parse(s).ok_or_else(|| bad(s))?),
            Some(*a),
            None,
        )),
        [s, a, n] => Ok((
            Some(StackSel::parse(s).ok_or_else(|| bad(s))?),
            Some(*a),
            Some(*n),
        )),
        _ => Err(SpecError::TooManyFields(token.to_string())),
    }
}

/// Parse a duration such as `0`, `250us`, `1ms`, `2s` or `1500ns` into nanoseconds (the
/// shared grammar, except that a bare number other than 0 is refused: in `switch:5` it would
/// read as seconds where nanoseconds might be meant).
pub fn parse_ns(s: &str) -> Option<u64> {
    if s != "0" && !s.contains(char::is_alphabetic) {
        return None;
    }
    crate::cli::parse_duration_ns(s).ok()
}

/// The shortest exact text for a duration in ns (`1ms`, `250us`, `0`).
pub fn format_ns(ns: u64) -> String {
    if ns == 0 {
        return "0".into();
    }
    for (mult, unit) in [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")] {
        if ns.is_multiple_of(mult) {
            return format!("{}{unit}", ns / mult);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(spec: &str, name: &str) -> KindArgs {
        *EventSpec::parse(spec).unwrap().get(name).unwrap()
    }

    fn profile(spec: &str) -> KindArgs {
        kind(spec, "profile")
    }

    #[test]
    fn kernel_symbols_are_needed_only_for_kernel_stacks() {
        let wants = |s: &str| EventSpec::parse(s).unwrap().wants_kernel_stacks();
        assert!(!wants("net:u,vfs:u,rss:u:1"));
        assert!(wants("net:u,block:k"));
        assert!(wants("state"), "state defaults to kernel stacks too");
        assert!(!wants("state:u"));
        assert!(wants("state"), "state defaults to kernel stacks too");
        assert!(!wants("state:u"));
        assert!(wants("switch"), "switch defaults to uk");
        assert!(wants(DEFAULT_SPEC));
    }

    /// `switch:STACKS:MIN:N`: its kept intervals sampled 1 in N; N written back only when
    /// not 1; no other kind takes a second argument.
    #[test]
    fn switch_takes_a_second_argument() {
        let s = kind("switch:uk:10ms:4", "switch");
        assert_eq!((s.arg, s.one_in), (Some(10_000_000), Some(4)));
        assert_eq!(kind("switch", "switch").one_in, Some(1));
        assert_eq!(kind("switch:2ms:8", "switch").one_in, Some(8));
        assert_eq!(kind("switch:2ms:8", "switch").stacks, StackSel::Both);
        let spec = EventSpec::parse("switch:k:1ms:1,wake:u:4").unwrap();
        assert_eq!(spec.normalized(), "switch:k:1ms,wake:u:4");
        let spec = EventSpec::parse("switch:k:1ms:16").unwrap();
        assert_eq!(spec.normalized(), "switch:k:1ms:16");
        assert_eq!(EventSpec::parse(&spec.normalized()).unwrap(), spec);
        assert_eq!(kind("profile:u:49", "profile").one_in, None);
        for bad in [
            "switch:uk:1ms:0",
            "switch:uk:1ms:x",
            "profile:u:49:2",
            "switch:u:1ms:2:3",
        ] {
            assert!(EventSpec::parse(bad).is_err(), "{bad} accepted");
        }
        let old = EventSpec::parse("switch:uk:1ms").unwrap();
        let new = EventSpec::parse("switch:uk:1ms:4").unwrap();
        assert!(old.takes_in_place(&new, |_| true).is_ok());
        assert!(old.takes_in_place(&new, |_| false).is_err());
    }

    #[test]
    fn n_takes_no_stacks() {
        let vfs = kind("vfs:n,block:n,switch:n:0", "vfs");
        assert_eq!(vfs.stacks, StackSel::None);
        assert_eq!(vfs.stacks.mask(), 0);
        assert!(!vfs.stacks.user() && !vfs.stacks.kernel() && !vfs.stacks.dwarf());
        let spec = EventSpec::parse("vfs:n,switch:n:0").unwrap();
        assert_eq!(spec.normalized(), "switch:n:0,vfs:n");
        assert!(!spec.wants_kernel_stacks());
    }

    #[test]
    fn defaults_and_forms() {
        assert_eq!(
            profile("profile"),
            KindArgs {
                name: "profile",
                stacks: StackSel::Both,
                arg: Some(99),
                grammar: Some(ArgGrammar::Hz { max: 10_000 }),
                one_in: None,
            }
        );
        assert_eq!(profile("profile:u").stacks, StackSel::User);
        assert_eq!(profile("profile:ku").stacks, StackSel::Both);
        assert_eq!(profile("profile:k:49").arg, Some(49));
        assert_eq!(profile("profile:199").arg, Some(199));
        assert_eq!(profile(" profile:u:99 ").stacks, StackSel::User);
        assert_eq!(
            EventSpec::parse(DEFAULT_SPEC).unwrap().normalized(),
            "profile:u:99,switch:uk:1ms,rss:u:29"
        );
        assert_eq!(profile("profile:u:1000").period_ns(), 1_000_000);
    }

    #[test]
    fn resource_events() {
        let s = EventSpec::parse("profile:u:99,switch:uk,rss:u:29,block:uk,vfs:u,net:u").unwrap();
        assert_eq!(
            s.normalized(),
            "profile:u:99,switch:uk:1ms,rss:u:29,block:uk,vfs:u,net:u"
        );
        let s = EventSpec::parse("switch:k:250us,rss:7,block,vfs,net").unwrap();
        assert_eq!(s.get("switch").unwrap().arg, Some(250_000));
        assert_eq!(s.get("switch").unwrap().stacks, StackSel::Kernel);
        assert_eq!(s.get("rss").unwrap().arg, Some(7));
        assert_eq!(s.get("block").unwrap().stacks, StackSel::Both);
        assert_eq!(s.get("vfs").unwrap().stacks, StackSel::User);
        assert_eq!(kind("switch:0", "switch").arg, Some(0));
        assert!(matches!(
            EventSpec::parse("switch:uk:fast").unwrap_err(),
            SpecError::BadMin { .. }
        ));
        assert!(matches!(
            EventSpec::parse("rss:u:0").unwrap_err(),
            SpecError::BadEvery { .. }
        ));
        assert!(matches!(
            EventSpec::parse("vfs:u:3").unwrap_err(),
            SpecError::NoArgument(..)
        ));
        assert_eq!(format_ns(1_500), "1500ns");
        assert_eq!(parse_ns("2s"), Some(2_000_000_000));
        assert_eq!(parse_ns("5"), None);
        assert_eq!(parse_ns("1.5"), None);
        assert_eq!(parse_ns("0"), Some(0));
        assert_eq!(parse_ns("1.5ms"), Some(1_500_000));
    }

    /// The registry documents each event's defaults (`-e` help); they are the parser's.
    #[test]
    fn registry_defaults_are_the_parser_defaults() {
        use crate::kinds::{self, Source};
        for k in kinds::recordable() {
            let Source::Event { stacks, arg, .. } = k.source else {
                continue;
            };
            let expected = match arg {
                Some(arg) => format!("{}:{stacks}:{}", k.name, arg.default),
                None => format!("{}:{stacks}", k.name),
            };
            // `wake` is recorded with `switch` only.
            let alone = if k.name == kind::WAKE {
                EventSpec::parse("switch,wake").unwrap().normalized()
            } else {
                EventSpec::parse(k.name).unwrap().normalized()
            };
            let alone = alone.strip_prefix("switch:uk:1ms,").unwrap_or(&alone);
            assert_eq!(alone, expected);
        }
        assert_eq!(
            event_names(),
            EventSpec::parse("profile,switch,wake,rss,block,vfs,net,uring,state,span,alloc")
                .unwrap()
                .names()
        );
    }

    /// A kind's stacks are the letters its registry entry allows (or `n`).
    #[test]
    fn stacks_are_the_letters_the_registry_allows() {
        assert_eq!(kind("uring", "uring").stacks, StackSel::User);
        assert_eq!(kind("uring:n", "uring").stacks, StackSel::None);
        assert_eq!(kind("uring:d", "uring").stacks, StackSel::Dwarf);
        for refused in ["uring:k", "uring:uk", "uring:dk", "switch,wake:d"] {
            let e = EventSpec::parse(refused).unwrap_err();
            assert!(matches!(e, SpecError::Letters { .. }), "{refused}: {e}");
        }
        assert_eq!(
            EventSpec::parse("uring:k").unwrap_err().to_string(),
            "`uring:k`: this event's stacks are u, d or n"
        );
    }

    #[test]
    fn wake_needs_switch_and_frame_pointer_stacks() {
        let e = |s: &str| EventSpec::parse(s).unwrap_err().to_string();
        assert!(e("wake").contains("add switch"), "{}", e("wake"));
        assert!(
            e("switch,wake:d").contains("`wake:d`"),
            "{}",
            e("switch,wake:d")
        );
        let s = EventSpec::parse("wake:uk,switch:k:0").unwrap();
        assert_eq!(s.normalized(), "switch:k:0,wake:uk:1");
    }

    #[test]
    fn alloc_event_takes_a_size() {
        let a = kind("alloc", "alloc");
        assert_eq!((a.stacks, a.arg), (StackSel::User, Some(512 << 10)));
        assert_eq!(kind("alloc:64K", "alloc").arg, Some(64 << 10));
        assert_eq!(kind("alloc:d:1000", "alloc").arg, Some(1000));
        assert_eq!(
            EventSpec::parse("alloc:u:1048576").unwrap().normalized(),
            "alloc:u:1M"
        );
        for bad in ["alloc:0", "alloc:u:64Q", "alloc:u:fast"] {
            let e = EventSpec::parse(bad).unwrap_err();
            assert!(matches!(e, SpecError::BadSize { .. }), "{bad}: {e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn state_event() {
        let s = kind("state", "state");
        assert_eq!((s.stacks, s.arg), (StackSel::Both, Some(20)));
        let s = kind("state:k:50", "state");
        assert_eq!(
            (s.stacks, s.arg, s.period_ns()),
            (StackSel::Kernel, Some(50), 20_000_000)
        );
        assert_eq!(
            EventSpec::parse("profile,state:u:100")
                .unwrap()
                .normalized(),
            "profile:uk:99,state:u:100"
        );
        for bad in ["state:0", "state:101", "state:uk:fast"] {
            assert!(
                matches!(
                    EventSpec::parse(bad),
                    Err(SpecError::BadRate { max: 100, .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn probes_in_order_with_the_other_events() {
        let s = EventSpec::parse("profile:u,tp:sched:sched_switch:k:count,usdt:/a:p:n").unwrap();
        assert_eq!(s.probes.len(), 2);
        assert_eq!(
            s.normalized(),
            "profile:u:99,tp:sched:sched_switch:k:count,usdt:/a:p:n:u"
        );
        assert_eq!(s.names(), ["profile", "tp", "usdt"]);
        assert!(s.wants_kernel_stacks());
        assert!(
            !EventSpec::parse("uretprobe:/a:f")
                .unwrap()
                .wants_kernel_stacks()
        );
        assert_eq!(
            EventSpec::parse("uretprobe:/a:f").unwrap().names(),
            ["uretprobe"]
        );
        assert_eq!(
            EventSpec::parse("tp:a:b,tp:a:b:k").unwrap_err(),
            SpecError::Duplicate("tp:a:b".into())
        );
        let many: Vec<String> = (0..=MAX_PROBES).map(|i| format!("tp:a:t{i}")).collect();
        assert_eq!(
            EventSpec::parse(&many.join(",")).unwrap_err(),
            SpecError::TooManyProbes
        );
    }

    #[test]
    fn errors_name_the_token() {
        let e = EventSpec::parse("profile:x:99").unwrap_err();
        assert!(e.to_string().contains("`x`") && e.to_string().contains("profile:x:99"));
        let e = EventSpec::parse("profile:u:0").unwrap_err();
        assert!(matches!(e, SpecError::BadRate { .. }), "{e}");
        let e = EventSpec::parse("profile:u:fast").unwrap_err();
        assert!(e.to_string().contains("`fast`"), "{e}");
        let e = EventSpec::parse("profile:u:100000").unwrap_err();
        assert!(matches!(e, SpecError::BadRate { .. }));
        let e = EventSpec::parse("profil:u").unwrap_err();
        assert!(e.to_string().contains("`profil`"), "{e}");
        assert_eq!(
            EventSpec::parse("profile,profile:u").unwrap_err(),
            SpecError::Duplicate("profile".into())
        );
        assert!(matches!(
            EventSpec::parse("profile:u:9:9").unwrap_err(),
            SpecError::TooManyFields(_)
        ));
        assert!(matches!(
            EventSpec::parse("profile,").unwrap_err(),
            SpecError::EmptyToken(_)
        ));
        assert_eq!(EventSpec::parse("").unwrap_err(), SpecError::Empty);
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
