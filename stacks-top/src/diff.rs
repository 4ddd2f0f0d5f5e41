//! The difference of two flame graphs, as pure computation: a baseline (an earlier window,
//! other filters, another store) against the current view. Per function, its total (stacks
//! through it, each once) and self value in both, as values and as shares of each side's
//! whole, ranked by the change of the total share; per frame of the current flame, the
//! baseline's total at the same call path (for the flame view's colours); and the folded
//! stacks of both side by side (`stack base now`, as flamegraph's difffolded.pl writes them).

use std::collections::{BTreeMap, HashMap};

use crate::flame::{Class, Flame};

/// One function in the baseline and now.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub name: String,
    pub class: Class,
    /// Value of the stacks through the function (each once), baseline and now.
    pub base_total: i64,
    pub total: i64,
    /// Value of the stacks ending in it, baseline and now.
    pub base_own: i64,
    pub own: i64,
}

/// Every function of two flames, the most changed first.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// The whole of each side.
    pub base_all: i64,
    pub all: i64,
    pub changes: Vec<Change>,
}

/// Each function's (class, total once per stack, own) in `f`.
fn functions(f: &Flame) -> HashMap<&str, (Class, i64, i64)> {
    let mut out: HashMap<&str, (Class, i64, i64)> = HashMap::new();
    for (i, n) in f.nodes.iter().enumerate().skip(1) {
        let e = out.entry(n.name.as_str()).or_insert((n.class, 0, 0));
        e.2 = e.2.saturating_add(n.own);
        if !f.under(i, &n.name) {
            e.1 = e.1.saturating_add(n.total);
        }
    }
    out
}

impl Change {
    /// Share of the whole, baseline and now, of the total.
    pub fn base_share(&self, d: &Diff) -> f64 {
        share(self.base_total, d.base_all)
    }
    pub fn share(&self, d: &Diff) -> f64 {
        share(self.total, d.all)
    }
    /// Change of the total's share (now − baseline), as a fraction.
    pub fn delta(&self, d: &Diff) -> f64 {
        self.share(d) - self.base_share(d)
    }
    /// Change of the self value's share.
    pub(crate) fn delta_own(&self, d: &Diff) -> f64 {
        share(self.own, d.all) - share(self.base_own, d.base_all)
    }
}

/// `v` of `all`, 0 when `all` is.
pub fn share(v: i64, all: i64) -> f64 {
    if all == 0 { 0.0 } else { v as f64 / all as f64 }
}

impl Diff {
    /// The functions of `base` and `now`, the largest change of total share first (then the
    /// largest change of value, then by name).
    pub fn new(base: &Flame, now: &Flame) -> Self {
        let (b, n) = (functions(base), functions(now));
        let mut names: Vec<&str> = b.keys().chain(n.keys()).copied().collect();
        names.sort_unstable();
        names.dedup();
        let mut changes: Vec<Change> = names
            .into_iter()
            .map(|name| {
                let (bc, bt, bo) = b.get(name).copied().unwrap_or((Class::User, 0, 0));
                let (nc, nt, no) = n.get(name).copied().unwrap_or((bc, 0, 0));
                Change {
                    name: name.to_string(),
                    class: if n.contains_key(name) { nc } else { bc },
                    base_total: bt,
                    total: nt,
                    base_own: bo,
                    own: no,
                }
            })
            .collect();
        let mut d = Diff {
            base_all: base.total(),
            all: now.total(),
            changes: Vec::new(),
        };
        changes.sort_by(|x, y| {
            let (dx, dy) = (x.delta(&d).abs(), y.delta(&d).abs());
            dy.total_cmp(&dx)
                .then_with(|| {
                    (y.total - y.base_total)
                        .abs()
                        .cmp(&(x.total - x.base_total).abs())
                })
                .then_with(|| x.name.cmp(&y.name))
        });
        d.changes = changes;
        d
    }

