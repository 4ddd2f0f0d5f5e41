//! A row's stack tree (`p`): its query, the tree of the row's stacks merged from the root
//! with each node's share, folded and unfolded from the keyboard; `w` follows the waker of
//! the off-CPU intervals below the highlighted node (the waker's own off-CPU stacks), `s`
//! opens a frame's sandwich over the view. Its keys and its drawing.

use std::ops::Deref;
use std::time::Duration;

use anyhow::Result;
use futures::FutureExt;
use ratatui::Frame;
use ratatui::crossterm::event::{KeyCode, KeyEvent};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::engine::{Engine, Querier};
use crate::fmt;
use crate::tree::Tree;
use crate::view::{Planner, Value, View};
use crate::views::{Answer, Cx, Draw, Job, Key, Mode, Outcome, Pane};

/// The keys of the stack tree.
pub(crate) const KEYS: &[Key] = &[
    Key {
        keys: "↑ ↓  j k  PgUp PgDn",
        help: "move the highlighted node",
        line: &["↑↓ node"],
    },
    Key {
        keys: "Enter  Space",
        help: "fold or unfold the node",
        line: &["⏎ fold/unfold"],
    },
    Key {
        keys: "s",
        help: "the sandwich of the frame over the view's stacks",
        line: &["s sandwich"],
    },
    Key {
        keys: "w",
        help: "the off-CPU stacks of the thread that woke the row (the highlighted waker, else the heaviest)",
        line: &["w waker's waits"],
    },
    Key {
        keys: "Esc  p  Backspace",
        help: "back to the table",
        line: &["Esc back"],
    },
    Key {
        keys: "q",
        help: "quit",
        line: &["q quit"],
    },
];

/// The stack tree open: its title and the tree (`&Tree` to draw it, `&mut Tree` to move in
/// it).
pub struct Peek<'a, T> {
    pub title: &'a str,
    pub tree: T,
}

/// The stack tree of the rows of `view` whose group columns equal `values`.
async fn tree_of(q: Querier, view: View, values: Vec<Value>) -> Result<(Tree, Duration)> {
    let planner = Planner {
        columns: &q.columns,
    };
    let sql = planner.stacks(&view, &values, q.wakers);
    let (batches, took) = q.timed("the row's stacks", &sql, Some(view.window)).await?;
    Ok((Tree::new(&batches)?, took))
}

/// [`tree_of`], waited for (text mode), titled.
pub fn tree(engine: &Engine, view: &View, values: &[Value]) -> Result<(String, Tree)> {
    let (tree, _) = engine.block_on(tree_of(engine.querier(), view.clone(), values.to_vec()))?;
    Ok((view.row_title(values), tree))
}

/// `p`: the stack tree of the row `values` of `view`, opened.
pub fn job(view: &View, values: Vec<Value>) -> Job {
    let title = view.row_title(&values);
    let view = view.clone();
    Job::new("the row's stacks", "peek", move |q| {
        async move {
            let (tree, took) = tree_of(q, view, values).await?;
            let answer: Answer = Box::new(move |s| {
                s.info(
                    "the row's stacks: Enter folds or unfolds, w follows the waker, Esc goes back",
                );
                *s.timing = format!("{} frames · {} ms", tree.nodes.len() - 1, took.as_millis());
                s.open(Mode::Peek { title, tree });
            });
            Ok(answer)
        }
        .boxed()
    })
}

/// `w`: the stack tree of the waker `tid` (named `name`)'s own off-CPU intervals in the
/// view's window, with their wakers, titled after the tree `title` it was followed from: one
/// link down the chain of wakers.
fn follow_job(view: &View, title: &str, tid: i64, name: String) -> Job {
    let title = format!("{title} ← {name}");
    let view = view.clone();
    Job::new("the waker's stacks", "follow the waker", move |q| {
        async move {
            let planner = Planner {
                columns: &q.columns,
            };
            let sql = planner.waker_stacks(&view, tid);
            let (batches, took) = q
                .timed("the waker's stacks", &sql, Some(view.window))
                .await?;
            let tree = Tree::new(&batches)?;
            let answer: Answer = Box::new(move |s| {
                if tree.nodes[0].value == 0.0 {
                    s.info(format!(
                        "{name}: no off-CPU intervals of its own in this window"
                    ));
                    return;
                }
                s.info(format!(
                    "off-CPU stacks of {name}, who woke the row: w follows its own waker, Esc goes back"
                ));
                *s.timing = format!("{} frames · {} ms", tree.nodes.len() - 1, took.as_millis());
                s.open(Mode::Peek { title, tree });
            });
            Ok(answer)
        }
        .boxed()
    })
}

impl<T: Deref<Target = Tree>> Draw for Peek<'_, T> {
    fn draw(&self, f: &mut Frame, area: Rect, _cx: &Cx) {
        let tree = &*self.tree;
        let mut lines = vec![Line::from(Span::styled(
            fmt::fit(&format!("Stacks of {}", self.title), area.width as usize),
            Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED),
        ))];
        let height = area.height.saturating_sub(1) as usize;
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

    fn keys(&self) -> &'static [Key] {
        KEYS
    }
}

impl Pane for Peek<'_, &mut Tree> {
    fn key(&mut self, key: KeyEvent, cx: &Cx) -> Outcome {
        let tree = &mut *self.tree;
        let page = cx.page(1) as isize;
        match key.code {
            KeyCode::Esc | KeyCode::Char('p') | KeyCode::Backspace => Outcome::Back,
            KeyCode::Char('q') => Outcome::Quit,
            KeyCode::Up | KeyCode::Char('k') => step(tree, -1),
            KeyCode::Down | KeyCode::Char('j') => step(tree, 1),
            KeyCode::PageUp => step(tree, -page),
            KeyCode::PageDown => step(tree, page),
            KeyCode::Enter | KeyCode::Char(' ') => {
                tree.toggle();
                Outcome::Stay
            }
            KeyCode::Char('w') => match tree.waker_at_cursor().or_else(|| tree.heaviest_waker()) {
                Some((0, name)) => {
                    Outcome::Say(format!("{name} is not a thread: the chain ends there"))
                }
                Some((tid, name)) => Outcome::Job(follow_job(cx.view, self.title, tid, name)),
                None => Outcome::Say("no waker in this tree (record with -e switch,wake)".into()),
            },
            KeyCode::Char('s') => {
                let at = tree.visible().get(tree.cursor).copied().unwrap_or(0);
                if at == 0 {
                    Outcome::Say("the root has no callers: s on a frame".into())
                } else {
                    let name = tree.nodes[at].name.clone();
                    Outcome::Job(crate::views::sandwich::job(cx.view, name))
                }
            }
            _ => Outcome::Stay,
        }
    }
}

fn step(tree: &mut Tree, delta: isize) -> Outcome {
    tree.step(delta);
    Outcome::Stay
}
