//! `stacks-sql`: SQL over a stacks store, shared by the tools that query one (stacks-query,
//! stacks-top) and the Ballista cluster (stacks-cluster): opening a store (a directory, or a
//! bucket URL with `--from/--to` hour pruning: [`open`]) as the tables `stacks`, `samples` and
//! `stack_table` ([`source`], [`bucket`]) with the views every query builds on ([`views`]:
//! `waits`, `observed`); sessions with the stack functions ([`udf`]), locally
//! or on a cluster; the bundled queries ([`queries`]) and their typed parameters ([`params`]);
//! and writing a result as a text table, CSV, JSON, NDJSON, an Arrow IPC stream or Parquet
//! ([`output`]).
//!
//! The Arrow output carries the recording's `stacks.*` metadata, so `stacks-query cpu |
//! stacks-pprof` knows what it is converting.

#![warn(unreachable_pub)]

pub mod args;
pub mod bucket;
pub mod cluster_watch;
pub mod output;
pub mod params;
pub mod pin;
pub mod position;
pub mod queries;
pub mod source;
pub mod stack_table;
pub mod stores;
pub mod udf;
pub mod views;
pub mod window;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use arrow_array::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;

use output::{Format, Writer};
use queries::Query;

/// The values to bind to `query`'s parameters: its declared defaults, overridden by `given`
/// (`NAME`, `VALUE` pairs, parsed by the declared type; for `inline` SQL, which declares
/// nothing, by the type the value looks like).
pub fn bind(query: &Query, given: &[(String, String)], inline: bool) -> Result<ParamValues> {
    let decls = params::declarations(&query.label, &query.sql)?;
    params::bind(&query.label, &decls, given, inline)
}

/// At least this many partitions over a store URL (see [`open`]).
pub(crate) const STORE_PARTITIONS: usize = 16;

/// Rows per batch for execution and Parquet reading.
pub(crate) const BATCH_ROWS: usize = 1024;

/// The session options of every stacks query, on this machine or on a cluster.
pub fn config() -> SessionConfig {
    // Samples rows are scalars and a 16-byte stack id: the per-batch cost dominates small
    // batches. Rows that carry a whole stack (the `stacks` view, query results) make a
    // batch of 1024 a few MB, which sorts and merges of large results must hold.
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_batch_size(BATCH_ROWS);
    config.options_mut().sql_parser.collect_spans = true;
    // A hash join on `stack_id` would push the ids of `stack_table` into the samples scan as
    // a filter evaluated on every row, though every stored id is in `stack_table`.
    config
        .options_mut()
        .optimizer
        .enable_join_dynamic_filter_pushdown = false;
    config
}

/// The runtime of a session: object stores opened from the environment on first use
/// ([`stores::EnvStores`]) and, with `memory_limit`, a fair spill pool of that size. Listings
/// are cached for the runtime's life (a store's samples and stacks tables list each hour
/// prefix once), so a long-lived process makes one runtime per query.
pub fn runtime(config: &mut SessionConfig, memory_limit: Option<usize>) -> Result<Arc<RuntimeEnv>> {
    let mut runtime =
        RuntimeEnvBuilder::new().with_object_store_registry(Arc::new(stores::EnvStores::default()));
    if let Some(limit) = memory_limit {
        // Sorts hold back this much for merging their spill files; the default (10 MiB) would
        // not fit a small pool.
        let reserve = &mut config.options_mut().execution.sort_spill_reservation_bytes;
        *reserve = (*reserve).min(limit / 8);
        runtime = runtime
            .with_memory_pool(Arc::new(FairSpillPool::new(limit)))
            .with_disk_manager_builder(DiskManagerBuilder::default());
    }
    runtime.build_arc().map_err(flat)
}

/// A session state of `config` and `runtime` with DataFusion's functions and the stack
/// functions.
pub fn state(config: SessionConfig, runtime: Arc<RuntimeEnv>) -> Result<SessionState> {
    let mut state = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .build();
    udf::register(&mut state).map_err(flat)?;
    Ok(state)
}

/// A session with the stack functions, SQL spans for error positions, and the memory limit.
pub fn session(memory_limit: Option<usize>) -> Result<SessionContext> {
    let mut config = config();
    let runtime = runtime(&mut config, memory_limit)?;
    Ok(SessionContext::new_with_state(state(config, runtime)?))
}

/// The session state a Ballista client starts from: [`config`] with Ballista's options, the
/// stack functions, [`runtime`]. Queries are planned by Ballista's static planner: its adaptive
/// one (the default in 55.0) resubmitted a join stage forever when one side of the join was
/// empty (`stuck-spans` over a store without spans), and failed `cpu` with "SortMergeJoinExec
/// requires children to be co-partitioned" on an in-process cluster.
pub fn cluster_state(memory_limit: Option<usize>) -> Result<SessionState> {
    use ballista::prelude::SessionConfigExt;
    let mut config = config().upgrade_for_ballista();
    // One task per partition, so a stage's partitions run at once on every executor's task
    // slots (Ballista 55's default, 0, gives a task every partition of its stage, run in one
    // slot); and as many partitions as a small cluster has slots, or more (see [`open`]).
    for (key, value) in [
        ("ballista.planner.adaptive.enabled", "false"),
        ("ballista.scheduler.max_partitions_per_task", "1"),
        ("datafusion.execution.target_partitions", "16"),
    ] {
        config.options_mut().set(key, value).map_err(flat)?;
    }
    let runtime = runtime(&mut config, memory_limit)?;
    state(config, runtime)
}

