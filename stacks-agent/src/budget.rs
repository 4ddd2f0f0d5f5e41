//! The CPU budget (`budget_cpu`, docs/agent.md#the-cpu-budget): what the recording costs the
//! host — the three stages' CPU time (from /proc and wait4) plus the recorder's BPF programs'
//! run time (the kernel's `run_time_ns` of each program the recorder holds, read from its
//! `/proc/PID/fdinfo`) — against a fraction of the host's CPUs, and the ladder of event
//! specifications it sheds along, made from the configured `-e` in a fixed order. When to take
//! a level is the controller's (controller.rs); the supervisor applies a level by stopping the
//! pipeline in order (the recorder drains, the packer finishes its set: no row is lost) and
//! starting it again with the level's specification, which each file set carries
//! (`stacks.events`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// What the first level divides the rates by.
const RATE_DIVISOR: u64 = 4;
/// Probe prefixes of `-e` (their fields are not `NAME[:STACKS][:ARG]`).
const PROBE_PREFIXES: [&str; 4] = ["tp", "uprobe", "uretprobe", "usdt"];

/// One level of the ladder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Level {
    /// stacks-record's `-e` at this level.
    pub events: String,
    /// What this level sheds, for the log (the configured level: `as configured`).
    pub step: &'static str,
}

/// A token of `-e`: a kind `NAME[:STACKS][:ARG]` or a probe.
#[derive(Debug, Clone)]
enum Token {
    Kind {
        name: String,
        stacks: Option<String>,
        arg: Option<String>,
    },
    Probe(String),
}

impl Token {
    fn parse(t: &str) -> Token {
        let fields: Vec<&str> = t.split(':').collect();
        if PROBE_PREFIXES.contains(&fields[0]) {
            return Token::Probe(t.to_string());
        }
        let name = fields[0].to_string();
        let digit = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_digit());
        let (stacks, arg) = match &fields[1..] {
            [] => (None, None),
            [x] if digit(x) => (None, Some(x.to_string())),
            [s] => (Some(s.to_string()), None),
            [s, a, ..] => (Some(s.to_string()), Some(a.to_string())),
        };
        Token::Kind { name, stacks, arg }
    }

    fn text(&self) -> String {
        match self {
            Token::Probe(p) => p.clone(),
            Token::Kind { name, stacks, arg } => {
                let mut s = name.clone();
                if let Some(st) = stacks {
                    s.push(':');
                    s.push_str(st);
                }
                if let Some(a) = arg {
                    s.push(':');
                    s.push_str(a);
                }
                s
            }
        }
    }

    fn name(&self) -> &str {
        match self {
            Token::Kind { name, .. } => name,
            Token::Probe(_) => "probe",
        }
    }
}

fn join(tokens: &[Token]) -> String {
    tokens.iter().map(Token::text).collect::<Vec<_>>().join(",")
}

/// The ladder of `events` (a `-e` the recorder accepted): the configured level first, then,
/// cumulatively and skipping a step that changes nothing or would leave nothing to record:
/// 1. `switch`'s MIN raised to 10 ms (the kinds whose argument is a MIN: shorter intervals are
///    folded, their time and count kept; wakeups are recorded for the intervals kept);
/// 2. the sampled kinds (`profile`, `state`) at a quarter of their rate (at least 1 Hz);
/// 3. `switch`'s MIN raised to 100 ms;
/// 4. the kinds of the IO ring (`vfs`, `net`, `block`, `uring`, `rss`) without stacks;
/// 5. the IO kinds stopped;
/// 6. everything but the sampled kinds stopped (`switch`, `wake`, probes, spans, `alloc`).
///
/// Steps 1–3 change only arguments the recorder takes in place ([`in_place`]); 4–6 restart
/// it. Which kinds are sampled, which are IO and which take a MIN is the registry's
/// (`stacks_stream::kinds`: each kind's `sampling`, `ring` and argument grammar).
pub(crate) fn ladder(events: &str) -> Vec<Level> {
    ladder_of(events, stacks_stream::kinds::ALL)
}

/// MINs of the ladder's steps 1 and 3, ns.
const MIN_STEPS_NS: [u64; 2] = [10_000_000, 100_000_000];

