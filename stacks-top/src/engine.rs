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
use crate::view::{Ns, Span, Wakers};

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
    /// Whether the rows have `offcpu_since` (`state` rows link to the interval they are in).
    state_links: bool,
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
            state_links: false,
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
            state_links: false,
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

    fn catalog(&mut self) -> Result<Vec<Column>> {
        let df = self.rt.block_on(self.ctx.table("samples")).map_err(flat)?;
        let schema = df.schema().as_arrow();
        self.state_links = schema
            .field_with_name(stacks_stream::col::OFFCPU_SINCE)
            .is_ok();
        Ok(catalog::columns(schema))
    }

    /// Run `sql` (named `label` in errors) with the window bound as `$from`/`$to`.
    pub fn run(&self, label: &str, sql: &str, window: Option<Span>) -> Result<Vec<RecordBatch>> {
        self.rt
            .block_on(collect(self.ctx.clone(), query(label, sql), values(window)))
    }

    /// [`Self::run`], timed.
    pub fn timed(
        &self,
        label: &str,
        sql: &str,
        window: Option<Span>,
    ) -> Result<(Vec<RecordBatch>, std::time::Duration)> {
        self.rt.block_on(self.querier().timed(label, sql, window))
    }

    /// What a query needs of the engine, to run away from the screen: the session of the
    /// rows now (live: of this refresh) and their columns.
    pub(crate) fn querier(&self) -> Querier {
        Querier {
            ctx: self.ctx.clone(),
            columns: self.columns.clone(),
            wakers: {
                let switch = self
                    .kinds
                    .iter()
                    .any(|(k, n)| k == stacks_stream::kind::WAKE && *n > 0);
                Wakers {
                    switch,
                    state: switch && self.state_links,
                }
            },
        }
    }

    /// Run `future` (a [`Querier`]'s work) to its end, waiting for it.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.rt.block_on(future)
    }

    /// Start `future` on the query runtime: it runs while the screen answers keys, and stops
    /// at its next await when the handle is dropped.
    pub fn spawn<F>(&self, future: F) -> Task<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Task(self.rt.spawn(future))
    }

    /// End the engine without waiting for the queries still running (the process is about to
    /// exit: a query deep in a scan must not hold up `q`).
    pub fn close(self) {
        self.rt.shutdown_background();
    }
}

/// A session's rows and columns, cheap to clone and sent with a query to the runtime.
#[derive(Clone)]
pub(crate) struct Querier {
    ctx: SessionContext,
    pub columns: Vec<Column>,
    /// Which rows link to `wake` rows (the waker of each explained off-CPU interval).
    pub wakers: Wakers,
}

impl Querier {
    /// Run `sql` (named `label` in errors) with the window bound as `$from`/`$to`, timed.
    pub(crate) async fn timed(
        &self,
        label: &str,
        sql: &str,
        window: Option<Span>,
    ) -> Result<(Vec<RecordBatch>, std::time::Duration)> {
        let t0 = Instant::now();
        let out = collect(self.ctx.clone(), query(label, sql), values(window)).await?;
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

/// Work running on the query runtime ([`Engine::spawn`]), aborted when dropped.
pub struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How much nicer than the screen's threads the query threads are: on a machine whose
/// cores a query fills, the thread reading keys and the one drawing still get the CPU at
/// once (alone, a query runs as fast).
const QUERY_NICE: libc::c_int = 5;

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(|| {
            // SAFETY: getpriority and setpriority of this thread, by its own id.
            unsafe {
                let tid = libc::gettid() as libc::id_t;
                let now = libc::getpriority(libc::PRIO_PROCESS, tid);
                libc::setpriority(libc::PRIO_PROCESS, tid, now + QUERY_NICE);
            }
        })
        .build()
        .context("cannot start the query runtime")
}
