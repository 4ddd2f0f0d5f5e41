//! The latency heatmap of a row (`H`): its events in the window by time (columns) and log2
//! latency bucket (lines, `<1µs` at the bottom, `≥1s` at the top), each cell shaded by its
//! events or (`t`) by their time, on a log scale of the fullest cell. Its state from the
//! query's rows, its keys and its drawing.

use anyhow::Result;
use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_schema::DataType;
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::fmt;
use crate::icicle::Outcome;
use crate::view::{BUCKETS, Ns, Span as Window};

/// The keys of the heatmap.
pub const KEYS: &str = "t events/time  Esc back  q quit";

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

    /// Handle one key.
    pub fn key(&mut self, key: KeyEvent) -> Outcome {
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

/// Draw the heatmap in `area`: a title, a line per latency bucket that has events (slowest
/// on top), the time axis.
pub fn draw(f: &mut Frame, h: &Heatmap, area: Rect) {
    let width = area.width as usize;
    let what = if h.by_time { "time" } else { "events" };
    let mut lines = vec![Line::from(Span::styled(
        fmt::fit(
            &format!(
                "Latency heatmap of {}: {} events, {} per column; shade: {what} (t)",
                h.title,
                h.total(),
                fmt::duration(h.bucket)
            ),
            width,
        ),
        Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ))];
    let used: Vec<usize> = (0..BUCKETS)
        .filter(|&k| h.counts.iter().any(|c| c[k] > 0))
        .collect();
    let (Some(&lo), Some(&hi)) = (used.first(), used.last()) else {
        lines.push(Line::from("no events with a latency in this window"));
        f.render_widget(Paragraph::new(lines), area);
        return;
    };
    let max = (0..h.counts.len())
        .flat_map(|c| (lo..=hi).map(move |k| (c, k)))
        .map(|(c, k)| h.value(c, k))
        .fold(0.0, f64::max);
    let room = (area.height as usize).saturating_sub(3);
    for k in (lo..=hi).rev().take(room) {
        let mut spans = vec![Span::styled(
            format!("{:>6} ", label(k)),
            Style::default().fg(Color::Cyan),
        )];
        let cells: String = (0..h.counts.len())
            .map(|c| {
                let v = h.value(c, k);
                if v <= 0.0 || max <= 0.0 {
                    SHADES[0]
                } else {
                    let level = ((1.0 + v).ln() / (1.0 + max).ln() * 4.0).ceil() as usize;
                    SHADES[level.clamp(1, 4)]
                }
            })
            .collect();
        spans.push(Span::styled(cells, Style::default().fg(Color::Yellow)));
        lines.push(Line::from(spans));
    }
    let left = fmt::time(h.start, false);
    let right = fmt::time(h.window.to, false);
    let gap = (7 + h.counts.len()).saturating_sub(left.chars().count() + right.chars().count());
    lines.push(Line::from(Span::styled(
        format!("{left}{}{right}", " ".repeat(gap)),
        Style::default().fg(Color::DarkGray),
    )));
    f.render_widget(Paragraph::new(lines), area);
}
