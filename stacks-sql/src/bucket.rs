//! The tables over a store in object storage (`-d s3://BUCKET/PREFIX`, `gs://…`, `az://…`,
//! `file:///…`), laid out as `stacks-pack URL` writes it:
//! `PREFIX/date=YYYY-MM-DD/hour=HH/host=NAME/*.samples.parquet` with its `*.stacks.parquet`.
//!
//! Only the hour prefixes of the time window are listed (one LIST each, shared by the samples
//! and stacks tables), the schema is the stream contract's rather than one read from every
//! footer, and a single footer is read for the recording metadata. The tables are plain
//! listing tables and views, so a Ballista cluster plans and runs them as they are. `date` and
//! `hour` are columns: the UTC date and hour of the row's `time`, which name the partition it
//! is stored under; `host` is a column of every row.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_schema::{Schema, SchemaRef};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::FunctionRegistry;
use datafusion::functions::expr_fn::to_char;
use datafusion::functions_aggregate::expr_fn::{first_value, max};
use datafusion::object_store::ObjectStore;
use datafusion::object_store::path::Path as Key;
use datafusion::prelude::{DataFrame, Expr, SessionContext, col, lit};
use futures::{StreamExt, TryStreamExt};
use url::Url;

use stacks_stream::store::{self, stack_col};
use stacks_stream::{col as column, symbolized_schema};

use crate::flat;
use crate::source::{self, KEYED_TABLE, STACK_TABLE};
use crate::stack_table::STACK_COLUMNS;
use crate::window::{Hour, Window};

/// The view of every stacks file's rows (one per distinct stack of its samples file).
const STACKS_FILES: &str = "stacks_files";
/// Partition columns, from the key of the file a row is stored in.
pub const DATE: &str = "date";
pub const HOUR: &str = "hour";
/// LISTs run at once while looking for the hours a store has.
const LIST_CONCURRENCY: usize = 16;

/// Register the tables over the store `url` with the rows of `window`, and return the
/// recording metadata of one of its samples files.
pub async fn register(
    ctx: &SessionContext,
    url: &str,
    window: &Window,
) -> Result<HashMap<String, String>> {
    let mut base = Url::parse(url).with_context(|| format!("`{url}`: not a URL"))?;
    if !base.path().ends_with('/') {
        base.set_path(&format!("{}/", base.path()));
    }
    let root = ListingTableUrl::parse(base.as_str())
        .map_err(flat)?
        .object_store();
    let store = ctx
        .runtime_env()
        .object_store(root)
        .map_err(|e| flat(e).context(format!("`{url}`")))?;
    let prefix = Key::from_url_path(base.path()).map_err(|e| flat(e).context(url.to_string()))?;
    let hours = match window.hours() {
        Some(hours) => hours,
        None => stored_hours(store.as_ref(), &prefix, window)
            .await
            .with_context(|| format!("{url}: listing its date=/hour= prefixes"))?,
    };
    let metadata = first_metadata(ctx, &store, &prefix, &hours)
        .await
        .with_context(|| format!("{url}: reading a samples file"))?
        .ok_or_else(|| {
            let within = if window.is_open() {
                String::new()
            } else {
                " in the --from/--to window".to_string()
            };
            anyhow::anyhow!(
                "{url}: no samples files{within} (keys PREFIX/date=…/hour=…/host=…/*{}): fill it \
                 with `stacks-record … | stacks-symbolize | stacks-pack {url}`",
                store::SAMPLES_SUFFIX
            )
        })?;

    let contract = symbolized_schema(HashMap::new());
    let samples_schema = store::samples_schema(&contract);
    let stacks_schema = store::stacks_schema(&contract);
    let mut paths = Vec::with_capacity(hours.len());
    for hour in &hours {
        let table_url = base
            .join(&hour.path())
            .with_context(|| format!("{url}: partition {}", hour.path()))?;
        paths.push(ListingTableUrl::parse(table_url.as_str()).map_err(flat)?);
    }
    let samples = listing(ctx, &paths, store::SAMPLES_SUFFIX, &samples_schema)?;
    let mut exprs: Vec<Expr> = samples_schema
        .fields()
        .iter()
        .map(|f| col(quoted(f.name())))
        .collect();
    // The partition a row is stored under is the UTC date and hour of its time.
    let time = || col(quoted(column::TIME));
    exprs.push(to_char(time(), lit("%Y-%m-%d")).alias(DATE));
    exprs.push(to_char(time(), lit("%H")).alias(HOUR));
    let samples = samples.select(exprs).map_err(flat)?;
    let stacks = listing(ctx, &paths, store::STACKS_SUFFIX, &stacks_schema)?;
    let keyed_schema: SchemaRef = Arc::new(samples.schema().as_arrow().clone());
    ctx.register_table(KEYED_TABLE, samples.into_view())
        .map_err(flat)?;
    ctx.register_table(STACKS_FILES, stacks.into_view())
        .map_err(flat)?;
    let table = distinct_stacks(ctx, &stacks_schema).await?;
    let table_schema: SchemaRef = Arc::new(table.schema().as_arrow().clone());
    ctx.register_table(STACK_TABLE, table.into_view())
        .map_err(flat)?;
    source::register_views(ctx, &[(KEYED_TABLE, keyed_schema)], &table_schema, window).await?;
    Ok(metadata)
}

