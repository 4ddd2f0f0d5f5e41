//! Answering the diff: the view marked as the baseline (`b`), another store's same view as
//! one (`--diff`), and the diff view of the current view against it (`d`), put into the app
//! state (errors go to the status line, the screen stays).

use std::rc::Rc;

use anyhow::Result;

use crate::app::{App, Mode};
use crate::catalog;
use crate::compare::{Baseline, DiffView};
use crate::engine::Engine;
use crate::flame::Flame;
use crate::session::flame;
use crate::view::{Ns, Span, View};

/// The baseline, if the view is of its kind; else why not on the status line.
pub(crate) fn baseline(app: &mut App) -> Option<Baseline> {
    let b = app.baseline.clone()?;
    if b.kind != app.view.kind {
        app.error(format!(
            "the baseline is of kind {}: b marks one of this kind",
            b.kind.as_deref().unwrap_or(catalog::ALL)
        ));
        return None;
    }
    Some(b)
}

/// What the view is, for a baseline's description: its window and filters.
pub fn describe(app: &App) -> String {
    let w = app.view.window;
    let mut text = format!(
        "{} → {} ({})",
        crate::fmt::time(w.from, false),
        crate::fmt::time(w.to, false),
        crate::fmt::duration(w.len())
    );
    for s in &app.view.steps {
        text.push_str(" › ");
        text.push_str(&s.shown());
    }
    text
}

/// `b`: the view's stacks `f`, described by `what`, become the baseline.
pub fn mark(app: &mut App, f: Flame, what: String) {
    app.info(format!(
        "baseline: {what}; move the window ([ ]) or filter, then d (functions) or F (flame)"
    ));
    app.baseline = Some(Baseline {
        flame: Rc::new(f),
        kind: app.view.kind.clone(),
        what,
    });
}

/// The baseline of `view` over another store (`--diff`): its stacks in the window `window`
/// picks in its range (the last `--window` of it, as for the view).
pub(crate) fn store_baseline(
    engine: &Engine,
    view: &View,
    window: Ns,
    label: &str,
) -> Result<Baseline> {
    let Some(range) = engine.range(view.kind.as_deref()) else {
        anyhow::bail!("--diff {label}: no rows of this kind");
    };
    let mut view = view.clone();
    view.window = if range.len() <= window {
        range
    } else {
        Span {
            from: range.to - window,
            to: range.to,
        }
    };
    let (flame, _) = flame(engine, &view).map_err(|e| e.context(format!("--diff {label}")))?;
    Ok(Baseline {
        flame: Rc::new(flame),
        kind: view.kind.clone(),
        what: label.to_string(),
    })
}

/// `d`: the functions of the view's stacks `f` against the baseline.
pub(crate) fn show_diff(app: &mut App, f: Flame) {
    let Some(b) = baseline(app) else {
        return;
    };
    let unit = crate::profile::unit(app.view.kind.as_deref());
    let mut view = DiffView::new(&b.flame, Rc::new(f), unit);
    // The window moved under an open diff: the same function stays highlighted.
    if let Mode::Diff(old) = &app.mode {
        view.search = old.search.clone();
        let name = old.current().map(|c| c.name.clone());
        view.cursor = name
            .and_then(|name| {
                let visible = view.visible();
                visible
                    .iter()
                    .position(|&i| view.diff.changes[i].name == name)
            })
            .unwrap_or(0);
    }
    app.info(format!(
        "diff against {}: [ ] move the window, F flame, s sandwich, Esc back",
        b.what
    ));
    app.mode = Mode::Diff(Box::new(view));
}
