//! The budget's controller (docs/agent.md#the-cpu-budget): from the recording's cost each
//! second (a fraction of the host's CPUs), when to take another level of the ladder. Over the
//! budget on average for [`Timing::shed_after`]: the next level (the last at once when over
//! [`FLOOD_FACTOR`] times it). Restoring is where a naive rule oscillates — a level that costs
//! 2% under a 5% budget says nothing about whether the level before it, which cost 8%, fits —
//! so the controller remembers what each level cost relative to the others when it was taken,
//! and restores only when the level before, *estimated* from the cost now and that memory, fits
//! the budget with a margin ([`RESTORE_MARGIN`]), for [`Timing::restore_after`] on end. The load
//! of what a level sheds is not seen at that level (a flood of a kind switched off), so a level
//! held for [`Timing::probe_after`] tries the level before anyway (a probe). A restore followed
//! soon by a shed doubles both times (up to [`MAX_HOLD_FACTOR`] times): a workload that changes
//! at that rhythm is not followed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Over this many times the budget for [`Timing::shed_after`]: straight to the last level (a
/// flood that large is not met by one step).
pub(crate) const FLOOD_FACTOR: f64 = 2.0;
/// A level is restored only when its estimated cost is under this fraction of the budget.
pub(crate) const RESTORE_MARGIN: f64 = 0.75;
/// The time asked before a restore grows to at most this many times [`Timing::restore_after`].
pub(crate) const MAX_HOLD_FACTOR: u32 = 8;
/// Costs under this (a fraction of the host's CPUs) count as this, so that an idle level's
/// cost ratio stays finite.
const COST_FLOOR: f64 = 1e-4;

/// The controller's times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Timing {
    /// Over budget on average for this long: shed.
    pub shed_after: Duration,
    /// The level before fits on average for this long (and this long since the last change):
    /// restore.
    pub restore_after: Duration,
    /// The first seconds of a pipeline (reading symbols, loading BPF) and of a level taken in
    /// place (the stages finishing the rows of the level before) are not measured.
    pub settle: Duration,
    /// What a level costs is measured over at most this long after it was taken.
    pub measure: Duration,
    /// A level held this long is left for the level before even when that is not estimated
    /// to fit (a probe: the load of the kinds a level sheds is not seen at that level).
    pub probe_after: Duration,
}

impl Timing {
    /// The times for a shed window `window` (10 s by default): restore after 6 windows, the
    /// cost of a new level measured over 3, a probe after 60 (10 minutes); a pipeline
    /// settles for 3 s whatever the window (reading symbols and loading BPF take what they
    /// take).
    pub(crate) fn from_window(window: Duration) -> Timing {
        Timing {
            shed_after: window,
            restore_after: window * 6,
            settle: Duration::from_secs(3),
            measure: window * 3,
            probe_after: window * 60,
        }
    }
}

impl Default for Timing {
    fn default() -> Timing {
        Timing::from_window(Duration::from_secs(10))
    }
}

/// A level change the budget asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Change {
    /// Over budget for [`Timing::shed_after`]: take level `to` (one more, or the last when
    /// over [`FLOOD_FACTOR`] times the budget), `used` = the window's cost.
    Shed { to: usize, used: f64 },
    /// The level before is estimated to fit, or (`probe`) the level was held for
    /// [`Timing::probe_after`]: take level `to` (one fewer); `used` = the cost now,
    /// `estimate` = what level `to` is estimated to cost.
    Restore {
        to: usize,
        used: f64,
        estimate: f64,
        probe: bool,
    },
}

/// A level change taken, whose effect is being measured.
#[derive(Debug, Clone, Copy)]
struct Taken {
    from: usize,
    /// The cost at `from` before the change.
    before: f64,
    at: Instant,
}