/// A column name as `col` reads it (names are case-sensitive).
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// The files ending in `suffix` under the hour prefixes `paths` (one table: its files are
/// split into the session's partitions), read with `schema` (columns a file lacks are null).
fn listing(
    ctx: &SessionContext,
    paths: &[ListingTableUrl],
    suffix: &str,
    schema: &SchemaRef,
) -> Result<DataFrame> {
    let options = ListingOptions::new(source::parquet_format()).with_file_extension(suffix);
    let config = ListingTableConfig::new_with_multi_paths(paths.to_vec())
        .with_listing_options(options)
        .with_schema(Arc::clone(schema));
    let table = ListingTable::try_new(config).map_err(flat)?;
    ctx.read_table(Arc::new(table)).map_err(flat)
}

/// `stack_table`: one row per `stack_id` of the stacks files (a stack recorded on several
/// hosts or in several files is stored once in each), with the columns of the local table.
async fn distinct_stacks(ctx: &SessionContext, stacks_schema: &Schema) -> Result<DataFrame> {
    let any = ctx.udaf("stack_any").map_err(flat)?;
    let mut aggregates = Vec::new();
    for name in STACK_COLUMNS {
        if stacks_schema.field_with_name(name).is_err() {
            continue;
        }
        let value = col(quoted(name));
        aggregates.push(if name == column::STACK {
            any.call(vec![value]).alias(name)
        } else {
            first_value(value, vec![]).alias(name)
        });
    }
    for name in [stack_col::FOLDED, stack_col::LEAF, stack_col::DEPTH] {
        aggregates.push(max(col(quoted(name))).alias(name));
    }
    let files = ctx.table(STACKS_FILES).await.map_err(flat)?;
    files
        .aggregate(vec![col(quoted(column::STACK_ID))], aggregates)
        .map_err(flat)
}

/// The hours under `prefix` (its `date=…/hour=…/` prefixes) that `window` covers, in order.
async fn stored_hours(store: &dyn ObjectStore, prefix: &Key, window: &Window) -> Result<Vec<Hour>> {
    let dates: Vec<String> = store
        .list_with_delimiter(Some(prefix))
        .await
        .map_err(flat)?
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename()?.strip_prefix("date=").map(str::to_string))
        .filter(|d| window.covers_date(d))
        .collect();
    let mut hours: Vec<Hour> = futures::stream::iter(dates)
        .map(|date| async move {
            let dir = prefix.clone().join(format!("date={date}"));
            let listed = store.list_with_delimiter(Some(&dir)).await.map_err(flat)?;
            Ok::<_, anyhow::Error>(
                listed
                    .common_prefixes
                    .iter()
                    .filter_map(|p| p.filename()?.strip_prefix("hour=").map(str::to_string))
                    .map(|hour| Hour {
                        date: date.clone(),
                        hour,
                    })
                    .filter(|h| window.covers(h))
                    .collect::<Vec<_>>(),
            )
        })
        .buffer_unordered(LIST_CONCURRENCY)
        .try_concat()
        .await?;
    hours.sort();
    Ok(hours)
}

/// The `stacks.*` metadata of the first samples file in `hours` (one LIST per hour until one
/// holds a samples file, then one GET of its footer); `None` if none does.
async fn first_metadata(
    ctx: &SessionContext,
    store: &Arc<dyn ObjectStore>,
    prefix: &Key,
    hours: &[Hour],
) -> Result<Option<HashMap<String, String>>> {
    for hour in hours {
        let dir = hour
            .path()
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(prefix.clone(), |k, part| k.join(part));
        let mut listed = store.list(Some(&dir));
        while let Some(object) = listed.try_next().await.map_err(flat)? {
            if !object.location.as_ref().ends_with(store::SAMPLES_SUFFIX) {
                continue;
            }
            let format = source::parquet_format_with_metadata();
            let schema = format
                .infer_schema(&ctx.state(), store, std::slice::from_ref(&object))
                .await
                .map_err(|e| flat(e).context(object.location.to_string()))?;
            return Ok(Some(source::stacks_metadata(&schema)));
        }
    }
    Ok(None)
}
