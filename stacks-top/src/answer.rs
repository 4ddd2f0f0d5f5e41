//! Answers into the app state: what a query job ([`crate::runner`]) computed goes where the
//! key that asked for it wanted — the table, the sparkline, a stack tree, the flame graph
//! (opened, or followed live with its zoom kept), a sandwich, a heatmap, the baseline or the
//! diff ([`crate::baseline`]). Errors go to the status line; the screen stays.

use std::time::Duration;

use anyhow::Result;

use crate::app::{App, Mode, Spark};
use crate::flame::Flame;
use crate::icicle::{FlameView, SandwichView};
use crate::runner::{Reply, Want};

/// Put `reply`, computed for `want`, into `app`.
pub fn apply(app: &mut App, want: Want, reply: Result<Reply>) {
    let reply = match reply {
        Ok(r) => r,
        Err(e) => return failed(app, &want, e),
    };
    match (want, reply) {
        (Want::Table { .. }, Reply::Table(table, took)) => {
            app.timing = format!("{} rows · {} ms", table.rows.len(), took.as_millis());
            app.table = Some(table);
            app.cursor = app.cursor.min(app.rows().len().saturating_sub(1));
        }
        (Want::Spark(plan), Reply::Spark(values)) => {
            app.spark = Spark {
                start: plan.start,
                bucket: plan.bucket,
                values,
                threads: plan.threads,
            };
            app.spark_key = Some(plan.key);
        }
        (Want::Peek { title }, Reply::Tree(tree, took)) => {
            app.info(
                "the row's stacks: Enter folds or unfolds, w follows the waker, Esc goes back",
            );
            app.timing = format!("{} frames · {} ms", tree.nodes.len() - 1, took.as_millis());
            app.mode = Mode::Peek { title, tree };
        }
        (Want::Follow { title, name }, Reply::Tree(tree, took)) => {
            if tree.nodes[0].value == 0.0 {
                app.info(format!(
                    "{name}: no off-CPU intervals of its own in this window"
                ));
                return;
            }
            app.info(format!(
                "off-CPU stacks of {name}, who woke the row: w follows its own waker, Esc goes back"
            ));
            app.timing = format!("{} frames · {} ms", tree.nodes.len() - 1, took.as_millis());
            app.mode = Mode::Peek { title, tree };
        }
        (Want::Flame, Reply::Flame(f, took)) => {
            if let Some(f) = stacks(app, f, took) {
                open_flame(app, f);
            }
        }
        (Want::LiveFlame, Reply::Flame(f, _)) => {
            if f.total() != 0 {
                follow_flame(app, f);
            }
        }
        (Want::Sandwich(name), Reply::Flame(f, took)) => {
            if let Some(f) = stacks(app, f, took) {
                open_sandwich(app, f, &name);
            }
        }
        (Want::Baseline { what }, Reply::Flame(f, took)) => {
            if let Some(f) = stacks(app, f, took) {
                crate::baseline::mark(app, f, what);
            }
        }
        (Want::Diff, Reply::Flame(f, took)) => {
            if let Some(f) = stacks(app, f, took) {
                crate::baseline::show_diff(app, f);
            }
        }
        (Want::Heatmap, Reply::Heatmap(h, took)) => {
            app.timing = format!("{} events · {} ms", h.total(), took.as_millis());
            app.info("latency by time: t shades by time instead of events, Esc goes back");
            app.mode = Mode::Heatmap(Box::new(h));
        }
        (want, _) => app.error(format!("{want:?}: an answer of another query")),
    }
}

/// A query for `want` failed: say why.
fn failed(app: &mut App, want: &Want, e: anyhow::Error) {
    match want {
        Want::Table { new_filter } => {
            let dropped =
                *new_filter && matches!(app.view.steps.last(), Some(crate::view::Step::Sql(_)));
            if dropped {
                app.view.steps.pop();
            }
            let text = format!("{e:#}");
            // The generated SQL's position and DataFusion's list of every field say nothing
            // to someone who typed a condition.
            let text = text.split(". Valid fields are").next().unwrap_or(&text);
            let text = text.strip_prefix("the table:").map_or(text, |rest| {
                rest.split_once(": ").map_or(rest, |(_, after)| after)
            });
            app.error(format!(
                "{}{text}",
                if dropped { "filter dropped: " } else { "" }
            ));
        }
        Want::Spark(_) => app.error(format!("sparkline: {e:#}")),
        // The last flame stays; the next refresh tries again.
        Want::LiveFlame => {}
        Want::Peek { .. } => app.error(format!("peek: {e:#}")),
        Want::Follow { .. } => app.error(format!("follow the waker: {e:#}")),
        Want::Heatmap => app.error(format!("heatmap: {e:#}")),
        Want::Flame | Want::Sandwich(_) | Want::Baseline { .. } | Want::Diff => {
            app.error(format!("flame: {e:#}"))
        }
    }
}

