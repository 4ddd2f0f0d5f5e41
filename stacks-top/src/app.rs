//! The screen's state and what the table's keys do to it: the view (kind, grouping,
//! filters, window, latency), the table and its cursor, the sparkline, the terminal's size,
//! and which pane has the keyboard ([`Mode`]: the panes' own keys are theirs, in
//! [`crate::views`]). Keys change state and say what must be computed ([`Effect`]); drawing
//! is in [`crate::ui`], the queries in [`crate::session`] and the panes' modules.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Rect, Size};

use crate::catalog::{self, Column};
use crate::table::{Row, Table};
use crate::view::{Ns, Span, Step, View};
use crate::views::diff::{self, Baseline};
use crate::views::heatmap::{self, HeatmapPlan};
use crate::views::table::{InputKind, Picker};
use crate::views::{self, Cx, Job, Key, Outcome, Screen};

pub use crate::views::{Mode, Status};

/// The keys of the table (handled in [`App::on_key`]): the help popup (`h`) lists every
/// one, the bottom line their short names.
pub const KEYS: &[Key] = &[
    Key {
        keys: "↑ ↓  j k",
        help: "move the highlighted row",
        line: &["↑↓ row"],
    },
    Key {
        keys: "PgUp PgDn",
        help: "a page up or down",
        line: &[],
    },
    Key {
        keys: "← →  < >",
        help: "move the highlighted column; move it left or right in the grouping",
        line: &["←→ column"],
    },
    Key {
        keys: "Enter",
        help: "drill down: keep only rows whose column equals the highlighted cell",
        line: &["⏎ drill"],
    },
    Key {
        keys: "Space",
        help: "include or exclude (n) values of the highlighted column",
        line: &["␣ in/out"],
    },
    Key {
        keys: "Backspace",
        help: "remove the last filter",
        line: &["⌫ back"],
    },
    Key {
        keys: "g",
        help: "choose the columns to group by (type to search)",
        line: &["g group"],
    },
    Key {
        keys: "/",
        help: "show only rows containing a text (Esc clears)",
        line: &["/ search"],
    },
    Key {
        keys: "f",
        help: "add an SQL condition on the rows, e.g. duration > 1000000",
        line: &["f filter"],
    },
    Key {
        keys: "[  ]",
        help: "move the window back or forward by its length",
        line: &["[ ] window"],
    },
    Key {
        keys: "w",
        help: "window: the whole range, or the last --window",
        line: &["w whole"],
    },
    Key {
        keys: "l",
        help: "latency columns: histogram <1µs…≥1s, p50, p95, p99",
        line: &["l latency"],
    },
    Key {
        keys: "p  H",
        help: "stack tree of the row (w there: its waker); its latency heatmap",
        line: &["p stacks", "H heatmap"],
    },
    Key {
        keys: "F",
        help: "flame graph of the view: ⏎ zoom, ⌫ zoom out, / search, s sandwich",
        line: &["F flame"],
    },
    Key {
        keys: "s",
        help: "in the flame graph or the tree: callers and callees of a frame",
        line: &[],
    },
    Key {
        keys: "b  B",
        help: "mark the view (window, filters) as the baseline; forget it",
        line: &["b baseline"],
    },
    Key {
        keys: "d",
        help: "diff: functions' share now against the baseline ([ ] move)",
        line: &["d diff"],
    },
    Key {
        keys: "Tab",
        help: "next event kind (then every kind)",
        line: &["Tab kind"],
    },
    Key {
        keys: "r",
        help: "query again",
        line: &[],
    },
    Key {
        keys: "h ?  q",
        help: "this help; q or Ctrl-C quits",
        line: &["h help", "q quit"],
    },
];

/// What the main loop must do after a key.
#[derive(Debug)]
pub enum Effect {
    None,
    /// The view changed: query the table (and the sparkline) again.
    Query,
    /// Compute what a key opens (the stack tree, the flame graph, …).
    Open(Job),
    Quit,
}