/// [`ladder`] with the kinds of registry `kinds`.
fn ladder_of(events: &str, kinds: &[stacks_stream::kinds::Kind]) -> Vec<Level> {
    use stacks_stream::kinds::{Ring, Sampling};
    let declared = |name: &str| kinds.iter().find(|k| k.name == name);
    let rate = |name: &str| declared(name).is_some_and(|k| k.sampling != Sampling::Event);
    let io = |name: &str| declared(name).is_some_and(|k| k.ring == Some(Ring::Io));
    let mut tokens: Vec<Token> = events
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(Token::parse)
        .collect();
    let mut levels = vec![Level {
        events: join(&tokens),
        step: "as configured",
    }];
    let mut take = |tokens: &[Token], step: &'static str| {
        let events = join(tokens);
        if !tokens.is_empty() && levels.last().is_some_and(|l| l.events != events) {
            levels.push(Level { events, step });
        }
    };
    let raise_min = |tokens: &mut Vec<Token>, to_ns: u64| {
        for t in tokens.iter_mut() {
            if let Token::Kind { name, stacks, arg } = t
                && let Some(a) = min_arg(declared(name))
            {
                let now =
                    stacks_stream::cli::parse_duration_ns(arg.as_deref().unwrap_or(a.default))
                        .unwrap_or(0);
                if now < to_ns {
                    *stacks = Some(
                        stacks
                            .clone()
                            .unwrap_or_else(|| default_stacks(declared(name))),
                    );
                    *arg = Some(format!("{}ms", to_ns / 1_000_000));
                }
            }
        }
    };
    raise_min(&mut tokens, MIN_STEPS_NS[0]);
    take(&tokens, "switch's MIN at 10ms");
    for t in &mut tokens {
        if let Token::Kind { name, stacks, arg } = t
            && rate(name)
        {
            let default = declared(name)
                .and_then(|k| match k.source {
                    stacks_stream::kinds::Source::Event { arg: Some(a), .. } => Some(a.default),
                    _ => None,
                })
                .unwrap_or("20");
            let hz: u64 = arg.as_deref().unwrap_or(default).parse().unwrap_or(20);
            // The rate is an explicit third field: `NAME:STACKS:HZ`.
            let sel = stacks
                .clone()
                .unwrap_or_else(|| default_stacks(declared(name)));
            *stacks = Some(sel);
            *arg = Some((hz / RATE_DIVISOR).max(1).to_string());
        }
    }
    take(&tokens, "profile and state at a quarter of their rate");
    raise_min(&mut tokens, MIN_STEPS_NS[1]);
    take(&tokens, "switch's MIN at 100ms");
    for t in &mut tokens {
        if let Token::Kind { name, stacks, .. } = t
            && io(name)
        {
            *stacks = Some("n".into());
        }
    }
    take(&tokens, "IO kinds without stacks");
    tokens.retain(|t| !io(t.name()));
    take(&tokens, "IO kinds stopped");
    tokens.retain(|t| rate(t.name()));
    take(&tokens, "all but profile and state stopped");
    levels
}

/// The argument of `kind` when it is a MIN (a duration: shorter events are folded).
fn min_arg(kind: Option<&stacks_stream::kinds::Kind>) -> Option<stacks_stream::kinds::Arg> {
    match kind?.source {
        stacks_stream::kinds::Source::Event { arg: Some(a), .. }
            if a.grammar == stacks_stream::kinds::ArgGrammar::Duration =>
        {
            Some(a)
        }
        _ => None,
    }
}

/// Whether the recorder takes `to` in place of `from` (stacks-record `--control`): the same
/// kinds with the same stacks and the same probes, only the rates of sampled kinds and the MINs
/// differing (stacks-record's `record::control::IN_PLACE`: `profile`, `state`, `switch`,
/// `uring`).
pub(crate) fn in_place(from: &str, to: &str) -> bool {
    in_place_of(from, to, stacks_stream::kinds::ALL)
}

