//! The pipeline `stacks-record | stacks-symbolize | stacks-pack` as three children joined by
//! pipes, kept running: when a stage dies, the others are stopped in order (the recorder told
//! to stop, so what it holds flows down and the packer finishes its set whole at the end of
//! its input; no row the packer has is lost) and the whole pipeline is started again after a
//! backoff (1 s, doubling to a minute; back to 1 s after a minute of running), each restart
//! logged and counted against the stage that died. SIGTERM or ^C stops it the same way,
//! within 10 s. Once a second the stages' memory and CPU time and stacks-pack's
//! counters are taken into the metrics snapshot, and the CPU budget (if any) is checked: a
//! level it asks for is taken by stopping the pipeline the same way and starting it again at
//! once with that level's events (not a restart: no backoff, counted apart). When a run of
//! the pipeline has ended, what left the recorder and reached no file set is counted lost
//! (`stage_died:KIND`, [`crate::inflight`]) and handed to the next packer to write.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::budget::{self, Budget};
use crate::controller::{Change, Timing};
use crate::metrics::{self, BudgetMetrics, Shared};
use crate::packstats::{Accumulator, PackStats};
use crate::stage::{self, Cause, Exit, Running, Which};

/// How often the children are looked at.
const TICK: Duration = Duration::from_millis(100);
/// How often memory, CPU time and the packer's counters are taken.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The first backoff before a restart, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A pipeline that ran this long restarts after [`BACKOFF_FIRST`] again.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Stopping: the recorder's end flowing down takes at most this long...
const DRAIN: Duration = Duration::from_secs(5);
/// ... then the stages left are told to stop (the packer finishes its set) for this long,
/// then killed: stopping takes at most 10 s.
const FINISH: Duration = Duration::from_secs(3);
/// A budget change stops the pipeline with no deadline to meet: the recorder, which under a
/// flood may hold many seconds of events, is given this long to hand them all over (a signal
/// meanwhile cuts it to [`DRAIN`]).
const BUDGET_DRAIN: Duration = Duration::from_secs(60);

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Each stage's executable and arguments, upstream first.
    pub stages: [(PathBuf, Vec<String>); 3],
    /// The file stacks-record writes the rows that left it to (its `--stats`).
    pub record_stats: PathBuf,
    /// The file stacks-pack writes its counters to (its `--stats`).
    pub pack_stats: PathBuf,
    /// The store, when it is a directory: a restart waits until it can be written.
    pub store_dir: Option<PathBuf>,
    /// The CPU budget (a fraction of the host's CPUs) and the ladder of the recorder's `-e`
    /// (the recorder's arguments then start with `-e`, followed by the configured events).
    pub budget: Option<(f64, Vec<budget::Level>, Timing)>,
}

/// The stages of a started pipeline still running.
struct Pipeline {
    running: Vec<Running>,
    started: Instant,
    /// The recorder's `--control` (its stdin), with a budget: where a level it takes in place
    /// is written.
    control: Option<std::process::ChildStdin>,
}

/// How one run of the pipeline ended.
enum Outcome {
    /// A stage died: start again after the backoff.
    Died,
    /// SIGTERM or ^C.
    Signal,
    /// A stage refused its arguments (exit status 2) at the first start: no restart helps.
    Usage(Which),
    /// The budget took another level: start again now.
    Budget,
}

/// The supervisor's state.
struct Supervisor<'a> {
    plan: &'a Plan,
    shared: Shared,
    /// CPU seconds of the stages' ended runs.
    cpu_ended: [f64; 3],
    pack: Accumulator,
    backoff: Duration,
    budget: Option<Budget>,
    /// BPF run time of the recorder's ended runs, and of the running one (by its pid).
    bpf_ended: f64,
    bpf_running: Option<(i32, f64)>,
    /// Each running stage's cgroup and the OOM kills it had counted when last looked at.
    memcg: [Option<(PathBuf, u64)>; 3],
    /// The counters of the run's packer once it ended, what it had not finished taken out.
    pack_run: Option<PackStats>,
    /// Events counted lost (`stage_died:KIND`) not in the store yet: given to each packer
    /// started (`--lost`) until one has finished a set, which holds them.
    owed: BTreeMap<String, u64>,
}

