//! The state of the flame view (`F`) and of the sandwich (`s`), and what their keys do: the
//! selected frame moved with the arrows, zooms in (Enter) and out (Backspace), the search
//! that highlights frames (`/`), a sandwich opened on a frame, and the exact values of the
//! selection for the status line. Drawing is in [`crate::ui_flame`].

use std::cell::Cell;
use std::rc::Rc;

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::flame::{FBox, Flame, Sandwich, SandwichLine};

/// The selected box: a frame, or the "…" box of the frames too narrow to draw under one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sel {
    Node(usize),
    Rest(usize),
}

/// What a key in the flame view or the sandwich asks of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Stay,
    /// Say this on the status line.
    Say(String),
    /// Leave the view.
    Back,
    Quit,
    /// Open the sandwich of this function.
    Sandwich(String),
    /// Move the window back (-1) or forward (1) by its length, and show the view again.
    Window(i64),
    /// Open the flame graph of the view.
    Flame,
}

/// The other side of a diff flame: its total at each drawn frame's call path, and its whole.
/// The view's flame is drawn against the baseline; negated (`n`), the baseline's flame is
/// drawn against the view, so that frames gone since are drawn at their baseline width.
#[derive(Debug, Clone)]
pub struct FlameBase {
    pub totals: Vec<i64>,
    pub all: i64,
    /// The other side's flame.
    pub other: Rc<Flame>,
    /// The flame drawn is the baseline's (and `other` the view's).
    pub negated: bool,
}

impl FlameBase {
    /// The other side of `flame`, matched by call path.
    fn new(flame: &Flame, other: Rc<Flame>, negated: bool) -> Self {
        FlameBase {
            totals: crate::diff::base_totals(&other, flame),
            all: other.total(),
            other,
            negated,
        }
    }

    /// The change of frame `n`'s share of the whole (now − baseline), as a fraction, whichever
    /// side is drawn: a frame only in the baseline, drawn negated, at minus its share.
    pub fn delta(&self, flame: &Flame, n: usize) -> f64 {
        let d = flame.share(flame.nodes[n].total) - crate::diff::share(self.totals[n], self.all);
        if self.negated { -d } else { d }
    }

    /// What the other side is called on the status line.
    pub(crate) fn other_name(&self) -> &'static str {
        if self.negated { "now" } else { "baseline" }
    }
}

/// The flame view.
#[derive(Debug, Clone)]
pub struct FlameView {
    pub flame: Rc<Flame>,
    /// The unit of the values (`ns`, `bytes`, `count`, `events`).
    pub unit: &'static str,
    /// Zoomed frames, outermost first; the last is drawn full width (none: the root).
    pub zoom: Vec<usize>,
    pub sel: Sel,
    /// Frames containing this text are highlighted.
    pub search: String,
    /// The search is being typed.
    pub typing: bool,
    /// Cells of the flame at the last draw: the layout the keys move in.
    pub width: Cell<u16>,
    /// A baseline: frames are coloured by the change of their share.
    pub base: Option<FlameBase>,
}

impl FlameView {
    pub fn new(flame: Flame, unit: &'static str) -> Self {
        FlameView {
            flame: Rc::new(flame),
            unit,
            zoom: Vec::new(),
            sel: Sel::Node(0),
            search: String::new(),
            typing: false,
            width: Cell::new(100),
            base: None,
        }
    }

    /// The flame compared with `base`, a baseline flame.
    pub fn compared(flame: Flame, unit: &'static str, base: Rc<Flame>) -> Self {
        let mut v = Self::new(flame, unit);
        v.base = Some(FlameBase::new(&v.flame, base, false));
        v
    }

