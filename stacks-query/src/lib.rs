//! `stacks-query`: run one SQL query over the Parquet files of a stacks data directory (the
//! table `stacks`) and write the result as a text table, CSV, JSON or an Arrow IPC stream.
//!
//! The Arrow output carries the recording's `stacks.*` metadata, so `stacks-query cpu |
//! stacks-pprof` knows what it is converting.

pub mod output;
pub mod queries;
pub mod source;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
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
                  stacks-query -c \"SELECT kind, count(*) FROM stacks GROUP BY kind\"\n  \
                  stacks-query --list"
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

    /// Output format [default: table on a terminal, arrow otherwise]
    #[arg(short = 'f', long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,

    /// List the bundled queries and the question each answers
    #[arg(long)]
    pub list: bool,
}

/// Entry point of the binary.
pub fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    if cli.list {
        queries::list(&mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    let query = match (&cli.query, &cli.sql) {
        (_, Some(sql)) => queries::inline(sql),
        (Some(q), None) => queries::resolve(q)?,
        (None, None) => anyhow::bail!("give a QUERY or -c SQL (see --help)"),
    };
    let format = cli
        .format
        .unwrap_or(if stacks_stream::cli::stdout_is_tty() {
            Format::Table
        } else {
            Format::Arrow
        });

    let files = source::find_files(&cli.dir)?;
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
    runtime.block_on(execute(&files, &query, format, metadata))?;
    Ok(ExitCode::SUCCESS)
}

/// Plan and run `query` over `files`, streaming the result to stdout.
async fn execute(
    files: &[PathBuf],
    query: &Query,
    format: Format,
    metadata: std::collections::HashMap<String, String>,
) -> Result<()> {
    let config = SessionConfig::new().with_information_schema(true);
    let ctx = SessionContext::new_with_config(config);
    source::register(&ctx, files).await?;

    // Read-only: no CREATE/INSERT/SET; one statement (DataFusion refuses several).
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let label = &query.label;
    let df = ctx
        .sql_with_options(&query.sql, options)
        .await
        .map_err(|e| flat(e).context(label.clone()))?;
    let mut stream = df
        .execute_stream()
        .await
        .map_err(|e| flat(e).context(label.clone()))?;
    let schema = stream.schema();
    let mut writer = Writer::new(format, &schema, metadata)?;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| flat(e).context(label.clone()))?;
        writer.write(&batch)?;
    }
    writer.finish()
}

/// An error from a library whose message already includes its causes (DataFusion, object_store)
/// as one message, so `cause: cause` chains do not repeat them.
pub(crate) fn flat(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}
