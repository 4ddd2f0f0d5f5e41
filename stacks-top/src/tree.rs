//! The merged stack tree of one row (`p`): every stack of the row's samples merged from the
//! root (user frames, then kernel frames) with each node's share of the row, the hottest path
//! open, nodes folded and unfolded from the keyboard. Off-CPU intervals a `wake` row explains
//! go on under their leaf: a "woken by" node, the waker thread, then the waker's stack at the
//! wakeup from its leaf (`try_to_wake_up`) back to its root.

use std::collections::HashMap;

use anyhow::Result;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use stacks_stream::col;
use stacks_stream::frames::StackFrames;

/// One frame of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub kernel: bool,
    pub value: f64,
    pub depth: usize,
    pub children: Vec<usize>,
    pub open: bool,
    /// On a waker's node: its thread id (0 for an interrupt, softirq or timer).
    pub waker_tid: Option<i64>,
}

/// The tree; node 0 is the root (every stack).
#[derive(Debug, Clone)]
pub struct Tree {
    pub nodes: Vec<Node>,
    /// Index into [`Self::visible`] of the highlighted line.
    pub cursor: usize,
}

/// Name of the node holding samples without a stack.
pub const NO_STACK: &str = "[no stack]";

/// Name of the node under a blocked stack's leaf holding its wakers.
pub(crate) const WOKEN_BY: &str = "woken by";

/// One step of a path from the root: a frame's name, whether it is a kernel frame, and the
/// waker's thread id on a waker's node.
type Step = (String, bool, Option<i64>);

/// A waker's node: its thread name, with its id for a task.
pub(crate) fn waker_name(thread: &str, tid: i64) -> String {
    if tid == 0 {
        thread.to_string()
    } else {
        format!("{thread} · tid {tid}")
    }
}

impl Tree {
    /// The tree of query result `batches` with columns `stack`, `w` (weight, may be null)
    /// and `n` (events, the weight where `w` is null), and optionally `waker_stack`,
    /// `waker` and `waker_tid` (the planner's stacks with wakers).
    pub fn new(batches: &[RecordBatch]) -> Result<Self> {
        let mut tree = Tree {
            nodes: vec![Node {
                name: "all".into(),
                kernel: false,
                value: 0.0,
                depth: 0,
                children: Vec::new(),
                open: true,
                waker_tid: None,
            }],
            cursor: 0,
        };
        let mut index: HashMap<(usize, String, bool), usize> = HashMap::new();
        for batch in batches {
            let stack = batch
                .column_by_name(col::STACK)
                .ok_or_else(|| anyhow::anyhow!("no stack column"))?;
            let w = arrow_cast::cast(batch.column(1), &DataType::Int64)?;
            let w = w.as_primitive::<Int64Type>();
            let n = arrow_cast::cast(batch.column(2), &DataType::Int64)?;
            let n = n.as_primitive::<Int64Type>();
            let frames = StackFrames::new(stack, "the row's stacks", col::STACK)?;
            let wakers = match (
                batch.column_by_name("waker_stack"),
                batch.column_by_name("waker"),
                batch.column_by_name("waker_tid"),
            ) {
                (Some(s), Some(name), Some(tid)) => Some((
                    StackFrames::new(s, "the wakers' stacks", "waker_stack")?,
                    arrow_cast::cast(name, &DataType::Utf8)?,
                    arrow_cast::cast(tid, &DataType::Int64)?,
                )),
                _ => None,
            };
            for row in 0..batch.num_rows() {
                let weight = if w.is_valid(row) {
                    w.value(row)
                } else {
                    n.value(row)
                } as f64;
                tree.nodes[0].value += weight;
                let mut at = 0;
                let mut path: Vec<Step> = if frames.is_null(row) {
                    vec![(NO_STACK.to_string(), false, None)]
                } else {
                    frames
                        .row(row)
                        .rev()
                        .filter_map(|i| frames.frame(i))
                        .map(|f| (f.name().into_owned(), f.kernel, None))
                        .collect()
                };
                if let Some((wframes, name, tid)) = &wakers {
                    let (name, tid) = (name.as_string::<i32>(), tid.as_primitive::<Int64Type>());
                    if name.is_valid(row) {
                        let tid = if tid.is_valid(row) { tid.value(row) } else { 0 };
                        path.push((WOKEN_BY.to_string(), false, None));
                        path.push((waker_name(name.value(row), tid), false, Some(tid)));
                        if !wframes.is_null(row) {
                            path.extend(
                                wframes
                                    .row(row)
                                    .filter_map(|i| wframes.frame(i))
                                    .map(|f| (f.name().into_owned(), f.kernel, None)),
                            );
                        }
                    }
                }
                for (name, kernel, waker_tid) in path {
                    let depth = tree.nodes[at].depth + 1;
                    let key = (at, name, kernel);
                    let next = match index.get(&key) {
                        Some(&i) => i,
                        None => {
                            let i = tree.nodes.len();
                            tree.nodes.push(Node {
                                name: key.1.clone(),
                                kernel,
                                value: 0.0,
                                depth,
                                children: Vec::new(),
                                open: false,
                                waker_tid,
                            });
                            tree.nodes[at].children.push(i);
                            index.insert(key, i);
                            i
                        }
                    };
                    tree.nodes[next].value += weight;
                    at = next;
                }
            }
        }
        for i in 0..tree.nodes.len() {
            let mut kids = std::mem::take(&mut tree.nodes[i].children);
            kids.sort_by(|a, b| {
                tree.nodes[*b]
                    .value
                    .total_cmp(&tree.nodes[*a].value)
                    .then_with(|| tree.nodes[*a].name.cmp(&tree.nodes[*b].name))
            });
            tree.nodes[i].children = kids;
        }
        tree.open_hottest();
        Ok(tree)
    }

