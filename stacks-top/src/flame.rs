//! The flame graph of a view, as pure computation: a tree of frames merged from stacks (root
//! first, each stack with its value), its folded stacks back (`root;…;leaf value`, as
//! stacks-pprof writes them), its layout as an icicle — rows of boxes whose widths are their
//! shares of a given width, hottest child first, children too narrow to draw merged into one
//! "…" box so nothing is left out — the frames a search matches with their total, and the
//! sandwich of a function (its callers, inverted and merged, and its callees).

use std::collections::{BTreeMap, HashMap};

use stacks_stream::frames::fold;

/// What kind of code a frame is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    User,
    Kernel,
    Jit,
    Python,
    /// A frame whose function is unknown, or a marker frame (`[no stack]`).
    Unresolved,
}

/// One frame of the tree: a function at one place in the call paths.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub class: Class,
    /// The value of every stack through this frame.
    pub total: i64,
    /// The value of the stacks ending here.
    pub own: i64,
    pub parent: Option<usize>,
    pub depth: usize,
    /// Hottest first (then by name), once [`Flame::finish`] ran.
    pub children: Vec<usize>,
}

/// Name of the root of every flame graph.
pub const ROOT: &str = "all";

/// The merged tree; node 0 is the root ([`ROOT`], every stack).
#[derive(Debug, Clone, PartialEq)]
pub struct Flame {
    pub nodes: Vec<Node>,
    index: HashMap<(usize, String), usize>,
}

impl Default for Flame {
    fn default() -> Self {
        Self::new()
    }
}

impl Flame {
    /// A tree with the root alone.
    pub fn new() -> Self {
        Self::rooted(ROOT, Class::User)
    }

    /// A tree whose root is called `name` (a sandwich's function).
    fn rooted(name: &str, class: Class) -> Self {
        Flame {
            nodes: vec![Node {
                name: name.to_string(),
                class,
                total: 0,
                own: 0,
                parent: None,
                depth: 0,
                children: Vec::new(),
            }],
            index: HashMap::new(),
        }
    }