    /// `n`: draw the other side of the diff (the baseline's flame, whose frames gone since
    /// show at their baseline width, or back to the view's), keeping the zoom and the
    /// selection where their call paths are on that side.
    fn negate(&mut self) -> Outcome {
        let Some(base) = self.base.take() else {
            return Outcome::Say("no baseline: n draws the baseline's flame in a diff".into());
        };
        let names = |f: &Flame, i: usize| -> Vec<String> {
            f.path(i).iter().map(|&n| f.nodes[n].name.clone()).collect()
        };
        let find = |f: &Flame, path: &[String]| -> Option<usize> {
            path.iter().try_fold(0, |at, name| f.child_named(at, name))
        };
        let zoom: Vec<Vec<String>> = self.zoom.iter().map(|&z| names(&self.flame, z)).collect();
        let sel = match self.sel {
            Sel::Node(n) => names(&self.flame, n),
            Sel::Rest(p) => names(&self.flame, p),
        };
        let drawn = std::mem::replace(&mut self.flame, base.other);
        self.base = Some(FlameBase::new(&self.flame, drawn, !base.negated));
        self.zoom = zoom.iter().map_while(|p| find(&self.flame, p)).collect();
        self.sel = Sel::Node(find(&self.flame, &sel).unwrap_or(self.zoomed()));
        Outcome::Say(if base.negated {
            "the view's flame against the baseline: n draws the baseline's".into()
        } else {
            "the baseline's flame against the view: frames gone since drawn at their baseline \
             width (deep blue); n draws the view's"
                .into()
        })
    }

    /// The frame drawn full width.
    pub fn zoomed(&self) -> usize {
        self.zoom.last().copied().unwrap_or(0)
    }

    /// The icicle at the last drawn width.
    pub fn layout(&self) -> Vec<Vec<FBox>> {
        self.flame.layout(self.zoomed(), self.width.get())
    }

    /// Row and index of the selection in `rows`, if it is there.
    pub fn find(&self, rows: &[Vec<FBox>]) -> Option<(usize, usize)> {
        for (r, row) in rows.iter().enumerate() {
            for (i, b) in row.iter().enumerate() {
                let here = match self.sel {
                    Sel::Node(n) => b.node == Some(n),
                    Sel::Rest(p) => b.node.is_none() && b.parent == p,
                };
                if here {
                    return Some((r, i));
                }
            }
        }
        None
    }

    fn select(&mut self, b: &FBox) {
        self.sel = match b.node {
            Some(n) => Sel::Node(n),
            None => Sel::Rest(b.parent),
        };
    }

    /// Handle one key.
    pub fn key(&mut self, key: KeyEvent) -> Outcome {
        if self.typing {
            crate::input::search_key(&mut self.search, &mut self.typing, key);
            return Outcome::Stay;
        }
        let rows = self.layout();
        let (r, i) = self.find(&rows).unwrap_or_else(|| {
            // Gone from the layout (zoomed out of, or narrower at this width).
            self.sel = Sel::Node(self.zoomed());
            (0, 0)
        });
        let here = rows[r][i];
        match key.code {
            KeyCode::Char('q') => return Outcome::Quit,
            KeyCode::Char('F') => return Outcome::Back,
            KeyCode::Esc if !self.search.is_empty() => self.search.clear(),
            KeyCode::Esc => return Outcome::Back,
            KeyCode::Up | KeyCode::Char('k') if r > 0 => self.sel = Sel::Node(here.parent),
            KeyCode::Down | KeyCode::Char('j') => {
                if let Some(b) = rows
                    .get(r + 1)
                    .and_then(|row| row.iter().find(|b| here.node == Some(b.parent)))
                {
                    self.select(b);
                }
            }
            KeyCode::Left if i > 0 => self.select(&rows[r][i - 1]),
            KeyCode::Right => {
                if let Some(b) = rows[r].get(i + 1) {
                    self.select(b);
                }
            }
            KeyCode::Enter => match here.node {
                Some(n) if n == self.zoomed() => {
                    return Outcome::Say("this frame is the full width already".into());
                }
                Some(n) => {
                    self.zoom.push(n);
                    return Outcome::Say(format!("zoomed into {}", self.flame.nodes[n].name));
                }
                None => {
                    return Outcome::Say(format!(
                        "the … box stands for {} frames narrower than a cell: Enter on {} \
                         (above) widens them, s lists them",
                        here.merged, self.flame.nodes[here.parent].name
                    ));
                }
            },
            KeyCode::Backspace => match self.zoom.pop() {
                Some(n) => {
                    return Outcome::Say(format!("zoomed out of {}", self.flame.nodes[n].name));
                }
                None => return Outcome::Say("not zoomed".into()),
            },
            KeyCode::Char('[') => return Outcome::Window(-1),
            KeyCode::Char(']') => return Outcome::Window(1),
            KeyCode::Char('n') => return self.negate(),
            KeyCode::Char('/') => {
                self.typing = true;
                self.search.clear();
            }
            KeyCode::Char('s') => {
                let n = match here.node {
                    Some(n) => n,
                    None => here.parent,
                };
                return if n == 0 {
                    Outcome::Say("the root has no callers: s on a frame".into())
                } else {
                    Outcome::Sandwich(self.flame.nodes[n].name.clone())
                };
            }
            _ => {}
        }
        Outcome::Stay
    }

