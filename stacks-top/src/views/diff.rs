//! The baseline and the diff view: the view's stacks marked as the baseline (`b`), another
//! store's same view as one (`--diff`), and the functions of the baseline against the
//! current view (`d`), the most changed first, a search narrowing them, a cursor over them;
//! its keys, its drawing (red for growth, blue for shrinkage) and the lines the screen and
//! `--once --diff` show.

use std::rc::Rc;

use anyhow::Result;
use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{Field, Schema};
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::catalog;
use crate::diff::{Change, Diff};
use crate::engine::Engine;
use crate::flame::Flame;
use crate::fmt;
use crate::view::{Ns, Span as Window, View};
use crate::views::sandwich::SandwichView;
use crate::views::{Cx, Draw, Job, Key, Mode, Outcome, Pane, Screen, Status};

/// The keys of the diff view.
pub(crate) const KEYS: &[Key] = &[
    Key {
        keys: "↑ ↓  j k  PgUp PgDn",
        help: "move the highlighted function",
        line: &["↑↓ function"],
    },
    Key {
        keys: "/",
        help: "list only the functions containing a text (Esc clears it)",
        line: &["/ search"],
    },
    Key {
        keys: "[  ]",
        help: "move the window back or forward by its length",
        line: &["[ ] window"],
    },
    Key {
        keys: "F",
        help: "the flame graph of the view, coloured by the change",
        line: &["F flame"],
    },
    Key {
        keys: "s  Enter",
        help: "the sandwich of the function over the view's stacks",
        line: &["s sandwich"],
    },
    Key {
        keys: "Esc  d",
        help: "back to the table",
        line: &["Esc table"],
    },
    Key {
        keys: "q",
        help: "quit",
        line: &["q quit"],
    },
];

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

impl Pane for DiffView {
    fn key(&mut self, key: KeyEvent, cx: &Cx) -> Outcome {
        let page = cx.page(2);
        if self.typing {
            crate::views::search_key(&mut self.search, &mut self.typing, key);
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
            KeyCode::PageUp => self.cursor = self.cursor.saturating_sub(page),
            KeyCode::PageDown => self.cursor = (self.cursor + page).min(last),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = last,
            KeyCode::Char('[') => return Outcome::Window(-1),
            KeyCode::Char(']') => return Outcome::Window(1),
            KeyCode::Char('F') => return Outcome::Job(crate::views::flame::job(cx.view)),
            KeyCode::Char('s') | KeyCode::Enter => {
                if let Some(c) = self.current() {
                    if c.total == 0 {
                        return Outcome::Say(format!(
                            "{} is in the baseline only: the view has no stacks through it",
                            c.name
                        ));
                    }
                    return Outcome::Sandwich(Box::new(SandwichView::new(
                        self.now.clone(),
                        self.unit,
                        &c.name,
                    )));
                }
            }
            _ => {}
        }
        Outcome::Stay
    }

    fn again(&self, cx: &Cx) -> Option<Job> {
        Some(job(cx.view))
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

impl Draw for DiffView {
    /// The title, the column titles, then a function a line, the most changed first, red
    /// for growth and blue for shrinkage.
    fn draw(&self, f: &mut Frame, area: Rect, cx: &Cx) {
        let what = cx.baseline.map_or("", |b| b.what.as_str());
        let width = area.width as usize;
        let height = area.height.saturating_sub(2) as usize;
        let bold = Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
        let search = if self.search.is_empty() {
            String::new()
        } else {
            format!("/{} · ", self.search)
        };
        let mut lines = vec![
            Line::from(Span::styled(
                fmt::fit(
                    &format!("{search}{}", title(&self.diff, self.unit, what)),
                    width,
                ),
                bold,
            )),
            Line::from(Span::styled(
                fmt::fit(HEADER, width),
                Style::default().fg(Color::Cyan),
            )),
        ];
        let first = self.cursor.saturating_sub(height.saturating_sub(1));
        let visible = self.visible();
        for (n, &i) in visible.iter().enumerate().skip(first).take(height) {
            let c = &self.diff.changes[i];
            let delta = c.delta(&self.diff);
            let mut style = if delta.abs() < 0.001 {
                Style::default()
            } else if delta > 0.0 {
                Style::default().fg(Color::LightRed)
            } else {
                Style::default().fg(Color::LightBlue)
            };
            if n == self.cursor {
                style = style.add_modifier(Modifier::REVERSED);
            }
            lines.push(Line::from(Span::styled(
                fmt::fit(&line(c, &self.diff), width),
                style,
            )));
        }
        f.render_widget(Paragraph::new(lines), area);
    }

    fn keys(&self) -> &'static [Key] {
        KEYS
    }

    fn status(&self, status: &Status, width: usize) -> Option<Line<'static>> {
        (!status.error).then(|| Line::from(vec![Span::raw(fmt::fit(&self.status(), width))]))
    }
}

