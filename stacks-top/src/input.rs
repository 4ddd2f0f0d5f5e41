//! The keys of the column picker (`g`), of the text inputs (`/` search, `f` SQL filter), the
//! Space menu's opening and `<` `>`: the rest of the table's keys ([`App`]'s own).

use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::app::{App, Effect, Mode};
use crate::catalog::Column;
use crate::table::Row;
use crate::view::Step;
use crate::views::choose::Choice;
use crate::views::table::InputKind;

impl App {
    /// `<` `>`: the highlighted group column moves left or right in the grouping.
    pub(crate) fn move_column(&mut self, dir: isize) -> Effect {
        let to = self.col as isize + dir;
        if to < 0 || to as usize >= self.view.group.len() {
            self.info("the column is at the edge already");
            return Effect::None;
        }
        self.view.group.swap(self.col, to as usize);
        self.col = to as usize;
        self.info(format!("grouped by {}", self.view.group.join(", ")));
        Effect::Query
    }

    /// Space: the include/exclude menu of the highlighted column.
    pub(crate) fn choose(&mut self) {
        let Some(column) = self.view.group.get(self.col).cloned() else {
            self.info("no group column to filter on");
            return;
        };
        let all: Vec<&Row> = self
            .table
            .as_ref()
            .map_or(Vec::new(), |t| t.rows.iter().collect());
        let at = self
            .rows()
            .get(self.cursor)
            .and_then(|r| all.iter().position(|a| std::ptr::eq(*a, *r)))
            .unwrap_or(0);
        if all.is_empty() {
            self.info("no rows to filter");
            return;
        }
        self.mode = Mode::Choose(Box::new(Choice::new(&column, self.col, &all, at)));
    }

    /// The catalog columns matching the picker's text.
    pub(crate) fn picker_matches(&self, text: &str) -> Vec<&Column> {
        let t = text.to_lowercase();
        self.columns
            .iter()
            .filter(|c| c.name.contains(&t) || c.about.to_lowercase().contains(&t))
            .collect()
    }

    pub(crate) fn picker_key(&mut self, key: KeyEvent) -> Effect {
        let Mode::Picker(p) = &self.mode else {
            return Effect::None;
        };
        let mut p = p.clone();
        let matches: Vec<String> = self
            .picker_matches(&p.text)
            .iter()
            .map(|c| c.name.clone())
            .collect();
        let mut effect = Effect::None;
        match key.code {
            KeyCode::Esc => {
                self.mode = Mode::Table;
                return Effect::None;
            }
            KeyCode::Up => p.cursor = p.cursor.saturating_sub(1),
            KeyCode::Down => p.cursor = (p.cursor + 1).min(matches.len().saturating_sub(1)),
            KeyCode::Char(' ') => toggle(&mut p.chosen, matches.get(p.cursor)),
            KeyCode::Enter => {
                if p.chosen == self.view.group {
                    toggle(&mut p.chosen, matches.get(p.cursor));
                }
                if p.chosen.is_empty() {
                    self.error("choose at least one column to group by");
                } else {
                    self.view.group = p.chosen.clone();
                    self.col = 0;
                    self.cursor = 0;
                    self.info(format!("grouped by {}", self.view.group.join(", ")));
                    effect = Effect::Query;
                }
                self.mode = Mode::Table;
                return effect;
            }
            KeyCode::Backspace => {
                p.text.pop();
                p.cursor = 0;
            }
            KeyCode::Char(c) => {
                p.text.push(c);
                p.cursor = 0;
            }
            _ => {}
        }
        self.mode = Mode::Picker(p);
        effect
    }

    pub(crate) fn input_key(&mut self, key: KeyEvent) -> Effect {
        let Mode::Input { kind, text } = &mut self.mode else {
            return Effect::None;
        };
        let kind = *kind;
        match key.code {
            KeyCode::Esc => {
                if kind == InputKind::Search {
                    self.search.clear();
                }
                self.mode = Mode::Table;
            }
            KeyCode::Backspace => {
                text.pop();
                if kind == InputKind::Search {
                    self.search = text.clone();
                    self.cursor = 0;
                }
            }
            KeyCode::Char(c) => {
                text.push(c);
                if kind == InputKind::Search {
                    self.search = text.clone();
                    self.cursor = 0;
                }
            }
            KeyCode::Enter => {
                let text = text.trim().to_string();
                self.mode = Mode::Table;
                if kind == InputKind::Filter && !text.is_empty() {
                    self.info(format!("filtered on ({text})"));
                    self.view.steps.push(Step::Sql(text));
                    self.new_filter = true;
                    self.cursor = 0;
                    return Effect::Query;
                }
            }
            _ => {}
        }
        Effect::None
    }
}

fn toggle(chosen: &mut Vec<String>, name: Option<&String>) {
    if let Some(name) = name {
        match chosen.iter().position(|c| c == name) {
            Some(i) => {
                chosen.remove(i);
            }
            None => chosen.push(name.clone()),
        }
    }
}
