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

/// The baseline a flame is compared with: its total at each frame's call path, and its whole.
#[derive(Debug, Clone)]
pub struct FlameBase {
    pub totals: Vec<i64>,
    pub all: i64,
}

impl FlameBase {
    /// The change of frame `n`'s share of the whole (now − baseline), as a fraction.
    pub fn delta(&self, flame: &Flame, n: usize) -> f64 {
        flame.share(flame.nodes[n].total) - crate::diff::share(self.totals[n], self.all)
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
    pub fn compared(flame: Flame, unit: &'static str, base: &Flame) -> Self {
        let totals = crate::diff::base_totals(base, &flame);
        let mut v = Self::new(flame, unit);
        v.base = Some(FlameBase {
            totals,
            all: base.total(),
        });
        v
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
                "  ·  Δ {:+.2}% (baseline {:.2}%, {} {unit})",
                100.0 * base.delta(f, n),
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
