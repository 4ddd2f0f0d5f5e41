//! Rows of paired records (`kinds::Taken::Interval`: a `tracing` span entered and left): a
//! thread's open and close paired into one row, from the open (its time, stacks) to the close
//! (its duration, `EventKind::interval`); intervals still open when their process exits or the
//! recording ends get a row with no duration.

use std::collections::HashMap;

use super::{Converter, RowStacks};
use crate::kernel::event::{Header, RawEvent};
use crate::kinds::{self, Edge, EventKind};
use crate::output::rows::RowBuilder;

/// An interval open on a thread.
struct Open {
    /// Its open's header and stacks, which its row has.
    h: Header,
    stacks: RowStacks,
    kind: &'static dyn EventKind,
    /// What its close names (`Edge`).
    id: u64,
}

/// Intervals opened and not closed per thread, innermost last.
#[derive(Default)]
pub(crate) struct OpenIntervals {
    by_tid: HashMap<u32, Vec<Open>, ahash::RandomState>,
    /// Closes whose open was not seen (opened before the probes were attached).
    pub unmatched_closes: u64,
}

/// Intervals open on one thread at most (deeper ones are not kept: a close lost on the way
/// would otherwise grow the stack for ever).
const MAX_DEPTH: usize = 256;

impl OpenIntervals {
    /// The stacks of every interval open.
    pub(super) fn stacks(&self) -> impl Iterator<Item = RowStacks> + '_ {
        self.by_tid.values().flatten().map(|o| o.stacks)
    }

    /// Change the stacks of every interval open.
    pub(super) fn for_each_stacks(&mut self, mut f: impl FnMut(&mut RowStacks)) {
        for o in self.by_tid.values_mut().flatten() {
            f(&mut o.stacks);
        }
    }
}

impl Converter {
    /// An open (kept until its close) or a close (its row appended). False for a record whose
    /// kind does not say which edge it is.
    pub(super) fn interval_edge(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) -> bool {
        let h = e.h;
        let Some((kind, edge)) = kinds::for_part(h.kind).and_then(|k| Some((k, k.edge(e)?))) else {
            return false;
        };
        let id = match edge {
            Edge::Open(id) => {
                let stacks = self.stacks(e, rows);
                let open = self.open.by_tid.entry(h.tid).or_default();
                if open.len() < MAX_DEPTH {
                    open.push(Open {
                        h,
                        stacks,
                        kind,
                        id,
                    });
                }
                return true;
            }
            Edge::Close(id) => id,
        };
        let open = self.open.by_tid.entry(h.tid).or_default();
        let Some(at) = open
            .iter()
            .rposition(|o| o.id == id && std::ptr::addr_eq(o.kind, kind))
        else {
            self.open.unmatched_closes += 1;
            return true;
        };
        // Intervals opened inside it whose close was not seen end with it, with no duration.
        let inner: Vec<Open> = open.drain(at..).collect();
        let mut inner = inner.into_iter();
        let outer = inner.next().expect("found above");
        for o in inner {
            self.push_interval(&o.h, o.kind, None, o.stacks, rows);
        }
        let ns = h.ts.saturating_sub(outer.h.ts);
        self.push_interval(&outer.h, kind, Some(ns), outer.stacks, rows);
        true
    }

    /// Rows for the intervals still open, with no duration: in process `pid` (its exit), or
    /// everywhere (`None`: the end of the recording).
    pub(crate) fn end_intervals(&mut self, pid: Option<u32>, rows: &mut RowBuilder) {
        if self.open.by_tid.is_empty() {
            return;
        }
        let mut ended = Vec::new();
        self.open.by_tid.retain(|_, open| {
            if open
                .first()
                .is_some_and(|o| pid.is_none_or(|p| o.h.pid == p))
            {
                ended.append(open);
            }
            !open.is_empty()
        });
        ended.sort_by_key(|o| o.h.ts);
        for o in ended {
            self.push_interval(&o.h, o.kind, None, o.stacks, rows);
        }
    }

    /// The row of an interval of `kind` opened by the record with header `h`, lasting `ns`.
    fn push_interval(
        &mut self,
        h: &Header,
        kind: &'static dyn EventKind,
        ns: Option<u64>,
        stacks: RowStacks,
        rows: &mut RowBuilder,
    ) {
        match kind.interval(ns) {
            Some(row) => self.push_row(h, row, stacks, rows),
            None => self.counts.malformed += 1,
        }
    }
}