/// The view's flame graph, or why not on the status line.
fn stacks(app: &mut App, f: Flame, took: Duration) -> Option<Flame> {
    if f.total() == 0 {
        app.info("no stacks in this view");
        return None;
    }
    app.timing = format!("{} frames · {} ms", f.nodes.len() - 1, took.as_millis());
    Some(f)
}

/// Open the flame graph `f` of the view, coloured by the change against the baseline when
/// there is one of its kind.
fn open_flame(app: &mut App, f: Flame) {
    let unit = crate::profile::unit(app.view.kind.as_deref());
    let compared = if app.baseline.is_some() {
        Some(crate::baseline::baseline(app))
    } else {
        None
    };
    let view = match compared {
        Some(Some(b)) => {
            app.info(format!(
                "flame graph against the baseline ({}): red grew, blue shrank; [ ] move the window",
                b.what
            ));
            FlameView::compared(f, unit, b.flame.clone())
        }
        Some(None) => FlameView::new(f, unit),
        None => {
            app.info("flame graph: arrows select, Enter zooms, Backspace zooms out, / searches, s sandwich, Esc back");
            FlameView::new(f, unit)
        }
    };
    app.mode = Mode::Flame(Box::new(view));
}

/// Live: the flame graph open on the screen replaced by `flame`, drawn from the rows kept
/// now, its zoom, selection and search kept where their frames still are (by call path).
fn follow_flame(app: &mut App, flame: Flame) {
    let Mode::Flame(old) = &app.mode else {
        return;
    };
    if old.base.as_ref().is_some_and(|b| b.negated) {
        // The baseline's flame is drawn: it does not change with the stream.
        return;
    }
    let names = |f: &Flame, i: usize| -> Vec<String> {
        f.path(i).iter().map(|&n| f.nodes[n].name.clone()).collect()
    };
    let zoom: Vec<Vec<String>> = old.zoom.iter().map(|&z| names(&old.flame, z)).collect();
    let sel = match old.sel {
        crate::icicle::Sel::Node(n) => Some(names(&old.flame, n)),
        crate::icicle::Sel::Rest(_) => None,
    };
    let (search, typing, compared) = (old.search.clone(), old.typing, old.base.is_some());
    let width = old.width.get();
    let find = |f: &Flame, path: &[String]| -> Option<usize> {
        path.iter().try_fold(0, |at, name| f.child_named(at, name))
    };
    let unit = crate::profile::unit(app.view.kind.as_deref());
    let mut view = match app
        .baseline
        .as_ref()
        .filter(|b| compared && b.kind == app.view.kind)
    {
        Some(b) => FlameView::compared(flame, unit, b.flame.clone()),
        None => FlameView::new(flame, unit),
    };
    view.zoom = zoom.iter().map_while(|p| find(&view.flame, p)).collect();
    view.sel = match sel.and_then(|p| find(&view.flame, &p)) {
        Some(n) => crate::icicle::Sel::Node(n),
        None => crate::icicle::Sel::Node(view.zoomed()),
    };
    view.search = search;
    view.typing = typing;
    view.width.set(width);
    app.mode = Mode::Flame(Box::new(view));
}

/// Open the sandwich of `name` over the view's stacks `f` (`s` in the stack tree).
fn open_sandwich(app: &mut App, f: Flame, name: &str) {
    match f.find(name) {
        Ok(name) => {
            let unit = crate::profile::unit(app.view.kind.as_deref());
            let view = SandwichView::new(std::rc::Rc::new(f), unit, &name);
            let back = std::mem::replace(&mut app.mode, Mode::Table);
            app.mode = Mode::Sandwich {
                view: Box::new(view),
                back: Box::new(back),
            };
            app.info(format!(
                "sandwich of {name} over the view: Enter on a line opens its own, Esc goes back"
            ));
        }
        Err(e) => app.error(e),
    }
}
