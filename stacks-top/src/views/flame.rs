//! The flame graph of the view (`F`): its query, the selected frame moved with the arrows,
//! zooms in (Enter) and out (Backspace), the search that highlights frames (`/`), a sandwich
//! opened on a frame, the exact values of the selection on the status line; against a
//! baseline, frames coloured by the change of their share, and `n` drawing the baseline's
//! side. Its drawing: the icicle's rows of boxes (coloured by kernel, user, JIT, Python or
//! unresolved code, search matches highlighted, the selection reversed, "…" boxes for frames
//! too narrow to draw, with their share), the zoom path above it. Live, it follows the
//! stream with its zoom and selection kept.

use std::rc::Rc;
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
use crate::flame::{Class, FBox, Flame};
use crate::fmt;
use crate::view::{Planner, View};
use crate::views::sandwich::SandwichView;
use crate::views::{Answer, Cx, Draw, Job, Key, Mode, Outcome, Pane, Screen, Status};

/// The selected box: a frame, or the "…" box of the frames too narrow to draw under one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sel {
    Node(usize),
    Rest(usize),
}

/// The keys of the flame view.
pub(crate) const KEYS: &[Key] = &[
    Key {
        keys: "← →  ↑ ↓  k j",
        help: "select a frame: its neighbours, its caller, its hottest callee",
        line: &["←↑↓→ select"],
    },
    Key {
        keys: "Enter  Backspace",
        help: "zoom into the frame (the full width); zoom out",
        line: &["⏎ zoom", "⌫ zoom out"],
    },
    Key {
        keys: "[  ]",
        help: "move the window back or forward by its length",
        line: &["[ ] window"],
    },
    Key {
        keys: "/",
        help: "highlight the frames containing a text, and sum their stacks",
        line: &["/ search"],
    },
    Key {
        keys: "s",
        help: "the sandwich of the frame: its callers and callees",
        line: &["s sandwich"],
    },
    Key {
        keys: "n",
        help: "against a baseline: draw the other side (the baseline's flame)",
        line: &[],
    },
    Key {
        keys: "Esc  F",
        help: "back to the table (Esc clears a search first)",
        line: &["Esc table"],
    },
    Key {
        keys: "q",
        help: "quit",
        line: &["q quit"],
    },
];

/// The flame graph of `view`'s stacks in its window.
pub(crate) async fn flame_of(q: Querier, view: View) -> Result<(Flame, Duration)> {
    let planner = Planner {
        columns: &q.columns,
    };
    let sql = planner.flame(&view);
    let (batches, took) = q
        .timed("the view's stacks", &sql, Some(view.window))
        .await?;
    Ok((crate::profile::flame(&batches)?, took))
}

/// [`flame_of`], waited for (text mode, `--diff`'s baseline).
pub fn flame(engine: &Engine, view: &View) -> Result<Flame> {
    Ok(engine.block_on(flame_of(engine.querier(), view.clone()))?.0)
}

