//! The tables over a store in object storage (`-d s3://BUCKET/PREFIX`, `gs://…`, `az://…`,
//! `file:///…`), laid out as `stacks-pack URL` writes it:
//! `PREFIX/date=YYYY-MM-DD/hour=HH/host=NAME/*.samples.parquet` with its `*.stacks.parquet`
//! and `*.frames.parquet`.
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
use arrow_schema::{Field, Schema, SchemaRef};
use datafusion::common::{JoinType, ScalarValue};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::FunctionRegistry;
use datafusion::functions::expr_fn::coalesce;
use datafusion::functions::expr_fn::{named_struct, to_char};
use datafusion::functions_aggregate::expr_fn::{array_agg, first_value, max, min};
use datafusion::functions_nested::expr_fn::{array_append, cardinality, gen_series};
use datafusion::logical_expr::when;
use datafusion::object_store::ObjectStore;
use datafusion::object_store::path::Path as Key;
use datafusion::prelude::{DataFrame, Expr, SessionContext, cast, col, lit};
use futures::{StreamExt, TryStreamExt};
use url::Url;

use stacks_store::{frames, stack_col};
use stacks_stream::{col as column, frame, stack_type, symbolized_schema};

use crate::flat;
use crate::source::{self, KEYED_TABLE, STACK_TABLE};
use crate::stack_table::STACK_COLUMNS;
use crate::window::{Hour, Window};

/// The view of every stacks file's rows (one per distinct stack of its samples file).
const STACKS_FILES: &str = "stacks_files";
/// The view of every frames file's rows (one per distinct frame of its file set).
const FRAMES_FILES: &str = "frames_files";
/// Partition columns, from the key of the file a row is stored in.
pub(crate) const DATE: &str = "date";
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
                stacks_store::SAMPLES_SUFFIX
            )
        })?;

    let contract = symbolized_schema(HashMap::new());
    let samples_schema = stacks_store::samples_schema(&contract);
    let stacks_schema = stacks_files_schema(&contract);
    let frames_schema = frames_files_schema();
    let mut paths = Vec::with_capacity(hours.len());
    for hour in &hours {
        let table_url = base
            .join(&hour.path())
            .with_context(|| format!("{url}: partition {}", hour.path()))?;
        paths.push(ListingTableUrl::parse(table_url.as_str()).map_err(flat)?);
    }
    let samples = listing(ctx, &paths, stacks_store::SAMPLES_SUFFIX, &samples_schema)?;
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
    let stacks = listing(ctx, &paths, stacks_store::STACKS_SUFFIX, &stacks_schema)?;
    let frames_files = listing(ctx, &paths, stacks_store::FRAMES_SUFFIX, &frames_schema)?;
    let keyed_schema: SchemaRef = Arc::new(samples.schema().as_arrow().clone());
    ctx.register_table(KEYED_TABLE, samples.into_view())
        .map_err(flat)?;
    ctx.register_table(STACKS_FILES, stacks.into_view())
        .map_err(flat)?;
    ctx.register_table(FRAMES_FILES, frames_files.into_view())
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

/// The columns a stacks file may have: those of the pair layout's (whole stacks with their
/// summaries) and of the frames layout's (`frame_ids`, `set_id`); a file lacking some reads
/// them as nulls.
fn stacks_files_schema(contract: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = stacks_store::stacks_schema(contract)
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for f in frames::framed_stacks_schema(HashMap::new()).fields() {
        if f.name() != column::STACK_ID {
            fields.push(f.as_ref().clone().with_nullable(true));
        }
    }
    Arc::new(Schema::new(fields))
}

