//! Where the rows come from and how queries run: a store (a directory or a bucket URL, here
//! or on a Ballista cluster, through stacks-sql) or a live stream on stdin ([`crate::live`]),
//! both seen as the tables `samples` and `stack_table`; the time range and kinds they hold.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::prelude::SessionContext;
use futures::StreamExt;

use stacks_sql::queries::Query;
use stacks_sql::window::Window;
use stacks_sql::{Data, flat};

use crate::catalog::{self, Column};
use crate::live::Live;
use crate::view::{Ns, Span};

/// The rows stacks-top looks at.
pub enum Source {
    /// A store, opened once.
    Store { label: String },
    /// Rows arriving on stdin, tables rebuilt at each refresh.
    Live(Live),
}

/// A source with its session and what it holds.
pub struct Engine {
    rt: tokio::runtime::Runtime,
    ctx: SessionContext,
    pub source: Source,
    /// The groupable columns of the rows.
    pub columns: Vec<Column>,
    /// Kinds present, with their row counts, most rows first.
    pub kinds: Vec<(String, i64)>,
    /// The time the rows of each kind cover.
    ranges: Vec<(String, Span)>,
    /// Live: rows read at the last refresh.
    rows_seen: u64,
}

impl Engine {
    /// A store: `data` with the rows of `window`, on the cluster at `cluster` if given.
    pub fn store(data: &Data, window: &Window, cluster: Option<&str>) -> Result<Self> {
        let rt = runtime()?;
        let ctx = rt.block_on(async {
            let ctx = match cluster {
                Some(url) => stacks_sql::cluster_session(url, None).await?,
                None => stacks_sql::session(None)?,
            };
            stacks_sql::open(&ctx, data, window).await?;
            anyhow::Ok(ctx)
        })?;
        let label = match data {
            Data::Dir(p) => p.display().to_string(),
            Data::Store(u) => u.clone(),
        };
        let mut engine = Engine {
            rt,
            ctx,
            source: Source::Store { label },
            columns: Vec::new(),
            kinds: Vec::new(),
            ranges: Vec::new(),
            rows_seen: 0,
        };
        engine.describe()?;
        Ok(engine)
    }

    /// Rows from stdin, keeping the last `keep_ns`.
    pub fn live(keep_ns: Ns) -> Result<Self> {
        let live = Live::start(keep_ns)?;
        let rt = runtime()?;
        let ctx = stacks_sql::session(None)?;
        let mut engine = Engine {
            rt,
            ctx,
            source: Source::Live(live),
            columns: Vec::new(),
            kinds: Vec::new(),
            ranges: Vec::new(),
            rows_seen: 0,
        };
        engine.refresh()?;
        Ok(engine)
    }

    /// What the screen names the source by.
    pub fn label(&self) -> String {
        match &self.source {
            Source::Store { label } => label.clone(),
            Source::Live(live) => live.label(),
        }
    }

    /// Live: take the rows that arrived since the last refresh (an error of the stream ends
    /// the screen with it); whether there were any. Stores do not change.
    pub fn refresh(&mut self) -> Result<bool> {
        let Source::Live(live) = &self.source else {
            return Ok(false);
        };
        let snapshot = live.snapshot()?;
        if snapshot.rows == self.rows_seen && self.rows_seen > 0 {
            return Ok(false);
        }
        self.rows_seen = snapshot.rows;
        let ctx = stacks_sql::session(None)?;
        self.rt.block_on(stacks_sql::source::register_memory(
            &ctx,
            snapshot.samples_schema,
            snapshot.samples,
            snapshot.stacks_schema,
            snapshot.stacks,
        ))?;
        self.ctx = ctx;
        // Counted as the rows arrived: no scan of every kept row each second.
        self.kinds = snapshot
            .kinds
            .iter()
            .map(|k| (k.kind.clone(), k.rows))
            .collect();
        self.ranges = snapshot
            .kinds
            .iter()
            .map(|k| {
                (
                    k.kind.clone(),
                    Span {
                        from: k.first,
                        to: k.last + 1,
                    },
                )
            })
            .collect();
        if self.columns.is_empty() {
            self.columns = self.catalog()?;
        }
        Ok(true)
    }

    /// The kinds, their ranges and the columns of a store.
    fn describe(&mut self) -> Result<()> {
        self.describe_kinds()?;
        self.columns = self.catalog()?;
        Ok(())
    }