    /// The status line: the selected frame's exact self and total, value and share of the
    /// whole, and with a search the share of the stacks it matches.
    pub fn status(&self) -> String {
        let f = &self.flame;
        let pct = |v: i64| 100.0 * f.share(v);
        let unit = self.unit;
        let mut text = match self.sel {
            Sel::Node(n) => {
                let node = &f.nodes[n];
                format!(
                    "{}  self {} {unit} ({:.2}%)  total {} {unit} ({:.2}%)",
                    node.name,
                    node.own,
                    pct(node.own),
                    node.total,
                    pct(node.total)
                )
            }
            Sel::Rest(p) => {
                let rows = self.layout();
                let (merged, value) = match self.find(&rows) {
                    Some((r, i)) => (rows[r][i].merged, rows[r][i].value),
                    None => (0, 0),
                };
                format!(
                    "… {merged} frames under {}  total {value} {unit} ({:.2}%)",
                    f.nodes[p].name,
                    pct(value)
                )
            }
        };
        if let (Some(base), Sel::Node(n)) = (&self.base, self.sel) {
            text.push_str(&format!(
                "  ·  Δ {:+.2}% ({} {:.2}%, {} {unit})",
                100.0 * base.delta(f, n),
                base.other_name(),
                100.0 * crate::diff::share(base.totals[n], base.all),
                base.totals[n]
            ));
        }
        if !self.search.is_empty() {
            let (_, total) = f.search(&self.search);
            text.push_str(&format!(
                "  ·  /{}: {} {unit} ({:.2}%)",
                self.search,
                total,
                pct(total)
            ));
        }
        text
    }
}

/// The sandwich view of one function over a flame's stacks.
#[derive(Debug, Clone)]
pub struct SandwichView {
    pub source: Rc<Flame>,
    pub unit: &'static str,
    pub sandwich: Sandwich,
    pub lines: Vec<SandwichLine>,
    pub cursor: usize,
    /// Functions whose sandwich was shown before this one (Backspace returns to them).
    pub history: Vec<String>,
}

impl SandwichView {
    pub fn new(source: Rc<Flame>, unit: &'static str, name: &str) -> Self {
        let sandwich = source.sandwich(name);
        let lines = sandwich.lines(unit);
        SandwichView {
            source,
            unit,
            sandwich,
            lines,
            cursor: 0,
            history: Vec::new(),
        }
    }

    fn show(&mut self, name: &str) {
        self.sandwich = self.source.sandwich(name);
        self.lines = self.sandwich.lines(self.unit);
        self.cursor = 0;
    }

