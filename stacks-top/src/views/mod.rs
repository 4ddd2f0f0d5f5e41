//! The parts of the screen that take the keyboard, one module each behind one trait
//! ([`Pane`], whose drawing half is [`Draw`]): a row's stack tree ([`tree`]), the flame graph
//! ([`flame`]), a function's sandwich ([`sandwich`]), the diff against a baseline
//! ([`diff`]), a row's latency heatmap ([`heatmap`]) and the Space menu ([`choose`]); and the
//! table's drawing ([`table`]: its state and keys are the [`crate::app::App`]'s). A pane owns
//! its state, handles its keys (what it asks of the screen is an [`Outcome`], a query a
//! [`Job`] carrying its work and what its answer does), draws itself from its state without
//! changing it, and lists its keys ([`Key`]: the key line, the help popup and docs/top.md's
//! check come from these lists). [`Mode`] says which pane has the keyboard.

pub mod choose;
pub mod diff;
pub mod flame;
pub mod heatmap;
pub mod sandwich;
pub mod table;
pub mod tree;

use anyhow::Result;
use futures::future::BoxFuture;
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;

use crate::engine::Querier;
use crate::view::View;

/// One entry of a pane's keys: the keys and what they do (a line of the help popup, empty
/// for none), and the short names the bottom line shows (none, one or several).
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub keys: &'static str,
    pub help: &'static str,
    pub line: &'static [&'static str],
}

/// The bottom line of `keys`: their short names in order.
pub fn key_line(keys: &[Key]) -> String {
    let names: Vec<&str> = keys.iter().flat_map(|k| k.line.iter().copied()).collect();
    names.join("  ")
}

/// The status line: what happened last.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub text: String,
    pub error: bool,
}

/// What the screen around a pane lends it, to draw and to handle keys: the view its
/// queries are of, the baseline, and the area panes are drawn in (for keys: as large as at
/// the last draw).
pub struct Cx<'a> {
    pub view: &'a View,
    pub baseline: Option<&'a diff::Baseline>,
    pub body: Rect,
}

impl Cx<'_> {
    /// Lines of a page of a pane drawn under `title` lines of titles.
    pub fn page(&self, title: u16) -> usize {
        usize::from(self.body.height.saturating_sub(title)).max(1)
    }
}

/// What a key in a pane asks of the screen.
pub enum Outcome {
    Stay,
    /// Say this on the status line.
    Say(String),
    /// Leave the pane (for the one it was opened from).
    Back,
    Quit,
    /// Open this sandwich over the pane, Esc coming back to it.
    Sandwich(Box<sandwich::SandwichView>),
    /// Move the window back (-1) or forward (1) by its length, and compute the pane again.
    Window(i64),
    /// Compute this.
    Job(Job),
}

/// A query a key asked for: what the screen says is being computed, its work on the query
/// runtime, and what its answer does to the screen.
pub struct Job {
    /// `the flame graph`, … (the header says it is computed; Esc cancels it).
    pub label: &'static str,
    /// The start of its errors on the status line (`flame`, `heatmap`, …).
    pub error: &'static str,
    /// Query the table again first when the window moved under the pane.
    pub sync: bool,
    /// Live: a pane following the stream, shown as nothing being computed, its errors and
    /// its cancellation not told.
    pub quiet: bool,
    pub(crate) work: Box<dyn FnOnce(Querier) -> BoxFuture<'static, Result<Answer>> + Send>,
}

impl Job {
    /// `label`'s job: `work` given the querier of the rows now.
    pub(crate) fn new<F>(label: &'static str, error: &'static str, work: F) -> Self
    where
        F: FnOnce(Querier) -> BoxFuture<'static, Result<Answer>> + Send + 'static,
    {
        Job {
            label,
            error,
            sync: false,
            quiet: false,
            work: Box::new(work),
        }
    }

    /// The same, the table queried again first if the window moved.
    pub fn synced(mut self) -> Self {
        self.sync = true;
        self
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job({})", self.label)
    }
}

/// What a job's answer does to the screen, on the screen's thread.
pub type Answer = Box<dyn FnOnce(&mut Screen<'_>) + Send>;

/// The part of the screen an answer changes: the pane open, the status line, the timing,
/// the baseline; and the view it was asked of.
pub struct Screen<'a> {
    pub mode: &'a mut Mode,
    pub status: &'a mut Status,
    pub timing: &'a mut String,
    pub baseline: &'a mut Option<diff::Baseline>,
    pub view: &'a View,
}

impl Screen<'_> {
    pub fn info(&mut self, text: impl Into<String>) {
        *self.status = Status {
            text: text.into(),
            error: false,
        };
    }

    pub fn error(&mut self, text: impl Into<String>) {
        *self.status = Status {
            text: text.into(),
            error: true,
        };
    }

    /// Open `mode`.
    pub fn open(&mut self, mode: Mode) {
        *self.mode = mode;
    }

    /// The unit of the view's values.
    pub fn unit(&self) -> &'static str {
        crate::profile::unit(self.view.kind.as_deref())
    }
}

/// A pane as drawn: its drawing, its own status line and its keys' list. Drawing reads the
/// pane's state only.
pub trait Draw {
    /// Draw the pane in `area`.
    fn draw(&self, f: &mut Frame, area: Rect, cx: &Cx);

    /// Its keys, as the bottom line shows them.
    fn keys(&self) -> &'static [Key];

    /// Its own status line, `width` cells wide, after the last key said `status` (`None`:
    /// the screen's).
    fn status(&self, _status: &Status, _width: usize) -> Option<Line<'static>> {
        None
    }

    /// Whether each key starts from an empty status line (what the last key said is all
    /// the line tells besides the pane's own).
    fn fresh_status(&self) -> bool {
        false
    }
}

