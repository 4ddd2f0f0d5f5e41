//! A function's sandwich (`s`): its callers (inverted, merged) and its callees over the
//! stacks of the flame graph, the diff or the view (from the stack tree: its query), with
//! self and total values and shares; Enter opens a line's own sandwich, Backspace the one
//! before. Its keys and its drawing.

use std::rc::Rc;

use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::flame::{Class, Flame, Sandwich, SandwichLine};
use crate::fmt;
use crate::view::View;
use crate::views::{Cx, Draw, Job, Key, Mode, Outcome, Pane, Screen};

/// The keys of the sandwich.
pub(crate) const KEYS: &[Key] = &[
    Key {
        keys: "↑ ↓  j k  PgUp PgDn",
        help: "move the highlighted line",
        line: &["↑↓ line"],
    },
    Key {
        keys: "Enter",
        help: "the sandwich of the highlighted caller or callee",
        line: &["⏎ its sandwich"],
    },
    Key {
        keys: "Backspace",
        help: "the sandwich shown before (none: back)",
        line: &["⌫ previous"],
    },
    Key {
        keys: "Esc",
        help: "back to where it was opened",
        line: &["Esc back"],
    },
    Key {
        keys: "q",
        help: "quit",
        line: &["q quit"],
    },
];

/// `s` in the stack tree: the sandwich of `name` over the view's stacks, opened over the
/// tree.
pub fn job(view: &View, name: String) -> Job {
    crate::views::flame::stacks_job("the sandwich", view, move |s, f| open(s, f, &name))
}

/// Open the sandwich of `name` over the view's stacks `f`.
fn open(s: &mut Screen<'_>, f: Flame, name: &str) {
    match f.find(name) {
        Ok(name) => {
            let view = SandwichView::new(Rc::new(f), s.unit(), &name);
            let back = std::mem::replace(s.mode, Mode::Table);
            s.open(Mode::Sandwich {
                view: Box::new(view),
                back: Box::new(back),
            });
            s.info(format!(
                "sandwich of {name} over the view: Enter on a line opens its own, Esc goes back"
            ));
        }
        Err(e) => s.error(e),
    }
}

/// The sandwich view of one function over a flame's stacks.
#[derive(Debug, Clone)]
pub struct SandwichView {
    pub source: Rc<Flame>,
    pub unit: &'static str,
    pub sandwich: Sandwich,
    pub lines: Vec<SandwichLine>,
    pub cursor: usize,
    /// Functions whose sandwich was shown before this one (Backspace returns to them).
    pub history: Vec<String>,
}

impl SandwichView {
    pub fn new(source: Rc<Flame>, unit: &'static str, name: &str) -> Self {
        let sandwich = source.sandwich(name);
        let lines = sandwich.lines(unit);
        SandwichView {
            source,
            unit,
            sandwich,
            lines,
            cursor: 0,
            history: Vec::new(),
        }
    }

    fn show(&mut self, name: &str) {
        self.sandwich = self.source.sandwich(name);
        self.lines = self.sandwich.lines(self.unit);
        self.cursor = 0;
    }
}

impl Pane for SandwichView {
    fn key(&mut self, key: KeyEvent, cx: &Cx) -> Outcome {
        let page = cx.page(1);
        let last = self.lines.len().saturating_sub(1);
        match key.code {
            KeyCode::Char('q') => return Outcome::Quit,
            KeyCode::Esc => return Outcome::Back,
            KeyCode::Up | KeyCode::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => self.cursor = (self.cursor + 1).min(last),
            KeyCode::PageUp => self.cursor = self.cursor.saturating_sub(page),
            KeyCode::PageDown => self.cursor = (self.cursor + page).min(last),
            KeyCode::Enter => {
                let name = self.lines[self.cursor].name.clone();
                if let Some(name) = name.filter(|n| *n != self.sandwich.name) {
                    self.history.push(self.sandwich.name.clone());
                    self.show(&name);
                    return Outcome::Say(format!("sandwich of {name}"));
                }
            }
            KeyCode::Backspace => match self.history.pop() {
                Some(name) => {
                    self.show(&name);
                    return Outcome::Say(format!("sandwich of {name}"));
                }
                None => return Outcome::Back,
            },
            _ => {}
        }
        Outcome::Stay
    }
}

impl Draw for SandwichView {
    /// Its title line, callers, then callees.
    fn draw(&self, f: &mut Frame, area: Rect, _cx: &Cx) {
        let height = area.height as usize;
        let first = self.cursor.saturating_sub(height.saturating_sub(1));
        let mut lines = Vec::new();
        for (n, line) in self.lines.iter().enumerate().skip(first).take(height) {
            let mut style = match line.class {
                None => Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
                Some(Class::Kernel) => Style::default().fg(ratatui::style::Color::LightBlue),
                Some(_) => Style::default(),
            };
            if n == self.cursor {
                style = style.add_modifier(Modifier::REVERSED);
            }
            lines.push(Line::from(Span::styled(
                fmt::fit(&line.text, area.width as usize),
                style,
            )));
        }
        f.render_widget(Paragraph::new(lines), area);
    }

    fn keys(&self) -> &'static [Key] {
        KEYS
    }
}