/// The controller's state: the limit, the levels, the level taken, the recent cost, and what
/// it remembers of each level's cost.
#[derive(Debug)]
pub(crate) struct Controller {
    /// The limit as a fraction of the host's CPUs.
    pub limit: f64,
    /// Levels of the ladder.
    levels: usize,
    pub level: usize,
    timing: Timing,
    cpus: f64,
    /// Cost per second (fraction of the host's CPUs) since the level was taken, newest last.
    window: VecDeque<(Instant, f64)>,
    /// The cumulative cost (CPU seconds) at the last observation.
    last: Option<(Instant, f64)>,
    settled_at: Option<Instant>,
    /// `weight[L]`: what level 0 costs over what level L costs, as last measured (level 0: 1);
    /// `None` for a level not measured yet, estimated as costly as level 0.
    weight: Vec<Option<f64>>,
    /// The change being measured, until [`Timing::measure`] after it.
    taken: Option<Taken>,
    /// The last change, the last restore, and what the times asked before a restore are
    /// multiplied by now (doubled by a restore that a shed soon followed).
    last_change: Option<Instant>,
    last_restore: Option<Instant>,
    backoff: u32,
    /// Since when the level before has been estimated to fit.
    fits_since: Option<Instant>,
    /// Where a flood goes first: the last level taken in place (then the last level).
    flood_to: usize,
}

impl Controller {
    pub(crate) fn new(limit: f64, levels: usize, cpus: f64, timing: Timing) -> Controller {
        let mut weight = vec![None; levels.max(1)];
        weight[0] = Some(1.0);
        Controller {
            limit,
            levels: levels.max(1),
            level: 0,
            timing,
            cpus,
            window: VecDeque::new(),
            last: None,
            settled_at: None,
            weight,
            taken: None,
            last_change: None,
            last_restore: None,
            backoff: 1,
            fits_since: None,
            flood_to: 0,
        }
    }

    /// A flood (over [`FLOOD_FACTOR`] times the budget) goes to level `to` first when below
    /// it (the last level the recorder takes in place), then to the last level.
    pub(crate) fn flood_to(mut self, to: usize) -> Controller {
        self.flood_to = to.min(self.levels - 1);
        self
    }

    /// A pipeline started at `now`: measuring starts over once it settled (and the level
    /// taken by starting it is measured from then: stopping the pipeline before took time).
    pub(crate) fn pipeline_started(&mut self, now: Instant) {
        self.last = None;
        let settled = now + self.timing.settle;
        if let Some(t) = &mut self.taken {
            t.at = settled;
        }
        self.restart_window(settled);
    }

    fn restart_window(&mut self, settled_at: Instant) {
        self.window.clear();
        self.fits_since = None;
        self.settled_at = Some(settled_at);
    }

    /// How long the level before must be estimated to fit before it is restored now (grows
    /// when restores are followed by sheds).
    pub(crate) fn hold(&self) -> Duration {
        self.timing.restore_after * self.backoff
    }

    /// How long a level is held before the level before is tried anyway, now.
    pub(crate) fn probe(&self) -> Duration {
        self.timing.probe_after * self.backoff
    }

    /// The mean cost over the last `span` (none until measured that long).
    fn mean(&self, now: Instant, span: Duration) -> Option<f64> {
        let start = self.settled_at?;
        if now < start + span {
            return None;
        }
        self.mean_within(now, span)
    }

    /// The mean cost over what the window has of the last `span`.
    fn mean_within(&self, now: Instant, span: Duration) -> Option<f64> {
        let recent: Vec<f64> = self
            .window
            .iter()
            .filter(|(t, _)| now.duration_since(*t) <= span)
            .map(|(_, v)| *v)
            .collect();
        (!recent.is_empty()).then(|| recent.iter().sum::<f64>() / recent.len() as f64)
    }

    /// The cost over the last [`Timing::shed_after`] (or since the level was taken, if less),
    /// as a fraction of the host's CPUs.
    pub(crate) fn used(&self, now: Instant) -> Option<f64> {
        self.mean_within(now, self.timing.shed_after)
    }

    /// What level `to` is estimated to cost when the level taken costs `now_cost`.
    pub(crate) fn estimate(&self, to: usize, now_cost: f64) -> f64 {
        let here = self.weight[self.level].unwrap_or(1.0);
        let there = self.weight[to].unwrap_or(1.0);
        now_cost.max(COST_FLOOR) * here / there
    }

