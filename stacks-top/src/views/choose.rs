//! The Space menu (xtop's include/exclude): the values of the highlighted column in the
//! table, the highlighted cell's checked; Space checks more, `n` turns the filter into its
//! `NOT`, Enter adds it (`column IN (…)` or `column NOT IN (…)`), Esc cancels. Its state, its
//! keys and its popup.

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::fmt;
use crate::table::Row;
use crate::view::{Step, Value};

/// The menu's state.
#[derive(Debug, Clone)]
pub struct Choice {
    pub column: String,
    /// Each distinct value of the column in the table, with its samples, most first.
    pub values: Vec<(Value, i64)>,
    pub checked: Vec<bool>,
    pub cursor: usize,
    /// Exclude the checked values instead.
    pub not: bool,
}

/// What a key in the menu asks of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    Stay,
    Cancel,
    /// Add this filter.
    Apply(Step),
}

impl Choice {
    /// The menu of column `col` (named `column`) over `rows`, the value of row `at` checked.
    pub fn new(column: &str, col: usize, rows: &[&Row], at: usize) -> Self {
        let mut values: Vec<(Value, i64)> = Vec::new();
        for r in rows {
            let v = &r.values[col];
            match values.iter_mut().find(|(x, _)| x == v) {
                Some((_, n)) => *n += r.samples,
                None => values.push((v.clone(), r.samples)),
            }
        }
        values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.shown.cmp(&b.0.shown)));
        let cursor = rows
            .get(at)
            .and_then(|r| values.iter().position(|(v, _)| *v == r.values[col]))
            .unwrap_or(0);
        let mut checked = vec![false; values.len()];
        if let Some(c) = checked.get_mut(cursor) {
            *c = true;
        }
        Choice {
            column: column.to_string(),
            values,
            checked,
            cursor,
            not: false,
        }
    }

    /// Handle one key.
    pub fn key(&mut self, key: KeyEvent) -> Chosen {
        let last = self.values.len().saturating_sub(1);
        match key.code {
            KeyCode::Esc => return Chosen::Cancel,
            KeyCode::Up | KeyCode::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.cursor = (self.cursor + 1).min(last),
            KeyCode::Char(' ') => {
                if let Some(c) = self.checked.get_mut(self.cursor) {
                    *c = !*c;
                }
            }
            KeyCode::Char('n') | KeyCode::Char('!') => self.not = !self.not,
            KeyCode::Enter => {
                let mut values: Vec<Value> = self
                    .values
                    .iter()
                    .zip(&self.checked)
                    .filter(|(_, c)| **c)
                    .map(|((v, _), _)| v.clone())
                    .collect();
                if values.is_empty() {
                    match self.values.get(self.cursor) {
                        Some((v, _)) => values.push(v.clone()),
                        None => return Chosen::Cancel,
                    }
                }
                return Chosen::Apply(Step::In {
                    column: self.column.clone(),
                    values,
                    not: self.not,
                });
            }
            _ => {}
        }
        Chosen::Stay
    }
}

/// Draw the menu as a popup over `area`.
pub fn draw(f: &mut Frame, c: &Choice, area: Rect) {
    let w = area.width.min(70);
    let h = (c.values.len() as u16 + 3).min(area.height);
    let popup = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, popup);
    let block = Block::default().borders(Borders::ALL).title(format!(
        " {}: Space checks, n NOT, ⏎ applies, Esc cancels ",
        c.column
    ));
    let inner = block.inner(popup);
    f.render_widget(block, popup);
    let how = if c.not {
        "exclude (NOT IN) the checked values"
    } else {
        "include (IN) only the checked values"
    };
    let mut lines = vec![Line::from(Span::styled(
        how,
        Style::default().fg(if c.not { Color::Red } else { Color::Cyan }),
    ))];
    let height = inner.height.saturating_sub(1) as usize;
    let first = c.cursor.saturating_sub(height.saturating_sub(1));
    for (n, ((v, samples), checked)) in c
        .values
        .iter()
        .zip(&c.checked)
        .enumerate()
        .skip(first)
        .take(height)
    {
        let mark = if *checked { "[x]" } else { "[ ]" };
        let room = (inner.width as usize).saturating_sub(16);
        let text = format!("{mark} {:<room$} {samples:>10}", fmt::fit(&v.shown, room));
        let style = if n == c.cursor {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        lines.push(Line::from(Span::styled(text, style)));
    }
    f.render_widget(Paragraph::new(lines), inner);
}
