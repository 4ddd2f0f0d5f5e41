//! The trace's `stackFrames` table: every distinct stack prefix becomes a node whose `parent`
//! is the frame that called it, so a leaf id names a whole stack (root → leaf chain). Nodes are
//! interned as rows arrive: the table grows with distinct stacks, not rows.

use std::collections::HashMap;
use std::ops::Range;

use stacks_stream::frames::{Frame, StackFrames, module_basename};

use crate::json::{Obj, push_str_literal};

/// Category of kernel frames.
const KERNEL: &str = "kernel";

/// The category of a frame: `kernel`, or the basename of its module.
fn category<'a>(f: &Frame<'a>) -> &'a str {
    if f.kernel {
        KERNEL
    } else {
        module_basename(f.module)
    }
}

#[derive(Default)]
pub(crate) struct FrameTable {
    strings: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    ids: HashMap<(u64, u32, u32), u64>,
    /// Node `id` is `nodes[id - 1]`: (parent id or 0, name, category).
    nodes: Vec<(u64, u32, u32)>,
}

impl FrameTable {
    fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.into());
        self.strings.insert(s.into(), id);
        id
    }

    /// Id of the leaf node of a stack (`frames`, a row's or an entry's, leaf first in the
    /// column), adding the nodes it needs; `None` for a null or empty stack.
    pub(crate) fn intern(&mut self, stack: &StackFrames, frames: Range<usize>) -> Option<u64> {
        let mut parent = 0;
        let mut name = String::new();
        for i in frames.rev() {
            let Some(f) = stack.frame(i) else { continue };
            name.clear();
            name.push_str(&f.name());
            let n = self.string(&name);
            let c = self.string(category(&f));
            parent = match self.ids.get(&(parent, n, c)) {
                Some(&id) => id,
                None => {
                    self.nodes.push((parent, n, c));
                    let id = self.nodes.len() as u64;
                    self.ids.insert((parent, n, c), id);
                    id
                }
            };
        }
        (parent != 0).then_some(parent)
    }

    /// Number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Append node `index` (0-based) as `"id":{"name":…,"category":…,"parent":…}`.
    pub(crate) fn push_node(&self, buf: &mut String, index: usize) {
        let Some(&(parent, n, c)) = self.nodes.get(index) else {
            return;
        };
        push_str_literal(buf, &(index + 1).to_string());
        buf.push(':');
        let mut o = Obj::new(buf);
        o.str("name", &self.names[n as usize])
            .str("category", &self.names[c as usize]);
        if parent != 0 {
            o.str("parent", &parent.to_string());
        }
        o.end();
    }
}
