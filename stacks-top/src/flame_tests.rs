//! Unit tests of the flame computation: folding back, search, layout (shares, "…" boxes,
//! nothing lost, children inside their parents), zoom, sandwich and finding a function.

use super::*;

/// Sorted by stack, as folded stacks come out.
const FOLDED: &str = "main;a 10\nmain;a;x 30\nmain;b;x 20\nmain;b;y 10\nmain;c 1\nother 29\n";

#[test]
fn folds_back_what_it_was_built_from() {
    let f = Flame::from_folded(FOLDED);
    assert_eq!(f.total(), 100);
    let lines: Vec<String> = f
        .folded()
        .into_iter()
        .map(|(s, v)| format!("{s} {v}\n"))
        .collect();
    assert_eq!(lines.concat(), FOLDED);
    let main = f.nodes[0].children[0];
    assert_eq!(
        (f.nodes[main].name.as_str(), f.nodes[main].total),
        ("main", 71)
    );
    let kids: Vec<&str> = f.nodes[main]
        .children
        .iter()
        .map(|&c| f.nodes[c].name.as_str())
        .collect();
    assert_eq!(kids, ["a", "b", "c"], "hottest first");
}

#[test]
fn a_search_counts_each_stack_once() {
    let f = Flame::from_folded("a;x;x 5\nb;x 3\nb;y 2\n");
    let (hit, total) = f.search("X");
    assert_eq!(total, 8);
    assert_eq!(hit.iter().filter(|h| **h).count(), 3);
    assert_eq!(f.search("").1, 0);
}

#[test]
fn boxes_are_shares_of_the_width_and_narrow_ones_merge() {
    let f = Flame::from_folded(FOLDED);
    let rows = f.layout(0, 100);
    assert_eq!(rows[0].len(), 1);
    assert_eq!(rows[0][0].w, 100);
    let row1: Vec<(u16, u16)> = rows[1].iter().map(|b| (b.x, b.w)).collect();
    assert_eq!(row1, [(0, 71), (71, 29)]);
    // c (1 of 100) is one cell: drawn. At 50 cells it is half a cell: merged.
    let rows = f.layout(0, 50);
    let last = *rows[2].last().unwrap();
    assert_eq!((last.node, last.value, last.merged), (None, 1, 1));
    assert!(last.w >= 1);
    // Nothing is lost: every row's boxes add up to the totals below them.
    for row in f.layout(0, 7).iter().chain(f.layout(0, 100).iter()) {
        let mut parents: HashMap<usize, i64> = HashMap::new();
        for b in row {
            *parents.entry(b.parent).or_default() += b.value;
        }
        for (p, sum) in parents {
            let n = &f.nodes[p];
            if row[0].node != Some(0) {
                assert_eq!(sum, n.total - n.own, "children of {}", n.name);
            }
        }
    }
}

#[test]
fn children_stay_inside_their_parent() {
    let text: String = (0..40)
        .map(|i| format!("r;f{i};g 1\nr;f{i} {i}\n"))
        .collect();
    let f = Flame::from_folded(&text);
    for width in [1u16, 3, 10, 33, 80] {
        let rows = f.layout(0, width);
        for pair in rows.windows(2) {
            for b in &pair[1] {
                let p = pair[0]
                    .iter()
                    .find(|p| p.node == Some(b.parent))
                    .expect("parent drawn");
                assert!(
                    b.w >= 1 && b.x >= p.x && b.x + b.w <= p.x + p.w,
                    "{b:?} in {p:?}"
                );
            }
            for w in pair[1].windows(2) {
                assert!(w[0].x + w[0].w <= w[1].x, "overlap {w:?} at width {width}");
            }
        }
    }
}

#[test]
fn zooming_makes_a_frame_the_full_width() {
    let f = Flame::from_folded(FOLDED);
    let main = f.nodes[0].children[0];
    let b = f.nodes[main].children[1];
    let rows = f.layout(b, 30);
    assert_eq!(rows[0][0].node, Some(b));
    let row1: Vec<(u16, u16, i64)> = rows[1].iter().map(|b| (b.x, b.w, b.value)).collect();
    assert_eq!(row1, [(0, 20, 20), (20, 10, 10)]);
}

#[test]
fn a_sandwich_merges_callers_and_callees() {
    let f = Flame::from_folded("m;a;s;k 30\nm;a;s 10\nm;b;s 15\nm;b 5\nr;s;s;k 40\n");
    let s = f.sandwich("s");
    assert_eq!((s.own, s.total, s.all), (25, 95, 100));
    let callers: Vec<(String, i64)> = s.callers.folded().into_iter().collect();
    assert_eq!(
        callers,
        [
            ("a;m".to_string(), 40),
            ("b;m".to_string(), 15),
            ("r".to_string(), 40)
        ]
    );
    let callees = s.callees.folded();
    assert_eq!(callees, [("k".to_string(), 30), ("s;k".to_string(), 40)]);
    assert_eq!(s.callees.nodes[0].own, 25);
    let lines = s.lines("ns");
    assert!(
        lines[0]
            .text
            .starts_with("s  self 25 ns (25.00%)  total 95 ns (95.00%)")
    );
    assert!(
        lines
            .iter()
            .any(|l| l.text.ends_with("    b") && l.text.contains("15.79%"))
    );
}

#[test]
fn functions_are_found_by_whole_or_last_name() {
    let f = Flame::from_folded("app::main;app::cpu::burn 1\napp::main;app::cpu::burn_more 1\n");
    assert_eq!(f.find("app::cpu::burn").unwrap(), "app::cpu::burn");
    assert_eq!(f.find("burn").unwrap(), "app::cpu::burn");
    assert_eq!(f.find("more").unwrap(), "app::cpu::burn_more");
    assert!(f.find("app").unwrap_err().contains("3 functions match"));
    assert!(f.find("nothing").unwrap_err().contains("no frame"));
}

#[test]
fn a_narrow_last_child_takes_a_cell_from_its_neighbour() {
    // b rounds to the very end of the row: a gives up a cell, it is not merged away.
    let f = Flame::from_folded("r;a 9990\nr;b 10\n");
    let rows = f.layout(0, 10);
    let row: Vec<(Option<&str>, u16, u16, i64)> = rows[2]
        .iter()
        .map(|b| (b.node.map(|n| f.nodes[n].name.as_str()), b.x, b.w, b.value))
        .collect();
    assert_eq!(row, [(Some("a"), 0, 9, 9990), (None, 9, 1, 10)]);
}