    /// Open the path of the heaviest child at every level, from the root.
    fn open_hottest(&mut self) {
        let mut at = 0;
        loop {
            self.nodes[at].open = true;
            match self.nodes[at].children.first() {
                Some(&next) => at = next,
                None => break,
            }
        }
    }

    /// The lines shown: nodes in depth-first order, children of open nodes only.
    pub fn visible(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut stack = vec![0];
        while let Some(i) = stack.pop() {
            out.push(i);
            if self.nodes[i].open {
                stack.extend(self.nodes[i].children.iter().rev());
            }
        }
        out
    }

    /// Share of the whole at node `i`.
    pub fn share(&self, i: usize) -> f64 {
        self.nodes[i].value / self.nodes[0].value.max(f64::MIN_POSITIVE)
    }

    /// Node `i` as a line: its share, indented by depth, a marker (▾ open, ▸ folded, · leaf)
    /// and its name.
    pub fn line(&self, i: usize) -> String {
        let node = &self.nodes[i];
        let marker = if node.children.is_empty() {
            '·'
        } else if node.open {
            '▾'
        } else {
            '▸'
        };
        format!(
            "{:>6.1}%  {}{marker} {}",
            self.share(i) * 100.0,
            " ".repeat(node.depth),
            node.name
        )
    }

    /// Fold or unfold the highlighted node.
    pub fn toggle(&mut self) {
        if let Some(&i) = self.visible().get(self.cursor)
            && !self.nodes[i].children.is_empty()
        {
            self.nodes[i].open = !self.nodes[i].open;
        }
    }

    /// The waker the highlighted line belongs to: the line itself when it is a waker's node,
    /// or the nearest waker above it whose subtree holds it; `None` outside "woken by".
    pub(crate) fn waker_at_cursor(&self) -> Option<(i64, String)> {
        let visible = self.visible();
        let at = *visible.get(self.cursor)?;
        let mut depth = self.nodes[at].depth + 1;
        for &i in visible[..=self.cursor].iter().rev() {
            let node = &self.nodes[i];
            if node.depth < depth {
                if let Some(tid) = node.waker_tid {
                    return Some((tid, node.name.clone()));
                }
                if node.name == WOKEN_BY {
                    return None;
                }
                depth = node.depth;
            }
        }
        None
    }

    /// The waker that ended the most of the tree's time (a thread, not an interrupt).
    pub(crate) fn heaviest_waker(&self) -> Option<(i64, String)> {
        self.nodes
            .iter()
            .filter(|n| n.waker_tid.is_some_and(|t| t != 0))
            .max_by(|a, b| a.value.total_cmp(&b.value))
            .map(|n| (n.waker_tid.unwrap_or(0), n.name.clone()))
    }

    /// Move the highlight by `delta` lines.
    pub fn step(&mut self, delta: isize) {
        let last = self.visible().len().saturating_sub(1) as isize;
        self.cursor = (self.cursor as isize + delta).clamp(0, last) as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(
        name: &str,
        depth: usize,
        value: f64,
        children: Vec<usize>,
        waker: Option<i64>,
    ) -> Node {
        Node {
            name: name.into(),
            kernel: false,
            value,
            depth,
            children,
            open: true,
            waker_tid: waker,
        }
    }

    /// all → read → __schedule → woken by → {b · tid 7 → try_to_wake_up, [softirq]}.
    fn chain() -> Tree {
        Tree {
            nodes: vec![
                node("all", 0, 10.0, vec![1], None),
                node("read", 1, 10.0, vec![2], None),
                node("__schedule", 2, 10.0, vec![3], None),
                node(WOKEN_BY, 3, 9.0, vec![4, 6], None),
                node(&waker_name("b", 7), 4, 6.0, vec![5], Some(7)),
                node("try_to_wake_up", 5, 6.0, vec![], None),
                node(&waker_name("[softirq]", 0), 4, 3.0, vec![], Some(0)),
            ],
            cursor: 0,
        }
    }

    #[test]
    fn the_waker_of_a_line_is_the_waker_above_it() {
        let mut t = chain();
        let at = |t: &mut Tree, line: usize| {
            t.cursor = line;
            t.waker_at_cursor()
        };
        assert_eq!(at(&mut t, 0), None);
        assert_eq!(at(&mut t, 3), None, "the woken-by node itself");
        assert_eq!(at(&mut t, 4), Some((7, "b · tid 7".into())));
        assert_eq!(
            at(&mut t, 5),
            Some((7, "b · tid 7".into())),
            "a frame of b's stack"
        );
        assert_eq!(at(&mut t, 6), Some((0, "[softirq]".into())));
        assert_eq!(t.heaviest_waker(), Some((7, "b · tid 7".into())));
    }
}
