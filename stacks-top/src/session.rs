//! Answering a view: the queries behind the table, the sparkline, a row's stack tree and
//! heatmap, the flame graph and the sandwich, run on the engine and put into the app state
//! (errors go to the status line, the screen stays); the diff's in [`crate::baseline`].

use std::time::Duration;

use anyhow::Result;
use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;

use crate::app::{self, App, Mode, Spark, SparkJob, SparkKey};
use crate::catalog;
use crate::engine::Engine;
use crate::flame::Flame;
use crate::icicle::{FlameView, SandwichView};
use crate::table::Table;
use crate::tree::Tree;
use crate::view::{Ns, Planner, Span, Step, View};

/// How a screen starts (the flags of the command line).
#[derive(Debug, Clone)]
pub struct Start {
    /// A kind, `all`, or `None` for the default.
    pub kind: Option<String>,
    /// Columns to group by; empty: the kind's default.
    pub group: Vec<String>,
    /// An SQL condition (`--where`).
    pub filter: Option<String>,
    pub window: Ns,
    pub latency: bool,
    pub limit: usize,
}

/// The app of `start` over `engine`, its range set; a column the engine does not have is an
/// error (a usage error on the command line).
pub fn app(engine: &Engine, start: &Start) -> std::result::Result<App, String> {
    let kind = match start.kind.as_deref() {
        Some(catalog::ALL) => None,
        Some(k) => Some(k.to_string()),
        None => Some(default_kind(&engine.kinds)),
    };
    let group = if start.group.is_empty() {
        app::default_group(kind.as_deref())
    } else {
        start.group.clone()
    };
    for g in &group {
        if !engine.columns.iter().any(|c| &c.name == g) {
            return Err(format!(
                "--group: no column `{g}` (stacks-top --columns lists them)"
            ));
        }
    }
    let view = View {
        kind,
        group,
        steps: start.filter.iter().map(|w| Step::Sql(w.clone())).collect(),
        window: Span { from: 0, to: 1 },
        latency: start.latency,
        limit: start.limit,
    };
    let mut app = App::new(view, engine.columns.clone(), start.window, false);
    app.kinds = engine.kinds.clone();
    app.source = engine.label();
    app.set_range(engine.range(app.view.kind.as_deref()));
    Ok(app)
}

/// The kind a screen opens on: threads by state when the store has them, else CPU, else the
/// kind with the most rows.
fn default_kind(kinds: &[(String, i64)]) -> String {
    for want in [stacks_stream::kind::STATE, stacks_stream::kind::PROFILE] {
        if kinds.iter().any(|(k, _)| k == want) {
            return want.to_string();
        }
    }
    kinds
        .iter()
        .find(|(k, _)| catalog::weights(k).is_some())
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| stacks_stream::kind::STATE.to_string())
}

/// Bucket widths the sparkline may use, smallest first.
const BUCKETS_NS: &[Ns] = &[
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    15_000_000_000,
    30_000_000_000,
    60_000_000_000,
    120_000_000_000,
    300_000_000_000,
    600_000_000_000,
    900_000_000_000,
    1_800_000_000_000,
    3_600_000_000_000,
    7_200_000_000_000,
    21_600_000_000_000,
    43_200_000_000_000,
    86_400_000_000_000,
];

/// The table of `view`.
pub fn table(engine: &Engine, view: &View) -> Result<(Table, Duration)> {
    let planner = Planner {
        columns: &engine.columns,
    };
    let sql = planner.table(view);
    let (batches, took) = engine.timed("the table", &sql, Some(view.window))?;
    let mut table = Table::new(&view.group, &batches, view.window, view.latency)?;
    if sampled_in_passes(view) {
        let sql = planner.observed(view.window.from, view.window.len().max(1), true);
        let (batches, more) = engine.timed("the sampled time", &sql, Some(view.window))?;
        table.observed_ns = observed_ns(&batches)?;
        return Ok((table, took + more));
    }
    Ok((table, took))
}

/// Whether `view`'s rows are taken in sampling passes (`state`), so that its average threads
/// divide by the time its passes observed, not by its window's length.
fn sampled_in_passes(view: &View) -> bool {
    view.kind.as_deref() == Some(stacks_stream::kind::STATE)
}

/// The time observed in the one bucket of a [`crate::view::Planner::observed`] result; `None`
/// when no pass ran.
fn observed_ns(batches: &[arrow_array::RecordBatch]) -> Result<Option<i64>> {
    let mut total = None;
    for b in batches {
        let obs = arrow_cast::cast(b.column(1), &DataType::Int64)?;
        let obs = obs.as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            if obs.is_valid(r) && obs.value(r) > 0 {
                *total.get_or_insert(0) += obs.value(r);
            }
        }
    }
    Ok(total)
}

