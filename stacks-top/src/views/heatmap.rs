//! The latency heatmap of a row (`H`): its events in the window by time (columns) and log2
//! latency bucket (lines, `<1µs` at the bottom, `≥1s` at the top), each cell shaded by its
//! events or (`t`) by their time, on a log scale of the fullest cell. Its query, its state
//! from the query's rows, its keys, its drawing and its text (`--once --heatmap`).

use std::time::Duration;

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_schema::DataType;
use futures::FutureExt;
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::engine::{Engine, Querier};
use crate::fmt;
use crate::view::{BUCKETS, Ns, Planner, Span as Window, Value, View};
use crate::views::{Cx, Draw, Job, Key, Outcome, Pane};

/// The keys of the heatmap.
pub(crate) const KEYS: &[Key] = &[
    Key {
        keys: "t",
        help: "shade the cells by the time of their events, or by their number",
        line: &["t events/time"],
    },
    Key {
        keys: "Esc  H  Backspace",
        help: "back to the table",
        line: &["Esc back"],
    },
    Key {
        keys: "q",
        help: "quit",
        line: &["q quit"],
    },
];

/// What a row's heatmap is of: the row, its title, and its columns.
#[derive(Debug, Clone)]
pub struct HeatmapPlan {
    pub view: View,
    pub values: Vec<Value>,
    pub title: String,
    pub columns: usize,
}

impl HeatmapPlan {
    /// The heatmap of the row `values` of `view`, `columns` wide.
    pub fn new(view: &View, values: Vec<Value>, columns: usize) -> Self {
        HeatmapPlan {
            title: view.row_title(&values),
            view: view.clone(),
            values,
            columns: columns.max(10),
        }
    }
}

/// The latency heatmap of `plan`'s row.
async fn heatmap_of(q: Querier, plan: HeatmapPlan) -> Result<(Heatmap, Duration)> {
    let window = plan.view.window;
    let bucket = bucket(window, plan.columns);
    let planner = Planner {
        columns: &q.columns,
    };
    let sql = planner.heatmap(&plan.view, &plan.values, window.from, bucket);
    let (batches, took) = q.timed("the heatmap", &sql, Some(window)).await?;
    let h = Heatmap::new(plan.title, window, plan.columns, &batches)?;
    Ok((h, took))
}

/// [`heatmap_of`], waited for (text mode).
pub fn heatmap(engine: &Engine, plan: HeatmapPlan) -> Result<Heatmap> {
    Ok(engine.block_on(heatmap_of(engine.querier(), plan))?.0)
}

/// `H`: the heatmap of `plan`'s row, opened.
pub fn job(plan: HeatmapPlan) -> Job {
    Job::new("the heatmap", "heatmap", |q| {
        async move {
            let (h, took) = heatmap_of(q, plan).await?;
            let open: crate::views::Answer = Box::new(move |s| {
                *s.timing = format!("{} events · {} ms", h.total(), took.as_millis());
                s.info("latency by time: t shades by time instead of events, Esc goes back");
                s.open(crate::views::Mode::Heatmap(Box::new(h)));
            });
            Ok(open)
        }
        .boxed()
    })
}

/// A row's heatmap.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    pub title: String,
    pub window: Window,
    /// The first column's start and each column's length.
    pub start: Ns,
    pub bucket: Ns,
    /// Events per column and latency bucket.
    pub counts: Vec<[i64; BUCKETS]>,
    /// Their time (ns) per column and latency bucket.
    pub times: Vec<[f64; BUCKETS]>,
    /// Shade by time instead of events.
    pub by_time: bool,
}

/// The label of latency bucket `k`: `<1µs`, its lower bound (1µs … 512ms), `≥1s`.
pub fn label(k: usize) -> String {
    match k {
        0 => "<1µs".into(),
        k if k >= BUCKETS - 1 => "≥1s".into(),
        k if k <= 10 => format!("{}µs", 1u64 << (k - 1)),
        k => format!("{}ms", 1u64 << (k - 11)),
    }
}

/// The length of each of `columns` columns over `window`.
pub fn bucket(window: Window, columns: usize) -> Ns {
    let columns = columns.max(1) as Ns;
    ((window.len() + columns - 1) / columns).max(1)
}

