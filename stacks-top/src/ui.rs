//! Drawing the screen from the app state: header (sparkline, range, window, filters,
//! grouping), the table or a row's stack tree, the status line and the keys; the column
//! picker and the help as popups. Nothing here changes state.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::app::{App, InputKind, Mode, Picker};
use crate::fmt;
use crate::table::{Row, Table};
use crate::tree::Tree;
use crate::ui_flame;

/// The smallest terminal the screen is drawn in.
pub(crate) const MIN_WIDTH: u16 = 60;
pub(crate) const MIN_HEIGHT: u16 = 12;

const HEADER: u16 = 6;
const BAR: usize = 10;
const MAX_CELL: usize = 40;

/// The keys of the table, as the bottom line names them.
const KEYS: &str = "↑↓ row  ←→ column  ⏎ drill  ␣ in/out  ⌫ back  g group  / search  f filter  \
                    [ ] window  w whole  l latency  p stacks  H heatmap  F flame  b baseline  d diff  \
                    Tab kind  h help  q quit";
/// The keys of the stack tree.
const TREE_KEYS: &str = "↑↓ node  ⏎ fold/unfold  s sandwich  w waker's waits  Esc back  q quit";

pub(crate) fn label() -> Style {
    Style::default().fg(Color::Cyan)
}

/// Draw the whole screen.
pub fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!(
            "stacks-top needs a terminal of at least {MIN_WIDTH}x{MIN_HEIGHT}; this one is {}x{}. \
             Enlarge it, or press q to quit.",
            area.width, area.height
        );
        f.render_widget(
            Paragraph::new(text).wrap(ratatui::widgets::Wrap { trim: true }),
            area,
        );
        return;
    }
    let [header, body, status, keys] = Layout::vertical([
        Constraint::Length(HEADER),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area);
    crate::ui_header::draw(f, app, header);
    let key_line = match &app.mode {
        Mode::Peek { title, tree } => {
            draw_tree(f, app, title, tree, body);
            TREE_KEYS
        }
        Mode::Flame(v) => {
            ui_flame::draw_flame(f, v, body);
            ui_flame::FLAME_KEYS
        }
        Mode::Heatmap(h) => {
            crate::heatmap::draw(f, h, body);
            crate::heatmap::KEYS
        }
        Mode::Diff(v) => {
            let what = app.baseline.as_ref().map_or("", |b| b.what.as_str());
            ui_flame::draw_diff(f, v, what, body, &app.page);
            ui_flame::DIFF_KEYS
        }
        Mode::Sandwich { view, .. } => {
            ui_flame::draw_sandwich(f, view, body, &app.page);
            ui_flame::SANDWICH_KEYS
        }
        _ => {
            draw_table(f, app, body);
            KEYS
        }
    };
    draw_status(f, app, status);
    f.render_widget(
        Paragraph::new(fmt::fit(key_line, keys.width as usize))
            .style(Style::default().fg(Color::DarkGray)),
        keys,
    );
    match &app.mode {
        Mode::Picker(p) => draw_picker(f, app, p, body),
        Mode::Choose(c) => crate::choose::draw(f, c, body),
        // Over the whole screen: every key fits from 24 lines up.
        Mode::Help => draw_help(f, area),
        _ => {}
    }
}

/// One table column: header, width, right-aligned.
struct Col {
    title: String,
    width: usize,
    right: bool,
}

