//! Drawing the flame view and the sandwich: the icicle's rows of boxes (coloured by kernel,
//! user, JIT, Python or unresolved code, search matches highlighted, the selection reversed,
//! "…" boxes for frames too narrow to draw, with their share), the zoom path above it, and
//! the sandwich's callers and callees, and the diff view (frames and functions coloured by
//! the change of their share against a baseline). Nothing here changes state.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::compare::{self, DiffView};
use crate::flame::{Class, FBox};
use crate::fmt;
use crate::icicle::{FlameView, SandwichView, Sel};

/// The keys of the flame view, as the bottom line names them.
pub(crate) const FLAME_KEYS: &str = "←↑↓→ select  ⏎ zoom  ⌫ zoom out  [ ] window  / search  \
                              s sandwich  Esc table  q quit";
/// The keys of the diff view.
pub(crate) const DIFF_KEYS: &str = "↑↓ function  / search  [ ] window  F flame  s sandwich  Esc table  \
                             q quit";
/// The keys of the sandwich.
pub(crate) const SANDWICH_KEYS: &str = "↑↓ line  ⏎ its sandwich  ⌫ previous  Esc back  q quit";

/// The background of a frame of `class`, in one of three shades picked by its name (so
/// neighbours differ).
fn colour(class: Class, name: &str) -> Color {
    let shade = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % 3;
    let d = (shade * 18) as u8;
    match class {
        Class::User => Color::Rgb(235 - d, 145 + d, 55),
        Class::Kernel => Color::Rgb(85 + d, 145 + d, 225),
        Class::Jit => Color::Rgb(80 + d, 185 - d, 90),
        Class::Python => Color::Rgb(175 - d, 115 + d, 225),
        Class::Unresolved => Color::Rgb(130 + d, 130 + d, 130 + d),
    }
}

/// The background of a frame whose share changed by `delta` (a fraction): red for growth,
/// blue for shrinkage, deeper up to 20 points; grey within 0.1 point.
pub(crate) fn delta_colour(delta: f64) -> Color {
    if delta.abs() < 0.001 {
        return Color::Rgb(200, 200, 200);
    }
    let t = (delta.abs() / 0.2).min(1.0);
    let fade = (210.0 - 170.0 * t) as u8;
    if delta > 0.0 {
        Color::Rgb(250, fade, fade)
    } else {
        Color::Rgb(fade, fade.saturating_add(20), 250)
    }
}

/// The label of a box: its name, or `…` and the share of the frames it stands for.
fn label(v: &FlameView, b: &FBox) -> String {
    match b.node {
        Some(n) => v.flame.nodes[n].name.clone(),
        None => format!("…{:.1}%", 100.0 * v.flame.share(b.value)),
    }
}