    /// Add one stack, root first, with its value. Frames are merged by name under the same
    /// parent (the first frame seen gives the class).
    pub fn add<'a>(&mut self, frames: impl IntoIterator<Item = (&'a str, Class)>, value: i64) {
        let mut at = 0;
        self.nodes[0].total = self.nodes[0].total.saturating_add(value);
        for (name, class) in frames {
            at = self.child(at, name, class);
            let n = &mut self.nodes[at];
            n.total = n.total.saturating_add(value);
        }
        let n = &mut self.nodes[at];
        n.own = n.own.saturating_add(value);
    }

    /// The child of `parent` named `name`, made when new.
    fn child(&mut self, parent: usize, name: &str, class: Class) -> usize {
        if let Some(&i) = self.index.get(&(parent, name.to_string())) {
            return i;
        }
        let i = self.nodes.len();
        self.nodes.push(Node {
            name: name.to_string(),
            class,
            total: 0,
            own: 0,
            parent: Some(parent),
            depth: self.nodes[parent].depth + 1,
            children: Vec::new(),
        });
        self.nodes[parent].children.push(i);
        self.index.insert((parent, name.to_string()), i);
        i
    }

    /// The child of `parent` named `name`, if there is one.
    pub(crate) fn child_named(&self, parent: usize, name: &str) -> Option<usize> {
        self.index.get(&(parent, name.to_string())).copied()
    }

    /// The tree of folded stacks (`root;…;leaf value` lines; every frame a user frame).
    #[cfg(test)]
    pub(crate) fn from_folded(text: &str) -> Self {
        let mut f = Flame::new();
        for line in text.lines() {
            if let Some((stack, value)) = line.rsplit_once(' ')
                && let Ok(value) = value.trim().parse::<i64>()
            {
                f.add(stack.split(';').map(|n| (n, Class::User)), value);
            }
        }
        f.finish();
        f
    }

    /// Sort every node's children, hottest first, then by name.
    pub fn finish(&mut self) {
        for i in 0..self.nodes.len() {
            let mut kids = std::mem::take(&mut self.nodes[i].children);
            kids.sort_by(|a, b| {
                let (a, b) = (&self.nodes[*a], &self.nodes[*b]);
                b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name))
            });
            self.nodes[i].children = kids;
        }
    }

    /// The value of every stack.
    pub fn total(&self) -> i64 {
        self.nodes[0].total
    }

    /// Share of the whole at node `i`'s total.
    pub fn share(&self, value: i64) -> f64 {
        value as f64 / self.total().max(1) as f64
    }

    /// Nodes from the root's child down to `i` (empty for the root).
    pub fn path(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = Some(i);
        while let Some(n) = at.filter(|&n| n != 0) {
            out.push(n);
            at = self.nodes[n].parent;
        }
        out.reverse();
        out
    }

    /// The folded stacks: one `(root;…;leaf, value)` per frame some stacks end at, sorted by
    /// stack; stacks whose value sums to 0 are left out (as stacks-pprof does).
    pub fn folded(&self) -> Vec<(String, i64)> {
        let mut out = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            if n.own != 0 {
                let path = self.path(i);
                let stack = fold(path.iter().map(|&p| self.nodes[p].name.as_str()));
                out.insert(stack, n.own);
            }
        }
        out.into_iter().collect()
    }

    /// Whether node `i` or one of its ancestors is named `name`, `i` excepted.
    pub(crate) fn under(&self, i: usize, name: &str) -> bool {
        let mut at = self.nodes[i].parent;
        while let Some(p) = at {
            if self.nodes[p].name == name && p != 0 {
                return true;
            }
            at = self.nodes[p].parent;
        }
        false
    }

    /// Nodes matching `needle` (case-insensitive substring of the name; nothing for an empty
    /// needle) and the value of the stacks through any of them, each stack counted once.
    pub fn search(&self, needle: &str) -> (Vec<bool>, i64) {
        let needle = needle.to_lowercase();
        let hit: Vec<bool> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| i != 0 && !needle.is_empty() && n.name.to_lowercase().contains(&needle))
            .collect();
        let mut total = 0i64;
        for (i, n) in self.nodes.iter().enumerate() {
            if hit[i] && !self.ancestors(i).any(|a| hit[a]) {
                total = total.saturating_add(n.total);
            }
        }
        (hit, total)
    }

    /// The ancestors of `i`, nearest first, the root left out.
    fn ancestors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(self.nodes[i].parent, |&p| self.nodes[p].parent).filter(|&p| p != 0)
    }

    /// The distinct frame names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.nodes.iter().skip(1).map(|n| n.name.as_str()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The function `query` names: a frame name equal to it, else the one name that ends in
    /// `::QUERY` or `.QUERY`, else the one that contains it; an error listing the candidates
    /// when there are several, or saying there is none.
    pub fn find(&self, query: &str) -> Result<String, String> {
        let names = self.names();
        if names.contains(&query) {
            return Ok(query.to_string());
        }
        let pick = |found: Vec<&str>| -> Option<Result<String, String>> {
            match found.len() {
                0 => None,
                1 => Some(Ok(found[0].to_string())),
                n => Some(Err(format!(
                    "{n} functions match `{query}`: {}{}",
                    found[..n.min(5)].join(", "),
                    if n > 5 { ", …" } else { "" }
                ))),
            }
        };
        let suffix = |n: &&str| {
            n.strip_suffix(query)
                .is_some_and(|head| head.ends_with("::") || head.ends_with('.'))
        };
        if let Some(r) = pick(names.iter().copied().filter(suffix).collect()) {
            return r;
        }
        if let Some(r) = pick(
            names
                .iter()
                .copied()
                .filter(|n| n.contains(query))
                .collect(),
        ) {
            return r;
        }
        Err(format!("no frame of this view is named `{query}`"))
    }

    /// The sandwich of function `name`: its own value (stacks ending in it), its total
    /// (stacks through it, once each), its callers inverted (the function at the root, its
    /// callers below it, theirs below them) and its callees, each merged over every place the
    /// function is called from. A recursive function counts from its outermost frame.
    pub fn sandwich(&self, name: &str) -> Sandwich {
        let class = self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .map_or(Class::User, |n| n.class);
        let mut callers = Flame::rooted(name, class);
        let mut callees = Flame::rooted(name, class);
        let mut own = 0i64;
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            if n.name != name {
                continue;
            }
            own = own.saturating_add(n.own);
            if self.under(i, name) {
                continue;
            }
            let up: Vec<(&str, Class)> = self
                .ancestors(i)
                .map(|a| (self.nodes[a].name.as_str(), self.nodes[a].class))
                .collect();
            callers.add(up, n.total);
            // Every stack through `i`, from `i` down: its own value at the end of its path.
            let mut todo = vec![i];
            while let Some(d) = todo.pop() {
                todo.extend(&self.nodes[d].children);
                if self.nodes[d].own != 0 {
                    let path = self.path(d);
                    let below = path.iter().skip_while(|&&p| p != i).skip(1);
                    callees.add(
                        below.map(|&p| (self.nodes[p].name.as_str(), self.nodes[p].class)),
                        self.nodes[d].own,
                    );
                }
            }
        }
        callers.finish();
        callees.finish();
        Sandwich {
            name: name.to_string(),
            own,
            total: callers.total(),
            all: self.total(),
            callers,
            callees,
        }
    }

    /// The icicle of the subtree at `zoom` in `width` cells: row 0 is `zoom` itself, full
    /// width; each row below holds the children of the boxes above, in order, each as wide as
    /// its share of `zoom` (rounded at both ends, so a child stays inside its parent). The
    /// children of a box narrower than one cell are merged into one "…" box of their total,
    /// at least one cell wide (taken from the box before it when the rounding left none), with
    /// nothing drawn under it.
    pub fn layout(&self, zoom: usize, width: u16) -> Vec<Vec<FBox>> {
        let width = width.max(1);
        let root = &self.nodes[zoom];
        let scale = f64::from(width) / root.total.max(1) as f64;
        let cell = |v: i64| (v as f64 * scale).round() as u16;
        let mut rows = vec![vec![FBox {
            node: Some(zoom),
            parent: root.parent.unwrap_or(0),
            x: 0,
            w: width,
            start: 0,
            value: root.total,
            merged: 1,
        }]];
        loop {
            let mut next: Vec<FBox> = Vec::new();
            for b in rows.last().expect("a row") {
                let Some(node) = b.node else { continue };
                let end = b.x + b.w;
                let mut offset = b.start;
                let mut group: Vec<FBox> = Vec::new();
                let mut rest: Option<FBox> = None;
                for &c in &self.nodes[node].children {
                    let v = self.nodes[c].total;
                    if v <= 0 {
                        continue;
                    }
                    if let Some(r) = rest.as_mut() {
                        r.value = r.value.saturating_add(v);
                        r.merged += 1;
                    } else if (v as f64) * scale < 1.0 {
                        rest = Some(FBox {
                            node: None,
                            parent: node,
                            x: 0,
                            w: 0,
                            start: offset,
                            value: v,
                            merged: 1,
                        });
                    } else {
                        let x = cell(offset);
                        group.push(FBox {
                            node: Some(c),
                            parent: node,
                            x,
                            w: cell(offset + v) - x,
                            start: offset,
                            value: v,
                            merged: 1,
                        });
                    }
                    offset = offset.saturating_add(v);
                }
                if let Some(mut r) = rest {
                    // At least one cell: when none is left, the box before it gives up its
                    // last cell, or joins it when it has one only.
                    let mut x = cell(r.start);
                    while x >= end {
                        match group.last_mut() {
                            Some(p) if p.w > 1 => {
                                p.w -= 1;
                                x = p.x + p.w;
                            }
                            Some(p) => {
                                r.start = p.start;
                                r.value = r.value.saturating_add(p.value);
                                r.merged += 1;
                                x = p.x;
                                group.pop();
                            }
                            None => {
                                x = b.x.min(end.saturating_sub(1));
                                break;
                            }
                        }
                    }
                    r.x = x;
                    r.w = cell(r.start + r.value).clamp(x + 1, end.max(x + 1)) - x;
                    group.push(r);
                }
                next.extend(group);
            }
            if next.is_empty() {
                break;
            }
            rows.push(next);
        }
        rows
    }
}