/// A job on the view's flame graph, `then` what its answer does with it (once it has
/// stacks: else the status line says so).
pub(crate) fn stacks_job<F>(label: &'static str, view: &View, then: F) -> Job
where
    F: FnOnce(&mut Screen<'_>, Flame) + Send + 'static,
{
    let view = view.clone();
    Job::new(label, "flame", move |q| {
        async move {
            let (f, took) = flame_of(q, view).await?;
            let answer: Answer = Box::new(move |s| {
                if f.total() == 0 {
                    s.info("no stacks in this view");
                    return;
                }
                *s.timing = format!("{} frames · {} ms", f.nodes.len() - 1, took.as_millis());
                then(s, f)
            });
            Ok(answer)
        }
        .boxed()
    })
}

/// `F`: the flame graph of the view, opened; coloured by the change against the baseline
/// when there is one of its kind.
pub fn job(view: &View) -> Job {
    stacks_job("the flame graph", view, open).synced()
}

/// Open the flame graph `f` of the view.
fn open(s: &mut Screen<'_>, f: Flame) {
    let unit = s.unit();
    let view = match s.baseline.clone() {
        Some(b) if b.kind == s.view.kind => {
            s.info(format!(
                "flame graph against the baseline ({}): red grew, blue shrank; [ ] move the window",
                b.what
            ));
            FlameView::compared(f, unit, b.flame)
        }
        Some(_) => {
            crate::views::diff::wrong_kind(s);
            FlameView::new(f, unit)
        }
        None => {
            s.info("flame graph: arrows select, Enter zooms, Backspace zooms out, / searches, s sandwich, Esc back");
            FlameView::new(f, unit)
        }
    };
    s.open(Mode::Flame(Box::new(view)));
}

/// Live: the flame graph open on the screen drawn again from the rows kept now, its zoom,
/// selection and search kept where their frames still are (by call path). Errors are not
/// told: the last flame stays, and the next refresh tries again.
pub fn live_job(view: &View) -> Job {
    let view = view.clone();
    let mut job = Job::new("the flame graph", "flame", move |q| {
        async move {
            let (f, _) = flame_of(q, view).await?;
            let answer: Answer = Box::new(move |s| {
                if f.total() != 0 {
                    follow(s, f);
                }
            });
            Ok(answer)
        }
        .boxed()
    });
    job.quiet = true;
    job
}

/// The flame graph open on the screen replaced by `flame`, its zoom and selection kept.
fn follow(s: &mut Screen<'_>, flame: Flame) {
    let Mode::Flame(old) = &*s.mode else {
        return;
    };
    if old.base.as_ref().is_some_and(|b| b.negated) {
        // The baseline's flame is drawn: it does not change with the stream.
        return;
    }
    let zoom: Vec<Vec<String>> = old.zoom.iter().map(|&z| names(&old.flame, z)).collect();
    let sel = match old.sel {
        Sel::Node(n) => Some(names(&old.flame, n)),
        Sel::Rest(_) => None,
    };
    let (search, typing, compared) = (old.search.clone(), old.typing, old.base.is_some());
    let unit = s.unit();
    let mut view = match s
        .baseline
        .as_ref()
        .filter(|b| compared && b.kind == s.view.kind)
    {
        Some(b) => FlameView::compared(flame, unit, b.flame.clone()),
        None => FlameView::new(flame, unit),
    };
    view.zoom = zoom.iter().map_while(|p| find(&view.flame, p)).collect();
    view.sel = match sel.and_then(|p| find(&view.flame, &p)) {
        Some(n) => Sel::Node(n),
        None => Sel::Node(view.zoomed()),
    };
    view.search = search;
    view.typing = typing;
    s.open(Mode::Flame(Box::new(view)));
}

/// The call path of frame `i` of `f`, by name.
fn names(f: &Flame, i: usize) -> Vec<String> {
    f.path(i).iter().map(|&n| f.nodes[n].name.clone()).collect()
}

/// The frame of `f` at call path `path`.
fn find(f: &Flame, path: &[String]) -> Option<usize> {
    path.iter().try_fold(0, |at, name| f.child_named(at, name))
}

/// The other side of a diff flame: its total at each drawn frame's call path, and its whole.
/// The view's flame is drawn against the baseline; negated (`n`), the baseline's flame is
/// drawn against the view, so that frames gone since are drawn at their baseline width.
#[derive(Debug, Clone)]
pub struct FlameBase {
    pub totals: Vec<i64>,
    pub all: i64,
    /// The other side's flame.
    pub other: Rc<Flame>,
    /// The flame drawn is the baseline's (and `other` the view's).
    pub negated: bool,
}

impl FlameBase {
    /// The other side of `flame`, matched by call path.
    fn new(flame: &Flame, other: Rc<Flame>, negated: bool) -> Self {
        FlameBase {
            totals: crate::diff::base_totals(&other, flame),
            all: other.total(),
            other,
            negated,
        }
    }

    /// The change of frame `n`'s share of the whole (now − baseline), as a fraction, whichever
    /// side is drawn: a frame only in the baseline, drawn negated, at minus its share.
    pub fn delta(&self, flame: &Flame, n: usize) -> f64 {
        let d = flame.share(flame.nodes[n].total) - crate::diff::share(self.totals[n], self.all);
        if self.negated { -d } else { d }
    }

    /// What the other side is called on the status line.
    pub(crate) fn other_name(&self) -> &'static str {
        if self.negated { "now" } else { "baseline" }
    }
}

/// The flame view.
#[derive(Debug, Clone)]
pub struct FlameView {
    pub flame: Rc<Flame>,
    /// The unit of the values (`ns`, `bytes`, `count`, `events`).
    pub unit: &'static str,
    /// Zoomed frames, outermost first; the last is drawn full width (none: the root).
    pub zoom: Vec<usize>,
    pub sel: Sel,
    /// Frames containing this text are highlighted.
    pub search: String,
    /// The search is being typed.
    pub typing: bool,
    /// A baseline: frames are coloured by the change of their share.
    pub base: Option<FlameBase>,
}

impl FlameView {
    pub fn new(flame: Flame, unit: &'static str) -> Self {
        FlameView {
            flame: Rc::new(flame),
            unit,
            zoom: Vec::new(),
            sel: Sel::Node(0),
            search: String::new(),
            typing: false,
            base: None,
        }
    }

    /// The flame compared with `base`, a baseline flame.
    pub fn compared(flame: Flame, unit: &'static str, base: Rc<Flame>) -> Self {
        let mut v = Self::new(flame, unit);
        v.base = Some(FlameBase::new(&v.flame, base, false));
        v
    }

    /// `n`: draw the other side of the diff (the baseline's flame, whose frames gone since
    /// show at their baseline width, or back to the view's), keeping the zoom and the
    /// selection where their call paths are on that side.
    fn negate(&mut self) -> Outcome {
        let Some(base) = self.base.take() else {
            return Outcome::Say("no baseline: n draws the baseline's flame in a diff".into());
        };
        let zoom: Vec<Vec<String>> = self.zoom.iter().map(|&z| names(&self.flame, z)).collect();
        let sel = match self.sel {
            Sel::Node(n) => names(&self.flame, n),
            Sel::Rest(p) => names(&self.flame, p),
        };
        let drawn = std::mem::replace(&mut self.flame, base.other);
        self.base = Some(FlameBase::new(&self.flame, drawn, !base.negated));
        self.zoom = zoom.iter().map_while(|p| find(&self.flame, p)).collect();
        self.sel = Sel::Node(find(&self.flame, &sel).unwrap_or(self.zoomed()));
        Outcome::Say(if base.negated {
            "the view's flame against the baseline: n draws the baseline's".into()
        } else {
            "the baseline's flame against the view: frames gone since drawn at their baseline \
             width (deep blue); n draws the view's"
                .into()
        })
    }

    /// The frame drawn full width.
    pub fn zoomed(&self) -> usize {
        self.zoom.last().copied().unwrap_or(0)
    }

    /// The icicle `width` cells wide.
    pub fn layout(&self, width: u16) -> Vec<Vec<FBox>> {
        self.flame.layout(self.zoomed(), width.max(1))
    }

    /// Row and index of the selection in `rows`, if it is there.
    pub fn find(&self, rows: &[Vec<FBox>]) -> Option<(usize, usize)> {
        for (r, row) in rows.iter().enumerate() {
            for (i, b) in row.iter().enumerate() {
                let here = match self.sel {
                    Sel::Node(n) => b.node == Some(n),
                    Sel::Rest(p) => b.node.is_none() && b.parent == p,
                };
                if here {
                    return Some((r, i));
                }
            }
        }
        None
    }

    fn select(&mut self, b: &FBox) {
        self.sel = match b.node {
            Some(n) => Sel::Node(n),
            None => Sel::Rest(b.parent),
        };
    }

    /// Handle one key, the icicle `width` cells wide.
    pub fn key_at(&mut self, key: KeyEvent, width: u16) -> Outcome {
        if self.typing {
            crate::views::search_key(&mut self.search, &mut self.typing, key);
            return Outcome::Stay;
        }
        let rows = self.layout(width);
        let (r, i) = self.find(&rows).unwrap_or_else(|| {
            // Gone from the layout (zoomed out of, or narrower at this width).
            self.sel = Sel::Node(self.zoomed());
            (0, 0)
        });
        let here = rows[r][i];
        match key.code {
            KeyCode::Char('q') => return Outcome::Quit,
            KeyCode::Char('F') => return Outcome::Back,
            KeyCode::Esc if !self.search.is_empty() => self.search.clear(),
            KeyCode::Esc => return Outcome::Back,
            KeyCode::Up | KeyCode::Char('k') if r > 0 => self.sel = Sel::Node(here.parent),
            KeyCode::Down | KeyCode::Char('j') => {
                if let Some(b) = rows
                    .get(r + 1)
                    .and_then(|row| row.iter().find(|b| here.node == Some(b.parent)))
                {
                    self.select(b);
                }
            }
            KeyCode::Left if i > 0 => self.select(&rows[r][i - 1]),
            KeyCode::Right => {
                if let Some(b) = rows[r].get(i + 1) {
                    self.select(b);
                }
            }
            KeyCode::Enter => match here.node {
                Some(n) if n == self.zoomed() => {
                    return Outcome::Say("this frame is the full width already".into());
                }
                Some(n) => {
                    self.zoom.push(n);
                    return Outcome::Say(format!("zoomed into {}", self.flame.nodes[n].name));
                }
                None => {
                    return Outcome::Say(format!(
                        "the … box stands for {} frames narrower than a cell: Enter on {} \
                         (above) widens them, s lists them",
                        here.merged, self.flame.nodes[here.parent].name
                    ));
                }
            },
            KeyCode::Backspace => match self.zoom.pop() {
                Some(n) => {
                    return Outcome::Say(format!("zoomed out of {}", self.flame.nodes[n].name));
                }
                None => return Outcome::Say("not zoomed".into()),
            },
            KeyCode::Char('[') => return Outcome::Window(-1),
            KeyCode::Char(']') => return Outcome::Window(1),
            KeyCode::Char('n') => return self.negate(),
            KeyCode::Char('/') => {
                self.typing = true;
                self.search.clear();
            }
            KeyCode::Char('s') => {
                let n = match here.node {
                    Some(n) => n,
                    None => here.parent,
                };
                return if n == 0 {
                    Outcome::Say("the root has no callers: s on a frame".into())
                } else {
                    let name = &self.flame.nodes[n].name;
                    Outcome::Sandwich(Box::new(SandwichView::new(
                        self.flame.clone(),
                        self.unit,
                        name,
                    )))
                };
            }
            _ => {}
        }
        Outcome::Stay
    }

    /// The status line: the selected frame's exact self and total, value and share of the
    /// whole, and with a search the share of the stacks it matches; the icicle `width` cells
    /// wide.
    pub fn status_at(&self, width: u16) -> String {
        let f = &self.flame;
        let pct = |v: i64| 100.0 * f.share(v);
        let unit = self.unit;
        let mut text = match self.sel {
            Sel::Node(n) => {
                let node = &f.nodes[n];
                format!(
                    "{}  self {} {unit} ({:.2}%)  total {} {unit} ({:.2}%)",
                    node.name,
                    node.own,
                    pct(node.own),
                    node.total,
                    pct(node.total)
                )
            }
            Sel::Rest(p) => {
                let rows = self.layout(width);
                let (merged, value) = match self.find(&rows) {
                    Some((r, i)) => (rows[r][i].merged, rows[r][i].value),
                    None => (0, 0),
                };
                format!(
                    "… {merged} frames under {}  total {value} {unit} ({:.2}%)",
                    f.nodes[p].name,
                    pct(value)
                )
            }
        };
        if let (Some(base), Sel::Node(n)) = (&self.base, self.sel) {
            text.push_str(&format!(
                "  ·  Δ {:+.2}% ({} {:.2}%, {} {unit})",
                100.0 * base.delta(f, n),
                base.other_name(),
                100.0 * crate::diff::share(base.totals[n], base.all),
                base.totals[n]
            ));
        }
        if !self.search.is_empty() {
            let (_, total) = f.search(&self.search);
            text.push_str(&format!(
                "  ·  /{}: {} {unit} ({:.2}%)",
                self.search,
                total,
                pct(total)
            ));
        }
        text
    }
}

impl Draw for FlameView {
    fn draw(&self, f: &mut Frame, area: Rect, _cx: &Cx) {
        draw_flame(f, self, area)
    }

    fn keys(&self) -> &'static [Key] {
        KEYS
    }

    fn status(&self, status: &Status, width: usize) -> Option<Line<'static>> {
        Some(flame_status(self, &status.text, width as u16))
    }

    fn fresh_status(&self) -> bool {
        true
    }
}

