//! The CPU budget (`budget_cpu`, docs/agent.md#the-cpu-budget): what the recording costs the
//! host — the three stages' CPU time (from /proc and wait4) plus the recorder's BPF programs'
//! run time (the kernel's `run_time_ns` of each program the recorder holds, read from its
//! `/proc/PID/fdinfo`, but for the thread-state iterator, whose run time is the recorder's own
//! system time already) — against a fraction of the host's CPUs, and the ladder of event
//! specifications it sheds along, made from the configured `-e` in a fixed order. When to take
//! a level is the controller's (controller.rs); the supervisor applies a level by stopping the
//! pipeline in order (the recorder drains, the packer finishes its set: no row is lost) and
//! starting it again with the level's specification, which each file set carries
//! (`stacks.events`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use stacks_stream::events::EventSpec;
use stacks_stream::kinds::{ArgGrammar, Kind, Ring, Sampling};

/// What the rate and 1-in-N steps divide the rows by.
const DIVISOR: u64 = 4;

/// One level of the ladder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Level {
    /// stacks-record's `-e` at this level.
    pub events: String,
    /// What this level sheds, for the log (the configured level: `as configured`).
    pub step: String,
}

/// The ladder of `events` (a `-e` the recorder accepted): the configured level first, then,
/// cumulatively and skipping a step that changes nothing or would leave nothing to record:
/// 1. the MINs (the kinds whose argument is a duration: shorter events are folded, their time
///    and count kept) raised to 10 ms;
/// 2. the kinds sampled 1 in N ([`Sampling::OneIn`]; [`Sampling::KeptOneIn`], N its second
///    argument) at a quarter of their rows (N × 4);
/// 3. the kinds sampled at a rate ([`Sampling::Rate`], [`Sampling::Passes`]) at a quarter of
///    their rate (at least 1 Hz);
/// 4. the MINs raised to 100 ms;
/// 5. the kinds of the IO ring ([`Ring::Io`]) without stacks;
/// 6. the IO kinds stopped;
/// 7. everything but the kinds sampled at a rate stopped (the rest of the kinds, probes).
///
/// Steps 1–4 change only arguments the recorder takes in place ([`in_place`]); 5–7 restart
/// it. Which kinds are sampled, which are IO and which take a MIN is the registry's
/// (`stacks_stream::kinds`: each kind's `sampling`, `ring` and argument grammar), and so are
/// the names the steps' log lines give: this file names no kind.
pub(crate) fn ladder(events: &str) -> Vec<Level> {
    ladder_of(events, stacks_stream::kinds::ALL)
}

/// MINs of the ladder's steps 1 and 4, ns.
const MIN_STEPS_NS: [u64; 2] = [10_000_000, 100_000_000];

/// Whether `k` is sampled at a rate (its argument a frequency).
fn at_rate(k: &Kind) -> bool {
    matches!(k.sampling, Sampling::Rate | Sampling::Passes)
}

/// Whether `k` is sampled 1 in N: its rows ([`Sampling::OneIn`]) or its kept events
/// ([`Sampling::KeptOneIn`], N its second argument).
fn one_in(k: &Kind) -> bool {
    matches!(k.sampling, Sampling::OneIn | Sampling::KeptOneIn { .. })
}

fn io(k: &Kind) -> bool {
    k.ring == Some(Ring::Io)
}

fn takes_min(k: &Kind) -> bool {
    matches!(
        k.source,
        stacks_stream::kinds::Source::Event { arg: Some(a), .. } if a.grammar == ArgGrammar::Duration
    )
}

