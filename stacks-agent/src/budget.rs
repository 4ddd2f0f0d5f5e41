//! The CPU budget (`budget_cpu`, docs/agent.md#the-cpu-budget): what the recording costs the
//! host — the three stages' CPU time (from /proc and wait4) plus the recorder's BPF programs'
//! run time (the kernel's `run_time_ns` of each program the recorder holds, read from its
//! `/proc/PID/fdinfo`) — measured each second against a fraction of the host's CPUs. Over
//! budget for 10 s: the next level of a ladder of event specifications is taken (shed; the
//! last level at once when over twice the budget); under budget for a minute: the level
//! before it (restore). The ladder is made from the configured
//! `-e` in a fixed order; the supervisor applies a level by stopping the pipeline in order
//! (the recorder drains, the packer finishes its set: no row is lost) and starting it again
//! with the level's specification, which each file set carries (`stacks.events`).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Over budget for this long: shed a level.
pub(crate) const SHED_AFTER: Duration = Duration::from_secs(10);
/// Over this many times the budget for [`SHED_AFTER`]: straight to the last level (a flood
/// that large is not met by one step, and each step costs a pipeline restart).
pub(crate) const FLOOD_FACTOR: f64 = 2.0;
/// Under budget for this long: restore a level.
pub(crate) const RESTORE_AFTER: Duration = Duration::from_secs(60);
/// The first seconds of a pipeline (the stages starting: reading symbols, loading BPF) are
/// not measured: a one-off cost, which would otherwise shed at every start.
pub(crate) const SETTLE: Duration = Duration::from_secs(3);

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
/// 1. the sampled kinds (`profile`, `state`) at a quarter of their rate (at least 1 Hz);
/// 2. the kinds of the IO ring (`vfs`, `net`, `block`, `uring`, `rss`) without stacks;
/// 3. the IO kinds stopped;
/// 4. everything but the sampled kinds stopped (`switch`, `wake`, probes, spans, `alloc`).
///
/// Which kinds are sampled and which are IO is the registry's (`stacks_stream::kinds`: each
/// kind's `sampling` and `ring`).
pub(crate) fn ladder(events: &str) -> Vec<Level> {
    ladder_of(events, stacks_stream::kinds::ALL)
}

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