    /// Handle one key; `page` lines make a page.
    pub fn key(&mut self, key: KeyEvent, page: usize) -> Outcome {
        let last = self.lines.len().saturating_sub(1);
        match key.code {
            KeyCode::Char('q') => return Outcome::Quit,
            KeyCode::Esc => return Outcome::Back,
            KeyCode::Up | KeyCode::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.cursor = (self.cursor + 1).min(last),
            KeyCode::PageUp => self.cursor = self.cursor.saturating_sub(page.max(1)),
            KeyCode::PageDown => self.cursor = (self.cursor + page.max(1)).min(last),
            KeyCode::Enter => {
                let name = self.lines[self.cursor].name.clone();
                if let Some(name) = name.filter(|n| *n != self.sandwich.name) {
                    self.history.push(self.sandwich.name.clone());
                    self.show(&name);
                    return Outcome::Say(format!("sandwich of {name}"));
                }
            }
            KeyCode::Backspace => match self.history.pop() {
                Some(name) => {
                    self.show(&name);
                    return Outcome::Say(format!("sandwich of {name}"));
                }
                None => return Outcome::Back,
            },
            _ => {}
        }
        Outcome::Stay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyModifiers;

    fn press(v: &mut FlameView, c: char) -> Outcome {
        v.key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }

    /// The box of the frame named `name` at `width` cells, if drawn.
    fn drawn(v: &FlameView, name: &str) -> Option<FBox> {
        v.width.set(100);
        v.layout()
            .into_iter()
            .flatten()
            .find(|b| b.node.is_some_and(|n| v.flame.nodes[n].name == name))
    }

    /// `a` is only in the baseline (30 of 100), `c` only now (50 of 100), `b` in both (70
    /// then, 50 now). The view's flame has no `a`; negated, the baseline's flame draws `a` 30
    /// cells of 100 wide at −30 points, `b` at −20, and has no `c`; `n` again goes back.
    #[test]
    fn n_draws_the_baselines_flame_with_the_frames_gone_since() {
        let base = Rc::new(Flame::from_folded("main;a 30\nmain;b 70\n"));
        let now = Flame::from_folded("main;b 50\nmain;c 50\n");
        let mut v = FlameView::compared(now, "ns", base);
        assert!(drawn(&v, "a").is_none(), "a is gone from the view");
        let c = drawn(&v, "c").expect("c drawn");
        let delta =
            |v: &FlameView, b: FBox| v.base.as_ref().unwrap().delta(&v.flame, b.node.unwrap());
        assert!((delta(&v, c) - 0.5).abs() < 1e-9);
        // Select b (main, then its hottest child) before negating: the selection stays on it.
        press(&mut v, 'j');
        press(&mut v, 'j');
        let Sel::Node(sel) = v.sel else { panic!() };
        assert_eq!(
            v.flame.nodes[sel].name, "b",
            "b before c (50 each), by name"
        );

        assert!(matches!(press(&mut v, 'n'), Outcome::Say(_)));
        assert!(v.base.as_ref().unwrap().negated);
        assert_eq!(v.flame.total(), 100);
        let a = drawn(&v, "a").expect("a drawn at its baseline width");
        assert_eq!((a.value, a.w), (30, 30));
        assert!((delta(&v, a) + 0.3).abs() < 1e-9, "a: {}", delta(&v, a));
        let b = drawn(&v, "b").expect("b drawn");
        assert_eq!((b.value, b.w), (70, 70));
        assert!((delta(&v, b) + 0.2).abs() < 1e-9, "b: {}", delta(&v, b));
        assert!(drawn(&v, "c").is_none(), "c was not there then");
        let Sel::Node(sel) = v.sel else { panic!() };
        assert_eq!(
            v.flame.nodes[sel].name, "b",
            "the selection kept by call path"
        );
        v.sel = Sel::Node(a.node.unwrap());
        assert!(
            v.status().ends_with("Δ -30.00% (now 0.00%, 0 ns)"),
            "{}",
            v.status()
        );

        press(&mut v, 'n');
        assert!(!v.base.as_ref().unwrap().negated);
        assert!(drawn(&v, "a").is_none());
        assert!(drawn(&v, "c").is_some());
        assert_eq!(
            v.sel,
            Sel::Node(v.zoomed()),
            "a is not in the view: the root selected"
        );
    }
}
