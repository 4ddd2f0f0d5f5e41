//! The state lane of a thread (`state` rows): consecutive samples of a thread in the same
//! state, system call and file make one slice on the lane (tid + [`STATE_LANE`], named
//! `THREAD state`), from the first sample's pass to the last one's end (its time + the
//! sampling period), so the lane shows what the thread was doing over time.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use stacks_stream::col;

use super::{Tracer, opt_int, opt_str};
use crate::columns::Columns;

/// Added to a tid to make the tid of its state lane (real tids stay below 2^22; the IO lane
/// is at 2^30).
pub const STATE_LANE: i64 = 1 << 31;

/// What a run of samples has in common.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub state: String,
    pub syscall: Option<String>,
    pub path: Option<String>,
    pub local: Option<String>,
    pub remote: Option<String>,
}

/// Consecutive samples of one thread with the same [`Key`].
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub pid: i64,
    pub tid: i64,
    pub key: Key,
    pub start: i64,
    /// The last sample's time + its period.
    pub end: i64,
    pub samples: i64,
    /// The longest time in the system call a sample saw.
    pub longest_ns: Option<i64>,
    /// The first sample's stack: its `stackFrames` node and names.
    pub sf: Option<u64>,
    pub stack: Option<Arc<[String]>>,
}

/// One sample of a thread.
pub(crate) struct Sample {
    pub pid: i64,
    pub tid: i64,
    pub time: i64,
    pub period: i64,
    pub key: Key,
    pub duration: Option<i64>,
}

/// The open run of every thread.
#[derive(Default)]
pub(crate) struct StateRuns {
    open: HashMap<i64, Run>,
}

impl StateRuns {
    /// Whether `s` continues the open run of its thread: same key, and not after a gap of more
    /// than one sampling pass (a pass the recorder skipped is bridged).
    pub(crate) fn continues(&self, s: &Sample) -> bool {
        self.open.get(&s.tid).is_some_and(|r| {
            r.key == s.key && s.time >= r.start && s.time <= r.end.saturating_add(s.period)
        })
    }

    /// Add a sample; returns the run it closed, if any. `stack` (its `stackFrames` node and
    /// names) is kept only when the sample starts a run.
    pub(crate) fn push(
        &mut self,
        s: Sample,
        stack: (Option<u64>, Option<Arc<[String]>>),
    ) -> Option<Run> {
        let end = s.time.saturating_add(s.period.max(0));
        if self.continues(&s) {
            let r = self.open.get_mut(&s.tid).expect("an open run");
            r.end = r.end.max(end);
            r.samples += 1;
            r.longest_ns = r.longest_ns.max(s.duration);
            return None;
        }
        let (sf, names) = stack;
        self.open.insert(
            s.tid,
            Run {
                pid: s.pid,
                tid: s.tid,
                key: s.key,
                start: s.time,
                end,
                samples: 1,
                longest_ns: s.duration,
                sf,
                stack: names,
            },
        )
    }

    /// The runs still open, by tid.
    pub(crate) fn finish(&mut self) -> Vec<Run> {
        let mut runs: Vec<Run> = self.open.drain().map(|(_, r)| r).collect();
        runs.sort_unstable_by_key(|r| r.tid);
        runs
    }
}

impl<W: Write> Tracer<W> {
    /// A `state` row: extends its thread's run, or closes it and starts one.
    pub(super) fn state_sample(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        let Some(state) = c.str(col::STATE, row) else {
            return;
        };
        let owned = |name| c.str(name, row).map(str::to_string);
        let s = Sample {
            pid,
            tid,
            time: t,
            period: c.int(col::VALUE, row).unwrap_or(0),
            key: Key {
                state: state.to_string(),
                syscall: owned(col::SYSCALL),
                path: owned(col::PATH),
                local: owned(col::LOCAL),
                remote: owned(col::REMOTE),
            },
            duration: c.int(col::DURATION, row),
        };
        let stack = if self.state_runs.continues(&s) {
            (None, None)
        } else {
            (self.stack_id(c, row), self.stack_names(c, row))
        };
        if let Some(closed) = self.state_runs.push(s, stack) {
            self.state_run(&closed);
        }
    }

    /// The state lane of `tid`, named on first use.
    fn state_lane(&mut self, pid: i64, tid: i64) -> i64 {
        self.lane(pid, tid, STATE_LANE, "state")
    }

    /// One run as a slice on its thread's state lane: named after the state, and the system
    /// call when in one (`sleeping: read`).
    pub(super) fn state_run(&mut self, r: &Run) {
        let dur = r.end.saturating_sub(r.start);
        if !self.visible(r.start, dur) {
            return;
        }
        let lane = self.state_lane(r.pid, r.tid);
        let name = match &r.key.syscall {
            Some(call) => format!("{}: {call}", r.key.state),
            None => r.key.state.clone(),
        };
        let mut o = self.event("X", r.pid, lane, r.start);
        o.micros("dur", dur).str("name", &name).str("cat", "state");
        if let Some(sf) = r.sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        a.str("state", &r.key.state).int("samples", r.samples);
        opt_str(&mut a, "syscall", r.key.syscall.as_deref());
        opt_int(&mut a, "longest_in_syscall_ns", r.longest_ns);
        opt_str(&mut a, "path", r.key.path.as_deref());
        opt_str(&mut a, "local", r.key.local.as_deref());
        opt_str(&mut a, "remote", r.key.remote.as_deref());
        if let Some(stack) = &r.stack {
            a.strs("stack", stack.iter().map(String::as_str));
        }
        a.end();
        o.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time: i64, state: &str, syscall: Option<&str>) -> Sample {
        Sample {
            pid: 1,
            tid: 2,
            time,
            period: 10,
            key: Key {
                state: state.into(),
                syscall: syscall.map(Into::into),
                path: None,
                local: None,
                remote: None,
            },
            duration: syscall.map(|_| time),
        }
    }

    #[test]
    fn runs_split_on_a_change_or_a_gap() {
        let mut runs = StateRuns::default();
        assert!(
            runs.push(sample(0, "sleeping", Some("read")), (None, None))
                .is_none()
        );
        assert!(
            runs.push(sample(10, "sleeping", Some("read")), (None, None))
                .is_none()
        );
        // A skipped pass is bridged.
        assert!(
            runs.push(sample(30, "sleeping", Some("read")), (None, None))
                .is_none()
        );
        let r = runs
            .push(sample(40, "running", None), (None, None))
            .unwrap();
        assert_eq!(
            (r.start, r.end, r.samples, r.longest_ns),
            (0, 40, 3, Some(30))
        );
        // Two passes missing: a new run even in the same state.
        let r = runs
            .push(sample(70, "running", None), (None, None))
            .unwrap();
        assert_eq!((r.start, r.end, r.samples), (40, 50, 1));
        let r = runs
            .push(sample(80, "sleeping", Some("futex")), (None, None))
            .unwrap();
        assert_eq!((r.start, r.end), (70, 80));
        let open = runs.finish();
        assert_eq!(open.len(), 1);
        assert_eq!((open[0].start, open[0].end), (80, 90));
        assert!(runs.finish().is_empty());
    }
}
