//! The screen's state and what each key does to it: the view (kind, grouping, filters,
//! window, latency), the table and its cursor, the sparkline, and the modal parts (stack tree,
//! column picker, text input, help). Keys change state and say what must be queried again;
//! drawing is in [`crate::ui`], queries in [`crate::session`].

use std::cell::Cell;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::catalog::{self, Column};
use crate::choose::{Choice, Chosen};
use crate::compare::{Baseline, DiffView};
use crate::icicle::{FlameView, Outcome, SandwichView};
use crate::table::{Row, Table};
use crate::tree::Tree;
use crate::view::{Ns, Span, Step, View};

/// What the main loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    None,
    /// The view changed: query the table (and the sparkline) again.
    Query,
    /// Build the stack tree of the highlighted row.
    Peek,
    /// Open the flame graph of the view.
    Flame,
    /// Open the sandwich of [`App::sandwich_of`] over the view's stacks.
    Sandwich,
    /// Replace the stack tree by that of the waker in [`App::follow_waker`].
    Follow,
    /// Mark the view's stacks as the baseline (`b`).
    Baseline,
    /// Open the diff of the view against the baseline (`d`).
    Diff,
    /// Open the latency heatmap of the highlighted row (`H`).
    Heatmap,
    Quit,
}

/// What a text input is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `/`: keep the rows whose cells contain the text.
    Search,
    /// `f`: an SQL condition on the rows before grouping.
    Filter,
}

/// The column picker of `g`.
#[derive(Debug, Clone)]
pub struct Picker {
    pub text: String,
    pub cursor: usize,
    pub chosen: Vec<String>,
}

/// The part of the screen that has the keyboard.
#[derive(Debug, Clone)]
pub enum Mode {
    Table,
    Peek {
        title: String,
        tree: Tree,
    },
    Picker(Picker),
    Input {
        kind: InputKind,
        text: String,
    },
    Help,
    /// The flame graph of the view (`F`).
    Flame(Box<FlameView>),
    /// A function's callers and callees (`s`), and the part of the screen it came from.
    Sandwich {
        view: Box<SandwichView>,
        back: Box<Mode>,
    },
    /// The functions of the view against the baseline (`d`).
    Diff(Box<DiffView>),
    /// The include/exclude menu of the highlighted column (Space).
    Choose(Box<Choice>),
    /// The latency heatmap of the highlighted row (`H`).
    Heatmap(Box<crate::heatmap::Heatmap>),
}

