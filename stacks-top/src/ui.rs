//! Drawing the screen from the app state, which it only reads: the header (the title line,
//! the sparkline of active threads with the window highlighted, the time range, the window,
//! the filters, the grouping), the table or the pane open ([`crate::views`]), the status line
//! and the keys; the column picker, the Space menu and the help as popups.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::app::{self, App, Mode};
use crate::fmt;
use crate::views::{self, Cx, centered, key_line, label};

/// The smallest terminal the screen is drawn in.
pub(crate) const MIN_WIDTH: u16 = 60;
pub(crate) const MIN_HEIGHT: u16 = 12;

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
    let [header, body, status, keys] = views::layout(area);
    draw_header(f, app, header);
    let cx = Cx {
        view: &app.view,
        baseline: app.baseline.as_ref(),
        body,
    };
    let pane = app.mode.drawn();
    let key_list = match &pane {
        Some(p) => {
            p.draw(f, body, &cx);
            p.keys()
        }
        None => {
            let rows = app.rows();
            views::table::draw(
                f,
                body,
                app.table.as_ref(),
                &rows,
                app.cursor,
                app.col,
                &app.search,
            );
            app::KEYS
        }
    };
    let own = pane
        .as_ref()
        .and_then(|p| p.status(&app.status, status.width as usize));
    f.render_widget(
        Paragraph::new(own.unwrap_or_else(|| status_line(app, status.width as usize))),
        status,
    );
    f.render_widget(
        Paragraph::new(fmt::fit(&key_line(key_list), keys.width as usize))
            .style(Style::default().fg(Color::DarkGray)),
        keys,
    );
    match &app.mode {
        Mode::Picker(p) => views::table::draw_picker(f, p, &app.picker_matches(&p.text), body),
        Mode::Choose(c) => views::choose::draw(f, c, body),
        // Over the whole screen: every key fits from 24 lines up.
        Mode::Help => draw_help(f, area),
        _ => {}
    }
}

/// The screen's status line, `w` cells wide: the text being typed, or what happened last
/// and the timing of the last query.
fn status_line(app: &App, w: usize) -> Line<'static> {
    if let Mode::Input { kind, text } = &app.mode {
        return Line::from(vec![
            Span::styled(kind.prompt(), label()),
            Span::raw(format!("{text}█")),
        ]);
    }
    let style = if app.status.error {
        Style::default().fg(Color::White).bg(Color::Red)
    } else {
        Style::default()
    };
    let right = format!("  {}", app.timing);
    let room = w.saturating_sub(right.chars().count());
    Line::from(vec![
        Span::styled(fmt::fit(&app.status.text, room), style),
        Span::raw(" ".repeat(room.saturating_sub(app.status.text.chars().count().min(room)))),
        Span::styled(right, Style::default().fg(Color::DarkGray)),
    ])
}

/// The help popup (`h`): every key of the table.
fn draw_help(f: &mut Frame, area: Rect) {
    let help: Vec<_> = app::KEYS.iter().filter(|k| !k.help.is_empty()).collect();
    let popup = centered(area, 80, help.len() as u16 + 2);
    f.render_widget(Clear, popup);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" keys (any key closes) ");
    let inner = block.inner(popup);
    f.render_widget(block, popup);
    let lines: Vec<Line> = help
        .iter()
        .map(|k| {
            Line::from(vec![
                Span::styled(format!(" {:<11}", k.keys), label()),
                Span::raw(k.help),
            ])
        })
        .collect();
    f.render_widget(Paragraph::new(lines), inner);
}