/// Draw the flame view in `area`: the zoom path, then the icicle from the zoomed frame down,
/// scrolled so the selection shows.
pub(crate) fn draw_flame(f: &mut Frame, v: &FlameView, area: Rect) {
    v.width.set(area.width.max(1));
    let rows = v.layout();
    let (sel_row, sel_i) = v.find(&rows).unwrap_or((0, 0));
    let path: Vec<&str> = v
        .flame
        .path(v.zoomed())
        .iter()
        .map(|&n| v.flame.nodes[n].name.as_str())
        .collect();
    let width = area.width as usize;
    let title = if path.is_empty() {
        let (what, how) = match &v.base {
            Some(b) if b.negated => (
                "The baseline's flame graph",
                format!(
                    "against the view's {} {}: red grew, blue shrank, gone since at their width (n: the view's)",
                    b.all, v.unit
                ),
            ),
            Some(b) => (
                "Flame graph",
                format!(
                    "against the baseline's {} {}: red grew, blue shrank (share of the whole; n: the baseline's)",
                    b.all, v.unit
                ),
            ),
            None => (
                "Flame graph",
                "(width: share of the zoomed frame)".to_string(),
            ),
        };
        fmt::fit(
            &format!("{what}: {} {} in all  {how}", v.flame.total(), v.unit),
            width,
        )
    } else {
        // A long zoom path keeps its end: the zoomed frame.
        let head = "Flame graph zoomed into ";
        let path = path.join(" › ");
        let room = width.saturating_sub(head.chars().count());
        let count = path.chars().count();
        if count > room && room > 1 {
            let tail: String = path.chars().skip(count + 1 - room).collect();
            format!("{head}…{tail}")
        } else {
            fmt::fit(&format!("{head}{path}"), width)
        }
    };
    let mut lines = vec![Line::from(Span::styled(
        title,
        Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
    ))];
    let height = area.height.saturating_sub(1) as usize;
    let first = sel_row.saturating_sub(height.saturating_sub(1));
    let (hits, _) = v.flame.search(&v.search);
    for (r, row) in rows.iter().enumerate().skip(first).take(height) {
        let mut spans = Vec::new();
        let mut at = 0u16;
        for (i, b) in row.iter().enumerate() {
            if b.x > at {
                spans.push(Span::raw(" ".repeat(usize::from(b.x - at))));
            }
            let mut style = match b.node {
                Some(n) => {
                    let node = &v.flame.nodes[n];
                    let bg = if hits[n] {
                        Color::Rgb(230, 60, 200)
                    } else if let Some(base) = &v.base {
                        delta_colour(base.delta(&v.flame, n))
                    } else {
                        colour(node.class, &node.name)
                    };
                    Style::default().bg(bg).fg(Color::Black)
                }
                None => Style::default().bg(Color::Rgb(70, 70, 70)).fg(Color::White),
            };
            if (r, i) == (sel_row, sel_i) {
                style = style.add_modifier(Modifier::REVERSED | Modifier::BOLD);
            }
            let w = usize::from(b.w);
            // The last cell of a box wider than two is left blank: boxes side by side read
            // apart.
            let inner = if w > 2 { w - 1 } else { w };
            let text = format!("{:<inner$}", fmt::fit(&label(v, b), inner));
            spans.push(Span::styled(text, style));
            if inner < w {
                spans.push(Span::raw(" "));
            }
            at = b.x + b.w;
        }
        lines.push(Line::from(spans));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// The status line of the flame view: the search being typed, else the selection's values,
/// then `note` (what the last key did).
pub(crate) fn flame_status(v: &FlameView, note: &str) -> Line<'static> {
    if v.typing {
        return Line::from(vec![
            Span::styled("search frames: ", Style::default().fg(Color::Cyan)),
            Span::raw(format!("{}█", v.search)),
        ]);
    }
    let style = match v.sel {
        Sel::Node(n) if v.flame.nodes[n].class == Class::Kernel => {
            Style::default().fg(Color::LightBlue)
        }
        _ => Style::default(),
    };
    let mut spans = vec![Span::styled(v.status(), style)];
    if !note.is_empty() {
        spans.push(Span::styled(
            format!("  ·  {note}"),
            Style::default().fg(Color::DarkGray),
        ));
    }
    Line::from(spans)
}

/// Draw a sandwich in `area`: its title line, callers, then callees.
pub(crate) fn draw_sandwich(
    f: &mut Frame,
    v: &SandwichView,
    area: Rect,
    page: &std::cell::Cell<usize>,
) {
    let height = area.height as usize;
    page.set(height.saturating_sub(1).max(1));
    let first = v.cursor.saturating_sub(height.saturating_sub(1));
    let mut lines = Vec::new();
    for (n, line) in v.lines.iter().enumerate().skip(first).take(height) {
        let mut style = match line.class {
            None => Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
            Some(Class::Kernel) => Style::default().fg(Color::LightBlue),
            Some(_) => Style::default(),
        };
        if n == v.cursor {
            style = style.add_modifier(Modifier::REVERSED);
        }
        lines.push(Line::from(Span::styled(
            fmt::fit(&line.text, area.width as usize),
            style,
        )));
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// Draw the diff view in `area`: the title, the column titles, then a function a line, the
/// most changed first, red for growth and blue for shrinkage.
pub(crate) fn draw_diff(
    f: &mut Frame,
    v: &DiffView,
    what: &str,
    area: Rect,
    page: &std::cell::Cell<usize>,
) {
    let width = area.width as usize;
    let height = area.height.saturating_sub(2) as usize;
    page.set(height.max(1));
    let bold = Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
    let mut lines = vec![
        Line::from(Span::styled(
            fmt::fit(
                &format!(
                    "{}{}",
                    if v.search.is_empty() {
                        String::new()
                    } else {
                        format!("/{} · ", v.search)
                    },
                    compare::title(&v.diff, v.unit, what),
                ),
                width,
            ),
            bold,
        )),
        Line::from(Span::styled(
            fmt::fit(compare::HEADER, width),
            Style::default().fg(Color::Cyan),
        )),
    ];
    let first = v.cursor.saturating_sub(height.saturating_sub(1));
    let visible = v.visible();
    for (n, &i) in visible.iter().enumerate().skip(first).take(height) {
        let c = &v.diff.changes[i];
        let delta = c.delta(&v.diff);
        let mut style = if delta.abs() < 0.001 {
            Style::default()
        } else if delta > 0.0 {
            Style::default().fg(Color::LightRed)
        } else {
            Style::default().fg(Color::LightBlue)
        };
        if n == v.cursor {
            style = style.add_modifier(Modifier::REVERSED);
        }
        lines.push(Line::from(Span::styled(
            fmt::fit(&compare::line(c, &v.diff), width),
            style,
        )));
    }
    f.render_widget(Paragraph::new(lines), area);
}