/// The sparkline of active threads (or events per second) over the whole range.
#[derive(Debug, Clone, Default)]
pub struct Spark {
    pub start: Ns,
    pub bucket: Ns,
    pub values: Vec<f64>,
    /// Whether the values are threads (else events per second).
    pub threads: bool,
}

/// What a sparkline was computed for.
#[derive(Debug, Clone, PartialEq)]
pub struct SparkKey {
    pub kind: Option<String>,
    pub steps: Vec<Step>,
    pub range: Option<Span>,
    pub width: usize,
}

/// The queries running for the screen, as the screen says so (set by the
/// [`crate::runner::Runner`]).
#[derive(Debug, Clone, Default)]
pub struct Busy {
    /// The table is being queried.
    pub table: bool,
    /// The sparkline being computed.
    pub spark: Option<SparkKey>,
    /// What a key opened and is being computed (`the flame graph`, …).
    pub view: Option<&'static str>,
}

/// Everything the screen shows.
pub struct App {
    pub view: View,
    pub table: Option<Table>,
    /// The highlighted row, among [`Self::rows`].
    pub cursor: usize,
    /// The highlighted group column.
    pub col: usize,
    /// The pane with the keyboard.
    pub mode: Mode,
    pub status: Status,
    /// How long the last query took, and what it returned.
    pub timing: String,
    /// What the rows are (the store, or the live stream).
    pub source: String,
    /// What the view is compared with (`b`, `--diff`).
    pub baseline: Option<Baseline>,
    pub(crate) columns: Vec<Column>,
    pub(crate) kinds: Vec<(String, i64)>,
    pub(crate) spark: Spark,
    /// What [`Self::spark`] shows.
    pub(crate) spark_key: Option<SparkKey>,
    /// The queries running.
    pub(crate) busy: Busy,
    pub(crate) range: Option<Span>,
    /// The window length asked for.
    pub(crate) window_len: Ns,
    /// The window is the whole range (`w`).
    pub(crate) whole: bool,
    /// The window ends at the range's end (and follows it live).
    pub(crate) follow: bool,
    /// Where the window ends when it does not follow.
    pub(crate) window_end: Ns,
    pub(crate) search: String,
    /// An SQL filter was just typed: dropped again if its query fails.
    pub(crate) new_filter: bool,
    pub(crate) live: bool,
    /// The terminal's size, as the main loop last saw it (`None`: never drawn).
    pub(crate) size: Option<Size>,
}

impl App {
    pub fn new(view: View, columns: Vec<Column>, window_len: Ns, whole: bool) -> Self {
        App {
            view,
            columns,
            kinds: Vec::new(),
            table: None,
            spark: Spark::default(),
            spark_key: None,
            busy: Busy::default(),
            range: None,
            window_len,
            whole,
            follow: true,
            window_end: 0,
            cursor: 0,
            col: 0,
            search: String::new(),
            mode: Mode::Table,
            status: Status::default(),
            timing: String::new(),
            new_filter: false,
            source: String::new(),
            live: false,
            size: None,
            baseline: None,
        }
    }

    /// The terminal is `size` now: the layout the keys move in (a page of rows, the flame
    /// graph's width, the sparkline's) is the one drawn at this size.
    pub fn resize(&mut self, size: Size) {
        self.size = Some(size);
    }

    /// The area the panes are drawn in, at the terminal's size (before the first draw: 100
    /// cells by 21 lines).
    pub(crate) fn body(&self) -> Rect {
        match self.size {
            Some(s) => views::layout(Rect::new(0, 0, s.width, s.height))[1],
            None => Rect::new(0, 0, 100, 21),
        }
    }

    /// Cells of the sparkline at the terminal's size (before the first draw: 60).
    pub(crate) fn spark_width(&self) -> usize {
        self.size.map_or(60, |s| views::spark_width(s.width))
    }