    /// The function named `name`.
    pub fn get(&self, name: &str) -> Option<&Change> {
        self.changes.iter().find(|c| c.name == name)
    }
}

/// For each frame of `now`, the total of the frame at the same call path in `base` (0 where
/// the path is not in the baseline).
pub(crate) fn base_totals(base: &Flame, now: &Flame) -> Vec<i64> {
    // A frame comes after its parent in `nodes`: its parent's match is known.
    let mut at: Vec<Option<usize>> = vec![None; now.nodes.len()];
    at[0] = Some(0);
    for (i, n) in now.nodes.iter().enumerate().skip(1) {
        at[i] = n
            .parent
            .and_then(|p| at[p])
            .and_then(|p| base.child_named(p, &n.name));
    }
    at.iter()
        .map(|m| m.map_or(0, |b| base.nodes[b].total))
        .collect()
}

/// The folded stacks of both: `(stack, base, now)` for every stack either has, sorted.
pub fn folded(base: &Flame, now: &Flame) -> Vec<(String, i64, i64)> {
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (s, v) in base.folded() {
        out.entry(s).or_default().0 = v;
    }
    for (s, v) in now.folded() {
        out.entry(s).or_default().1 = v;
    }
    out.into_iter().map(|(s, (b, n))| (s, b, n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_change_by_function_counted_once_per_stack() {
        // a: 3/4 → 1/4; b: 1/4 → 3/4; main everywhere; r recursive, once per stack.
        let base = Flame::from_folded("main;a 30\nmain;b 10\n");
        let now = Flame::from_folded("main;a 10\nmain;b;r;r 25\nmain;b 5\nnew 50\nother 10\n");
        let d = Diff::new(&base, &now);
        assert_eq!((d.base_all, d.all), (40, 100));
        let a = d.get("a").unwrap();
        assert_eq!((a.base_total, a.total, a.base_own, a.own), (30, 10, 30, 10));
        assert!((a.delta(&d) - (0.10 - 0.75)).abs() < 1e-9);
        let r = d.get("r").unwrap();
        assert_eq!((r.base_total, r.total, r.own), (0, 25, 25));
        let new = d.get("new").unwrap();
        assert!((new.delta(&d) - 0.5).abs() < 1e-9);
        // The most changed first: a (−0.65), main (1.0 → 0.4), new (+0.5), other (+0.1).
        let order: Vec<&str> = d.changes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(&order[..3], ["a", "main", "new"]);
        assert!((d.get("main").unwrap().delta(&d) + 0.6).abs() < 1e-9);
        assert!(d.get("nowhere").is_none());
    }

    #[test]
    fn frames_find_their_baseline_by_call_path() {
        let base = Flame::from_folded("main;a;x 30\nmain;b 10\n");
        let now = Flame::from_folded("main;a 10\nmain;b;x 5\nmain;a;x 1\n");
        let bt = base_totals(&base, &now);
        let path_of = |i: usize| -> String {
            now.path(i)
                .iter()
                .map(|&p| now.nodes[p].name.as_str())
                .collect::<Vec<_>>()
                .join(";")
        };
        let got: BTreeMap<String, i64> =
            (1..now.nodes.len()).map(|i| (path_of(i), bt[i])).collect();
        let want: BTreeMap<String, i64> = [
            ("main", 40),
            ("main;a", 30),
            ("main;a;x", 30),
            ("main;b", 10),
            ("main;b;x", 0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(got, want);
        assert_eq!(bt[0], 40);
    }

    #[test]
    fn folded_side_by_side_has_every_stack_of_both() {
        let base = Flame::from_folded("main;a 3\nmain;b 1\n");
        let now = Flame::from_folded("main;b 2\nmain;c 5\n");
        assert_eq!(
            folded(&base, &now),
            [
                ("main;a".to_string(), 3, 0),
                ("main;b".to_string(), 1, 2),
                ("main;c".to_string(), 0, 5)
            ]
        );
    }
}
