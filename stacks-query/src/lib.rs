//! `stacks-query`: run one SQL query over the Parquet files of a stacks data directory (the
//! table `stacks`), with typed parameters and stack functions, and write the result as a text
//! table, CSV, JSON, NDJSON, an Arrow IPC stream or Parquet.
//!
//! The Arrow output carries the recording's `stacks.*` metadata, so `stacks-query cpu |
//! stacks-pprof` knows what it is converting.

pub mod output;
pub mod params;
pub mod position;
pub mod queries;
pub mod source;
pub mod udf;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use datafusion::common::ParamValues;
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;

use output::{Format, Writer};
use queries::Query;

/// Command line of `stacks-query`.
#[derive(Debug, Parser)]
#[command(
    name = "stacks-query",
    version,
    about = "Run SQL over a directory of stacks Parquet files (the table `stacks`)",
    after_help = "Examples:\n  stacks-query cpu | stacks-pprof > cpu.pb.gz\n  \
                  stacks-query offcpu --param comm=nginx --param from=2025-01-02T03:00:00Z | stacks-pprof > off.pb.gz\n  \
                  stacks-query timeline --param kind=block --param interval=100ms -f csv\n  \
                  stacks-query -c \"SELECT stack_fold(stack) AS folded, count(*) AS samples FROM stacks GROUP BY 1\"\n  \
                  stacks-query --list\n\n\
                  Queries and functions: docs/queries.md"
)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["query", "sql", "list"]))]
pub struct Cli {
    /// Directory of Parquet files written by stacks-pack, searched recursively (names starting
    /// with `.` are unfinished files and skipped); or a single Parquet file
    #[arg(
        short = 'd',
        long = "dir",
        value_name = "DIR",
        env = "STACKS_DATA",
        default_value = "out"
    )]
    pub dir: PathBuf,

    /// A .sql file, or the name of a bundled query (see --list)
    #[arg(value_name = "QUERY")]
    pub query: Option<String>,

    /// Run this SQL instead of a query file
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SQL",
        allow_hyphen_values = true
    )]
    pub sql: Option<String>,

    /// Bind a query parameter (`$NAME` in the SQL) to a typed value; repeatable. An empty
    /// VALUE is NULL. Bundled queries list theirs with --list
    #[arg(
        short = 'p',
        long = "param",
        value_name = "NAME=VALUE",
        value_parser = params::split_assignment
    )]
    pub params: Vec<(String, String)>,

    /// Output format [default: table on a terminal, arrow otherwise]
    #[arg(short = 'f', long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,

    /// Memory for query execution, e.g. 512M, 2G: sorts and aggregations beyond it spill to
    /// temporary files [default: unlimited]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_limit: Option<usize>,

    /// List the bundled queries, the question each answers and its parameters
    #[arg(long)]
    pub list: bool,
}

/// A byte count with an optional K, M, G or T suffix (powers of 1024).
fn parse_size(text: &str) -> Result<usize, String> {
    let bytes = stacks_stream::cli::parse_size(text)?;
    usize::try_from(bytes).map_err(|_| format!("`{text}` is too large"))
}

/// Entry point of the binary.
pub fn run() -> Result<ExitCode> {
    let cli = stacks_stream::cli::parse_args::<Cli>("stacks-query");
    if cli.list {
        queries::list(&mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    let query = match (&cli.query, &cli.sql) {
        (_, Some(sql)) => queries::inline(sql),
        (Some(q), None) => queries::resolve(q)?,
        (None, None) => anyhow::bail!("give a QUERY or -c SQL (see --help)"),
    };
    let decls = params::declarations(&query.label, &query.sql)?;
    let values = params::bind(&query.label, &decls, &cli.params, cli.sql.is_some())?;
    let format = cli
        .format
        .unwrap_or(if stacks_stream::cli::stdout_is_tty() {
            Format::Table
        } else {
            Format::Arrow
        });

    let files = source::stacks_files(&cli.dir, source::find_files(&cli.dir)?)?;
    let mut metadata = source::recording_metadata(&files[0])?;
    stacks_stream::stamp(
        &mut metadata,
        "stacks-query",
        env!("CARGO_PKG_VERSION"),
        stacks_stream::stage::QUERY,
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the query runtime")?;
    let ctx = session(cli.memory_limit)?;
    runtime.block_on(execute(&ctx, &files, &query, values, format, metadata))?;
    Ok(ExitCode::SUCCESS)
}

/// Rows per batch for execution and Parquet reading.
pub const BATCH_ROWS: usize = 512;

/// A session with the stack functions, SQL spans for error positions, and the memory limit.
pub fn session(memory_limit: Option<usize>) -> Result<SessionContext> {
    // A row carries a whole stack (often 20 frames of a dozen fields each), so DataFusion's
    // default of 8192 rows makes batches of tens of MB: 512 rows keep them about a MB, which
    // is both faster (they stay in cache) and bounded (peak memory a sixth of 8192's).
    let mut config = SessionConfig::new()
        .with_information_schema(true)
        .with_batch_size(BATCH_ROWS);
    config.options_mut().sql_parser.collect_spans = true;
    let mut runtime = RuntimeEnvBuilder::new();
    if let Some(limit) = memory_limit {
        // Sorts hold back this much for merging their spill files; the default (10 MiB) would
        // not fit a small pool.
        let reserve = &mut config.options_mut().execution.sort_spill_reservation_bytes;
        *reserve = (*reserve).min(limit / 8);
        runtime = runtime
            .with_memory_pool(Arc::new(FairSpillPool::new(limit)))
            .with_disk_manager_builder(DiskManagerBuilder::default());
    }
    let runtime = runtime.build_arc().map_err(flat)?;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    udf::register(&ctx);
    Ok(ctx)
}

/// Plan and run `query` over `files` with `values` bound, streaming the result to stdout.
async fn execute(
    ctx: &SessionContext,
    files: &[PathBuf],
    query: &Query,
    values: ParamValues,
    format: Format,
    metadata: std::collections::HashMap<String, String>,
) -> Result<()> {
    source::register(ctx, files).await?;

    // Read-only: no CREATE/INSERT/SET; one statement (DataFusion refuses several).
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
    let mut stream = df.execute_stream().await.map_err(located)?;
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
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(located)?;
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

/// An error from a library whose message already includes its causes (DataFusion, object_store)
/// as one message, so `cause: cause` chains do not repeat them.
pub(crate) fn flat(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}