/// The baseline, if it is of the view's kind; else why not on the status line.
pub(crate) fn compared(s: &mut Screen<'_>) -> Option<Baseline> {
    match s.baseline.clone() {
        Some(b) if b.kind == s.view.kind => Some(b),
        Some(_) => {
            wrong_kind(s);
            None
        }
        None => None,
    }
}

/// Say that the baseline is of another kind than the view.
pub(crate) fn wrong_kind(s: &mut Screen<'_>) {
    if let Some(b) = s.baseline.as_ref() {
        let text = kind_error(b);
        s.error(text);
    }
}

/// Whether the baseline is of `view`'s kind.
pub(crate) fn same_kind(baseline: &Baseline, view: &View) -> bool {
    baseline.kind == view.kind
}

/// Why the baseline `b` is not compared with a view of another kind.
pub(crate) fn kind_error(b: &Baseline) -> String {
    format!(
        "the baseline is of kind {}: b marks one of this kind",
        b.kind.as_deref().unwrap_or(catalog::ALL)
    )
}

/// What `view` is, for a baseline's description: its window and filters.
pub fn describe(view: &View) -> String {
    let w = view.window;
    let mut text = format!(
        "{} → {} ({})",
        fmt::time(w.from, false),
        fmt::time(w.to, false),
        fmt::duration(w.len())
    );
    for s in &view.steps {
        text.push_str(" › ");
        text.push_str(&s.shown());
    }
    text
}

/// `b`: the view's stacks become the baseline.
pub fn mark_job(view: &View) -> Job {
    let what = describe(view);
    crate::views::flame::stacks_job("the baseline", view, move |s, f| {
        s.info(format!(
            "baseline: {what}; move the window ([ ]) or filter, then d (functions) or F (flame)"
        ));
        *s.baseline = Some(Baseline {
            flame: Rc::new(f),
            kind: s.view.kind.clone(),
            what,
        });
    })
}

/// The baseline of `view` over another store (`--diff`): its stacks in the window `window`
/// picks in its range (the last `--window` of it, as for the view).
pub(crate) fn store_baseline(
    engine: &Engine,
    view: &View,
    window: Ns,
    label: &str,
) -> Result<Baseline> {
    let Some(range) = engine.range(view.kind.as_deref()) else {
        anyhow::bail!("--diff {label}: no rows of this kind");
    };
    let mut view = view.clone();
    view.window = if range.len() <= window {
        range
    } else {
        Window {
            from: range.to - window,
            to: range.to,
        }
    };
    let flame = crate::views::flame::flame(engine, &view)
        .map_err(|e| e.context(format!("--diff {label}")))?;
    Ok(Baseline {
        flame: Rc::new(flame),
        kind: view.kind.clone(),
        what: label.to_string(),
    })
}

/// `d`: the functions of the view's stacks against the baseline, opened.
pub fn job(view: &View) -> Job {
    crate::views::flame::stacks_job("the diff", view, show).synced()
}

/// The functions of the view's stacks `f` against the baseline.
fn show(s: &mut Screen<'_>, f: Flame) {
    let Some(b) = compared(s) else {
        return;
    };
    let mut view = DiffView::new(&b.flame, Rc::new(f), s.unit());
    // The window moved under an open diff: the same function stays highlighted.
    if let Mode::Diff(old) = &*s.mode {
        view.search = old.search.clone();
        let name = old.current().map(|c| c.name.clone());
        view.cursor = name
            .and_then(|name| {
                let visible = view.visible();
                visible
                    .iter()
                    .position(|&i| view.diff.changes[i].name == name)
            })
            .unwrap_or(0);
    }
    s.info(format!(
        "diff against {}: [ ] move the window, F flame, s sandwich, Esc back",
        b.what
    ));
    s.open(Mode::Diff(Box::new(view)));
}