impl Heatmap {
    /// The heatmap of `columns` columns of `window` from the query's `batches` (`i`, `lb`,
    /// `n`, `t`).
    pub fn new(
        title: String,
        window: Window,
        columns: usize,
        batches: &[RecordBatch],
    ) -> Result<Self> {
        let columns = columns.max(1);
        let mut h = Heatmap {
            title,
            window,
            start: window.from,
            bucket: bucket(window, columns),
            counts: vec![[0; BUCKETS]; columns],
            times: vec![[0.0; BUCKETS]; columns],
            by_time: false,
        };
        for b in batches {
            let col = |i: usize, t: &DataType| arrow_cast::cast(b.column(i), t);
            let (i, lb) = (col(0, &DataType::Int64)?, col(1, &DataType::Int64)?);
            let (n, t) = (col(2, &DataType::Int64)?, col(3, &DataType::Float64)?);
            let (i, lb) = (
                i.as_primitive::<Int64Type>(),
                lb.as_primitive::<Int64Type>(),
            );
            let (n, t) = (
                n.as_primitive::<Int64Type>(),
                t.as_primitive::<Float64Type>(),
            );
            for r in 0..b.num_rows() {
                let (c, k) = (i.value(r), lb.value(r));
                if c < 0 || c as usize >= columns || k < 0 || k as usize >= BUCKETS {
                    continue;
                }
                h.counts[c as usize][k as usize] += n.value(r);
                h.times[c as usize][k as usize] += t.value(r);
            }
        }
        Ok(h)
    }

    /// Every event of the heatmap.
    pub fn total(&self) -> i64 {
        self.counts.iter().flatten().sum()
    }

    /// Events per latency bucket, over the whole window.
    pub fn buckets(&self) -> [i64; BUCKETS] {
        let mut out = [0; BUCKETS];
        for c in &self.counts {
            for (o, v) in out.iter_mut().zip(c) {
                *o += v;
            }
        }
        out
    }

    fn value(&self, c: usize, k: usize) -> f64 {
        if self.by_time {
            self.times[c][k]
        } else {
            self.counts[c][k] as f64
        }
    }
}

impl Pane for Heatmap {
    fn key(&mut self, key: KeyEvent, _cx: &Cx) -> Outcome {
        match key.code {
            KeyCode::Char('q') => Outcome::Quit,
            KeyCode::Esc | KeyCode::Char('H') | KeyCode::Backspace => Outcome::Back,
            KeyCode::Char('t') => {
                self.by_time = !self.by_time;
                Outcome::Say(if self.by_time {
                    "shaded by the time of the events".into()
                } else {
                    "shaded by the number of events".into()
                })
            }
            _ => Outcome::Stay,
        }
    }
}

const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];

/// The heatmap as text: a title, a line per latency bucket from the slowest with events to
/// the fastest (at most `room`), and the time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    pub title: String,
    /// Each bucket's label, its cells (a shade per column) and its events.
    pub lines: Vec<(String, String, i64)>,
    pub axis: String,
}

/// The lower bound of latency bucket `k`, in ns (0 for `<1µs`).
pub fn lower_ns(k: usize) -> i64 {
    if k == 0 { 0 } else { 1 << (k + 9) }
}

impl Heatmap {
    /// What the screen shows of the heatmap, `room` bucket lines at most.
    pub fn text(&self, room: usize) -> Text {
        let what = if self.by_time { "time" } else { "events" };
        let title = format!(
            "Latency heatmap of {}: {} events, {} per column; shade: {what} (t)",
            self.title,
            self.total(),
            fmt::duration(self.bucket)
        );
        let left = fmt::time(self.start, false);
        let right = fmt::time(self.window.to, false);
        let gap =
            (7 + self.counts.len()).saturating_sub(left.chars().count() + right.chars().count());
        let axis = format!("{left}{}{right}", " ".repeat(gap));
        let used: Vec<usize> = (0..BUCKETS)
            .filter(|&k| self.counts.iter().any(|c| c[k] > 0))
            .collect();
        let (Some(&lo), Some(&hi)) = (used.first(), used.last()) else {
            return Text {
                title,
                lines: Vec::new(),
                axis,
            };
        };
        let max = (0..self.counts.len())
            .flat_map(|c| (lo..=hi).map(move |k| (c, k)))
            .map(|(c, k)| self.value(c, k))
            .fold(0.0, f64::max);
        let events = self.buckets();
        let lines = (lo..=hi)
            .rev()
            .take(room)
            .map(|k| {
                let cells: String = (0..self.counts.len())
                    .map(|c| {
                        let v = self.value(c, k);
                        if v <= 0.0 || max <= 0.0 {
                            SHADES[0]
                        } else {
                            let level = ((1.0 + v).ln() / (1.0 + max).ln() * 4.0).ceil() as usize;
                            SHADES[level.clamp(1, 4)]
                        }
                    })
                    .collect();
                (label(k), cells, events[k])
            })
            .collect();
        Text { title, lines, axis }
    }

