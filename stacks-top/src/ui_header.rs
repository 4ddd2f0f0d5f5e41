//! Drawing the screen's header from the app state: the title line (the kind, what is being
//! computed, the source, the baseline), the sparkline of active threads with the window
//! highlighted, the time range, the window, the filters and the grouping. Nothing here
//! changes state.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::app::App;
use crate::fmt;
use crate::ui::label;

/// Draw the header: the title line (kind, what is being computed, the source, the
/// baseline), the sparkline, the time range, the window, the filters and the grouping.
pub fn draw(f: &mut Frame, app: &App, area: Rect) {
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
    let room = w.saturating_sub(name.len() + 12);
    app.spark_width.set(room);
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