/// The columns a frames file may have: those stacks-pack writes, `name` nullable (files
/// written before it lack it).
fn frames_files_schema() -> SchemaRef {
    let written = frames::frames_schema(&stack_type(), HashMap::new())
        .expect("the contract's stack is a list of frames");
    let fields: Vec<Field> = written
        .fields()
        .iter()
        .map(|f| {
            f.as_ref()
                .clone()
                .with_nullable(f.is_nullable() || f.name() == frame::NAME)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// `stack_table`: one row per `stack_id` of the stacks files (a stack recorded on several
/// hosts or in several files is stored once in each), with the columns of the local table.
///
/// Every stacks file is read once (DataFusion plans a DataFrame used twice twice, and each
/// scan of thousands of small files in object storage costs more than the work done on
/// them). One aggregate takes, for each stack, the whole stack and summaries of pair-layout
/// files and the `frame_ids` of one frames-layout file set (`arg_min` over `set_id`: a stack
/// recorded on many hosts or in many hours is assembled once, not once per set). Those ids
/// are unnested with their positions, left-joined with that set's frames on (`set_id`,
/// `frame_id`) and gathered back (`as_stack` over positioned frames); a whole stack passes
/// through as one row with no frame to join. A stack's frame ids end with one more, null:
/// a stack of no frames still has a row to gather (its null frame is left out by
/// `as_stack`). The frames are gathered with their stored `name`, which an assembled stack's
/// `folded` joins (`stack_fold` names a frame only when a frames file written before the
/// column has none); `leaf` and `depth` are the stack functions'; raw stack columns are null.
async fn distinct_stacks(ctx: &SessionContext, stacks_schema: &Schema) -> Result<DataFrame> {
    let any = ctx.udaf("stack_any").map_err(flat)?;
    let arg_min = ctx.udaf("arg_min").map_err(flat)?;
    let summaries = [stack_col::FOLDED, stack_col::LEAF, stack_col::DEPTH];
    let stored: Vec<&str> = STACK_COLUMNS
        .iter()
        .copied()
        .filter(|name| stacks_schema.field_with_name(name).is_ok())
        .collect();
    // One value per stack of a column every row of the stack has the same value in.
    let one = |name: &str| {
        let value = col(quoted(name));
        if name == column::STACK {
            any.call(vec![value]).alias(name)
        } else if summaries.contains(&name) {
            max(value).alias(name)
        } else {
            first_value(value, vec![]).alias(name)
        }
    };
    let carried = || stored.iter().chain(summaries.iter()).copied();
    let (stack, set_id, ids) = (
        || col(quoted(column::STACK)),
        || col(quoted(frames::SET_ID)),
        || col(quoted(frames::FRAME_IDS)),
    );
    let mut per_stack: Vec<Expr> = carried().map(one).collect();
    per_stack.push(min(set_id()).alias("c_set_id"));
    per_stack.push(arg_min.call(vec![ids(), set_id()]).alias("c_ids"));
    let stacks = ctx
        .table(STACKS_FILES)
        .await
        .and_then(|f| f.aggregate(vec![col(quoted(column::STACK_ID))], per_stack))
        .map_err(flat)?;
    // Raw pair-layout files have no `stack`: theirs stay null unless a frame set has them.
    let whole = if stored.contains(&column::STACK) {
        stack().is_not_null().or(col("c_set_id").is_null())
    } else {
        col("c_set_id").is_null()
    };
    let end = lit(ScalarValue::UInt32(None));
    let count = cast(
        coalesce(vec![cardinality(col("c_ids")), lit(0u64)]),
        arrow_schema::DataType::Int64,
    );
    let mut rows: Vec<Expr> = vec![col(quoted(column::STACK_ID))];
    rows.extend(carried().map(|name| col(quoted(name))));
    rows.extend([
        whole.alias("c_whole"),
        col("c_set_id"),
        array_append(col("c_ids"), end).alias("r_frame_id"),
        gen_series(lit(1i64), count + lit(1i64), lit(1i64)).alias("r_pos"),
    ]);
    let refs = stacks
        .select(rows)
        .and_then(|f| f.unnest_columns(&["r_frame_id", "r_pos"]))
        .map_err(flat)?;
    let fields = frames::frame_struct(&stack_type())
        .expect("a list of frames")
        .clone();
    let frame = named_struct(
        fields
            .iter()
            .map(|f| f.name().as_str())
            .chain([frame::NAME])
            .flat_map(|name| [lit(name), col(quoted(name))])
            .collect(),
    );
    let frames_files = ctx
        .table(FRAMES_FILES)
        .await
        .and_then(|f| {
            f.select(vec![
                set_id().alias("f_set_id"),
                col(quoted(frames::FRAME_ID)).alias("f_frame_id"),
                frame.alias("f_frame"),
            ])
        })
        .map_err(flat)?;
    // Unordered, with each frame's position: `as_stack` orders them (see there why not
    // `ORDER BY` inside `array_agg`).
    let gathered = array_agg(named_struct(vec![
        lit("pos"),
        col("r_pos"),
        lit("frame"),
        col("f_frame"),
    ]));
    // Grouped by the carried columns too (all null but for whole stacks): DataFusion would
    // add them anyway, as `stack_id` determines them, also when a cluster's scheduler
    // rebuilds the plan.
    let mut keys = vec![col(quoted(column::STACK_ID)), col("c_whole")];
    keys.extend(carried().map(|name| col(quoted(name))));
    let assembled = refs
        .join(
            frames_files,
            JoinType::Left,
            &["c_set_id", "r_frame_id"],
            &["f_set_id", "f_frame_id"],
            None,
        )
        .and_then(|j| j.aggregate(keys, vec![gathered.alias("r_stack")]))
        .map_err(flat)?;
    let as_stack = ctx.udf("as_stack").map_err(flat)?;
    let is_whole = || col("c_whole");
    let either = |stored: Expr, made: Expr| -> Result<Expr> {
        when(is_whole(), stored).otherwise(made).map_err(flat)
    };
    // The assembled stack's frames in order, with their names (`r_named`); then without.
    let named = || as_stack.call(vec![as_stack.call(vec![col("r_stack")])]);
    let mut columns = vec![col(quoted(column::STACK_ID))];
    for &name in &stored {
        columns.push(if name == column::STACK {
            either(stack(), named())?.alias(name)
        } else {
            col(quoted(name))
        });
    }
    columns.extend(summaries.iter().map(|name| col(quoted(name))));
    columns.push(is_whole());
    columns.push(as_stack.call(vec![col("r_stack")]).alias("r_named"));
    let udf = |name: &str| ctx.udf(name).map_err(flat);
    let mut summarized = vec![col(quoted(column::STACK_ID))];
    summarized.extend(stored.iter().map(|name| col(quoted(name))));
    summarized.push(
        either(
            col(quoted(stack_col::FOLDED)),
            udf("stack_fold")?.call(vec![col("r_named")]),
        )?
        .alias(stack_col::FOLDED),
    );
    summarized.push(
        either(
            col(quoted(stack_col::LEAF)),
            udf("stack_leaf")?.call(vec![stack()]),
        )?
        .alias(stack_col::LEAF),
    );
    let depth = cast(
        udf("stack_depth")?.call(vec![stack()]),
        arrow_schema::DataType::Int32,
    );
    summarized.push(either(col(quoted(stack_col::DEPTH)), depth)?.alias(stack_col::DEPTH));
    assembled
        .select(columns)
        .and_then(|f| f.select(summarized))
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
            if !object
                .location
                .as_ref()
                .ends_with(stacks_store::SAMPLES_SUFFIX)
            {
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