/// `names` as a phrase: `a`, `a and b`, `a, b and c`.
fn and(names: &[String]) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// [`ladder`] with the kinds of registry `kinds`.
fn ladder_of(events: &str, kinds: &[Kind]) -> Vec<Level> {
    let configured = events
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(",");
    let mut levels = vec![Level {
        events: configured,
        step: "as configured".into(),
    }];
    let Ok(mut spec) = EventSpec::parse_in(events, kinds) else {
        return levels;
    };
    let declared = |name: &str| kinds.iter().find(|k| k.name == name);
    let is = |name: &str, class: fn(&Kind) -> bool| declared(name).is_some_and(class);
    // The registry's kinds of a class, named for the log.
    let class = |class: fn(&Kind) -> bool, suffix: &str| -> String {
        let names: Vec<String> = kinds
            .iter()
            .filter(|k| matches!(k.source, stacks_stream::kinds::Source::Event { .. }))
            .filter(|k| class(k))
            .map(|k| format!("{}{suffix}", k.name))
            .collect();
        and(&names)
    };
    let mut last = spec.normalized();
    let mut take = |spec: &EventSpec, step: String| {
        let events = spec.normalized();
        if (!spec.kinds.is_empty() || !spec.probes.is_empty()) && events != last {
            last.clone_from(&events);
            levels.push(Level { events, step });
        }
    };
    let raise_min = |spec: &mut EventSpec, to_ns: u64| {
        for k in &mut spec.kinds {
            if is(k.name, takes_min) && k.arg.unwrap_or(0) < to_ns {
                k.arg = Some(to_ns);
            }
        }
    };
    raise_min(&mut spec, MIN_STEPS_NS[0]);
    take(&spec, format!("{} MIN at 10ms", class(takes_min, "'s")));
    for k in &mut spec.kinds {
        if is(k.name, one_in)
            && let (Some(n), Some(ArgGrammar::Every { max })) = (k.arg, k.grammar)
        {
            k.arg = Some((n * DIVISOR).min(u64::from(max)));
        }
        if let (Some(n), Some(arg)) = (k.one_in, declared(k.name).and_then(Kind::one_in_arg))
            && let ArgGrammar::Every { max } = arg.grammar
        {
            k.one_in = Some((n * DIVISOR).min(u64::from(max)));
        }
    }
    take(
        &spec,
        format!("{} at a quarter of their rows", class(one_in, "")),
    );
    for k in &mut spec.kinds {
        if is(k.name, at_rate)
            && let Some(hz) = k.arg
        {
            k.arg = Some((hz / DIVISOR).max(1));
        }
    }
    take(
        &spec,
        format!("{} at a quarter of their rate", class(at_rate, "")),
    );
    raise_min(&mut spec, MIN_STEPS_NS[1]);
    take(&spec, format!("{} MIN at 100ms", class(takes_min, "'s")));
    for k in &mut spec.kinds {
        if is(k.name, io) {
            k.stacks = stacks_stream::events::StackSel::None;
        }
    }
    take(&spec, "IO kinds without stacks".into());
    spec.kinds.retain(|k| !is(k.name, io));
    take(&spec, "IO kinds stopped".into());
    spec.kinds.retain(|k| is(k.name, at_rate));
    spec.probes.clear();
    take(&spec, format!("all but {} stopped", class(at_rate, "")));
    levels
}

/// Whether the recorder takes `to` in place of `from` (stacks-record `--control`): the same
/// kinds with the same stacks and the same probes, only the arguments the registry says change
/// in place differing (`Kind::arg_in_place`: rates, 1-in-N samplings, MINs).
pub(crate) fn in_place(from: &str, to: &str) -> bool {
    in_place_of(from, to, stacks_stream::kinds::ALL)
}