/// The status line: what happened last.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub text: String,
    pub error: bool,
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
    pub columns: Vec<Column>,
    pub kinds: Vec<(String, i64)>,
    pub table: Option<Table>,
    pub spark: Spark,
    /// What [`Self::spark`] shows.
    pub spark_key: Option<SparkKey>,
    /// The queries running.
    pub busy: Busy,
    pub range: Option<Span>,
    /// The window length asked for.
    pub window_len: Ns,
    /// The window is the whole range (`w`).
    pub whole: bool,
    /// The window ends at the range's end (and follows it live).
    pub follow: bool,
    /// Where the window ends when it does not follow.
    pub window_end: Ns,
    pub cursor: usize,
    /// The highlighted group column.
    pub col: usize,
    pub search: String,
    pub mode: Mode,
    pub status: Status,
    /// How long the last table query took, and its rows.
    pub timing: String,
    /// An SQL filter was just typed: dropped again if its query fails.
    pub new_filter: bool,
    pub source: String,
    pub live: bool,
    /// Rows of the table area at the last draw (for PgUp/PgDn).
    pub page: Cell<usize>,
    /// Cells the sparkline had at the last draw.
    pub spark_width: Cell<usize>,
    /// The function whose sandwich [`Effect::Sandwich`] opens.
    pub sandwich_of: Option<String>,
    /// The waker (thread id, node name) whose waits [`Effect::Follow`] opens.
    pub follow_waker: Option<(i64, String)>,
    /// What the view is compared with (`b`, `--diff`).
    pub baseline: Option<Baseline>,
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
            page: Cell::new(20),
            spark_width: Cell::new(60),
            sandwich_of: None,
            follow_waker: None,
            baseline: None,
        }
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
            Mode::Peek { tree, .. } => match key.code {
                KeyCode::Esc | KeyCode::Char('p') | KeyCode::Backspace => {
                    self.mode = Mode::Table;
                    Effect::None
                }
                KeyCode::Char('q') => Effect::Quit,
                KeyCode::Up | KeyCode::Char('k') => step(tree, -1),
                KeyCode::Down | KeyCode::Char('j') => step(tree, 1),
                KeyCode::PageUp => step(tree, -(self.page.get() as isize)),
                KeyCode::PageDown => step(tree, self.page.get() as isize),
                KeyCode::Enter | KeyCode::Char(' ') => {
                    tree.toggle();
                    Effect::None
                }
                KeyCode::Char('w') => {
                    match tree.waker_at_cursor().or_else(|| tree.heaviest_waker()) {
                        Some((0, name)) => {
                            self.info(format!("{name} is not a thread: the chain ends there"));
                            Effect::None
                        }
                        Some(waker) => {
                            self.follow_waker = Some(waker);
                            Effect::Follow
                        }
                        None => {
                            self.info("no waker in this tree (record with -e switch,wake)");
                            Effect::None
                        }
                    }
                }
                KeyCode::Char('s') => {
                    let at = tree.visible().get(tree.cursor).copied().unwrap_or(0);
                    if at == 0 {
                        self.info("the root has no callers: s on a frame");
                        Effect::None
                    } else {
                        self.sandwich_of = Some(tree.nodes[at].name.clone());
                        Effect::Sandwich
                    }
                }
                _ => Effect::None,
            },
            Mode::Flame(view) => {
                self.status = Status::default();
                let outcome = view.key(key);
                self.outcome(outcome)
            }
            Mode::Sandwich { view, .. } => {
                let outcome = view.key(key, self.page.get());
                self.outcome(outcome)
            }
            Mode::Diff(view) => {
                let outcome = view.key(key, self.page.get());
                self.outcome(outcome)
            }
            Mode::Heatmap(h) => {
                let outcome = h.key(key);
                self.outcome(outcome)
            }
            Mode::Choose(choice) => match choice.key(key) {
                Chosen::Stay => Effect::None,
                Chosen::Cancel => {
                    self.mode = Mode::Table;
                    Effect::None
                }
                Chosen::Apply(step) => {
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
        }
    }

    /// What a key of the flame view or the sandwich asked for.
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
                let again = match self.mode {
                    Mode::Diff(_) => Effect::Diff,
                    _ => Effect::Flame,
                };
                return match self.move_window(dir) {
                    Effect::Query => again,
                    other => other,
                };
            }
            Outcome::Flame => return Effect::Flame,
            Outcome::Sandwich(name) => {
                let source = match &self.mode {
                    Mode::Flame(view) => Some((view.flame.clone(), view.unit)),
                    Mode::Diff(view) => Some((view.now.clone(), view.unit)),
                    _ => None,
                };
                if let Some((flame, unit)) = source {
                    let sandwich = SandwichView::new(flame, unit, &name);
                    let back = std::mem::replace(&mut self.mode, Mode::Table);
                    self.mode = Mode::Sandwich {
                        view: Box::new(sandwich),
                        back: Box::new(back),
                    };
                    self.info(format!(
                        "sandwich of {name}: Enter on a line opens its own, Esc goes back"
                    ));
                }
            }
        }
        Effect::None
    }

    fn table_key(&mut self, key: KeyEvent) -> Effect {
        let rows = self.rows().len();
        let page = self.page.get().max(1);
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
                return if rows == 0 {
                    self.info("no row to peek");
                    Effect::None
                } else {
                    Effect::Peek
                };
            }
            KeyCode::Char('H') => {
                let latency = match &self.view.kind {
                    Some(k) => catalog::weights(k).is_some_and(|w| w.latency),
                    None => true,
                };
                return if rows == 0 {
                    self.info("no row to show");
                    Effect::None
                } else if !latency {
                    self.info("this kind has no latency: H on vfs, block, switch, span, state…");
                    Effect::None
                } else {
                    Effect::Heatmap
                };
            }
            KeyCode::Char('F') => {
                return if self.range.is_none() {
                    self.info("no rows to draw");
                    Effect::None
                } else {
                    Effect::Flame
                };
            }
            KeyCode::Char('b') => {
                return if self.range.is_none() {
                    self.info("no rows to mark");
                    Effect::None
                } else {
                    Effect::Baseline
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
                } else {
                    Effect::Diff
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

fn step(tree: &mut Tree, delta: isize) -> Effect {
    tree.step(delta);
    Effect::None
}

/// The grouping a screen of `kind` (`None`: every kind) starts with.
pub(crate) fn default_group(kind: Option<&str>) -> Vec<String> {
    let cols = match kind.and_then(catalog::weights) {
        Some(k) => k.group,
        None => catalog::ALL_KINDS_GROUP,
    };
    cols.iter().map(|s| s.to_string()).collect()
}
