//! The merged stack tree of one row (`p`): every stack of the row's samples merged from the
//! root (user frames, then kernel frames) with each node's share of the row, the hottest path
//! open, nodes folded and unfolded from the keyboard.

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

impl Tree {
    /// The tree of query result `batches` with columns `stack`, `w` (weight, may be null)
    /// and `n` (events, the weight where `w` is null).
    pub fn new(batches: &[RecordBatch]) -> Result<Self> {
        let mut tree = Tree {
            nodes: vec![Node {
                name: "all".into(),
                kernel: false,
                value: 0.0,
                depth: 0,
                children: Vec::new(),
                open: true,
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
            for row in 0..batch.num_rows() {
                let weight = if w.is_valid(row) {
                    w.value(row)
                } else {
                    n.value(row)
                } as f64;
                tree.nodes[0].value += weight;
                let mut at = 0;
                let path: Vec<(String, bool)> = if frames.is_null(row) {
                    vec![(NO_STACK.to_string(), false)]
                } else {
                    frames
                        .row(row)
                        .rev()
                        .filter_map(|i| frames.frame(i))
                        .map(|f| (f.name().into_owned(), f.kernel))
                        .collect()
                };
                for (name, kernel) in path {
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

    /// Move the highlight by `delta` lines.
    pub fn step(&mut self, delta: isize) {
        let last = self.visible().len().saturating_sub(1) as isize;
        self.cursor = (self.cursor as isize + delta).clamp(0, last) as usize;
    }
}
