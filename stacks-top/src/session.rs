//! How a screen starts, and the queries behind it: the table and the sparkline, each an
//! async function of a [`Querier`] that the [`crate::runner`] runs away from the keys (and
//! `--once` runs to its end); how the app takes their answers is in [`crate::answer`]. The
//! panes' queries are in their modules ([`crate::views`]).

use std::time::Duration;

use anyhow::Result;
use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_schema::DataType;

use crate::app::{self, App, SparkKey};
use crate::catalog;
use crate::engine::{Engine, Querier};
use crate::table::Table;
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
pub(crate) async fn table_of(q: Querier, view: View) -> Result<(Table, Duration)> {
    let planner = Planner {
        columns: &q.columns,
    };
    let sql = planner.table(&view);
    let (batches, took) = q.timed("the table", &sql, Some(view.window)).await?;
    let mut table = Table::new(&view.group, &batches, view.window, view.latency)?;
    if sampled_in_passes(&view) {
        let sql = planner.observed(view.window.from, view.window.len().max(1), true);
        let (batches, more) = q.timed("the sampled time", &sql, Some(view.window)).await?;
        table.observed_ns = observed_ns(&batches)?;
        return Ok((table, took + more));
    }
    Ok((table, took))
}

/// Whether `view`'s rows are taken in sampling passes (`state`), so that its average threads
/// divide by the time its passes observed, not by its window's length.
fn sampled_in_passes(view: &View) -> bool {
    view.kind
        .as_deref()
        .is_some_and(stacks_stream::kinds::sampled_in_passes)
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

/// [`table_of`], waited for (text mode).
pub fn table(engine: &Engine, view: &View) -> Result<(Table, Duration)> {
    engine.block_on(table_of(engine.querier(), view.clone()))
}

/// What a sparkline query is for: its key, buckets and what its values are.
#[derive(Debug, Clone)]
pub struct SparkPlan {
    pub key: SparkKey,
    pub start: Ns,
    pub bucket: Ns,
    pub count: usize,
    pub threads: bool,
    pub sql: String,
}

/// The sparkline the app's view needs, unless it shows it already or it is being computed
/// (`pending`): what it shows depends on the kind, the filters, the range and its width (not
/// the window, the grouping or the latency columns).
pub(crate) fn spark_plan(
    engine: &Engine,
    app: &App,
    pending: Option<&SparkKey>,
) -> Option<SparkPlan> {
    let range = app.range?;
    let width = app.spark_width().max(8);
    let key = SparkKey {
        kind: app.view.kind.clone(),
        steps: app.view.steps.clone(),
        range: app.range,
        width,
    };
    if pending.or(app.spark_key.as_ref()) == Some(&key) {
        return None;
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
    Some(SparkPlan {
        key,
        start,
        bucket,
        count: ((range.to - start + bucket - 1) / bucket).max(1) as usize,
        threads: match &app.view.kind {
            Some(k) => catalog::weights(k).is_some_and(|w| w.thread_ns.is_some()),
            None => true,
        },
        sql,
    })
}

/// The sparkline's values of `plan`.
pub(crate) async fn spark_of(q: Querier, plan: SparkPlan) -> Result<Vec<f64>> {
    let (batches, _) = q.timed("the sparkline", &plan.sql, None).await?;
    spark_values(&batches, plan.bucket, plan.count, plan.threads)
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