/// Draw the header: the title line (kind, what is being computed, the source, the
/// baseline), the sparkline, the time range, the window, the filters and the grouping.
fn draw_header(f: &mut Frame, app: &App, area: Rect) {
    let w = area.width as usize;
    let kind = app.view.kind.as_deref().unwrap_or(crate::catalog::ALL);
    // What is being computed comes before the source, which is cut to fit.
    let computing = match app.busy.view {
        Some(what) => format!("computing {what}… (Esc cancels)  "),
        None if app.busy.table => "computing the table…  ".to_string(),
        None => String::new(),
    };
    let room = w.saturating_sub(20 + kind.len() + computing.chars().count());
    let title = vec![
        Span::styled(
            " stacks-top ",
            Style::default().add_modifier(Modifier::REVERSED),
        ),
        Span::raw(format!(" kind {kind}  ")),
        Span::styled(computing, Style::default().fg(Color::Yellow)),
        Span::styled(
            fmt::fit(&app.source, room),
            Style::default().fg(Color::DarkGray),
        ),
    ];
    let mut title = title;
    if let Some(b) = &app.baseline {
        let used: usize = title.iter().map(|s| s.content.chars().count()).sum();
        title.push(Span::styled(
            fmt::fit(&format!("  baseline {}", b.what), w.saturating_sub(used)),
            Style::default().fg(Color::Magenta),
        ));
    }
    let mut lines = vec![Line::from(title)];
    let name = if app.spark.threads {
        "AvgThreads "
    } else {
        "Events/s   "
    };
    let room = views::spark_width(area.width);
    let mut spans = vec![Span::styled(name, label())];
    let max = app.spark.values.iter().copied().fold(0.0, f64::max);
    let window = app.view.window;
    for (i, v) in app.spark.values.iter().take(room).enumerate() {
        let start = app.spark.start + i as i64 * app.spark.bucket;
        let c = spark_char(*v, max);
        let inside = start + app.spark.bucket > window.from && start < window.to;
        let style = if inside {
            Style::default()
                .fg(Color::Yellow)
                .add_modifier(Modifier::REVERSED)
        } else {
            Style::default().fg(Color::Yellow)
        };
        spans.push(Span::styled(c.to_string(), style));
    }
    spans.push(Span::raw(format!(" max {max:.2}")));
    if app.busy.spark.is_some() {
        spans.push(Span::styled(
            " updating",
            Style::default().fg(Color::DarkGray),
        ));
    }
    lines.push(Line::from(spans));
    let span_line = |name: &str, s: Option<crate::view::Span>, extra: &str| {
        let text = match s {
            Some(s) => format!(
                "{} → {} ({}){extra}",
                fmt::time(s.from, true),
                fmt::time(s.to, false),
                fmt::duration(s.len())
            ),
            None => "no rows".to_string(),
        };
        Line::from(vec![
            Span::styled(format!("{name:<11}"), label()),
            Span::raw(text),
        ])
    };
    lines.push(span_line("TimeRange", app.range, ""));
    let how = if app.whole {
        "  whole range (w)".to_string()
    } else if app.range.is_some_and(|r| r.len() <= app.window_len) {
        "  whole range".to_string()
    } else if app.follow {
        format!(
            "  last {} ([ ] move, w whole)",
            fmt::duration(app.window_len)
        )
    } else {
        format!("  {} ([ ] move, w whole)", fmt::duration(app.window_len))
    };
    lines.push(span_line("Window", app.range.map(|_| window), &how));
    let filters = if app.view.steps.is_empty() {
        "none".to_string()
    } else {
        app.view
            .steps
            .iter()
            .map(|s| s.shown())
            .collect::<Vec<_>>()
            .join(" › ")
    };
    let mut filter_line = vec![
        Span::styled("Filters    ", label()),
        Span::raw(fmt::fit(&filters, w.saturating_sub(11))),
    ];
    if !app.search.is_empty() {
        filter_line.push(Span::styled(
            format!("  /{}", app.search),
            Style::default().fg(Color::Magenta),
        ));
    }
    lines.push(Line::from(filter_line));
    lines.push(Line::from(vec![
        Span::styled("GroupBy    ", label()),
        Span::raw(app.view.group.join(", ")),
    ]));
    f.render_widget(Paragraph::new(lines), area);
}

fn spark_char(v: f64, max: f64) -> char {
    const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if v <= 0.0 || max <= 0.0 {
        return LEVELS[0];
    }
    let i = ((v / max) * 8.0).ceil() as usize;
    LEVELS[i.clamp(1, 8)]
}

#[cfg(test)]
mod tests {
    use crate::app;
    use crate::views::{Key, diff, flame, heatmap, key_line, sandwich, tree};

    /// Every key a pane lists is in docs/top.md (in backquotes), and every pane's list gives
    /// its key line.
    #[test]
    fn every_key_is_documented() {
        let doc = std::fs::read_to_string(
            stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("../docs/top.md"),
        )
        .expect("docs/top.md");
        let panes: [(&str, &[Key]); 6] = [
            ("table", app::KEYS),
            ("tree", tree::KEYS),
            ("flame", flame::KEYS),
            ("sandwich", sandwich::KEYS),
            ("diff", diff::KEYS),
            ("heatmap", heatmap::KEYS),
        ];
        let mut missing = Vec::new();
        for (pane, keys) in panes {
            assert!(!key_line(keys).is_empty(), "{pane}: no key line");
            for k in keys {
                assert!(!k.help.is_empty(), "{pane}: `{}` says nothing", k.keys);
                for key in k.keys.split_whitespace() {
                    if !doc.contains(&format!("`{key}`")) {
                        missing.push(format!("{pane}: `{key}`"));
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "docs/top.md does not name these keys: {}",
            missing.join(", ")
        );
    }
}
