//! The table's drawing (the screen's first pane, whose state and keys are the app's,
//! [`crate::app`]): the group columns as wide as their widest cell, the value columns it has
//! (samples, average threads and their bar, bytes, the latency histogram and percentiles);
//! the column picker of `g` and the text inputs of `/` and `f`.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::catalog::Column;
use crate::fmt;
use crate::table::{Row, Table};
use crate::views::{centered, label};

const BAR: usize = 10;
const MAX_CELL: usize = 40;

/// What a text input is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// `/`: keep the rows whose cells contain the text.
    Search,
    /// `f`: an SQL condition on the rows before grouping.
    Filter,
}

impl InputKind {
    /// The prompt of the status line while the text is typed.
    pub fn prompt(self) -> &'static str {
        match self {
            InputKind::Search => "search rows: ",
            InputKind::Filter => "filter (SQL condition, ⏎ applies, Esc cancels): ",
        }
    }
}

/// The column picker of `g`.
#[derive(Debug, Clone)]
pub struct Picker {
    pub text: String,
    pub cursor: usize,
    pub chosen: Vec<String>,
}

/// One table column: header, width, right-aligned.
struct Col {
    title: String,
    width: usize,
    right: bool,
}

/// Draw the table in `area`: `rows` of `table` (those the search `search` keeps), row
/// `cursor` highlighted and its group cell `col`.
pub fn draw(
    f: &mut Frame,
    area: Rect,
    table: Option<&Table>,
    rows: &[&Row],
    cursor: usize,
    col: usize,
    search: &str,
) {
    let Some(table) = table else {
        f.render_widget(Paragraph::new(" no rows to show"), area);
        return;
    };
    let mut layout = table_columns(table, rows, area.width as usize);
    layout.max_thr = rows
        .iter()
        .filter_map(|r| r.avg_thr(table.thread_window()))
        .fold(0.0, f64::max);
    let cols = &layout.cols;
    let mut lines = Vec::new();
    lines.push(Line::from(
        cols.iter()
            .map(|c| {
                Span::styled(
                    cell(&c.title, c),
                    Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
                )
            })
            .collect::<Vec<_>>(),
    ));
    let height = area.height.saturating_sub(1) as usize;
    let first = cursor.saturating_sub(height.saturating_sub(1));
    for (n, row) in rows.iter().enumerate().skip(first).take(height) {
        let on = n == cursor;
        let base = if on {
            Style::default().bg(Color::DarkGray)
        } else if n % 2 == 1 {
            Style::default().bg(Color::Rgb(24, 24, 24))
        } else {
            Style::default()
        };
        let selected = on.then_some(col);
        lines.push(table_row(table, row, &layout, base, selected));
    }
    if rows.is_empty() {
        lines.push(Line::from(if search.is_empty() {
            " no rows in this window: [ ] moves it, w shows the whole range, ⌫ removes a filter"
        } else {
            " no row matches the search: Esc clears it"
        }));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// `text` fitted to column `c`, aligned, and the space after it.
fn cell(text: &str, c: &Col) -> String {
    let t = fmt::fit(text, c.width);
    if c.right {
        format!("{t:>w$} ", w = c.width)
    } else {
        format!("{t:<w$} ", w = c.width)
    }
}

/// How the table's rows are laid out.
struct TableLayout {
    cols: Vec<Col>,
    /// Whether the `avg_thr` columns, and the `bytes` ones, are shown.
    threads: bool,
    bytes: bool,
    /// The largest `avg_thr`, the full length of its bar.
    max_thr: f64,
}

/// The table's columns: its group columns as wide as their widest cell, then the value
/// columns it has, the group columns shrunk (widest first) until a row fits `width`.
fn table_columns(table: &Table, rows: &[&Row], width: usize) -> TableLayout {
    let threads = table.has_threads();
    let bytes = table.has_bytes();
    let mut cols: Vec<Col> = Vec::new();
    for (i, g) in table.group.iter().enumerate() {
        let widest = rows
            .iter()
            .map(|r| r.values[i].shown.chars().count())
            .max()
            .unwrap_or(0);
        cols.push(Col {
            title: g.clone(),
            width: widest.max(g.len()).clamp(4, MAX_CELL),
            right: false,
        });
    }
    let mut add = |title: &str, width: usize, right: bool| {
        cols.push(Col {
            title: title.to_string(),
            width: width.max(title.chars().count()),
            right,
        })
    };
    add("samples", 9, true);
    if threads {
        add("avg_thr", 7, true);
        add("", BAR, false);
    }
    if bytes {
        add("bytes", 7, true);
        add("bytes/s", 7, true);
    }
    if table.latency {
        add(&fmt::histogram_header(), crate::view::BUCKETS, false);
        for p in ["p50", "p95", "p99"] {
            add(p, 6, true);
        }
    }
    let g = table.group.len();
    let total = |cols: &[Col]| cols.iter().map(|c| c.width + 1).sum::<usize>();
    while total(&cols) > width {
        let Some(widest) = (0..g).max_by_key(|&i| cols[i].width) else {
            break;
        };
        if cols[widest].width <= 6 {
            break;
        }
        cols[widest].width -= 1;
    }
    TableLayout {
        cols,
        threads,
        bytes,
        max_thr: 0.0,
    }
}

/// One row of the table laid out by `layout`, on `base`, its `selected` group cell
/// highlighted.
fn table_row(
    table: &Table,
    row: &Row,
    layout: &TableLayout,
    base: Style,
    selected: Option<usize>,
) -> Line<'static> {
    let cols = &layout.cols;
    let window_ns = table.window.len();
    let secs = window_ns as f64 / 1e9;
    let mut spans = Vec::new();
    for (i, (value, col)) in row.values.iter().zip(cols).enumerate() {
        let style = if selected == Some(i) {
            base.add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            base
        };
        spans.push(Span::styled(cell(&value.shown, col), style));
    }
    let mut k = table.group.len();
    let mut next = |text: String, style: Style| {
        spans.push(Span::styled(cell(&text, &cols[k]), style));
        k += 1;
    };
    next(fmt::count(row.samples), base);
    if layout.threads {
        let thr = row.avg_thr(table.thread_window());
        next(thr.map(|t| format!("{t:.2}")).unwrap_or_default(), base);
        let frac = thr
            .map(|t| t / layout.max_thr.max(f64::MIN_POSITIVE))
            .unwrap_or(0.0);
        next(fmt::bar(frac, BAR), base.fg(Color::Green));
    }
    if layout.bytes {
        next(
            row.bytes.map(|b| fmt::bytes(b as f64)).unwrap_or_default(),
            base,
        );
        next(
            row.bytes
                .map(|b| fmt::bytes(b as f64 / secs))
                .unwrap_or_default(),
            base,
        );
    }
    if table.latency {
        let lat = row.latency.as_ref().filter(|l| l.n > 0);
        next(
            lat.map(|l| fmt::histogram(&l.hist)).unwrap_or_default(),
            base.fg(Color::Yellow),
        );
        for i in 0..3 {
            next(
                lat.and_then(|l| l.p[i])
                    .map(fmt::duration)
                    .unwrap_or_default(),
                base,
            );
        }
    }
    Line::from(spans)
}

/// Draw the column picker over `area`, the columns `matches` listed.
pub fn draw_picker(f: &mut Frame, p: &Picker, matches: &[&Column], area: Rect) {
    let popup = centered(area, 70, area.height);
    f.render_widget(Clear, popup);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" group by: type to search, ↑↓ move, Space toggles, ⏎ applies, Esc cancels ");
    let inner = block.inner(popup);
    f.render_widget(block, popup);
    let mut lines = vec![Line::from(vec![
        Span::styled("search: ", label()),
        Span::raw(format!("{}█", p.text)),
    ])];
    let height = inner.height.saturating_sub(1) as usize;
    let first = p.cursor.saturating_sub(height.saturating_sub(1));
    for (n, c) in matches.iter().enumerate().skip(first).take(height) {
        let mark = match p.chosen.iter().position(|x| *x == c.name) {
            Some(i) => format!("[{}]", i + 1),
            None => "[ ]".to_string(),
        };
        let text = format!("{mark} {:<14} {}", c.name, c.about);
        let style = if n == p.cursor {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        lines.push(Line::from(Span::styled(
            fmt::fit(&text, inner.width as usize),
            style,
        )));
    }
    f.render_widget(Paragraph::new(lines), inner);
}