fn in_place_of(from: &str, to: &str, kinds: &[Kind]) -> bool {
    let (Ok(a), Ok(b)) = (
        EventSpec::parse_in(from, kinds),
        EventSpec::parse_in(to, kinds),
    ) else {
        return false;
    };
    a.takes_in_place(&b, |name| {
        kinds
            .iter()
            .find(|k| k.name == name)
            .is_some_and(Kind::arg_in_place)
    })
    .is_ok()
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
/// are on ([`enable_bpf_stats`]). See [`run_ns_outside`] for what is left out.
pub(crate) fn bpf_run_ns(pid: i32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
    let texts: Vec<String> = dir
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .collect();
    Some(run_ns_outside(&texts))
}

/// The run time of the programs among `fdinfos` (the fdinfo texts of one process's
/// descriptors) that run outside that process: each program once, by its id, but for those an
/// iterator link holds (`link_type: iter`: the `state` kind's thread-state passes). An
/// iterator's program runs inside the holder's own `read()` of each pass, so its run time is
/// already the holder's system time, which the stages' CPU counts.
fn run_ns_outside(fdinfos: &[String]) -> u64 {
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .map(str::to_owned)
    };
    let id = |text: &str| field(text, "prog_id:").and_then(|v| v.parse::<u64>().ok());
    let in_holder: std::collections::BTreeSet<u64> = fdinfos
        .iter()
        .filter(|t| field(t, "link_type:").as_deref() == Some("iter"))
        .filter_map(|t| id(t))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut total = 0u64;
    for text in fdinfos {
        if let (Some(id), Some(ns)) = (
            id(text),
            field(text, "run_time_ns:").and_then(|v| v.parse::<u64>().ok()),
        ) && !in_holder.contains(&id)
            && seen.insert(id)
        {
            total += ns;
        }
    }
    total
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

    fn steps(spec: &str) -> Vec<String> {
        ladder(spec).into_iter().map(|l| l.step).collect()
    }

    #[test]
    fn the_ladder_sheds_in_the_documented_order() {
        let tp = "tp:sched:sched_process_exec:u:count";
        assert_eq!(
            events(&format!(
                "profile:u:49,state:uk:5,switch:uk,wake:u,vfs:u,{tp}"
            )),
            [
                format!("profile:u:49,state:uk:5,switch:uk,wake:u,vfs:u,{tp}"),
                format!("profile:u:49,switch:uk:10ms,wake:u:1,vfs:u,state:uk:5,{tp}"),
                format!("profile:u:49,switch:uk:10ms:4,wake:u:4,vfs:u,state:uk:5,{tp}"),
                format!("profile:u:12,switch:uk:10ms:4,wake:u:4,vfs:u,state:uk:1,{tp}"),
                format!("profile:u:12,switch:uk:100ms:4,wake:u:4,vfs:u,state:uk:1,{tp}"),
                format!("profile:u:12,switch:uk:100ms:4,wake:u:4,vfs:n,state:uk:1,{tp}"),
                format!("profile:u:12,switch:uk:100ms:4,wake:u:4,state:uk:1,{tp}"),
                "profile:u:12,state:uk:1".to_string(),
            ]
        );
        assert_eq!(
            steps("profile:u:49,state:uk:5,switch:uk,wake:u,vfs:u"),
            [
                "as configured",
                "switch's and uring's MIN at 10ms",
                "switch and wake at a quarter of their rows",
                "profile and state at a quarter of their rate",
                "switch's and uring's MIN at 100ms",
                "IO kinds without stacks",
                "IO kinds stopped",
                "all but profile and state stopped",
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
                "profile:u:1,switch:uk:10ms:4",
                "profile:u:1,switch:uk:100ms:4",
                "profile:u:1"
            ]
        );
        // 1-in-N sampling stops at the registry's most.
        assert_eq!(
            events("switch:k:100ms:300000,wake:k:999999"),
            [
                "switch:k:100ms:300000,wake:k:999999",
                "switch:k:100ms:1000000,wake:k:1000000"
            ]
        );
        // Every level is a specification the recorder reads back as itself.
        for l in events(&format!(
            "profile,state,switch,wake,rss,block,vfs,net,uring,{tp}"
        )) {
            let spec = EventSpec::parse(&l).unwrap();
            assert_eq!(EventSpec::parse(&spec.normalized()).unwrap(), spec, "{l}");
        }
        // A specification this version does not read is the one level.
        assert_eq!(events("profile,nonsense"), ["profile,nonsense"]);
    }

    /// A kind added to the registry is shed by what it declares, with no list here to extend:
    /// `uring` (IO ring) like `vfs`, and a made-up kind of each class.
    #[test]
    fn sheds_follow_the_registry() {
        use stacks_stream::kinds::ALL;
        assert_eq!(
            events("switch,uring:u"),
            [
                "switch,uring:u",
                "switch:uk:10ms,uring:u:10ms",
                "switch:uk:10ms:4,uring:u:10ms",
                "switch:uk:100ms:4,uring:u:100ms",
                "switch:uk:100ms:4,uring:n:100ms",
                "switch:uk:100ms:4"
            ]
        );
        // A MIN over a step's is kept.
        assert_eq!(
            events("switch:k:50ms,profile:u:8"),
            [
                "switch:k:50ms,profile:u:8",
                "profile:u:8,switch:k:50ms:4",
                "profile:u:2,switch:k:50ms:4",
                "profile:u:2,switch:k:100ms:4",
                "profile:u:2"
            ]
        );
        let vfs = *stacks_stream::kinds::get("vfs").unwrap();
        let state = *stacks_stream::kinds::get("state").unwrap();
        let wake = *stacks_stream::kinds::get("wake").unwrap();
        let mut kinds = ALL.to_vec();
        kinds.push(Kind {
            name: "newio",
            ..vfs
        });
        kinds.push(Kind {
            name: "newsampled",
            ring: Some(Ring::Samples),
            sampling: Sampling::Passes,
            ..state
        });
        kinds.push(Kind {
            name: "newonein",
            ..wake
        });
        let ladder = ladder_of("newsampled:u:8,switch,newio:u,newonein:k:2", &kinds);
        let levels: Vec<&str> = ladder.iter().map(|l| l.events.as_str()).collect();
        assert_eq!(
            levels,
            [
                "newsampled:u:8,switch,newio:u,newonein:k:2",
                "switch:uk:10ms,newio:u,newsampled:u:8,newonein:k:2",
                "switch:uk:10ms:4,newio:u,newsampled:u:8,newonein:k:8",
                "switch:uk:10ms:4,newio:u,newsampled:u:2,newonein:k:8",
                "switch:uk:100ms:4,newio:u,newsampled:u:2,newonein:k:8",
                "switch:uk:100ms:4,newio:n,newsampled:u:2,newonein:k:8",
                "switch:uk:100ms:4,newsampled:u:2,newonein:k:8",
                "newsampled:u:2",
            ]
        );
        assert_eq!(
            ladder[2].step,
            "switch, wake and newonein at a quarter of their rows"
        );
        assert_eq!(
            ladder[3].step,
            "profile, state and newsampled at a quarter of their rate"
        );
        let in_place_from_0: Vec<bool> = levels
            .iter()
            .map(|l| in_place_of(levels[0], l, &kinds))
            .collect();
        assert_eq!(
            in_place_from_0,
            [true, true, true, true, true, false, false, false]
        );
    }

    /// The levels the recorder takes in place are those changing rates, 1-in-N samplings and
    /// MINs only; the ladder's first levels are, from the IO steps on they are not.
    #[test]
    fn rates_and_mins_change_in_place() {
        let l = events("profile:u:49,state:uk:5,switch:uk,wake:u,vfs:u");
        let in_place_from_0: Vec<bool> = l.iter().map(|e| in_place(&l[0], e)).collect();
        assert_eq!(
            in_place_from_0,
            [true, true, true, true, true, false, false, false],
            "{l:?}"
        );
        assert!(in_place("profile,switch", "profile:uk:12,switch:uk:10ms"));
        assert!(in_place("switch,wake", "switch:uk:1ms,wake:k:16"));
        assert!(!in_place("profile:u", "profile:uk"));
        assert!(!in_place("vfs:u", "vfs:n"));
        assert!(!in_place("switch,wake", "switch"));
        assert!(!in_place("profile,tp:a:b", "profile,tp:a:c"));
        assert!(!in_place("rss:u:29", "rss:u:7"));
        assert!(!in_place("profile", "profile,nonsense"));
    }

    /// A program's fdinfo (as the kernel prints it) and a link's.
    fn prog(id: u64, ns: u64) -> String {
        format!(
            "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1038\nprog_type:\t26\n\
             prog_jited:\t1\nprog_tag:\t740935101a4750bd\nmemlock:\t4096\nprog_id:\t{id}\n\
             run_time_ns:\t{ns}\nrun_cnt:\t7\nrecursion_misses:\t0\nverified_insns:\t13\n"
        )
    }
    fn link(kind: &str, prog: u64, extra: &str) -> String {
        format!(
            "pos:\t0\nflags:\t02000000\nmnt_id:\t17\nino:\t1038\nlink_type:\t{kind}\n\
             link_id:\t35405\nprog_tag:\t740935101a4750bd\nprog_id:\t{prog}\n{extra}"
        )
    }

    #[test]
    fn the_state_iterator_is_not_counted_twice() {
        let fds = [
            prog(1, 1_000),
            prog(2, 20_000),
            // The thread-state iterator: run in the recorder's read(), its system time.
            prog(3, 300_000),
            // Held twice: counted once.
            prog(1, 1_000),
            link("raw_tracepoint", 1, "tp_name:\tsys_exit\ncookie:\t0\n"),
            link("tracing", 2, "attach_type:\t24\n"),
            link("iter", 3, "target_name:\ttask\n"),
            "pos:\t0\nflags:\t02\n".to_owned(),
        ];
        assert_eq!(run_ns_outside(&fds), 21_000);
        // Without the iterator's link (no `state`), every program counts.
        assert_eq!(run_ns_outside(&fds[..5]), 321_000);
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
