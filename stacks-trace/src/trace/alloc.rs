//! `alloc` rows (`-e alloc`): a sampled allocation as an instant `alloc` with its stack, the
//! block's address (hex, as debuggers and allocators print it), its size and its weight (the
//! bytes it stands for); the free of a sampled block as an instant `free` with its address (and
//! size, when the producer gave it). Category `alloc`, on the allocating thread's track.

use std::io::Write;

use stacks_stream::col;

use super::{Tracer, opt_int, span_args};
use crate::columns::Columns;

impl<W: Write> Tracer<W> {
    pub(super) fn alloc_event(&mut self, c: &Columns, row: usize, pid: i64, tid: i64, t: i64) {
        if !self.visible(t, 0) {
            return;
        }
        let free = c.str(col::OP, row) == Some("free");
        let sf = if free { None } else { self.stack_id(c, row) };
        let mut o = self.event("i", pid, tid, t);
        o.str("s", "t")
            .str("name", if free { "free" } else { "alloc" })
            .str("cat", "alloc");
        if let Some(sf) = sf {
            o.str("sf", &sf.to_string());
        }
        let mut a = o.obj("args");
        span_args(&mut a, c, row);
        if let Some(address) = c.arg(row, 0) {
            a.str("address", &format!("{:#x}", address as u64));
        }
        // A free without a size (OpenTelemetry's otel_memory:free gives none) has size 0.
        opt_int(&mut a, "size", c.arg(row, 1).filter(|&s| !free || s > 0));
        if !free {
            opt_int(&mut a, "weight", c.int(col::VALUE, row));
        }
        a.end();
        o.end();
    }
}