/// Query the table and the sparkline of the app's view (see [`refresh_table`] and
/// [`refresh_spark`]).
pub fn refresh(engine: &Engine, app: &mut App) {
    refresh_table(engine, app);
    refresh_spark(engine, app);
}

/// Query the table of the app's view; a failing query leaves the last table and says why in
/// the status line. A failing SQL filter just added is dropped.
pub fn refresh_table(engine: &Engine, app: &mut App) {
    app.kinds = engine.kinds.clone();
    app.source = engine.label();
    app.set_range(engine.range(app.view.kind.as_deref()));
    if app.range.is_none() {
        app.table = None;
        app.spark = Spark::default();
        app.spark_key = None;
        app.spark_job = None;
        app.info(if app.live {
            "waiting for rows on stdin"
        } else {
            "no rows"
        });
        return;
    }
    let result = table(engine, &app.view);
    let new_filter = std::mem::take(&mut app.new_filter);
    match result {
        Ok((table, took)) => {
            app.timing = format!("{} rows · {} ms", table.rows.len(), took.as_millis());
            app.table = Some(table);
            app.cursor = app.cursor.min(app.rows().len().saturating_sub(1));
        }
        Err(e) => {
            let dropped =
                new_filter && matches!(app.view.steps.last(), Some(crate::view::Step::Sql(_)));
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
    }
}

/// Query the sparkline again when what it shows changed: the kind, the filters, the range
/// or its width (not the window, the grouping or the latency columns, which it does not
/// depend on).
pub fn refresh_spark(engine: &Engine, app: &mut App) {
    start_spark(engine, app);
    if let Some(job) = app.spark_job.take() {
        finish_spark(engine, app, job);
    }
}

/// [`refresh_spark`] in the background: the query starts here, and [`poll_spark`] takes its
/// result when it is done, so keys are answered meanwhile.
pub fn start_spark(engine: &Engine, app: &mut App) {
    let Some(range) = app.range else {
        return;
    };
    let width = app.spark_width.get().max(8);
    let key = SparkKey {
        kind: app.view.kind.clone(),
        steps: app.view.steps.clone(),
        range: app.range,
        width,
    };
    let current = app
        .spark_job
        .as_ref()
        .map(|j| &j.key)
        .or(app.spark_key.as_ref());
    if current == Some(&key) {
        return;
    }
    let bucket = BUCKETS_NS
        .iter()
        .copied()
        .find(|b| range.len() / b < width as Ns)
        .unwrap_or(*BUCKETS_NS.last().expect("buckets"));
    let start = range.from - range.from.rem_euclid(bucket);
    let planner = Planner {
        columns: &engine.columns,
    };
    let sql = if sampled_in_passes(&app.view) {
        planner.sparkline_observed(&app.view, start, bucket)
    } else {
        planner.sparkline(&app.view, start, bucket)
    };
    // A job for an older view is dropped, which cancels it.
    app.spark_job = Some(SparkJob {
        key,
        start,
        bucket,
        count: ((range.to - start + bucket - 1) / bucket).max(1) as usize,
        threads: match &app.view.kind {
            Some(k) => catalog::weights(k).is_some_and(|w| w.thread_ns.is_some()),
            None => true,
        },
        job: engine.spawn("the sparkline", &sql, None),
    });
}

/// Take the sparkline's result if its query is done; whether it was.
pub fn poll_spark(engine: &Engine, app: &mut App) -> bool {
    if !app.spark_job.as_ref().is_some_and(|j| j.job.is_finished()) {
        return false;
    }
    let job = app.spark_job.take().expect("checked");
    finish_spark(engine, app, job);
    true
}

fn finish_spark(engine: &Engine, app: &mut App, job: SparkJob) {
    let SparkJob {
        key,
        start,
        bucket,
        count,
        threads,
        job,
    } = job;
    match engine
        .wait(job)
        .and_then(|batches| spark_values(&batches, bucket, count, threads))
    {
        Ok(values) => {
            app.spark = Spark {
                start,
                bucket,
                values,
                threads,
            };
            app.spark_key = Some(key);
        }
        Err(e) => app.error(format!("sparkline: {e:#}")),
    }
}

/// Average threads (or events per second) per bucket from the sparkline query's rows.
fn spark_values(
    batches: &[arrow_array::RecordBatch],
    bucket: Ns,
    count: usize,
    threads: bool,
) -> Result<Vec<f64>> {
    let mut values = vec![0.0; count];
    for b in batches {
        let i = arrow_cast::cast(b.column(0), &DataType::Int64)?;
        let i = i.as_primitive::<Int64Type>();
        let w = arrow_cast::cast(b.column(1), &DataType::Int64)?;
        let w = w.as_primitive::<Int64Type>();
        let n = arrow_cast::cast(b.column(2), &DataType::Int64)?;
        let n = n.as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            let at = i.value(r);
            if at < 0 || at as usize >= count {
                continue;
            }
            values[at as usize] = if threads {
                if w.is_valid(r) {
                    w.value(r) as f64 / bucket as f64
                } else {
                    0.0
                }
            } else {
                n.value(r) as f64 / (bucket as f64 / 1e9)
            };
        }
    }
    Ok(values)
}