/// Run the pipeline until SIGTERM or ^C; exit status 2 when a stage refused its arguments.
pub(crate) fn run(plan: &Plan, shared: Shared) -> Result<ExitCode> {
    let mut sup = Supervisor {
        plan,
        shared,
        cpu_ended: [0.0; 3],
        pack: Accumulator::default(),
        backoff: BACKOFF_FIRST,
        budget: plan
            .budget
            .clone()
            .map(|(limit, levels, timing)| Budget::new(limit, levels, timing)),
        bpf_ended: 0.0,
        bpf_running: None,
        memcg: Default::default(),
        pack_run: None,
        owed: BTreeMap::new(),
    };
    // The kernel counts BPF programs' run time only while asked to: held for the agent's life.
    let _bpf_stats = match &sup.budget {
        Some(_) => match budget::enable_bpf_stats() {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!(
                    "stacks-agent: warning: the budget counts the stages' CPU time but not the BPF programs' run time: kernel.bpf_stats_enabled is 0 and turning the statistics on (BPF_ENABLE_STATS) failed: {e}"
                );
                None
            }
        },
        None => None,
    };
    let mut first = true;
    loop {
        let outcome = sup.run_once(first);
        first = false;
        match outcome {
            Outcome::Budget if !stacks_stream::sys::signal_caught() => {}
            Outcome::Died if sup.sleep_backoff() => {}
            Outcome::Died | Outcome::Signal | Outcome::Budget => {
                if !sup.owed.is_empty() {
                    eprintln!(
                        "stacks-agent: warning: {} events counted lost ({}) are not in the store: no packer runs again to write them",
                        sup.owed.values().sum::<u64>(),
                        describe_lost(&sup.owed)
                    );
                }
                eprintln!("stacks-agent: stopped");
                return Ok(ExitCode::SUCCESS);
            }
            Outcome::Usage(which) => {
                eprintln!(
                    "stacks-agent: error: {} refused its arguments (see its message above); not restarting",
                    which.tool()
                );
                return Ok(ExitCode::from(2));
            }
        }
    }
}

