//! The event specification grammar shared by every event: `NAME[:STACKS][:ARG]`, comma-separated.

use std::fmt;

use crate::probes::spec::{MAX_PROBES, Probe, ProbeType};

/// Which stacks an event captures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackSel {
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
            StackSel::User => 1,
            StackSel::Kernel => 2,
            StackSel::Both => 3,
            StackSel::Dwarf => 1 | 4,
            StackSel::DwarfKernel => 1 | 2 | 4,
        }
    }

    pub fn user(self) -> bool {
        self != StackSel::Kernel
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

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "u" => Some(StackSel::User),
            "k" => Some(StackSel::Kernel),
            "uk" | "ku" => Some(StackSel::Both),
            "d" => Some(StackSel::Dwarf),
            "dk" | "kd" => Some(StackSel::DwarfKernel),
            _ => None,
        }
    }
}

impl fmt::Display for StackSel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StackSel::User => "u",
            StackSel::Kernel => "k",
            StackSel::Both => "uk",
            StackSel::Dwarf => "d",
            StackSel::DwarfKernel => "dk",
        })
    }
}

/// `profile[:STACKS][:HZ]`: CPU samples from the cpu-clock perf event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub stacks: StackSel,
    pub hz: u32,
}

impl Profile {
    pub const DEFAULT_HZ: u32 = stacks_stream::kinds::PROFILE_DEFAULT_HZ;
    pub const MAX_HZ: u32 = 10_000;

    /// The sampling period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.hz)
    }
}

/// `switch[:STACKS][:MIN]`: off-CPU intervals; shorter than MIN are folded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub stacks: StackSel,
    pub min_ns: u64,
}

impl Switch {
    pub const DEFAULT_MIN_NS: u64 = 1_000_000;
}

/// `rss[:STACKS][:N]`: RSS growth, every Nth growth event per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rss {
    pub stacks: StackSel,
    pub every: u32,
}

impl Rss {
    pub const DEFAULT_EVERY: u32 = 29;
}

/// `state[:STACKS][:HZ]`: every live thread's state, HZ times a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub stacks: StackSel,
    pub hz: u32,
}

impl State {
    pub const DEFAULT_HZ: u32 = 20;
    pub const MAX_HZ: u32 = 100;

    /// The sampling period in nanoseconds: what one row stands for.
    pub fn period_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.hz)
    }
}

/// Events with only a stack selection: `block`, `vfs`, `net`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plain {
    pub stacks: StackSel,
}

/// A parsed `-e` specification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventSpec {
    pub profile: Option<Profile>,
    pub switch: Option<Switch>,
    pub rss: Option<Rss>,
    pub block: Option<Plain>,
    pub vfs: Option<Plain>,
    pub net: Option<Plain>,
    pub state: Option<State>,
    /// `span[:STACKS]`: each entry of a `tracing` span (tracing-stacks' USDT probes).
    pub span: Option<Plain>,
    /// Probes (`tp:`, `uprobe:`, `uretprobe:`, `usdt:`), in the order given: a probe's index
    /// is its BPF cookie.
    pub probes: Vec<Probe>,
}

/// The specification used when `-e` is not given.
pub const DEFAULT_SPEC: &str = "profile:u:99,rss:u:29,switch:uk";

/// The programs of `switch` with `d` stacks, besides `switch`'s own (see [`EventSpec::names`]).
pub const SWITCH_DWARF: &str = "switch:d";

/// Events whose user stacks may be unwound with CFI (`d`), per the registry.
pub fn dwarf_kinds() -> Vec<&'static str> {
    use stacks_stream::kinds::{ALL, Source};
    ALL.iter()
        .filter(|k| matches!(k.source, Source::Event { dwarf: true, .. }))
        .map(|k| k.name)
        .collect()
}

/// Event names this build can record: the registry's recordable kinds.
pub fn event_names() -> Vec<&'static str> {
    stacks_stream::kinds::recordable().map(|k| k.name).collect()
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
    #[error("`{token}`: {name} does not support d (DWARF user stacks); {supported} do")]
    NoDwarf {
        token: String,
        name: String,
        supported: String,
    },
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
    #[error("`{0}` takes no argument: use {1}[:STACKS]")]
    NoArgument(String, String),
    #[error("too many fields in `{0}`: expected NAME[:STACKS][:ARG]")]
    TooManyFields(String),
    #[error("event `{0}` given twice")]
    Duplicate(String),
    #[error("bad probe `{token}`: expected {form}")]
    ProbeForm { token: String, form: String },
    #[error("more than {MAX_PROBES} probes")]
    TooManyProbes,
}

