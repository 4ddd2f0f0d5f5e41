//! The pipeline `stacks-record | stacks-symbolize | stacks-pack` as three children joined by
//! pipes, kept running: when a stage dies, the others are stopped in order (the recorder told
//! to stop, so what it holds flows down and the packer finishes its set whole at the end of
//! its input; no row the packer has is lost) and the whole pipeline is started again after a
//! backoff (1 s, doubling to a minute; back to 1 s after a minute of running), each restart
//! logged and counted against the stage that died. SIGTERM or ^C stops it the same way,
//! within 10 s. Once a second the stages' memory and CPU time and stacks-pack's
//! counters are taken into the metrics snapshot.

use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::metrics::{self, Shared};
use crate::packstats::{Accumulator, PackStats};
use crate::stage::{self, Exit, Running, Which};

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

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Each stage's executable and arguments, upstream first.
    pub stages: [(PathBuf, Vec<String>); 3],
    /// The file stacks-pack writes its counters to (its `--stats`).
    pub pack_stats: PathBuf,
}

/// The stages of a started pipeline still running.
struct Pipeline {
    running: Vec<Running>,
    started: Instant,
}

/// How one run of the pipeline ended.
enum Outcome {
    /// A stage died: start again after the backoff.
    Died,
    /// SIGTERM or ^C.
    Signal,
    /// A stage refused its arguments (exit status 2) at the first start: no restart helps.
    Usage(Which),
}

/// The supervisor's state.
struct Supervisor<'a> {
    plan: &'a Plan,
    shared: Shared,
    /// CPU seconds of the stages' ended runs.
    cpu_ended: [f64; 3],
    pack: Accumulator,
    backoff: Duration,
}

/// Run the pipeline until SIGTERM or ^C; exit status 2 when a stage refused its arguments.
pub fn run(plan: &Plan, shared: Shared) -> Result<ExitCode> {
    let mut sup = Supervisor {
        plan,
        shared,
        cpu_ended: [0.0; 3],
        pack: Accumulator::default(),
        backoff: BACKOFF_FIRST,
    };
    let mut first = true;
    loop {
        let outcome = sup.run_once(first);
        first = false;
        match outcome {
            Outcome::Died if sup.sleep_backoff() => {}
            Outcome::Died | Outcome::Signal => {
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
    /// Start the pipeline and watch it until a stage dies or the agent is told to stop.
    fn run_once(&mut self, first: bool) -> Outcome {
        let _ = std::fs::remove_file(&self.plan.pack_stats);
        let mut pipe = match self.start() {
            Ok(p) => p,
            Err((which, e)) => {
                eprintln!("stacks-agent: cannot start {}: {e:#}", which.tool());
                self.note_restart(which);
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
                let n = self.note_restart(which);
                eprintln!(
                    "stacks-agent: {} {}; stopping the pipeline and starting it again in {:.0?} (restart {n} of the {} stage)",
                    which.tool(),
                    exit.describe(),
                    self.backoff,
                    which.label()
                );
                self.stop(&mut pipe);
                return Outcome::Died;
            }
            if last_sample.is_none_or(|t| t.elapsed() >= SAMPLE_EVERY) {
                last_sample = Some(Instant::now());
                self.sample(&pipe);
            }
            std::thread::sleep(TICK);
        }
    }

    /// Spawn the three stages joined by pipes; on a failure the ones started are stopped.
    fn start(&mut self) -> std::result::Result<Pipeline, (Which, anyhow::Error)> {
        let mut pipe = Pipeline {
            running: Vec::new(),
            started: Instant::now(),
        };
        let mut upstream = Stdio::null();
        for which in Which::ALL {
            let (exe, args) = &self.plan.stages[which.index()];
            let stdout = match which {
                Which::Pack => Stdio::null(),
                _ => Stdio::piped(),
            };
            let stdin = std::mem::replace(&mut upstream, Stdio::null());
            match stage::spawn(which, exe, args, stdin, stdout)
                .with_context(|| exe.display().to_string())
            {
                Ok((run, mut child)) => {
                    if let Some(out) = child.stdout.take() {
                        upstream = Stdio::from(out);
                    }
                    pipe.running.push(run);
                }
                Err(e) => {
                    self.stop(&mut pipe);
                    return Err((which, e));
                }
            }
        }
        for s in &mut metrics::lock(&self.shared).stages {
            s.up = true;
        }
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
            self.pack.end_run();
            let _ = std::fs::remove_file(&self.plan.pack_stats);
        }
        let mut snap = metrics::lock(&self.shared);
        let m = &mut snap.stages[which.index()];
        m.up = false;
        m.rss_bytes = 0;
        m.cpu_seconds = self.cpu_ended[which.index()];
        snap.pack = self.pack.totals();
    }

    /// Count a restart for `which`; returns its count.
    fn note_restart(&mut self, which: Which) -> u64 {
        let mut snap = metrics::lock(&self.shared);
        let m = &mut snap.stages[which.index()];
        m.restarts += 1;
        m.restarts
    }

    /// Stop what is left of `pipe` in order: the recorder first (it drains; its stream's
    /// end reaches the symbolizer, then the packer, which finishes its set); after
    /// [`DRAIN`] the stages left are sent SIGTERM, after [`FINISH`] more SIGKILL.
    fn stop(&mut self, pipe: &mut Pipeline) {
        let deadline = Instant::now() + DRAIN;
        if let Some(r) = pipe.running.iter().find(|r| r.which == Which::Record) {
            stage::signal(r.pid, libc::SIGTERM);
        }
        self.wait_all(pipe, deadline);
        if !pipe.running.is_empty() {
            for r in &pipe.running {
                eprintln!(
                    "stacks-agent: {} has not ended {:.0?} after the recorder was stopped: SIGTERM",
                    r.which.tool(),
                    DRAIN
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

    /// Take the stages' memory and CPU time from /proc and the packer's counters.
    fn sample(&mut self, pipe: &Pipeline) {
        if let Some(latest) = PackStats::read(&self.plan.pack_stats) {
            self.pack.update(latest);
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
    }

    /// Wait the backoff (doubled for next time); `false` when a signal came meanwhile.
    fn sleep_backoff(&mut self) -> bool {
        let until = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        while Instant::now() < until {
            if stacks_stream::sys::signal_caught() {
                return false;
            }
            std::thread::sleep(TICK);
        }
        !stacks_stream::sys::signal_caught()
    }
}