fn draw_table(f: &mut Frame, app: &App, area: Rect) {
    let rows = app.rows();
    let Some(table) = &app.table else {
        f.render_widget(Paragraph::new(" no rows to show"), area);
        return;
    };
    let mut layout = table_columns(table, &rows, area.width as usize);
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
    app.page.set(height.max(1));
    let first = app.cursor.saturating_sub(height.saturating_sub(1));
    for (n, row) in rows.iter().enumerate().skip(first).take(height) {
        let on = n == app.cursor;
        let base = if on {
            Style::default().bg(Color::DarkGray)
        } else if n % 2 == 1 {
            Style::default().bg(Color::Rgb(24, 24, 24))
        } else {
            Style::default()
        };
        let selected = on.then_some(app.col);
        lines.push(table_row(table, row, &layout, base, selected));
    }
    if rows.is_empty() {
        lines.push(Line::from(if app.search.is_empty() {
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

fn draw_tree(f: &mut Frame, app: &App, title: &str, tree: &Tree, area: Rect) {
    let mut lines = vec![Line::from(Span::styled(
        fmt::fit(&format!("Stacks of {title}"), area.width as usize),
        Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ))];
    let height = area.height.saturating_sub(1) as usize;
    app.page.set(height.max(1));
    let visible = tree.visible();
    let first = tree.cursor.saturating_sub(height.saturating_sub(1));
    for (n, &i) in visible.iter().enumerate().skip(first).take(height) {
        let node = &tree.nodes[i];
        let text = tree.line(i);
        let mut style = if node.kernel {
            Style::default().fg(Color::LightBlue)
        } else {
            Style::default()
        };
        if n == tree.cursor {
            style = style.add_modifier(Modifier::REVERSED);
        }
        lines.push(Line::from(Span::styled(
            fmt::fit(&text, area.width as usize),
            style,
        )));
    }
    f.render_widget(Paragraph::new(lines), area);
}

fn draw_status(f: &mut Frame, app: &App, area: Rect) {
    let w = area.width as usize;
    let line = match &app.mode {
        Mode::Input { kind, text } => {
            let prompt = match kind {
                InputKind::Search => "search rows: ",
                InputKind::Filter => "filter (SQL condition, ⏎ applies, Esc cancels): ",
            };
            Line::from(vec![
                Span::styled(prompt, label()),
                Span::raw(format!("{text}█")),
            ])
        }
        Mode::Flame(v) => ui_flame::flame_status(v, &app.status.text),
        Mode::Diff(v) if !app.status.error => Line::from(vec![Span::raw(fmt::fit(&v.status(), w))]),
        _ => {
            let style = if app.status.error {
                Style::default().fg(Color::White).bg(Color::Red)
            } else {
                Style::default()
            };
            let right = format!("  {}", app.timing);
            let room = w.saturating_sub(right.chars().count());
            Line::from(vec![
                Span::styled(fmt::fit(&app.status.text, room), style),
                Span::raw(
                    " ".repeat(room.saturating_sub(app.status.text.chars().count().min(room))),
                ),
                Span::styled(right, Style::default().fg(Color::DarkGray)),
            ])
        }
    };
    f.render_widget(Paragraph::new(line), area);
}

/// A rectangle of `w`×`h` centered in `area`.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

fn draw_picker(f: &mut Frame, app: &App, p: &Picker, area: Rect) {
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
    let matches = app.picker_matches(&p.text);
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

/// Every key, for `h`.
pub const HELP: &[(&str, &str)] = &[
    ("↑ ↓  j k", "move the highlighted row"),
    ("PgUp PgDn", "a page up or down"),
    (
        "← →  < >",
        "move the highlighted column; move it left or right in the grouping",
    ),
    (
        "Enter",
        "drill down: keep only rows whose column equals the highlighted cell",
    ),
    (
        "Space",
        "include or exclude (n) values of the highlighted column",
    ),
    ("Backspace", "remove the last filter"),
    ("g", "choose the columns to group by (type to search)"),
    ("/", "show only rows containing a text (Esc clears)"),
    (
        "f",
        "add an SQL condition on the rows, e.g. duration > 1000000",
    ),
    ("[  ]", "move the window back or forward by its length"),
    ("w", "window: the whole range, or the last --window"),
    ("l", "latency columns: histogram <1µs…≥1s, p50, p95, p99"),
    (
        "p  H",
        "stack tree of the row (w there: its waker); its latency heatmap",
    ),
    (
        "F",
        "flame graph of the view: ⏎ zoom, ⌫ zoom out, / search, s sandwich",
    ),
    (
        "s",
        "in the flame graph or the tree: callers and callees of a frame",
    ),
    (
        "b  B",
        "mark the view (window, filters) as the baseline; forget it",
    ),
    (
        "d",
        "diff: functions' share now against the baseline ([ ] move)",
    ),
    ("Tab", "next event kind (then every kind)"),
    ("r", "query again"),
    ("h ?  q", "this help; q or Ctrl-C quits"),
];

fn draw_help(f: &mut Frame, area: Rect) {
    let popup = centered(area, 80, HELP.len() as u16 + 2);
    f.render_widget(Clear, popup);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" keys (any key closes) ");
    let inner = block.inner(popup);
    f.render_widget(block, popup);
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!(" {k:<11}"), label()),
                Span::raw(*what),
            ])
        })
        .collect();
    f.render_widget(Paragraph::new(lines), inner);
}
