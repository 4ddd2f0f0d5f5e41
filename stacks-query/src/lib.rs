//! `stacks-query`: run one SQL query over the Parquet files of a stacks data directory (the
//! tables `stacks`, `samples` and `stack_table`: see [`source`]), with typed parameters and stack functions, and write the result as a text
//! table, CSV, JSON, NDJSON, an Arrow IPC stream or Parquet.
//!
//! The Arrow output carries the recording's `stacks.*` metadata, so `stacks-query cpu |
//! stacks-pprof` knows what it is converting.

pub mod cli;
pub mod output;
pub mod params;
pub mod position;
pub mod queries;
pub mod source;
pub mod stack_table;
pub mod udf;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use datafusion::common::ParamValues;
use datafusion::execution::disk_manager::DiskManagerBuilder;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;

use output::{Format, Writer};
use queries::Query;

pub use cli::run;

/// Tool name used in messages and provenance.
pub const TOOL: &str = "stacks-query";

/// The values to bind to `query`'s parameters: its declared defaults, overridden by `given`
/// (`NAME`, `VALUE` pairs, parsed by the declared type; for `inline` SQL, which declares
/// nothing, by the type the value looks like).
pub fn bind(query: &Query, given: &[(String, String)], inline: bool) -> Result<ParamValues> {
    let decls = params::declarations(&query.label, &query.sql)?;
    params::bind(&query.label, &decls, given, inline)
}

/// Rows per batch for execution and Parquet reading.
pub const BATCH_ROWS: usize = 1024;

/// A session with the stack functions, SQL spans for error positions, and the memory limit.
pub fn session(memory_limit: Option<usize>) -> Result<SessionContext> {
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

/// Run `query` over `files` with `values` bound, streaming the result to stdout as `format`
/// with the recording's `metadata`.
pub async fn query(
    ctx: &SessionContext,
    files: &[PathBuf],
    query: &Query,
    values: ParamValues,
    format: Format,
    metadata: std::collections::HashMap<String, String>,
) -> Result<()> {
    source::register(ctx, files).await?;
    let mut stream = start(ctx, query, values).await?;
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

/// An error from a library whose message already includes its causes (DataFusion, object_store)
/// as one message, so `cause: cause` chains do not repeat them.
pub(crate) fn flat(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}