    /// What an answer may change.
    pub(crate) fn screen(&mut self) -> Screen<'_> {
        Screen {
            mode: &mut self.mode,
            status: &mut self.status,
            timing: &mut self.timing,
            baseline: &mut self.baseline,
            view: &self.view,
        }
    }

    /// Live: the query of the pane open, again over the rows kept now, if it follows them.
    pub(crate) fn live_job(&mut self) -> Option<Job> {
        let body = self.body();
        let cx = Cx {
            view: &self.view,
            baseline: self.baseline.as_ref(),
            body,
        };
        self.mode.pane()?.live(&cx)
    }

    /// Whether the part of the screen open follows the live stream (the table does).
    pub(crate) fn follows_live(&mut self) -> bool {
        matches!(self.mode, Mode::Table) || self.live_job().is_some()
    }

    /// Set the loaded range and place the window in it.
    pub(crate) fn set_range(&mut self, range: Option<Span>) {
        self.range = range;
        self.view.window = self.window();
    }

    /// The window the view uses now.
    pub fn window(&self) -> Span {
        let Some(range) = self.range else {
            return Span { from: 0, to: 1 };
        };
        if self.whole || range.len() <= self.window_len {
            return range;
        }
        let end = if self.follow {
            range.to
        } else {
            self.window_end
                .clamp(range.from + self.window_len, range.to)
        };
        Span {
            from: end - self.window_len,
            to: end,
        }
    }

    /// The rows shown: the table's, narrowed by the search text.
    pub fn rows(&self) -> Vec<&Row> {
        let needle = self.search.to_lowercase();
        match &self.table {
            Some(t) => t
                .rows
                .iter()
                .filter(|r| needle.is_empty() || r.matches(&needle))
                .collect(),
            None => Vec::new(),
        }
    }

    pub fn info(&mut self, text: impl Into<String>) {
        self.status = Status {
            text: text.into(),
            error: false,
        };
    }

    pub fn error(&mut self, text: impl Into<String>) {
        self.status = Status {
            text: text.into(),
            error: true,
        };
    }

    /// Handle one key.
    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Effect {
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Effect::Quit;
        }
        match &mut self.mode {
            Mode::Table => self.table_key(key),
            Mode::Help => {
                self.mode = Mode::Table;
                Effect::None
            }
            Mode::Choose(choice) => match choice.key(key) {
                views::choose::Chosen::Stay => Effect::None,
                views::choose::Chosen::Cancel => {
                    self.mode = Mode::Table;
                    Effect::None
                }
                views::choose::Chosen::Apply(step) => {
                    self.mode = Mode::Table;
                    self.info(format!("filtered on {}", step.shown()));
                    self.view.steps.push(step);
                    self.cursor = 0;
                    self.search.clear();
                    Effect::Query
                }
            },
            Mode::Picker(_) => self.picker_key(key),
            Mode::Input { .. } => self.input_key(key),
            _ => self.pane_key(key),
        }
    }

    /// A key of the pane open.
    fn pane_key(&mut self, key: KeyEvent) -> Effect {
        let cx = Cx {
            view: &self.view,
            baseline: self.baseline.as_ref(),
            body: self.body(),
        };
        let Some(mut pane) = self.mode.pane() else {
            return Effect::None;
        };
        if pane.fresh_status() {
            self.status = Status::default();
        }
        let outcome = pane.key(key, &cx);
        drop(pane);
        self.outcome(outcome)
    }

    /// What a key of a pane asked for.
    fn outcome(&mut self, outcome: Outcome) -> Effect {
        match outcome {
            Outcome::Stay => {}
            Outcome::Say(text) => self.info(text),
            Outcome::Quit => return Effect::Quit,
            Outcome::Back => {
                self.mode = match std::mem::replace(&mut self.mode, Mode::Table) {
                    Mode::Sandwich { back, .. } => *back,
                    _ => Mode::Table,
                };
                self.info("");
            }
            Outcome::Window(dir) => {
                return match self.move_window(dir) {
                    Effect::Query => {
                        let cx = Cx {
                            view: &self.view,
                            baseline: self.baseline.as_ref(),
                            body: self.body(),
                        };
                        match self.mode.pane().and_then(|p| p.again(&cx)) {
                            Some(job) => Effect::Open(job),
                            None => Effect::Query,
                        }
                    }
                    other => other,
                };
            }
            Outcome::Sandwich(view) => {
                let name = view.sandwich.name.clone();
                let back = std::mem::replace(&mut self.mode, Mode::Table);
                self.mode = Mode::Sandwich {
                    view,
                    back: Box::new(back),
                };
                self.info(format!(
                    "sandwich of {name}: Enter on a line opens its own, Esc goes back"
                ));
            }
            Outcome::Job(job) => return Effect::Open(job),
        }
        Effect::None
    }

    /// The group values of the highlighted row.
    fn row_values(&self) -> Option<Vec<crate::view::Value>> {
        self.rows().get(self.cursor).map(|r| r.values.clone())
    }

    fn table_key(&mut self, key: KeyEvent) -> Effect {
        let rows = self.rows().len();
        let page = usize::from(self.body().height.saturating_sub(1)).max(1);
        match key.code {
            KeyCode::Char('q') => return Effect::Quit,
            KeyCode::Up | KeyCode::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => {
                self.cursor = (self.cursor + 1).min(rows.saturating_sub(1))
            }
            KeyCode::PageUp => self.cursor = self.cursor.saturating_sub(page),
            KeyCode::PageDown => self.cursor = (self.cursor + page).min(rows.saturating_sub(1)),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = rows.saturating_sub(1),
            KeyCode::Left => self.col = self.col.saturating_sub(1),
            KeyCode::Right => {
                self.col = (self.col + 1).min(self.view.group.len().saturating_sub(1))
            }
            KeyCode::Enter => return self.drill(),
            KeyCode::Char(' ') => self.choose(),
            KeyCode::Char('<') => return self.move_column(-1),
            KeyCode::Char('>') => return self.move_column(1),
            KeyCode::Backspace => {
                return match self.view.steps.pop() {
                    Some(s) => {
                        self.info(format!("removed {}", s.shown()));
                        self.cursor = 0;
                        Effect::Query
                    }
                    None => {
                        self.info("no filter to remove");
                        Effect::None
                    }
                };
            }
            KeyCode::Char('g') => {
                self.mode = Mode::Picker(Picker {
                    text: String::new(),
                    cursor: 0,
                    chosen: self.view.group.clone(),
                })
            }
            KeyCode::Char('/') => {
                self.mode = Mode::Input {
                    kind: InputKind::Search,
                    text: self.search.clone(),
                }
            }
            KeyCode::Char('f') => {
                self.mode = Mode::Input {
                    kind: InputKind::Filter,
                    text: String::new(),
                }
            }
            KeyCode::Esc if !self.search.is_empty() => {
                self.search.clear();
                self.cursor = 0;
            }
            KeyCode::Char('[') => return self.move_window(-1),
            KeyCode::Char(']') => return self.move_window(1),
            KeyCode::Char('w') => {
                self.whole = !self.whole;
                self.view.window = self.window();
                return Effect::Query;
            }
            KeyCode::Char('l') => {
                self.view.latency = !self.view.latency;
                return Effect::Query;
            }
            KeyCode::Tab => return self.next_kind(),
            KeyCode::Char('p') => {
                return match self.row_values() {
                    None => {
                        self.info("no row to peek");
                        Effect::None
                    }
                    Some(values) => Effect::Open(views::tree::job(&self.view, values)),
                };
            }
            KeyCode::Char('H') => {
                let latency = match &self.view.kind {
                    Some(k) => catalog::weights(k).is_some_and(|w| w.latency),
                    None => true,
                };
                return match self.row_values() {
                    None => {
                        self.info("no row to show");
                        Effect::None
                    }
                    Some(_) if !latency => {
                        self.info(
                            "this kind has no latency: H on vfs, block, switch, span, state…",
                        );
                        Effect::None
                    }
                    Some(values) => {
                        let plan = HeatmapPlan::new(&self.view, values, self.spark_width());
                        Effect::Open(heatmap::job(plan))
                    }
                };
            }
            KeyCode::Char('F') => {
                return if self.range.is_none() {
                    self.info("no rows to draw");
                    Effect::None
                } else {
                    Effect::Open(views::flame::job(&self.view))
                };
            }
            KeyCode::Char('b') => {
                return if self.range.is_none() {
                    self.info("no rows to mark");
                    Effect::None
                } else {
                    Effect::Open(diff::mark_job(&self.view))
                };
            }
            KeyCode::Char('B') => match self.baseline.take() {
                Some(b) => self.info(format!("baseline forgotten: {}", b.what)),
                None => self.info("no baseline: b marks the view as one"),
            },
            KeyCode::Char('d') => {
                return if self.baseline.is_none() {
                    self.info("no baseline: b marks the view as one (then move the window or filter), or --diff DIR");
                    Effect::None
                } else if self.range.is_none() {
                    self.info("no rows to compare");
                    Effect::None
                } else if let Some(b) = self
                    .baseline
                    .as_ref()
                    .filter(|b| !diff::same_kind(b, &self.view))
                {
                    let text = diff::kind_error(b);
                    self.error(text);
                    Effect::None
                } else {
                    Effect::Open(diff::job(&self.view))
                };
            }
            KeyCode::Char('r') => return Effect::Query,
            KeyCode::Char('h') | KeyCode::Char('?') => self.mode = Mode::Help,
            _ => {}
        }
        Effect::None
    }

    /// Enter: filter on the highlighted cell.
    fn drill(&mut self) -> Effect {
        let rows = self.rows();
        let Some(row) = rows.get(self.cursor) else {
            self.info("no row to drill into");
            return Effect::None;
        };
        let Some(column) = self.view.group.get(self.col).cloned() else {
            self.info("no group column to drill into");
            return Effect::None;
        };
        let value = row.values[self.col].clone();
        let step = Step::Is(crate::view::Filter { column, value });
        self.info(format!("filtered on {}", step.shown()));
        self.view.steps.push(step);
        self.cursor = 0;
        self.search.clear();
        Effect::Query
    }

    fn move_window(&mut self, dir: i64) -> Effect {
        let Some(range) = self.range else {
            return Effect::None;
        };
        if self.whole || range.len() <= self.window_len {
            self.info("the window is the whole range: w toggles it, --window sets its length");
            return Effect::None;
        }
        let end = self.window().to + dir * self.window_len;
        if end >= range.to {
            self.follow = true;
        } else {
            self.follow = false;
            self.window_end = end.max(range.from + self.window_len);
        }
        self.view.window = self.window();
        Effect::Query
    }

    /// Tab: the next kind present (then every kind), with its default grouping.
    fn next_kind(&mut self) -> Effect {
        let mut names: Vec<Option<String>> = self
            .kinds
            .iter()
            .filter(|(k, _)| catalog::weights(k).is_some())
            .map(|(k, _)| Some(k.clone()))
            .collect();
        names.push(None);
        let at = names.iter().position(|k| *k == self.view.kind).unwrap_or(0);
        let next = names[(at + 1) % names.len()].clone();
        self.view.group = default_group(next.as_deref());
        self.view.kind = next;
        self.col = 0;
        self.cursor = 0;
        self.info(format!(
            "kind: {}",
            self.view.kind.as_deref().unwrap_or(catalog::ALL)
        ));
        Effect::Query
    }
}

/// The grouping a screen of `kind` (`None`: every kind) starts with.
pub(crate) fn default_group(kind: Option<&str>) -> Vec<String> {
    let cols = match kind.and_then(catalog::weights) {
        Some(k) => k.group,
        None => catalog::ALL_KINDS_GROUP,
    };
    cols.iter().map(|s| s.to_string()).collect()
}