    /// Level `to` is taken at `now` (its settings written in place: measuring starts again
    /// once settled, as the stages still work through the rows recorded before the change —
    /// charged to the new level, a flood's backlog took a level that fitted past the budget;
    /// a pipeline started again calls [`Self::pipeline_started`] after this).
    pub(crate) fn take(&mut self, to: usize, now: Instant) {
        let before = self
            .mean_within(now, self.timing.measure)
            .unwrap_or(self.limit);
        let restore = to < self.level;
        // A shed soon after a restore: the restore was wrong; ask longer before the next one.
        if !restore
            && self
                .last_restore
                .is_some_and(|at| now.duration_since(at) < self.timing.restore_after * 2)
        {
            self.backoff = (self.backoff * 2).min(MAX_HOLD_FACTOR);
        }
        if restore {
            self.last_restore = Some(now);
        }
        let settled = now + self.timing.settle;
        self.taken = Some(Taken {
            from: self.level,
            before,
            at: settled,
        });
        self.level = to;
        self.last_change = Some(now);
        self.restart_window(settled);
    }

    /// Learn the weight of the level taken from its cost since the change and the cost before
    /// it, once measured for [`Timing::measure`] or when it is left (`closing`).
    fn learn(&mut self, now: Instant, closing: bool) {
        let Some(t) = self.taken else {
            return;
        };
        if !closing && now.duration_since(t.at) < self.timing.measure {
            return;
        }
        self.taken = None;
        let measured = self
            .settled_at
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        if measured >= self.timing.shed_after / 2
            && let Some(after) = self.mean_within(now, self.timing.measure)
            && let Some(w_from) = self.weight[t.from]
        {
            self.weight[self.level] =
                Some(w_from * t.before.max(COST_FLOOR) / after.max(COST_FLOOR));
        }
    }