    /// `--once --heatmap`: the lines of the screen, each bucket's with its events after it.
    pub fn printed(&self) -> Vec<String> {
        let text = self.text(usize::MAX);
        let mut out = vec![text.title];
        if text.lines.is_empty() {
            out.push("no events with a latency in this window".into());
        }
        for (label, cells, events) in &text.lines {
            out.push(format!("{label:>6} {cells}  {events}"));
        }
        out.push(text.axis);
        out
    }

    /// `--once --heatmap -f csv|json`: a row per cell with events — its time column
    /// (`start_ns`, `end_ns`), latency bucket (`bucket`, `lower_ns`), events and their time.
    pub fn batch(&self) -> Result<RecordBatch> {
        use arrow_array::{ArrayRef, Float64Array, Int64Array, StringArray};
        let cells: Vec<(usize, usize)> = (0..self.counts.len())
            .flat_map(|c| (0..BUCKETS).map(move |k| (c, k)))
            .filter(|&(c, k)| self.counts[c][k] > 0)
            .collect();
        let start = |c: usize| self.start + c as Ns * self.bucket;
        let i64s = |f: &dyn Fn(usize, usize) -> i64| -> ArrayRef {
            std::sync::Arc::new(cells.iter().map(|&(c, k)| f(c, k)).collect::<Int64Array>())
        };
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("start_ns", i64s(&|c, _| start(c))),
            ("end_ns", i64s(&|c, _| start(c + 1).min(self.window.to))),
            (
                "bucket",
                std::sync::Arc::new(
                    cells
                        .iter()
                        .map(|&(_, k)| Some(label(k)))
                        .collect::<StringArray>(),
                ),
            ),
            ("lower_ns", i64s(&|_, k| lower_ns(k))),
            ("events", i64s(&|c, k| self.counts[c][k])),
            (
                "time_ns",
                std::sync::Arc::new(
                    cells
                        .iter()
                        .map(|&(c, k)| self.times[c][k])
                        .collect::<Float64Array>(),
                ),
            ),
        ];
        let schema = arrow_schema::Schema::new(
            cols.iter()
                .map(|(n, a)| arrow_schema::Field::new(*n, a.data_type().clone(), false))
                .collect::<Vec<_>>(),
        );
        Ok(RecordBatch::try_new(
            std::sync::Arc::new(schema),
            cols.into_iter().map(|(_, a)| a).collect(),
        )?)
    }
}

impl Draw for Heatmap {
    /// A title, a line per latency bucket that has events (slowest on top), the time axis.
    fn draw(&self, f: &mut Frame, area: Rect, _cx: &Cx) {
        let width = area.width as usize;
        let text = self.text((area.height as usize).saturating_sub(3));
        let mut lines = vec![Line::from(Span::styled(
            fmt::fit(&text.title, width),
            Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        ))];
        if text.lines.is_empty() {
            lines.push(Line::from("no events with a latency in this window"));
            f.render_widget(Paragraph::new(lines), area);
            return;
        }
        for (label, cells, _) in text.lines {
            lines.push(Line::from(vec![
                Span::styled(format!("{label:>6} "), Style::default().fg(Color::Cyan)),
                Span::styled(cells, Style::default().fg(Color::Yellow)),
            ]));
        }
        lines.push(Line::from(Span::styled(
            text.axis,
            Style::default().fg(Color::DarkGray),
        )));
        f.render_widget(Paragraph::new(lines), area);
    }

    fn keys(&self) -> &'static [Key] {
        KEYS
    }
}