/// One box of an icicle row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FBox {
    /// The frame it draws; `None` for a "…" box of frames too narrow to draw.
    pub node: Option<usize>,
    /// The frame it is under (the zoomed frame's parent, for row 0).
    pub parent: usize,
    /// First cell and width in cells.
    pub x: u16,
    pub w: u16,
    /// Where it starts, in value from the left edge of the zoomed frame.
    pub start: i64,
    /// Its total (a "…" box: the total of the frames it stands for).
    pub value: i64,
    /// How many frames it stands for.
    pub merged: usize,
}

/// Callers and callees of one function.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandwich {
    pub name: String,
    /// Value of the stacks ending in the function.
    pub own: i64,
    /// Value of the stacks through it (each once).
    pub total: i64,
    /// Value of every stack of the view.
    pub all: i64,
    /// Rooted at the function: its callers, then theirs.
    pub callers: Flame,
    /// Rooted at the function: what it calls.
    pub callees: Flame,
}

impl Sandwich {
    /// The lines of the text mode and the screen: a title, then `callers` and `callees`, one
    /// node a line (depth-first, hottest first) with its total, its share of the function's
    /// total and, for callees, its own value.
    pub fn lines(&self, unit: &str) -> Vec<SandwichLine> {
        let pct = |v: i64, of: i64| 100.0 * v as f64 / of.max(1) as f64;
        let mut out = vec![SandwichLine {
            text: format!(
                "{}  self {} {unit} ({:.2}%)  total {} {unit} ({:.2}%)",
                self.name,
                self.own,
                pct(self.own, self.all),
                self.total,
                pct(self.total, self.all)
            ),
            name: None,
            class: None,
        }];
        for (title, tree, own) in [
            ("callers (who calls it, inverted)", &self.callers, false),
            ("callees (what it calls)", &self.callees, true),
        ] {
            out.push(SandwichLine {
                text: title.to_string(),
                name: None,
                class: None,
            });
            let mut todo = vec![0usize];
            while let Some(i) = todo.pop() {
                let n = &tree.nodes[i];
                todo.extend(n.children.iter().rev());
                let own_text = if own {
                    format!("  self {:>14} {:>7.2}%", n.own, pct(n.own, self.total))
                } else {
                    String::new()
                };
                out.push(SandwichLine {
                    text: format!(
                        "{:>7.2}%  {:>14}{own_text}  {}{}",
                        pct(n.total, self.total),
                        n.total,
                        "  ".repeat(n.depth),
                        n.name
                    ),
                    name: Some(n.name.clone()),
                    class: Some(n.class),
                });
            }
        }
        out
    }
}

/// One line of a sandwich.
#[derive(Debug, Clone, PartialEq)]
pub struct SandwichLine {
    pub text: String,
    /// The frame it shows (none for titles).
    pub name: Option<String>,
    pub class: Option<Class>,
}

#[cfg(test)]
#[path = "flame_tests.rs"]
mod tests;