    /// The kinds present with their rows and time ranges.
    fn describe_kinds(&mut self) -> Result<()> {
        let batches = self.run(
            "the kinds",
            "SELECT kind, count(*) AS n, CAST(min(time) AS BIGINT) AS a, \
             CAST(max(time) AS BIGINT) AS z FROM samples WHERE kind <> 'lost' \
             GROUP BY kind ORDER BY n DESC, kind",
            None,
        )?;
        let mut kinds = Vec::new();
        let mut ranges = Vec::new();
        for b in &batches {
            let k = arrow_cast::cast(b.column(0), &arrow_schema::DataType::Utf8)?;
            let k = k.as_string::<i32>();
            let n = b.column(1).as_primitive::<Int64Type>();
            let a = b.column(2).as_primitive::<Int64Type>();
            let z = b.column(3).as_primitive::<Int64Type>();
            for i in 0..b.num_rows() {
                kinds.push((k.value(i).to_string(), n.value(i)));
                if a.is_valid(i) && z.is_valid(i) {
                    ranges.push((
                        k.value(i).to_string(),
                        Span {
                            from: a.value(i),
                            to: z.value(i) + 1,
                        },
                    ));
                }
            }
        }
        self.kinds = kinds;
        self.ranges = ranges;
        Ok(())
    }

    /// The time the rows of `kind` (every kind: `None`) cover, first row to last.
    pub fn range(&self, kind: Option<&str>) -> Option<Span> {
        self.ranges
            .iter()
            .filter(|(k, _)| kind.is_none_or(|want| want == k))
            .map(|(_, s)| *s)
            .reduce(|a, b| Span {
                from: a.from.min(b.from),
                to: a.to.max(b.to),
            })
    }

    fn catalog(&self) -> Result<Vec<Column>> {
        let df = self.rt.block_on(self.ctx.table("samples")).map_err(flat)?;
        Ok(catalog::columns(df.schema().as_arrow()))
    }

    /// Run `sql` (named `label` in errors) with the window bound as `$from`/`$to`.
    pub fn run(&self, label: &str, sql: &str, window: Option<Span>) -> Result<Vec<RecordBatch>> {
        self.rt
            .block_on(collect(self.ctx.clone(), query(label, sql), values(window)))
    }

    /// Start `sql` as [`Self::run`] does, in the background: the screen keeps answering keys
    /// while it runs.
    pub fn spawn(&self, label: &str, sql: &str, window: Option<Span>) -> Job {
        Job(self
            .rt
            .spawn(collect(self.ctx.clone(), query(label, sql), values(window))))
    }

    /// The result of `job`, waiting for it.
    pub fn wait(&self, job: Job) -> Result<Vec<RecordBatch>> {
        let mut job = job;
        self.rt.block_on(&mut job.0)?
    }

    /// [`Self::run`], timed.
    pub fn timed(
        &self,
        label: &str,
        sql: &str,
        window: Option<Span>,
    ) -> Result<(Vec<RecordBatch>, std::time::Duration)> {
        let t0 = Instant::now();
        let out = self.run(label, sql, window)?;
        Ok((out, t0.elapsed()))
    }
}

/// `sql` as a query named `label` in errors.
fn query(label: &str, sql: &str) -> Query {
    Query {
        label: label.to_string(),
        sql: sql.to_string(),
    }
}

/// The window bound as `$from`/`$to`, or no parameters.
fn values(window: Option<Span>) -> ParamValues {
    match window {
        Some(w) => {
            let at = |ns| ScalarValue::TimestampNanosecond(Some(ns), Some(Arc::from("UTC")));
            ParamValues::from(vec![
                ("from".to_string(), at(w.from)),
                ("to".to_string(), at(w.to)),
            ])
        }
        None => ParamValues::from(Vec::<ScalarValue>::new()),
    }
}

/// Run `query` with `values` over `ctx`, every batch of its result.
async fn collect(
    ctx: SessionContext,
    query: Query,
    values: ParamValues,
) -> Result<Vec<RecordBatch>> {
    let mut stream = stacks_sql::start(&ctx, &query, values).await?;
    let mut out = Vec::new();
    while let Some(batch) = stream.next().await {
        out.push(batch.map_err(|e| stacks_sql::position::locate(&query.label, &e))?);
    }
    Ok(out)
}

/// A query running in the background ([`Engine::spawn`]).
pub struct Job(tokio::task::JoinHandle<Result<Vec<RecordBatch>>>);

impl Job {
    /// Whether it has finished ([`Engine::wait`] then returns at once).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the query runtime")
}