fn in_place_of(from: &str, to: &str, kinds: &[stacks_stream::kinds::Kind]) -> bool {
    let declared = |name: &str| kinds.iter().find(|k| k.name == name);
    let tokens = |s: &str| -> Vec<Token> {
        s.split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(Token::parse)
            .collect()
    };
    let (a, b) = (tokens(from), tokens(to));
    a.len() == b.len()
        && a.iter().zip(&b).all(|pair| match pair {
            (Token::Probe(x), Token::Probe(y)) => x == y,
            (
                Token::Kind {
                    name: n1,
                    stacks: s1,
                    arg: a1,
                },
                Token::Kind {
                    name: n2,
                    stacks: s2,
                    arg: a2,
                },
            ) => {
                let k = declared(n1);
                let stacks = |s: &Option<String>| s.clone().unwrap_or_else(|| default_stacks(k));
                let tunable = k
                    .is_some_and(|k| k.sampling != stacks_stream::kinds::Sampling::Event)
                    || min_arg(k).is_some();
                n1 == n2 && stacks(s1) == stacks(s2) && (a1 == a2 || tunable)
            }
            _ => false,
        })
}

/// The stacks a kind captures when `-e` does not say (the registry's default).
fn default_stacks(kind: Option<&stacks_stream::kinds::Kind>) -> String {
    match kind.map(|k| k.source) {
        Some(stacks_stream::kinds::Source::Event { stacks, .. }) => stacks.to_string(),
        _ => "uk".to_string(),
    }
}

/// The budget: its ladder and the controller choosing a level of it.
#[derive(Debug)]
pub(crate) struct Budget {
    pub levels: Vec<Level>,
    pub ctl: crate::controller::Controller,
}

impl Budget {
    pub(crate) fn new(limit: f64, levels: Vec<Level>, timing: crate::controller::Timing) -> Budget {
        // A flood goes first to the last level the recorder takes in place.
        let gentle = levels
            .iter()
            .rposition(|l| in_place(&levels[0].events, &l.events))
            .unwrap_or(0);
        let ctl = crate::controller::Controller::new(limit, levels.len(), host_cpus(), timing)
            .flood_to(gentle);
        Budget { levels, ctl }
    }

    /// The events of the level taken.
    pub(crate) fn events(&self) -> &str {
        &self.levels[self.ctl.level].events
    }
}

/// `budget_cpu`: a percentage of the host's CPUs (`1%`, `0.5%`), as a fraction.
pub(crate) fn parse_percent(s: &str) -> Result<f64, String> {
    let n = s
        .trim()
        .strip_suffix('%')
        .ok_or_else(|| format!("`{s}`: a percentage of the host's CPUs, such as 1%"))?;
    let v: f64 = n
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: a percentage of the host's CPUs, such as 1%"))?;
    if !(v > 0.0 && v <= 100.0) {
        return Err(format!("`{s}`: between 0% (excluded) and 100%"));
    }
    Ok(v / 100.0)
}

/// The host's CPUs (online).
pub(crate) fn host_cpus() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 { n as f64 } else { 1.0 }
}

/// Run time in ns of the BPF programs process `pid` holds open (each program once, by its
/// id), from its `/proc/PID/fdinfo`; counted by the kernel only while BPF run-time statistics
/// are on ([`enable_bpf_stats`]).
pub(crate) fn bpf_run_ns(pid: i32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    let mut seen = std::collections::BTreeSet::new();
    let mut total = 0u64;
    for entry in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(ns)) = (field("prog_id:"), field("run_time_ns:"))
            && seen.insert(id)
        {
            total += ns;
        }
    }
    Some(total)
}