impl EventSpec {
    /// Parse a comma-separated list of `NAME[:STACKS][:ARG]`.
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
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
            let fields: Vec<&str> = token.split(':').collect();
            let name = fields[0];
            let (stacks, arg) = split_fields(token, &fields[1..])?;
            if stacks.is_some_and(StackSel::dwarf) && !dwarf_kinds().contains(&name) {
                return Err(SpecError::NoDwarf {
                    token: token.to_string(),
                    name: name.to_string(),
                    supported: dwarf_kinds().join(", "),
                });
            }
            let dup = || SpecError::Duplicate(name.to_string());
            match name {
                "profile" => {
                    let hz = match arg {
                        None => Profile::DEFAULT_HZ,
                        Some(a) => parse_hz(a, token, Profile::MAX_HZ)?,
                    };
                    let p = Profile {
                        stacks: stacks.unwrap_or(StackSel::Both),
                        hz,
                    };
                    set(&mut out.profile, p).map_err(|_| dup())?;
                }
                "state" => {
                    let hz = match arg {
                        None => State::DEFAULT_HZ,
                        Some(a) => parse_hz(a, token, State::MAX_HZ)?,
                    };
                    let st = State {
                        stacks: stacks.unwrap_or(StackSel::Both),
                        hz,
                    };
                    set(&mut out.state, st).map_err(|_| dup())?;
                }
                "switch" => {
                    let min_ns = match arg {
                        None => Switch::DEFAULT_MIN_NS,
                        Some(a) => parse_ns(a).ok_or_else(|| SpecError::BadMin {
                            value: a.to_string(),
                            token: token.to_string(),
                        })?,
                    };
                    let s = Switch {
                        stacks: stacks.unwrap_or(StackSel::Both),
                        min_ns,
                    };
                    set(&mut out.switch, s).map_err(|_| dup())?;
                }
                "rss" => {
                    let every = match arg {
                        None => Rss::DEFAULT_EVERY,
                        Some(a) => a
                            .parse::<u32>()
                            .ok()
                            .filter(|n| (1..=1_000_000).contains(n))
                            .ok_or_else(|| SpecError::BadEvery {
                                value: a.to_string(),
                                token: token.to_string(),
                            })?,
                    };
                    let r = Rss {
                        stacks: stacks.unwrap_or(StackSel::User),
                        every,
                    };
                    set(&mut out.rss, r).map_err(|_| dup())?;
                }
                "block" | "vfs" | "net" | "span" => {
                    if arg.is_some() {
                        return Err(SpecError::NoArgument(token.to_string(), name.to_string()));
                    }
                    let default = if name == "block" {
                        StackSel::Both
                    } else {
                        StackSel::User
                    };
                    let p = Plain {
                        stacks: stacks.unwrap_or(default),
                    };
                    let slot = match name {
                        "block" => &mut out.block,
                        "vfs" => &mut out.vfs,
                        "span" => &mut out.span,
                        _ => &mut out.net,
                    };
                    set(slot, p).map_err(|_| dup())?;
                }
                name => {
                    return Err(SpecError::UnknownEvent {
                        name: name.to_string(),
                        token: token.to_string(),
                        available: format!(
                            "{}, tp:, uprobe:, uretprobe:, usdt:",
                            event_names().join(", ")
                        ),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The normalized text form, e.g. `profile:uk:99,switch:uk:1ms`: stored in the stream
    /// metadata.
    pub fn normalized(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.profile {
            parts.push(format!("profile:{}:{}", p.stacks, p.hz));
        }
        if let Some(s) = &self.switch {
            parts.push(format!("switch:{}:{}", s.stacks, format_ns(s.min_ns)));
        }
        if let Some(r) = &self.rss {
            parts.push(format!("rss:{}:{}", r.stacks, r.every));
        }
        for (name, p) in [
            ("block", &self.block),
            ("vfs", &self.vfs),
            ("net", &self.net),
        ] {
            if let Some(p) = p {
                parts.push(format!("{name}:{}", p.stacks));
            }
        }
        if let Some(s) = &self.state {
            parts.push(format!("state:{}:{}", s.stacks, s.hz));
        }
        if let Some(s) = &self.span {
            parts.push(format!("span:{}", s.stacks));
        }
        parts.extend(self.probes.iter().map(Probe::normalized));
        parts.join(",")
    }
}

impl EventSpec {
    /// Names of the events requested.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (name, on) in [
            ("profile", self.profile.is_some()),
            ("switch", self.switch.is_some()),
            ("rss", self.rss.is_some()),
            ("block", self.block.is_some()),
            ("vfs", self.vfs.is_some()),
            ("net", self.net.is_some()),
            ("state", self.state.is_some()),
            ("span", self.span.is_some()),
        ] {
            if on {
                v.push(name);
            }
        }
        // `switch:d` takes user stacks at the return from system calls.
        if self.switch.is_some_and(|s| s.stacks.dwarf()) {
            v.push(SWITCH_DWARF);
        }
        // The probe programs, by the probe types used.
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
        [
            self.profile.map(|p| p.stacks),
            self.switch.map(|s| s.stacks),
            self.rss.map(|r| r.stacks),
            self.block.map(|b| b.stacks),
            self.vfs.map(|v| v.stacks),
            self.net.map(|n| n.stacks),
            self.state.map(|t| t.stacks),
            self.span.map(|s| s.stacks),
        ]
        .into_iter()
        .flatten()
        .chain(self.probes.iter().map(|p| p.stacks))
        .any(StackSel::kernel)
    }
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

fn set<T>(slot: &mut Option<T>, value: T) -> Result<(), ()> {
    if slot.is_some() {
        return Err(());
    }
    *slot = Some(value);
    Ok(())
}

/// Split `[STACKS][:ARG]`; a lone field that is not a stack selection is the argument.
fn split_fields<'a>(
    token: &str,
    rest: &[&'a str],
) -> Result<(Option<StackSel>, Option<&'a str>), SpecError> {
    let bad = |s: &str| SpecError::BadStacks {
        value: s.to_string(),
        token: token.to_string(),
    };
    match rest {
        [] => Ok((None, None)),
        [x] if x.chars().next().is_some_and(|c| c.is_ascii_digit()) => Ok((None, Some(*x))),
        [s] => Ok((Some(StackSel::parse(s).ok_or_else(|| bad(s))?), None)),
        [s, a] => Ok((Some(StackSel::parse(s).ok_or_else(|| bad(s))?), Some(*a))),
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
    stacks_stream::cli::parse_duration_ns(s).ok()
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

    fn profile(spec: &str) -> Profile {
        EventSpec::parse(spec).unwrap().profile.unwrap()
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

    #[test]
    fn defaults_and_forms() {
        assert_eq!(
            profile("profile"),
            Profile {
                stacks: StackSel::Both,
                hz: 99
            }
        );
        assert_eq!(profile("profile:u").stacks, StackSel::User);
        assert_eq!(profile("profile:ku").stacks, StackSel::Both);
        assert_eq!(profile("profile:k:49").hz, 49);
        assert_eq!(profile("profile:199").hz, 199);
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
        assert_eq!(s.switch.unwrap().min_ns, 250_000);
        assert_eq!(s.switch.unwrap().stacks, StackSel::Kernel);
        assert_eq!(s.rss.unwrap().every, 7);
        assert_eq!(s.block.unwrap().stacks, StackSel::Both);
        assert_eq!(s.vfs.unwrap().stacks, StackSel::User);
        assert_eq!(
            EventSpec::parse("switch:0").unwrap().switch.unwrap().min_ns,
            0
        );
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
        use stacks_stream::kinds::{self, Source};
        for k in kinds::recordable() {
            let Source::Event { stacks, arg, .. } = k.source else {
                continue;
            };
            let expected = match arg {
                Some(arg) => format!("{}:{stacks}:{}", k.name, arg.default),
                None => format!("{}:{stacks}", k.name),
            };
            assert_eq!(EventSpec::parse(k.name).unwrap().normalized(), expected);
        }
        assert_eq!(
            event_names(),
            EventSpec::parse("profile,switch,rss,block,vfs,net,state,span")
                .unwrap()
                .names()
        );
    }

    #[test]
    fn state_event() {
        let s = EventSpec::parse("state").unwrap().state.unwrap();
        assert_eq!((s.stacks, s.hz), (StackSel::Both, 20));
        let s = EventSpec::parse("state:k:50").unwrap().state.unwrap();
        assert_eq!(
            (s.stacks, s.hz, s.period_ns()),
            (StackSel::Kernel, 50, 20_000_000)
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
}