impl Supervisor<'_> {
    /// Start the pipeline and watch it until a stage dies or the agent is told to stop; then
    /// count what the run lost between the recorder and the store.
    fn run_once(&mut self, first: bool) -> Outcome {
        let _ = std::fs::remove_file(&self.plan.pack_stats);
        let _ = std::fs::remove_file(&self.plan.record_stats);
        self.pack_run = None;
        let outcome = self.watch(first);
        self.account();
        outcome
    }

    /// What left the recorder of the run that ended and reached no file set (every stage has
    /// ended): counted lost, `stage_died:KIND`, in the metrics at once and in the store by the
    /// next packer (`--lost`). The events owed to the store are paid once a packer they were
    /// given to has finished a set (they are in its first).
    fn account(&mut self) {
        let stored = self.pack_run.take();
        if stored.as_ref().is_some_and(|p| p.sets_written > 0) {
            self.owed.clear();
        }
        let Some(left) = stacks_stream::tally::RecordStats::read(&self.plan.record_stats) else {
            return;
        };
        let died = crate::inflight::died(&left, &stored.unwrap_or_default());
        if died.is_empty() {
            return;
        }
        eprintln!(
            "stacks-agent: {} events left the recorder and reached no file set ({}): counted as lost; the next packer writes them as lost rows{}",
            died.values().sum::<u64>(),
            describe_lost(&died),
            if left.ended {
                ""
            } else {
                " (the recorder did not end its stream: what it still held is not counted)"
            }
        );
        for (cause, n) in &died {
            *self.owed.entry(cause.clone()).or_default() += n;
        }
        self.pack.count_lost(&died);
        metrics::lock(&self.shared).pack = self.pack.totals();
    }

    /// Start the pipeline and watch it until a stage dies or the agent is told to stop.
    fn watch(&mut self, first: bool) -> Outcome {
        let mut pipe = match self.start() {
            Ok(p) => p,
            Err((which, e)) => {
                eprintln!("stacks-agent: cannot start {}: {e:#}", which.tool());
                self.note_restart(which, Cause::Spawn);
                return Outcome::Died;
            }
        };
        metrics::lock(&self.shared).pipeline_starts += 1;
        let mut last_sample: Option<Instant> = None;
        loop {
            if stacks_stream::sys::signal_caught() {
                eprintln!(
                    "stacks-agent: stopping (signal): the recorder drains, the packer finishes its set"
                );
                self.stop(&mut pipe);
                return Outcome::Signal;
            }
            if let Some((which, exit)) = self.reap_died(&mut pipe) {
                let quick = pipe.started.elapsed() < Duration::from_secs(5);
                if first && quick && exit.code == 2 && exit.signal.is_none() {
                    self.stop(&mut pipe);
                    return Outcome::Usage(which);
                }
                if pipe.started.elapsed() >= HEALTHY_AFTER {
                    self.backoff = BACKOFF_FIRST;
                }
                let cause = exit.cause(self.oom_killed(which));
                let n = self.note_restart(which, cause);
                eprintln!(
                    "stacks-agent: {} {}; stopping the pipeline and starting it again in {:.0?} (restart {n} of the {} stage)",
                    which.tool(),
                    exit.describe(cause),
                    self.backoff,
                    which.label()
                );
                self.stop(&mut pipe);
                return Outcome::Died;
            }
            if last_sample.is_none_or(|t| t.elapsed() >= SAMPLE_EVERY) {
                last_sample = Some(Instant::now());
                if let Some(change) = self.sample(&pipe)
                    && !self.take(change, &mut pipe)
                {
                    self.stop_within(&mut pipe, BUDGET_DRAIN);
                    return Outcome::Budget;
                }
            }
            std::thread::sleep(TICK);
        }
    }

    /// Spawn the three stages joined by pipes; on a failure the ones started are stopped.
    fn start(&mut self) -> std::result::Result<Pipeline, (Which, anyhow::Error)> {
        let mut pipe = Pipeline {
            running: Vec::new(),
            started: Instant::now(),
            control: None,
        };
        let mut upstream = Stdio::null();
        let events = self.budget.as_ref().map(|b| b.events().to_string());
        for which in Which::ALL {
            let (exe, args) = &self.plan.stages[which.index()];
            let mut args = args.clone();
            if which == Which::Record
                && let Some(e) = &events
                && args.first().is_some_and(|a| a == "-e")
                && args.len() > 1
            {
                args[1] = e.clone();
            }
            let control = which == Which::Record && events.is_some();
            if control {
                // The budget's levels taken in place come as lines on its stdin.
                args.extend(["--control".to_string(), "/dev/stdin".to_string()]);
            }
            if which == Which::Pack {
                // What earlier runs lost, for its first set.
                for (cause, n) in &self.owed {
                    args.extend(["--lost".to_string(), format!("{cause}={n}")]);
                }
            }
            let args = &args;
            let stdout = match which {
                Which::Pack => Stdio::null(),
                _ => Stdio::piped(),
            };
            let stdin = if control {
                Stdio::piped()
            } else {
                std::mem::replace(&mut upstream, Stdio::null())
            };
            match stage::spawn(which, exe, args, stdin, stdout)
                .with_context(|| exe.display().to_string())
            {
                Ok((run, mut child)) => {
                    if let Some(out) = child.stdout.take() {
                        upstream = Stdio::from(out);
                    }
                    if let Some(input) = child.stdin.take() {
                        pipe.control = Some(input);
                    }
                    self.memcg[which.index()] = None;
                    self.look_at_memcg(which, run.pid);
                    pipe.running.push(run);
                }
                Err(e) => {
                    self.stop(&mut pipe);
                    return Err((which, e));
                }
            }
        }
        if let Some(b) = &mut self.budget {
            b.ctl.pipeline_started(pipe.started);
        }
        let mut snap = metrics::lock(&self.shared);
        for s in &mut snap.stages {
            s.up = true;
        }
        snap.backoff_seconds = 0.0;
        snap.events = match events {
            Some(e) => e,
            None => self.plan.stages[0]
                .1
                .windows(2)
                .find(|w| w[0] == "-e")
                .map(|w| w[1].clone())
                .unwrap_or_default(),
        };
        Ok(pipe)
    }

    /// The stage that died, if any did: of those found ended (one dying ends its neighbours,
    /// which see their pipe close), the one killed by a signal, else one that failed, else
    /// the most downstream.
    fn reap_died(&mut self, pipe: &mut Pipeline) -> Option<(Which, Exit)> {
        let mut ended = Vec::new();
        while let Some(e) = self.reap_one(pipe) {
            ended.push(e);
        }
        let rank = |(w, e): &(Which, Exit)| {
            (
                e.signal.is_some_and(|s| s != libc::SIGPIPE),
                e.code != 0,
                w.index(),
            )
        };
        ended.into_iter().max_by_key(rank)
    }

    /// The first stage found ended, if any: taken out of the pipeline, its end noted.
    fn reap_one(&mut self, pipe: &mut Pipeline) -> Option<(Which, Exit)> {
        let (i, exit) = pipe
            .running
            .iter()
            .enumerate()
            .find_map(|(i, r)| stage::try_reap(r.pid).map(|e| (i, e)))?;
        let which = pipe.running.remove(i).which;
        self.ended(which, &exit);
        Some((which, exit))
    }

    /// `which` ended with `exit`: its CPU time is kept, and the packer's last counters.
    fn ended(&mut self, which: Which, exit: &Exit) {
        self.cpu_ended[which.index()] += exit.cpu_seconds;
        if which == Which::Pack {
            if let Some(last) = PackStats::read(&self.plan.pack_stats) {
                self.pack.update(last);
            }
            self.pack_run = Some(self.pack.end_run());
            let _ = std::fs::remove_file(&self.plan.pack_stats);
        }
        let mut snap = metrics::lock(&self.shared);
        let m = &mut snap.stages[which.index()];
        m.up = false;
        m.rss_bytes = 0;
        m.cpu_seconds = self.cpu_ended[which.index()];
        snap.pack = self.pack.totals();
    }

    /// Count a restart for `which`, which ended for `cause`; returns its count.
    fn note_restart(&mut self, which: Which, cause: Cause) -> u64 {
        let mut snap = metrics::lock(&self.shared);
        let m = &mut snap.stages[which.index()];
        m.restarts += 1;
        m.failures[cause.index()] += 1;
        m.restarts
    }

    /// Remember the cgroup of running stage `which` (`pid`) and its OOM kills so far (not
    /// once it has ended: a kill then must not become the baseline).
    fn look_at_memcg(&mut self, which: Which, pid: i32) {
        if stage::has_ended(pid) {
            return;
        }
        if let Some(dir) = stage::cgroup_dir(pid)
            && let Some(kills) = stage::oom_kills(&dir)
        {
            self.memcg[which.index()] = Some((dir, kills));
        }
    }

    /// Whether the memory cgroup `which` was last seen in has counted an OOM kill since.
    fn oom_killed(&self, which: Which) -> bool {
        self.memcg[which.index()]
            .as_ref()
            .is_some_and(|(dir, before)| stage::oom_kills(dir).is_some_and(|now| now > *before))
    }

    /// Stop what is left of `pipe` in order: the recorder first (it drains; its stream's
    /// end reaches the symbolizer, then the packer, which finishes its set); after
    /// [`DRAIN`] the stages left are sent SIGTERM, after [`FINISH`] more SIGKILL.
    fn stop(&mut self, pipe: &mut Pipeline) {
        self.stop_within(pipe, DRAIN);
    }

    /// [`Self::stop`], the recorder's end given `drain` to flow down (cut to [`DRAIN`] by a
    /// signal).
    fn stop_within(&mut self, pipe: &mut Pipeline, drain: Duration) {
        let asked = Instant::now();
        let mut deadline = asked + drain;
        if let Some(r) = pipe.running.iter().find(|r| r.which == Which::Record) {
            stage::signal(r.pid, libc::SIGTERM);
        }
        while !pipe.running.is_empty() && Instant::now() < deadline {
            if stacks_stream::sys::signal_caught() {
                deadline = deadline.min(Instant::now() + DRAIN);
            }
            if self.reap_one(pipe).is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if !pipe.running.is_empty() {
            for r in &pipe.running {
                eprintln!(
                    "stacks-agent: {} has not ended {:.0?} after the recorder was stopped: SIGTERM",
                    r.which.tool(),
                    asked.elapsed()
                );
                stage::signal(r.pid, libc::SIGTERM);
            }
            self.wait_all(pipe, Instant::now() + FINISH);
        }
        for r in &pipe.running {
            eprintln!("stacks-agent: {} killed (SIGKILL)", r.which.tool());
            stage::signal(r.pid, libc::SIGKILL);
        }
        self.wait_all(pipe, Instant::now() + Duration::from_secs(1));
    }

    /// Reap the stages of `pipe` as they end, until all have or `deadline`.
    fn wait_all(&mut self, pipe: &mut Pipeline, deadline: Instant) {
        while !pipe.running.is_empty() && Instant::now() < deadline {
            if self.reap_one(pipe).is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Take the stages' memory and CPU time from /proc, the recorder's BPF run time and the
    /// packer's counters; the budget's change, if it asks for one.
    fn sample(&mut self, pipe: &Pipeline) -> Option<Change> {
        if let Some(latest) = PackStats::read(&self.plan.pack_stats) {
            self.pack.update(latest);
        }
        if let Some(rec) = pipe.running.iter().find(|r| r.which == Which::Record)
            && let Some(ns) = budget::bpf_run_ns(rec.pid)
        {
            let secs = ns as f64 / 1e9;
            match self.bpf_running {
                Some((pid, last)) if pid != rec.pid => {
                    self.bpf_ended += last;
                    self.bpf_running = Some((rec.pid, secs));
                }
                _ => self.bpf_running = Some((rec.pid, secs)),
            }
        }
        let bpf = self.bpf_ended + self.bpf_running.map_or(0.0, |(_, s)| s);
        for r in &pipe.running {
            self.look_at_memcg(r.which, r.pid);
        }
        let mut snap = metrics::lock(&self.shared);
        for r in &pipe.running {
            if let Some((rss, cpu)) = stage::usage(r.pid) {
                let m = &mut snap.stages[r.which.index()];
                m.rss_bytes = rss;
                m.cpu_seconds = self.cpu_ended[r.which.index()] + cpu;
            }
        }
        snap.pack = self.pack.totals();
        snap.bpf_run_seconds = bpf;
        let budget = self.budget.as_mut()?;
        let now = Instant::now();
        let cost = snap.stages.iter().map(|m| m.cpu_seconds).sum::<f64>() + bpf;
        let change = budget.ctl.observe(now, cost);
        let m = snap.budget.get_or_insert_with(BudgetMetrics::default);
        m.limit_ratio = budget.ctl.limit;
        m.used_ratio = budget.ctl.used(now).unwrap_or(0.0);
        m.restore_estimate_ratio =
            (budget.ctl.level > 0).then(|| budget.ctl.estimate(budget.ctl.level - 1, m.used_ratio));
        m.level = budget.ctl.level;
        m.levels = budget.levels.len();
        m.hold_seconds = budget.ctl.hold().as_secs_f64();
        change
    }

    /// Take the budget's `change`, logged and counted: in place (the new `-e` written to the
    /// recorder's `--control`; `true`) when the recorder takes it so, else by starting the
    /// pipeline again with it (`false`: the caller stops the pipeline).
    fn take(&mut self, change: Change, pipe: &mut Pipeline) -> bool {
        let Some(b) = self.budget.as_mut() else {
            return true;
        };
        let pct = |f: f64| format!("{:.2}%", f * 100.0);
        let last = b.levels.len() - 1;
        let (to, line) = match change {
            Change::Shed { to, used } => (
                to,
                format!(
                    "over budget for {:.0?} ({} of the host's CPUs, budget {}): shedding to level {to} of {last} ({})",
                    self.plan
                        .budget
                        .as_ref()
                        .map_or(Duration::ZERO, |p| p.2.shed_after),
                    pct(used),
                    pct(b.ctl.limit),
                    b.levels[to].step
                ),
            ),
            Change::Restore {
                to,
                used,
                estimate,
                probe: false,
            } => (
                to,
                format!(
                    "level {to} estimated at {} of the host's CPUs for {:.0?} ({} now, budget {}): restoring level {to} of {last} ({})",
                    pct(estimate),
                    b.ctl.hold(),
                    pct(used),
                    pct(b.ctl.limit),
                    b.levels[to].step
                ),
            ),
            Change::Restore {
                to,
                used,
                estimate,
                probe: true,
            } => (
                to,
                format!(
                    "level {} held for {:.0?} ({} now, budget {}; level {to} estimated at {} from what it cost last): trying level {to} of {last} again ({})",
                    to + 1,
                    b.ctl.probe(),
                    pct(used),
                    pct(b.ctl.limit),
                    pct(estimate),
                    b.levels[to].step
                ),
            ),
        };
        let from = b.events().to_string();
        b.ctl.take(to, Instant::now());
        let events = b.events().to_string();
        // In place: the recorder's rows carry what they were taken under (`profile` and
        // `state` their period in `value`, folded `switch` rows their count), so sums stay
        // right across the change.
        let in_place = budget::in_place(&from, &events)
            && pipe.control.as_mut().is_some_and(|c| {
                use std::io::Write;
                writeln!(c, "{events}").and_then(|()| c.flush()).is_ok()
            });
        if in_place {
            eprintln!(
                "stacks-agent: budget: {line}; the recorder records -e {events} from now on (in place)"
            );
        } else {
            // Each file set says what it recorded: its `stacks.events`.
            eprintln!(
                "stacks-agent: budget: {line}; the recorder restarts with -e {events} (the packer finishes its set first)"
            );
        }
        let mut snap = metrics::lock(&self.shared);
        if in_place {
            snap.events = events;
        }
        let m = snap.budget.get_or_insert_with(BudgetMetrics::default);
        m.level = to;
        match change {
            Change::Shed { .. } => m.shed += 1,
            Change::Restore { .. } => m.restored += 1,
        }
        in_place
    }

    /// Wait the backoff (doubled for next time), then until the store can be written; `false`
    /// when a signal came meanwhile.
    fn sleep_backoff(&mut self) -> bool {
        let until = Instant::now() + self.backoff;
        metrics::lock(&self.shared).backoff_seconds = self.backoff.as_secs_f64();
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        while Instant::now() < until {
            if stacks_stream::sys::signal_caught() {
                return false;
            }
            std::thread::sleep(TICK);
        }
        self.wait_for_store()
    }

    /// A directory store that cannot be written (read-only, its permissions changed, gone)
    /// is waited for, looked at once a second, without starting the stages: the packer would
    /// only refuse it, and each start loads the recorder's BPF programs. `false` when a
    /// signal came meanwhile.
    fn wait_for_store(&mut self) -> bool {
        let Some(dir) = self.plan.store_dir.clone() else {
            return !stacks_stream::sys::signal_caught();
        };
        let Err(e) = writable(&dir) else {
            return !stacks_stream::sys::signal_caught();
        };
        let since = Instant::now();
        eprintln!(
            "stacks-agent: the store {} cannot be written ({e}): not starting the pipeline until it can (looked at every {:.0?})",
            dir.display(),
            STORE_CHECK
        );
        metrics::lock(&self.shared).store_unwritable = true;
        loop {
            if stacks_stream::sys::signal_caught() {
                return false;
            }
            std::thread::sleep(STORE_CHECK);
            if writable(&dir).is_ok() {
                break;
            }
        }
        eprintln!(
            "stacks-agent: the store {} can be written again after {:.0?}: starting the pipeline",
            dir.display(),
            since.elapsed()
        );
        metrics::lock(&self.shared).store_unwritable = false;
        !stacks_stream::sys::signal_caught()
    }
}

/// `stage_died:switch 120, stage_died:wake 3`.
fn describe_lost(lost: &BTreeMap<String, u64>) -> String {
    lost.iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How often a store that cannot be written is looked at.
const STORE_CHECK: Duration = Duration::from_secs(1);

/// Whether files can be made in `dir` (`access(W_OK | X_OK)`: a read-only file system says
/// so).
fn writable(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