    /// The cumulative cost at `now` is `seconds` (the stages' CPU seconds plus BPF run time):
    /// the change to make, if any (taken by [`Self::take`]).
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
        let keep = self.timing.restore_after.max(self.timing.measure) * MAX_HOLD_FACTOR;
        while self
            .window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > keep)
        {
            self.window.pop_front();
        }
        let change = self.decide(now);
        // The cost of the level taken is learnt until measured, or now if it changes.
        self.learn(now, change.is_some());
        change
    }

    fn decide(&mut self, now: Instant) -> Option<Change> {
        if self.level + 1 < self.levels
            && let Some(used) = self.mean(now, self.timing.shed_after)
            && used > self.limit
        {
            let to = if used > self.limit * FLOOD_FACTOR {
                if self.level < self.flood_to {
                    self.flood_to
                } else {
                    self.levels - 1
                }
            } else {
                self.level + 1
            };
            return Some(Change::Shed { to, used });
        }
        if self.level == 0 {
            return None;
        }
        let used = self.mean(now, self.timing.shed_after)?;
        let held = self
            .last_change
            .map_or(Duration::MAX, |c| now.duration_since(c));
        let estimate = self.estimate(self.level - 1, used);
        if held >= self.probe() {
            let used = self
                .mean_within(now, self.timing.restore_after)
                .unwrap_or(used);
            return Some(Change::Restore {
                to: self.level - 1,
                used,
                estimate: self.estimate(self.level - 1, used),
                probe: true,
            });
        }
        if estimate >= self.limit * RESTORE_MARGIN {
            self.fits_since = None;
            return None;
        }
        let since = *self.fits_since.get_or_insert(now);
        if now.duration_since(since) >= self.hold() && held >= self.hold() {
            let used = self.mean_within(now, self.hold()).unwrap_or(used);
            let estimate = self.estimate(self.level - 1, used);
            if estimate < self.limit * RESTORE_MARGIN {
                return Some(Change::Restore {
                    to: self.level - 1,
                    used,
                    estimate,
                    probe: false,
                });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reproducible series of numbers in [0, 1).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Run `c` for `seconds` at one observation a second, the cost of a second at level L
    /// drawn by `cost(L, second, rng)` (a fraction of the host's CPUs); the changes taken, by
    /// second.
    fn simulate(
        c: &mut Controller,
        seconds: u64,
        cost: &dyn Fn(usize, u64, &mut Lcg) -> f64,
    ) -> Vec<(u64, Change)> {
        let t0 = Instant::now();
        let mut rng = Lcg(65);
        let mut total = 0.0;
        let mut changes = Vec::new();
        c.pipeline_started(t0);
        for s in 0..seconds {
            let now = t0 + Duration::from_secs(s);
            total += cost(c.level, s, &mut rng) * c.cpus;
            if let Some(change) = c.observe(now, total) {
                let to = match change {
                    Change::Shed { to, .. } | Change::Restore { to, .. } => to,
                };
                c.take(to, now);
                changes.push((s, change));
            }
        }
        changes
    }

    /// #65: under a 5% budget, the agent as configured cost 5.7–9.9% of the host's CPUs beside
    /// pgbench and 0.8–3.5% a level lower; the old rule (restore after a minute under the
    /// budget) changed level 12 times in 8 minutes. Remembering what the level before cost,
    /// the controller sheds once and stays but for a probe every 10, 20, 40… minutes: at most
    /// 2 changes in any 10 minutes of an hour.
    #[test]
    fn a_steady_workload_over_the_budget_is_shed_once_and_not_restored() {
        let mut c = Controller::new(0.05, 4, 2.0, Timing::default());
        let pgbench = |level: usize, _: u64, r: &mut Lcg| match level {
            0 => 0.057 + r.next() * (0.099 - 0.057),
            _ => 0.008 + r.next() * (0.035 - 0.008),
        };
        let changes = simulate(&mut c, 3600, &pgbench);
        eprintln!("remembering, an hour: {changes:?}");
        assert!(
            matches!(changes[0], (13, Change::Shed { to: 1, .. })),
            "{changes:?}"
        );
        // The probes (a level held 10 minutes tries the level before) are the only restores,
        // each shed again 10 s later, each doubling the time to the next.
        for (i, (s, _)) in changes.iter().enumerate() {
            let in_ten_minutes = changes[i..].iter().take_while(|(t, _)| t - s < 600).count();
            assert!(in_ten_minutes <= 2, "from {s} s: {changes:?}");
        }
        assert!(changes.len() <= 5, "{changes:?}");
        assert!(
            changes.iter().all(|(_, c)| match c {
                Change::Restore { probe, .. } => *probe,
                Change::Shed { .. } => true,
            }),
            "{changes:?}"
        );
        assert_eq!(c.level, 1);
        // What level 0 costs was learnt: estimated from level 1's cost, over the margin.
        let est = c.estimate(0, 0.0215);
        assert!((0.06..0.10).contains(&est), "{est}");
    }

    /// The naive rule on the same series (restore after a minute under the budget, whatever
    /// the level before costs; no longer hold after a wrong restore) oscillates as #65 saw
    /// (12 changes in 8 minutes): the memory is what stops it.
    #[test]
    fn without_the_memory_the_same_series_oscillates() {
        let mut c = Controller::new(0.05, 4, 2.0, Timing::default());
        let pgbench = |level: usize, _: u64, r: &mut Lcg| match level {
            0 => 0.057 + r.next() * (0.099 - 0.057),
            _ => 0.008 + r.next() * (0.035 - 0.008),
        };
        let t0 = Instant::now();
        let mut rng = Lcg(65);
        let mut total = 0.0;
        let mut changes = 0;
        c.pipeline_started(t0);
        for s in 0..600 {
            let now = t0 + Duration::from_secs(s);
            total += pgbench(c.level, s, &mut rng) * c.cpus;
            // Forget every level's cost: the naive rule.
            for w in c.weight.iter_mut().skip(1) {
                *w = None;
            }
            c.weight[c.level] = Some(1.0);
            c.weight[0] = Some(1.0);
            c.backoff = 1;
            if let Some(change) = c.observe(now, total) {
                let to = match change {
                    Change::Shed { to, .. } | Change::Restore { to, .. } => to,
                };
                c.take(to, now);
                changes += 1;
            }
        }
        eprintln!("naive: {changes} changes in 10 minutes");
        assert!(changes >= 10, "{changes}");
    }

    /// When the workload falls, the level before fits and is restored; when it rises again,
    /// shed again — and a shed soon after a restore makes the next restore wait longer.
    #[test]
    fn a_workload_that_falls_is_restored_and_a_wrong_restore_waits_longer() {
        let mut c = Controller::new(0.05, 4, 2.0, Timing::default());
        // Busy for 3 minutes (level 0 at 8%, level 1 at 2%), then quiet (0.5% and 0.12%).
        let load = |level: usize, s: u64, _: &mut Lcg| {
            let busy = s < 180;
            match (level, busy) {
                (0, true) => 0.08,
                (_, true) => 0.02,
                (0, false) => 0.005,
                (_, false) => 0.00125,
            }
        };
        let changes = simulate(&mut c, 400, &load);
        assert!(
            matches!(changes[0].1, Change::Shed { to: 1, .. }),
            "{changes:?}"
        );
        let (when, restore) = changes[1];
        assert!(
            matches!(restore, Change::Restore { to: 0, estimate, probe: false, .. } if estimate < 0.05 * RESTORE_MARGIN),
            "{changes:?}"
        );
        // Quiet from 180 s: the window holds busy seconds until 190 s, then a minute fits.
        assert!((240..=260).contains(&when), "{changes:?}");
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(c.hold(), Timing::default().restore_after);

        // A restore that a shed follows soon doubles the hold.
        let mut c = Controller::new(0.05, 3, 2.0, Timing::default());
        let t0 = Instant::now();
        c.take(1, t0);
        c.take(0, t0 + Duration::from_secs(100));
        c.take(1, t0 + Duration::from_secs(120));
        assert_eq!(c.hold(), Timing::default().restore_after * 2);
    }

    /// Over twice the budget: the last level at once; a flood that stops is restored.
    #[test]
    fn a_flood_goes_to_the_last_level_at_once() {
        let mut c = Controller::new(0.04, 4, 2.0, Timing::default());
        let flood = |level: usize, s: u64, _: &mut Lcg| match (level, s < 120) {
            (3, true) => 0.02,
            (_, true) => 0.25,
            (_, false) => 0.001,
        };
        let changes = simulate(&mut c, 300, &flood);
        assert!(
            matches!(changes[0], (13, Change::Shed { to: 3, .. })),
            "{changes:?}"
        );
        assert!(
            matches!(changes.get(1), Some((_, Change::Restore { to: 2, .. }))),
            "{changes:?}"
        );
    }

    /// A flood goes first to the last level taken in place, then, still a flood, to the last:
    /// a window after the first change has settled (3 s: the rows of the level before are not
    /// the new level's cost).
    #[test]
    fn a_flood_takes_the_in_place_levels_first() {
        let mut c = Controller::new(0.04, 6, 2.0, Timing::default()).flood_to(3);
        let flood = |level: usize, _: u64, _: &mut Lcg| if level < 5 { 0.25 } else { 0.02 };
        let changes = simulate(&mut c, 60, &flood);
        assert!(
            matches!(changes[0], (13, Change::Shed { to: 3, .. })),
            "{changes:?}"
        );
        assert!(
            matches!(changes[1], (26, Change::Shed { to: 5, .. })),
            "{changes:?}"
        );
    }

    /// A level taken by restarting the pipeline is measured from the new pipeline's start:
    /// the old one took its time to stop (the recorder handing over what it held).
    #[test]
    fn a_level_taken_by_a_restart_is_measured_after_it() {
        let mut c = Controller::new(0.05, 3, 1.0, Timing::default());
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        c.pipeline_started(t0);
        let mut total = 0.0;
        for s in 0..=13 {
            total += 0.2;
            if let Some(Change::Shed { to, .. }) = c.observe(at(s), total) {
                c.take(to, at(s));
                break;
            }
        }
        assert_eq!(c.level, 2, "a flood: the last level");
        // Stopping took 40 s; the new pipeline costs 1%.
        c.pipeline_started(at(53));
        for s in 53..120 {
            total += 0.01;
            assert_eq!(c.observe(at(s), total), None, "{s}");
        }
        let w = c.weight[2].expect("level 2 measured");
        assert!((w - 20.0).abs() < 1e-6, "{w}");
    }

    #[test]
    fn timing_follows_the_window() {
        let t = Timing::from_window(Duration::from_secs(2));
        assert_eq!(t.shed_after, Duration::from_secs(2));
        assert_eq!(t.restore_after, Duration::from_secs(12));
        assert_eq!(t.probe_after, Duration::from_secs(120));
        assert_eq!(t.settle, Duration::from_secs(3));
        assert_eq!(Timing::default().settle, Duration::from_secs(3));
    }
}