/// A pane with the keyboard: what its keys do, and its query again when the window moves.
pub trait Pane: Draw {
    /// Handle one key.
    fn key(&mut self, key: KeyEvent, cx: &Cx) -> Outcome;

    /// Its query again, after the window moved (`[` `]`).
    fn again(&self, _cx: &Cx) -> Option<Job> {
        None
    }

    /// Live: its query again over the rows kept now, when it follows the stream.
    fn live(&self, _cx: &Cx) -> Option<Job> {
        None
    }
}

impl<D: Draw + ?Sized> Draw for &D {
    fn draw(&self, f: &mut Frame, area: Rect, cx: &Cx) {
        (**self).draw(f, area, cx)
    }
    fn keys(&self) -> &'static [Key] {
        (**self).keys()
    }
    fn status(&self, status: &Status, width: usize) -> Option<Line<'static>> {
        (**self).status(status, width)
    }
    fn fresh_status(&self) -> bool {
        (**self).fresh_status()
    }
}

impl<D: Draw + ?Sized> Draw for &mut D {
    fn draw(&self, f: &mut Frame, area: Rect, cx: &Cx) {
        (**self).draw(f, area, cx)
    }
    fn keys(&self) -> &'static [Key] {
        (**self).keys()
    }
    fn status(&self, status: &Status, width: usize) -> Option<Line<'static>> {
        (**self).status(status, width)
    }
    fn fresh_status(&self) -> bool {
        (**self).fresh_status()
    }
}

impl<P: Pane + ?Sized> Pane for &mut P {
    fn key(&mut self, key: KeyEvent, cx: &Cx) -> Outcome {
        (**self).key(key, cx)
    }
    fn again(&self, cx: &Cx) -> Option<Job> {
        (**self).again(cx)
    }
    fn live(&self, cx: &Cx) -> Option<Job> {
        (**self).live(cx)
    }
}

/// The part of the screen that has the keyboard.
#[derive(Debug, Clone)]
pub enum Mode {
    Table,
    Peek {
        title: String,
        tree: crate::tree::Tree,
    },
    Picker(table::Picker),
    Input {
        kind: table::InputKind,
        text: String,
    },
    Help,
    /// The flame graph of the view (`F`).
    Flame(Box<flame::FlameView>),
    /// A function's callers and callees (`s`), and the part of the screen it came from.
    Sandwich {
        view: Box<sandwich::SandwichView>,
        back: Box<Mode>,
    },
    /// The functions of the view against the baseline (`d`).
    Diff(Box<diff::DiffView>),
    /// The include/exclude menu of the highlighted column (Space).
    Choose(Box<choose::Choice>),
    /// The latency heatmap of the highlighted row (`H`).
    Heatmap(Box<heatmap::Heatmap>),
}

impl Mode {
    /// The pane drawn in the body of the screen, with the keyboard (`None`: the table, its
    /// popups and the help, which are the app's).
    pub fn pane(&mut self) -> Option<Box<dyn Pane + '_>> {
        Some(match self {
            Mode::Peek { title, tree } => Box::new(tree::Peek { title, tree }),
            Mode::Flame(v) => Box::new(v.as_mut()),
            Mode::Sandwich { view, .. } => Box::new(view.as_mut()),
            Mode::Diff(v) => Box::new(v.as_mut()),
            Mode::Heatmap(h) => Box::new(h.as_mut()),
            Mode::Table | Mode::Picker(_) | Mode::Input { .. } | Mode::Help | Mode::Choose(_) => {
                return None;
            }
        })
    }

    /// The same, to be drawn.
    pub fn drawn(&self) -> Option<Box<dyn Draw + '_>> {
        Some(match self {
            Mode::Peek { title, tree } => Box::new(tree::Peek { title, tree }),
            Mode::Flame(v) => Box::new(v.as_ref()),
            Mode::Sandwich { view, .. } => Box::new(view.as_ref()),
            Mode::Diff(v) => Box::new(v.as_ref()),
            Mode::Heatmap(h) => Box::new(h.as_ref()),
            Mode::Table | Mode::Picker(_) | Mode::Input { .. } | Mode::Help | Mode::Choose(_) => {
                return None;
            }
        })
    }
}

/// The screen's rows, top to bottom: the header, the body (where panes are drawn), the
/// status line and the key line.
pub fn layout(area: Rect) -> [Rect; 4] {
    Layout::vertical([
        Constraint::Length(HEADER),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area)
}

/// Lines of the header.
const HEADER: u16 = 6;

/// Cells of the sparkline on a screen `width` cells wide (after its name and its maximum).
pub fn spark_width(width: u16) -> usize {
    usize::from(width).saturating_sub(23)
}

/// A rectangle of `w`×`h` centered in `area`.
pub fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

/// The style of a label (the header's names, prompts).
pub fn label() -> Style {
    Style::default().fg(Color::Cyan)
}

/// A key while a search text is typed (the flame view's and the diff's `/`): characters and
/// Backspace edit `search`, Enter keeps it, Esc clears it; both end `typing`.
pub fn search_key(search: &mut String, typing: &mut bool, key: KeyEvent) {
    match key.code {
        KeyCode::Esc => {
            *typing = false;
            search.clear();
        }
        KeyCode::Enter => *typing = false,
        KeyCode::Backspace => {
            search.pop();
        }
        KeyCode::Char(c) => search.push(c),
        _ => {}
    }
}