/// The stack tree of the rows of `app`'s view whose group columns equal `values`, titled.
pub fn tree(
    engine: &Engine,
    app: &App,
    values: &[crate::view::Value],
) -> Result<(String, Tree, std::time::Duration)> {
    let title: Vec<String> = app
        .view
        .group
        .iter()
        .zip(values)
        .map(|(g, v)| format!("{g} = {}", v.shown))
        .collect();
    let planner = Planner {
        columns: &engine.columns,
    };
    let sql = planner.stacks(&app.view, values, has_wakers(engine));
    let (batches, took) = engine.timed("the row's stacks", &sql, Some(app.view.window))?;
    Ok((title.join(" · "), Tree::new(&batches)?, took))
}

/// Whether the store holds `wake` rows (the waker of each explained off-CPU interval).
fn has_wakers(engine: &Engine) -> bool {
    engine
        .kinds
        .iter()
        .any(|(k, n)| k == stacks_stream::kind::WAKE && *n > 0)
}

/// The stack tree of thread `tid`'s off-CPU intervals in the view's window, with their
/// wakers: one link down the chain from the waker highlighted in the stack tree (`w`).
pub fn waker_tree(engine: &Engine, app: &App, tid: i64) -> Result<(Tree, std::time::Duration)> {
    let planner = Planner {
        columns: &engine.columns,
    };
    let sql = planner.waker_stacks(&app.view, tid);
    let (batches, took) = engine.timed("the waker's stacks", &sql, Some(app.view.window))?;
    Ok((Tree::new(&batches)?, took))
}

/// Follow the chain of wakers one link (`w` on a waker in the stack tree): the tree of that
/// waker's own off-CPU intervals in the same window, and who woke it.
pub fn follow_waker(engine: &Engine, app: &mut App) {
    let Some((tid, name)) = app.follow_waker.take() else {
        return;
    };
    let Mode::Peek { title, .. } = &app.mode else {
        return;
    };
    let title = format!("{title} ← {name}");
    match waker_tree(engine, app, tid) {
        Ok((tree, _)) if tree.nodes[0].value == 0.0 => {
            app.info(format!(
                "{name}: no off-CPU intervals of its own in this window"
            ));
            let _ = tree;
        }
        Ok((tree, took)) => {
            app.info(format!(
                "off-CPU stacks of {name}, who woke the row: w follows its own waker, Esc goes back"
            ));
            app.timing = format!("{} frames · {} ms", tree.nodes.len() - 1, took.as_millis());
            app.mode = Mode::Peek { title, tree };
        }
        Err(e) => app.error(format!("follow the waker: {e:#}")),
    }
}

/// Open the stack tree of the highlighted row.
pub fn peek(engine: &Engine, app: &mut App) {
    let rows = app.rows();
    let Some(row) = rows.get(app.cursor) else {
        return;
    };
    let values = row.values.clone();
    match tree(engine, app, &values) {
        Ok((title, tree, took)) => {
            app.info(
                "the row's stacks: Enter folds or unfolds, w follows the waker, Esc goes back",
            );
            app.timing = format!("{} frames · {} ms", tree.nodes.len() - 1, took.as_millis());
            app.mode = Mode::Peek { title, tree };
        }
        Err(e) => app.error(format!("peek: {e:#}")),
    }
}

/// The flame graph of `view`'s stacks in its window.
pub fn flame(engine: &Engine, view: &View) -> Result<(Flame, Duration)> {
    let planner = Planner {
        columns: &engine.columns,
    };
    let sql = planner.flame(view);
    let (batches, took) = engine.timed("the view's stacks", &sql, Some(view.window))?;
    Ok((crate::profile::flame(&batches)?, took))
}

/// The flame graph of the view, or why not on the status line.
pub(crate) fn view_flame(engine: &Engine, app: &mut App) -> Option<Flame> {
    match flame(engine, &app.view) {
        Ok((f, took)) if f.total() != 0 => {
            app.timing = format!("{} frames · {} ms", f.nodes.len() - 1, took.as_millis());
            Some(f)
        }
        Ok(_) => {
            app.info("no stacks in this view");
            None
        }
        Err(e) => {
            app.error(format!("flame: {e:#}"));
            None
        }
    }
}