impl Pane for FlameView {
    fn key(&mut self, key: KeyEvent, cx: &Cx) -> Outcome {
        self.key_at(key, cx.body.width)
    }

    fn again(&self, cx: &Cx) -> Option<Job> {
        Some(job(cx.view))
    }

    fn live(&self, cx: &Cx) -> Option<Job> {
        Some(live_job(cx.view))
    }
}

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
fn draw_flame(f: &mut Frame, v: &FlameView, area: Rect) {
    let rows = v.layout(area.width);
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
fn flame_status(v: &FlameView, note: &str, width: u16) -> Line<'static> {
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
    let mut spans = vec![Span::styled(v.status_at(width), style)];
    if !note.is_empty() {
        spans.push(Span::styled(
            format!("  ·  {note}"),
            Style::default().fg(Color::DarkGray),
        ));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::crossterm::event::KeyModifiers;

    fn press(v: &mut FlameView, c: char) -> Outcome {
        v.key_at(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE), 100)
    }

    /// The box of the frame named `name` at `width` cells, if drawn.
    fn drawn(v: &FlameView, name: &str) -> Option<FBox> {
        v.layout(100)
            .into_iter()
            .flatten()
            .find(|b| b.node.is_some_and(|n| v.flame.nodes[n].name == name))
    }

    /// `a` is only in the baseline (30 of 100), `c` only now (50 of 100), `b` in both (70
    /// then, 50 now). The view's flame has no `a`; negated, the baseline's flame draws `a` 30
    /// cells of 100 wide at −30 points, `b` at −20, and has no `c`; `n` again goes back.
    #[test]
    fn n_draws_the_baselines_flame_with_the_frames_gone_since() {
        let base = Rc::new(Flame::from_folded("main;a 30\nmain;b 70\n"));
        let now = Flame::from_folded("main;b 50\nmain;c 50\n");
        let mut v = FlameView::compared(now, "ns", base);
        assert!(drawn(&v, "a").is_none(), "a is gone from the view");
        let c = drawn(&v, "c").expect("c drawn");
        let delta =
            |v: &FlameView, b: FBox| v.base.as_ref().unwrap().delta(&v.flame, b.node.unwrap());
        assert!((delta(&v, c) - 0.5).abs() < 1e-9);
        // Select b (main, then its hottest child) before negating: the selection stays on it.
        press(&mut v, 'j');
        press(&mut v, 'j');
        let Sel::Node(sel) = v.sel else { panic!() };
        assert_eq!(
            v.flame.nodes[sel].name, "b",
            "b before c (50 each), by name"
        );

        assert!(matches!(press(&mut v, 'n'), Outcome::Say(_)));
        assert!(v.base.as_ref().unwrap().negated);
        assert_eq!(v.flame.total(), 100);
        let a = drawn(&v, "a").expect("a drawn at its baseline width");
        assert_eq!((a.value, a.w), (30, 30));
        assert!((delta(&v, a) + 0.3).abs() < 1e-9, "a: {}", delta(&v, a));
        let b = drawn(&v, "b").expect("b drawn");
        assert_eq!((b.value, b.w), (70, 70));
        assert!((delta(&v, b) + 0.2).abs() < 1e-9, "b: {}", delta(&v, b));
        assert!(drawn(&v, "c").is_none(), "c was not there then");
        let Sel::Node(sel) = v.sel else { panic!() };
        assert_eq!(
            v.flame.nodes[sel].name, "b",
            "the selection kept by call path"
        );
        v.sel = Sel::Node(a.node.unwrap());
        assert!(
            v.status_at(100).ends_with("Δ -30.00% (now 0.00%, 0 ns)"),
            "{}",
            v.status_at(100)
        );

        press(&mut v, 'n');
        assert!(!v.base.as_ref().unwrap().negated);
        assert!(drawn(&v, "a").is_none());
        assert!(drawn(&v, "c").is_some());
        assert_eq!(
            v.sel,
            Sel::Node(v.zoomed()),
            "a is not in the view: the root selected"
        );
    }
}