/// A scheduler address, `df://HOST:PORT` (the `--cluster` flag's parser).
pub(crate) fn parse_cluster(text: &str) -> std::result::Result<String, String> {
    let url = url::Url::parse(text).map_err(|e| format!("`{text}`: {e}"))?;
    if url.scheme() != "df" || url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{text}` is not df://HOST:PORT"));
    }
    Ok(text.to_string())
}

/// A session whose queries run on the Ballista cluster whose scheduler is at `url`
/// (`df://HOST:PORT`); the tables it registers are read by the cluster's executors.
pub async fn cluster_session(url: &str, memory_limit: Option<usize>) -> Result<SessionContext> {
    use ballista::prelude::SessionContextExt;
    let ctx = SessionContext::remote_with_state(url, cluster_state(memory_limit)?)
        .await
        .map_err(|e| flat(e).context(format!("--cluster {url}")))?;
    with_functions(ctx)
}

/// `ctx` with the stack functions registered again: Ballista's upgrade of a session replaces
/// its functions with its built-in set.
pub fn with_functions(mut ctx: SessionContext) -> Result<SessionContext> {
    udf::register(&mut ctx).map_err(flat)?;
    Ok(ctx)
}

/// Plan `query` read-only (no CREATE/INSERT/SET; one statement) with `values` bound, over
/// the tables registered in `ctx`, and start it. Errors are located in the SQL.
pub async fn start(
    ctx: &SessionContext,
    query: &Query,
    values: ParamValues,
) -> Result<SendableRecordBatchStream> {
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let label = &query.label;
    let located = |e| position::locate(label, &e);
    let df = ctx
        .sql_with_options(&query.sql, options)
        .await
        .map_err(located)?;
    let df = df
        .with_param_values(values)
        .map_err(|e| missing_param(label, e))?;
    df.execute_stream().await.map_err(located)
}

/// Where the data is: a directory (or one file) of stacks-pack's files, or a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    Dir(PathBuf),
    Store(String),
}

impl Data {
    /// `-d`'s argument: a URL (`scheme://…`) names a store, anything else a path.
    pub fn parse(arg: &str) -> Self {
        if stacks_store::objstore::is_url(arg) {
            Data::Store(arg.to_string())
        } else {
            Data::Dir(PathBuf::from(arg))
        }
    }
}

/// Register the tables over `data` in `ctx`, with the rows of `window`, and return the
/// recording metadata (that of the first samples file).
pub async fn open(
    ctx: &SessionContext,
    data: &Data,
    window: &window::Window,
) -> Result<HashMap<String, String>> {
    match data {
        Data::Dir(dir) => {
            let files = source::stacks_files(dir, source::find_files(dir)?)?;
            let metadata = source::recording_metadata(&files[0])?;
            source::register_window(ctx, &files, window).await?;
            Ok(metadata)
        }
        Data::Store(url) => {
            // Reads from object storage wait on the network: as many files in flight as
            // partitions (each partition reads its files one after the other).
            {
                let state = ctx.state_ref();
                let mut state = state.write();
                let execution = &mut state.config_mut().options_mut().execution;
                execution.target_partitions = execution.target_partitions.max(STORE_PARTITIONS);
            }
            bucket::register(ctx, url, window).await
        }
    }
}

/// Run `query` with `values` bound over the tables registered in `ctx`, streaming the result
/// to stdout as `format` with the recording's `metadata`.
pub async fn query(
    ctx: &SessionContext,
    query: &Query,
    values: ParamValues,
    format: Format,
    metadata: HashMap<String, String>,
) -> Result<()> {
    let first = first_batch(ctx, query, values).await?;
    write_result(first, query, format, metadata).await
}

/// A query started up to its first batch (`None`: no rows), before anything is written: a
/// query that fails here has written nothing and may be run again.
pub struct Started {
    stream: SendableRecordBatchStream,
    first: Option<RecordBatch>,
}

/// Run `query` up to its first batch ([`Started`]).
pub async fn first_batch(
    ctx: &SessionContext,
    query: &Query,
    values: ParamValues,
) -> Result<Started> {
    let mut stream = start(ctx, query, values).await?;
    let first = match stream.next().await {
        Some(batch) => Some(batch.map_err(|e| position::locate(&query.label, &e))?),
        None => None,
    };
    Ok(Started { stream, first })
}

/// Write a started query's result to stdout in `format`, with `metadata`.
pub async fn write_result(
    started: Started,
    query: &Query,
    format: Format,
    metadata: HashMap<String, String>,
) -> Result<()> {
    let Started { mut stream, first } = started;
    let schema = stream.schema();
    let mut metadata = metadata;
    if let Some(column) = query.default_value()
        && schema.column_with_name(column).is_some()
    {
        metadata.insert(
            stacks_stream::meta::DEFAULT_VALUE.to_string(),
            column.to_string(),
        );
    }
    let mut writer = Writer::new(format, &schema, metadata)?;
    if let Some(batch) = first {
        writer.write(&batch)?;
    }
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| position::locate(&query.label, &e))?;
        writer.write(&batch)?;
    }
    writer.finish()
}

/// A placeholder without a value, said in terms of the command line.
fn missing_param(label: &str, e: datafusion::error::DataFusionError) -> anyhow::Error {
    let text = e.to_string();
    match text.split("placeholder with name $").nth(1) {
        Some(rest) => {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            anyhow::anyhow!("{label}: ${name} has no value: give --param {name}=VALUE")
        }
        None => position::locate(label, &e),
    }
}

/// The name this process was started as (`stacks-query`, `stacks-top`), for warnings.
pub fn program() -> String {
    std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "stacks".to_string())
}

/// An error from a library whose message already includes its causes (DataFusion, object_store)
/// as one message, so `cause: cause` chains do not repeat them.
pub fn flat(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}