/// The stacks a kind captures when `-e` does not say (the registry's default).
fn default_stacks(kind: Option<&stacks_stream::kinds::Kind>) -> String {
    match kind.map(|k| k.source) {
        Some(stacks_stream::kinds::Source::Event { stacks, .. }) => stacks.to_string(),
        _ => "uk".to_string(),
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

/// A level change the budget asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Change {
    /// Over budget for [`SHED_AFTER`]: take level `to` (one more, or the last when over
    /// [`FLOOD_FACTOR`] times the budget), `used` = the window's cost.
    Shed { to: usize, used: f64 },
    /// Under budget for [`RESTORE_AFTER`]: take level `to` (one fewer).
    Restore { to: usize, used: f64 },
}

/// The budget's state: the limit, the ladder, the level taken, the recent cost.
#[derive(Debug)]
pub(crate) struct Budget {
    /// The limit as a fraction of the host's CPUs.
    pub limit: f64,
    pub levels: Vec<Level>,
    pub level: usize,
    cpus: f64,
    /// Cost per second (fraction of the host's CPUs) since the pipeline settled, newest last.
    window: VecDeque<(Instant, f64)>,
    /// The cumulative cost (CPU seconds) at the last observation.
    last: Option<(Instant, f64)>,
    settled_at: Option<Instant>,
}

impl Budget {
    pub(crate) fn new(limit: f64, levels: Vec<Level>, cpus: f64) -> Budget {
        Budget {
            limit,
            levels,
            level: 0,
            cpus,
            window: VecDeque::new(),
            last: None,
            settled_at: None,
        }
    }

    /// The events of the level taken.
    pub(crate) fn events(&self) -> &str {
        &self.levels[self.level].events
    }

    /// A pipeline started at `now`: measuring starts over once it settled.
    pub(crate) fn pipeline_started(&mut self, now: Instant) {
        self.window.clear();
        self.last = None;
        self.settled_at = Some(now + SETTLE);
    }

    /// The mean cost over the last `span` (none until the window covers it).
    fn mean(&self, now: Instant, span: Duration) -> Option<f64> {
        let start = self.settled_at?;
        if now < start + span {
            return None;
        }
        let recent: Vec<f64> = self
            .window
            .iter()
            .filter(|(t, _)| now.duration_since(*t) <= span)
            .map(|(_, v)| *v)
            .collect();
        (!recent.is_empty()).then(|| recent.iter().sum::<f64>() / recent.len() as f64)
    }

    /// The cost over the last [`SHED_AFTER`], as a fraction of the host's CPUs (the
    /// `stacks_agent_budget_used_ratio` gauge).
    pub(crate) fn used(&self, now: Instant) -> Option<f64> {
        let start = self.settled_at?;
        let span = now.duration_since(start).min(SHED_AFTER);
        if span.is_zero() {
            return None;
        }
        self.mean(now, span)
    }

    /// The cumulative cost at `now` is `seconds` (the stages' CPU seconds plus BPF run time):
    /// the change to make, if any.
    pub(crate) fn observe(&mut self, now: Instant, seconds: f64) -> Option<Change> {
        let settled = self.settled_at.is_some_and(|s| now >= s);
        if let Some((t, s)) = self.last.filter(|_| settled) {
            let dt = now.duration_since(t).as_secs_f64();
            if dt > 0.0 {
                self.window
                    .push_back((now, ((seconds - s).max(0.0) / dt) / self.cpus));
            }
        }
        self.last = Some((now, seconds));
        while self
            .window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RESTORE_AFTER)
        {
            self.window.pop_front();
        }
        if self.level + 1 < self.levels.len()
            && let Some(used) = self.mean(now, SHED_AFTER)
            && used > self.limit
        {
            let to = if used > self.limit * FLOOD_FACTOR {
                self.levels.len() - 1
            } else {
                self.level + 1
            };
            return Some(Change::Shed { to, used });
        }
        if self.level > 0
            && let Some(used) = self.mean(now, RESTORE_AFTER)
            && used < self.limit
        {
            return Some(Change::Restore {
                to: self.level - 1,
                used,
            });
        }
        None
    }
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
                "profile:u:12,state:uk:1,switch:uk,vfs:u,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1,switch:uk,vfs:n,tp:sched:sched_process_exec:u:count",
                "profile:u:12,state:uk:1,switch:uk,tp:sched:sched_process_exec:u:count",
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
            ["profile:u:1,switch", "profile:u:1"]
        );
    }

    /// A kind added to the registry is shed by what it declares, with no list here to extend:
    /// `uring` (IO ring) like `vfs`, and a made-up kind of each class.
    #[test]
    fn sheds_follow_the_registry() {
        use stacks_stream::kinds::{ALL, Ring, Sampling};
        assert_eq!(
            events("switch,uring:u"),
            ["switch,uring:u", "switch,uring:n", "switch"]
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
                "newsampled:u:2,switch,newio:u",
                "newsampled:u:2,switch,newio:n",
                "newsampled:u:2,switch",
                "newsampled:u:2",
            ]
        );
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("1%"), Ok(0.01));
        assert_eq!(parse_percent(" 0.5 %"), Ok(0.005));
        for bad in ["1", "0%", "-1%", "101%", "a%"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn over_for_ten_seconds_sheds_under_for_a_minute_restores() {
        let levels = ladder("profile:u:49,vfs:u");
        let mut b = Budget::new(0.06, levels, 2.0);
        let t0 = Instant::now();
        b.pipeline_started(t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        // 10% of 2 CPUs: 0.2 CPU seconds a second.
        let mut cost = 0.0;
        let mut shed = None;
        for s in 0..30 {
            cost += 0.2;
            if let Some(c) = b.observe(at(s), cost) {
                shed = Some((s, c));
                break;
            }
        }
        let (when, change) = shed.expect("shed");
        assert_eq!(when, 3 + 10, "settled at 3 s, then 10 s over");
        assert!(matches!(change, Change::Shed { to: 1, used } if (used - 0.1).abs() < 1e-9));
        // Over twice the budget: the last level at once.
        let mut flood = Budget::new(0.04, ladder("profile:u:49,vfs:u"), 2.0);
        flood.pipeline_started(t0);
        let mut c = 0.0;
        let change = (0..30)
            .find_map(|s| {
                c += 0.2;
                flood.observe(at(s), c)
            })
            .unwrap();
        assert!(matches!(change, Change::Shed { to: 3, .. }), "{change:?}");
        b.level = 1;
        b.pipeline_started(at(when));
        // Idle: nothing for a minute, then a restore.
        let mut restored = None;
        for s in when..when + 120 {
            if let Some(c) = b.observe(at(s), cost) {
                restored = Some((s - when, c));
                break;
            }
        }
        let (after, change) = restored.expect("restored");
        assert_eq!(after, 3 + 60);
        assert!(matches!(change, Change::Restore { to: 0, .. }));
    }
}
