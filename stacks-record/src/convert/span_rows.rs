//! `span` rows (`-e span`): a thread's enter and exit of a `tracing` span paired into one row,
//! from the enter (its time, stacks) to the exit (its duration); spans still entered when their
//! process exits or the recording ends get a row with no duration.

use std::collections::HashMap;

use stacks_stream::kind;

use super::{Converter, Decoded, RowStacks};
use crate::kernel::abi::types::{stacks_span_event, stacks_span_op};
use crate::kernel::event::{Header, RawEvent};
use crate::output::rows::{Extra, RowBuilder};

/// Spans entered and not left per thread, innermost last.
#[derive(Default)]
pub(crate) struct OpenSpans {
    by_tid: HashMap<u32, Vec<(Header, RowStacks)>, ahash::RandomState>,
    /// Exits whose enter was not seen (entered before the probes were attached).
    pub unmatched_exits: u64,
}

/// Spans open on one thread at most (deeper ones are not kept: an exit lost on the way would
/// otherwise grow the stack for ever).
const MAX_DEPTH: usize = 256;

impl OpenSpans {
    /// The stacks of every span entered and not left.
    pub(super) fn stacks(&self) -> impl Iterator<Item = RowStacks> + '_ {
        self.by_tid.values().flatten().map(|(_, s)| *s)
    }

    /// Change the stacks of every span entered and not left.
    pub(super) fn for_each_stacks(&mut self, mut f: impl FnMut(&mut RowStacks)) {
        for (_, s) in self.by_tid.values_mut().flatten() {
            f(s);
        }
    }
}

impl Converter {
    /// A span's enter (kept until its exit) or exit (its row appended).
    pub(super) fn span_transition(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) {
        let h = e.h;
        let ev: stacks_span_event = e.info();
        if ev.op == stacks_span_op::STACKS_SPAN_ENTER {
            let stacks = self.stacks(e, rows);
            let open = self.open_spans.by_tid.entry(h.tid).or_default();
            if open.len() < MAX_DEPTH {
                open.push((h, stacks));
            }
            return;
        }
        let open = self.open_spans.by_tid.entry(h.tid).or_default();
        let Some(at) = open
            .iter()
            .rposition(|(o, _)| o.span.span_id == h.span.span_id)
        else {
            self.open_spans.unmatched_exits += 1;
            return;
        };
        // Spans entered inside it whose exit was not seen end with it, with no duration.
        let inner: Vec<_> = open.drain(at..).collect();
        let mut inner = inner.into_iter();
        let (enter, stacks) = inner.next().expect("found above");
        for (h, stacks) in inner {
            self.push_row(&h, span_row(None), stacks, rows);
        }
        let ns = h.ts.saturating_sub(enter.ts);
        self.push_row(&enter, span_row(Some(ns)), stacks, rows);
    }

    /// Rows for the spans still entered, with no duration: in process `pid` (its exit), or
    /// everywhere (`None`: the end of the recording).
    pub(crate) fn end_spans(&mut self, pid: Option<u32>, rows: &mut RowBuilder) {
        if self.open_spans.by_tid.is_empty() {
            return;
        }
        let mut ended = Vec::new();
        self.open_spans.by_tid.retain(|_, open| {
            if open
                .first()
                .is_some_and(|(h, _)| pid.is_none_or(|p| h.pid == p))
            {
                ended.append(open);
            }
            !open.is_empty()
        });
        ended.sort_by_key(|(h, _)| h.ts);
        for (h, stacks) in ended {
            self.push_row(&h, span_row(None), stacks, rows);
        }
    }
}

/// A span row lasting `ns` (`None`: not left).
fn span_row(ns: Option<u64>) -> Decoded {
    Decoded {
        kind: kind::SPAN,
        value: ns.unwrap_or(0) as i64,
        extra: Extra {
            duration: ns.map(|n| n as i64),
            ..Extra::default()
        },
    }
}