/// Query the table again when the window moved under another view (`[` `]` in the flame
/// graph or the diff), so the screen behind it is the same view.
pub(crate) fn sync_table(engine: &Engine, app: &mut App) {
    if app
        .table
        .as_ref()
        .is_some_and(|t| t.window != app.view.window)
    {
        refresh_table(engine, app);
        start_spark(engine, app);
    }
}

/// Open the flame graph of the view (`F`), coloured by the change against the baseline when
/// there is one of its kind.
pub fn open_flame(engine: &Engine, app: &mut App) {
    sync_table(engine, app);
    if let Some(f) = view_flame(engine, app) {
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
                FlameView::compared(f, unit, &b.flame)
            }
            Some(None) => FlameView::new(f, unit),
            None => {
                app.info("flame graph: arrows select, Enter zooms, Backspace zooms out, / searches, s sandwich, Esc back");
                FlameView::new(f, unit)
            }
        };
        app.mode = Mode::Flame(Box::new(view));
    }
}

/// Open the latency heatmap of the highlighted row (`H`), as wide as the sparkline.
pub fn open_heatmap(engine: &Engine, app: &mut App) {
    let rows = app.rows();
    let Some(row) = rows.get(app.cursor) else {
        return;
    };
    let values = row.values.clone();
    let title: Vec<String> = app
        .view
        .group
        .iter()
        .zip(&values)
        .map(|(g, v)| format!("{g} = {}", v.shown))
        .collect();
    let window = app.view.window;
    let columns = app.spark_width.get().max(10);
    let bucket = crate::heatmap::bucket(window, columns);
    let planner = Planner {
        columns: &engine.columns,
    };
    let sql = planner.heatmap(&app.view, &values, window.from, bucket);
    let result = engine
        .timed("the heatmap", &sql, Some(window))
        .and_then(|(batches, took)| {
            let h = crate::heatmap::Heatmap::new(title.join(" · "), window, columns, &batches)?;
            Ok((h, took))
        });
    match result {
        Ok((h, took)) => {
            app.timing = format!("{} events · {} ms", h.total(), took.as_millis());
            app.info("latency by time: t shades by time instead of events, Esc goes back");
            app.mode = Mode::Heatmap(Box::new(h));
        }
        Err(e) => app.error(format!("heatmap: {e:#}")),
    }
}

/// Live: the flame graph open on the screen drawn again from the rows kept now, its zoom,
/// selection and search kept where their frames still are (by call path).
pub fn refresh_flame(engine: &Engine, app: &mut App) {
    let Mode::Flame(old) = &app.mode else {
        return;
    };
    let names = |f: &Flame, i: usize| -> Vec<String> {
        f.path(i).iter().map(|&n| f.nodes[n].name.clone()).collect()
    };
    let zoom: Vec<Vec<String>> = old.zoom.iter().map(|&z| names(&old.flame, z)).collect();
    let sel = match old.sel {
        crate::icicle::Sel::Node(n) => Some(names(&old.flame, n)),
        crate::icicle::Sel::Rest(_) => None,
    };
    let (search, typing, compared) = (old.search.clone(), old.typing, old.base.is_some());
    let Ok((flame, _)) = flame(engine, &app.view) else {
        // The last flame stays; the next refresh tries again.
        return;
    };
    if flame.total() == 0 {
        return;
    }
    let find = |f: &Flame, path: &[String]| -> Option<usize> {
        path.iter().try_fold(0, |at, name| f.child_named(at, name))
    };
    let unit = crate::profile::unit(app.view.kind.as_deref());
    let mut view = match app
        .baseline
        .as_ref()
        .filter(|b| compared && b.kind == app.view.kind)
    {
        Some(b) => FlameView::compared(flame, unit, &b.flame),
        None => FlameView::new(flame, unit),
    };
    view.zoom = zoom.iter().map_while(|p| find(&view.flame, p)).collect();
    if let Some(n) = sel.and_then(|p| find(&view.flame, &p)) {
        view.sel = crate::icicle::Sel::Node(n);
    } else {
        view.sel = crate::icicle::Sel::Node(view.zoomed());
    }
    view.search = search;
    view.typing = typing;
    if let Mode::Flame(old) = &app.mode {
        view.width.set(old.width.get());
    }
    app.mode = Mode::Flame(Box::new(view));
}

/// Open the sandwich of [`App::sandwich_of`] over the view's stacks (`s` in the stack tree).
pub fn open_sandwich(engine: &Engine, app: &mut App) {
    let Some(name) = app.sandwich_of.take() else {
        return;
    };
    let Some(f) = view_flame(engine, app) else {
        return;
    };
    match f.find(&name) {
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