/// BPF run-time statistics on for as long as the returned descriptor is held
/// (`BPF_ENABLE_STATS`, CAP_SYS_ADMIN); `None` when `kernel.bpf_stats_enabled` is 1 already.
pub(crate) fn enable_bpf_stats() -> io::Result<Option<OwnedFd>> {
    if std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() == "1")
    {
        return Ok(None);
    }
    const BPF_ENABLE_STATS: libc::c_long = 32;
    const BPF_STATS_RUN_TIME: u32 = 0;
    // union bpf_attr's enable_stats: one u32 (the rest zero).
    let attr = [BPF_STATS_RUN_TIME, 0, 0, 0];
    // SAFETY: bpf(2) reads `size` bytes of attr, which we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_ENABLE_STATS,
            attr.as_ptr(),
            std::mem::size_of_val(&attr) as u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(spec: &str) -> Vec<String> {
        ladder(spec).into_iter().map(|l| l.events).collect()
    }

    #[test]
    fn the_ladder_sheds_in_the_documented_order() {
        assert_eq!(
            events("profile:u:49,state:uk:5,switch:uk,vfs:u,tp:sched:sched_process_exec:u:count"),
            [
                "profile:u:49,state:uk:5,switch:uk,vfs:u,tp:sched:sched_process_exec:u:count",
                "profile:u:49,state:uk:5,switch:uk:10ms,vfs:u,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1,switch:uk:10ms,vfs:u,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1,switch:uk:100ms,vfs:u,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1,switch:uk:100ms,vfs:n,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1,switch:uk:100ms,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1",
            ]
        );
        // Defaults made explicit; steps that change nothing are not levels.
        assert_eq!(
            events("profile,vfs:u"),
            [
                "profile,vfs:u",
                "profile:uk:24,vfs:u",
                "profile:uk:24,vfs:n",
                "profile:uk:24"
            ]
        );
        // Nothing left to record is not a level.
        assert_eq!(events("vfs:u"), ["vfs:u", "vfs:n"]);
        assert_eq!(events("profile:u:2"), ["profile:u:2", "profile:u:1"]);
        assert_eq!(events("profile:u:1"), ["profile:u:1"]);
        assert_eq!(
            events("profile:u:1,switch"),
            [
                "profile:u:1,switch",
                "profile:u:1,switch:uk:10ms",
                "profile:u:1,switch:uk:100ms",
                "profile:u:1"
            ]
        );
    }

    /// A kind added to the registry is shed by what it declares, with no list here to extend:
    /// `uring` (IO ring) like `vfs`, and a made-up kind of each class.
    #[test]
    fn sheds_follow_the_registry() {
        use stacks_stream::kinds::{ALL, Ring, Sampling};
        assert_eq!(
            events("switch,uring:u"),
            [
                "switch,uring:u",
                "switch:uk:10ms,uring:u:10ms",
                "switch:uk:100ms,uring:u:100ms",
                "switch:uk:100ms,uring:n:100ms",
                "switch:uk:100ms"
            ]
        );
        // A MIN over a step's is kept.
        assert_eq!(
            events("switch:k:50ms,profile:u:8"),
            [
                "switch:k:50ms,profile:u:8",
                "switch:k:50ms,profile:u:2",
                "switch:k:100ms,profile:u:2",
                "profile:u:2"
            ]
        );
        let vfs = *stacks_stream::kinds::get("vfs").unwrap();
        let state = *stacks_stream::kinds::get("state").unwrap();
        let mut kinds = ALL.to_vec();
        kinds.push(stacks_stream::kinds::Kind {
            name: "newio",
            ..vfs
        });
        kinds.push(stacks_stream::kinds::Kind {
            name: "newsampled",
            ring: Some(Ring::Samples),
            sampling: Sampling::Passes,
            ..state
        });
        let levels: Vec<String> = ladder_of("newsampled:u:8,switch,newio:u", &kinds)
            .into_iter()
            .map(|l| l.events)
            .collect();
        assert_eq!(
            levels,
            [
                "newsampled:u:8,switch,newio:u",
                "newsampled:u:8,switch:uk:10ms,newio:u",
                "newsampled:u:2,switch:uk:10ms,newio:u",
                "newsampled:u:2,switch:uk:100ms,newio:u",
                "newsampled:u:2,switch:uk:100ms,newio:n",
                "newsampled:u:2,switch:uk:100ms",
                "newsampled:u:2",
            ]
        );
    }

    /// The levels the recorder takes in place are those changing rates and MINs only; the
    /// ladder's first levels are, from the IO steps on they are not.
    #[test]
    fn rates_and_mins_change_in_place() {
        let l = events("profile:u:49,state:uk:5,switch:uk,wake:u,vfs:u");
        let in_place_from_0: Vec<bool> = l.iter().map(|e| in_place(&l[0], e)).collect();
        assert_eq!(
            in_place_from_0,
            [true, true, true, true, false, false, false],
            "{l:?}"
        );
        assert!(in_place("profile,switch", "profile:uk:12,switch:uk:10ms"));
        assert!(!in_place("profile:u", "profile:uk"));
        assert!(!in_place("vfs:u", "vfs:n"));
        assert!(!in_place("switch,wake", "switch"));
        assert!(!in_place("profile,tp:a:b", "profile,tp:a:c"));
        assert!(!in_place("rss:u:29", "rss:u:7"));
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("1%"), Ok(0.01));
        assert_eq!(parse_percent(" 0.5 %"), Ok(0.005));
        for bad in ["1", "0%", "-1%", "101%", "a%"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }
}
