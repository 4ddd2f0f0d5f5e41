//! The state of the diff view (`d`) and what its keys do: the functions of the baseline
//! ([`Baseline`], marked with `b` or given by `--diff`) against the current view, the most
//! changed first, a search narrowing them, a cursor over them, and the lines the screen and `--once --diff` show.
//! Drawing is in [`crate::ui_flame`].

use std::rc::Rc;

use anyhow::Result;
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{Field, Schema};
use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::diff::{Change, Diff};
use crate::flame::Flame;
use crate::icicle::Outcome;

/// What the current view is compared with.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub flame: Rc<Flame>,
    /// Its kind (`None`: every kind): a view of another kind is not compared with it.
    pub kind: Option<String>,
    /// What it is, for the header: its window and filters, or its store.
    pub what: String,
}

/// The diff view.
#[derive(Debug, Clone)]
pub struct DiffView {
    pub diff: Diff,
    /// The current view's flame (the sandwich of a function is opened over it).
    pub now: Rc<Flame>,
    pub unit: &'static str,
    /// The highlighted line, among [`DiffView::visible`].
    pub cursor: usize,
    /// Only the functions whose name contains this (case-insensitive) are listed.
    pub search: String,
    /// The search is being typed.
    pub typing: bool,
}

/// The column titles of the diff view and of `--once --diff`.
pub(crate) const HEADER: &str = "  Δtotal   base →    now    Δself        Δ value  function";

impl DiffView {
    pub fn new(base: &Flame, now: Rc<Flame>, unit: &'static str) -> Self {
        DiffView {
            diff: Diff::new(base, &now),
            now,
            unit,
            cursor: 0,
            search: String::new(),
            typing: false,
        }
    }

    /// The functions listed: indices into the diff's changes, the search applied.
    pub fn visible(&self) -> Vec<usize> {
        let needle = self.search.to_lowercase();
        (0..self.diff.changes.len())
            .filter(|&i| {
                needle.is_empty() || self.diff.changes[i].name.to_lowercase().contains(&needle)
            })
            .collect()
    }

    /// The highlighted function.
    pub fn current(&self) -> Option<&Change> {
        let i = *self.visible().get(self.cursor)?;
        self.diff.changes.get(i)
    }

    /// Handle one key; `page` lines make a page.
    pub fn key(&mut self, key: KeyEvent, page: usize) -> Outcome {
        if self.typing {
            crate::input::search_key(&mut self.search, &mut self.typing, key);
            self.cursor = 0;
            return Outcome::Stay;
        }
        let last = self.visible().len().saturating_sub(1);
        match key.code {
            KeyCode::Char('q') => return Outcome::Quit,
            KeyCode::Esc if !self.search.is_empty() => {
                self.search.clear();
                self.cursor = 0;
            }
            KeyCode::Esc | KeyCode::Char('d') => return Outcome::Back,
            KeyCode::Char('/') => {
                self.typing = true;
                self.search.clear();
                self.cursor = 0;
            }
            KeyCode::Up | KeyCode::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.cursor = (self.cursor + 1).min(last),
            KeyCode::PageUp => self.cursor = self.cursor.saturating_sub(page.max(1)),
            KeyCode::PageDown => self.cursor = (self.cursor + page.max(1)).min(last),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = last,
            KeyCode::Char('[') => return Outcome::Window(-1),
            KeyCode::Char(']') => return Outcome::Window(1),
            KeyCode::Char('F') => return Outcome::Flame,
            KeyCode::Char('s') | KeyCode::Enter => {
                if let Some(c) = self.current() {
                    if c.total == 0 {
                        return Outcome::Say(format!(
                            "{} is in the baseline only: the view has no stacks through it",
                            c.name
                        ));
                    }
                    return Outcome::Sandwich(c.name.clone());
                }
            }
            _ => {}
        }
        Outcome::Stay
    }

    /// The status line: the highlighted function's values, baseline and now.
    pub fn status(&self) -> String {
        let d = &self.diff;
        let unit = self.unit;
        if self.typing {
            return format!("search functions: {}█", self.search);
        }
        match self.current() {
            Some(c) => format!(
                "{}  total {} → {} {unit}  self {} → {} {unit}",
                c.name, c.base_total, c.total, c.base_own, c.own
            ),
            None => format!(
                "no functions: {} {unit} in the baseline, {} now",
                d.base_all, d.all
            ),
        }
    }
}

/// One function's line: Δ total share, the shares before and now, Δ self share, Δ value and
/// the name (shares in percent points).
pub fn line(c: &Change, d: &Diff) -> String {
    format!(
        "{:>+7.2}%  {:>6.2}% → {:>6.2}%  {:>+7.2}%  {:>+14}  {}",
        100.0 * c.delta(d),
        100.0 * c.base_share(d),
        100.0 * c.share(d),
        100.0 * c.delta_own(d),
        c.total - c.base_total,
        c.name
    )
}

/// The title line: both wholes.
pub fn title(d: &Diff, unit: &str, what: &str) -> String {
    format!(
        "Diff against the baseline ({what}): {} {unit} then, {} {unit} now; shares of each whole",
        d.base_all, d.all
    )
}

/// `--once --diff` as a batch: a row per function, the most changed first; shares as
/// fractions.
pub fn batch(d: &Diff) -> Result<RecordBatch> {
    let f64s = |f: &dyn Fn(&Change) -> f64| -> ArrayRef {
        std::sync::Arc::new(d.changes.iter().map(f).collect::<Float64Array>())
    };
    let i64s = |f: &dyn Fn(&Change) -> i64| -> ArrayRef {
        std::sync::Arc::new(d.changes.iter().map(f).collect::<Int64Array>())
    };
    let names: ArrayRef = std::sync::Arc::new(
        d.changes
            .iter()
            .map(|c| Some(c.name.as_str()))
            .collect::<StringArray>(),
    );
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("function", names),
        ("delta_share", f64s(&|c| c.delta(d))),
        ("base_share", f64s(&|c| c.base_share(d))),
        ("share", f64s(&|c| c.share(d))),
        ("delta_self_share", f64s(&|c| c.delta_own(d))),
        ("base_total", i64s(&|c| c.base_total)),
        ("total", i64s(&|c| c.total)),
        ("base_self", i64s(&|c| c.base_own)),
        ("self", i64s(&|c| c.own)),
    ];
    let schema = Schema::new(
        cols.iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), false))
            .collect::<Vec<_>>(),
    );
    Ok(RecordBatch::try_new(
        std::sync::Arc::new(schema),
        cols.into_iter().map(|(_, a)| a).collect(),
    )?)
}
