//! The tables over the finished Parquet files under the data directory (`samples`,
//! `stack_table` and the view `stacks` joining them), plus the recording metadata carried by
//! those files. The directory may hold samples/stacks pairs, first-layout files (stacks
//! inline in every row), or both.
//!
//! stacks-pack writes each file under a name starting with `.` and renames it when complete,
//! so dot-named files and directories are never read.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::common::{Column, JoinType, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::FunctionRegistry;
use datafusion::object_store::ObjectStoreExt;
use datafusion::prelude::{DataFrame, Expr, SessionContext, lit};
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use stacks_store::{FileKind, file_kind, frames};
use stacks_stream::col;
use stacks_stream::dict::{is_stack_column, value_type};

use crate::stack_table::{self, Source, StackTable};
use crate::window::Window;
use crate::{flat, pin};

/// Name of the table of rows with their stacks.
pub const TABLE: &str = "stacks";
/// Name of the table of rows without their stacks (with `stack_id`).
pub const SAMPLES: &str = "samples";
/// Name of the table of distinct stacks.
pub(crate) const STACK_TABLE: &str = stack_table::NAME;
/// The files with a stored `stack_id`: samples files and first-layout files stacks-pack wrote.
pub(crate) const KEYED_TABLE: &str = "stacks_keyed_files";
/// First-layout files without a `stack_id`.
const LOOSE_TABLE: &str = "stacks_loose_files";

/// How to fill the data directory `dir`, for error messages.
fn fill_hint(dir: &Path) -> String {
    format!(
        "fill it with `stacks-record … | stacks-symbolize | stacks-pack {}`, \
         or choose another directory with -d or STACKS_DATA",
        dir.display()
    )
}

/// The finished, non-empty Parquet files under `dir` (recursively), sorted by path.
/// `dir` may also be a single Parquet file.
pub fn find_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let shown = dir.display();
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!("{shown}: no such data directory: {}", fill_hint(dir))
        }
        Err(e) => return Err(e).with_context(|| format!("{shown}: cannot open data directory")),
    };
    if meta.is_file() {
        if has_parquet_name(dir) {
            return Ok(vec![dir.to_path_buf()]);
        }
        anyhow::bail!("{shown}: not a directory of Parquet files");
    }
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    if files.is_empty() {
        anyhow::bail!(
            "{shown}: no Parquet files in the data directory: {}",
            fill_hint(dir)
        );
    }
    Ok(files)
}

fn has_parquet_name(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "parquet")
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // A partition directory removed by retention since its parent was listed.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("{}: cannot list", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("{}: cannot list", dir.display()))?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        let kind = entry
            .file_type()
            .with_context(|| format!("{}: cannot stat", path.display()))?;
        if kind.is_dir() {
            walk(&path, files)?;
            continue;
        }
        if !has_parquet_name(&path) {
            continue;
        }
        // Follows symlinks to files; symlinked directories are not entered (no cycles).
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() > 0 => files.push(path),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("{}: cannot stat", path.display())),
        }
    }
    Ok(())
}

/// The files of `files` that hold stacks rows: samples files (each checked to have its stacks
/// file, and its frames file when the stacks file refers to frames) and first-layout files.
/// Stacks and frames files are read through their samples file, so one without (left by a
/// pack killed between its renames) is ignored. Each file kept is held open from here on
/// ([`pin`]): a set deleted later is still read, one deleted already is skipped with a
/// warning. Each other Parquet file
/// (a foreign table, a query result) is named on stderr and left out, so it cannot break
/// every query on the store. Fails when none is left.
pub fn stacks_files(dir: &Path, files: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    let mut kept = Vec::with_capacity(files.len());
    for file in files {
        if matches!(file_kind(&file), Some(FileKind::Stacks | FileKind::Frames)) {
            continue;
        }
        if !pin_set(&file)? {
            eprintln!(
                "{}: warning: skipping {}: deleted since the store was listed",
                crate::program(),
                file.display()
            );
            continue;
        }
        check_footer(&file)?;
        let meta = arrow_metadata(&file)?;
        match stacks_stream::check_row_columns(meta.schema(), &file.display().to_string()) {
            Ok(()) => {
                if file_kind(&file) == Some(FileKind::Samples) {
                    check_stacks_file(&file)?;
                }
                kept.push(file)
            }
            Err(e) => eprintln!("{}: warning: skipping {e}", crate::program()),
        }
    }
    if kept.is_empty() {
        anyhow::bail!(
            "{}: no stacks files in the data directory (see the warnings above): {}",
            dir.display(),
            fill_hint(dir)
        );
    }
    Ok(kept)
}

/// Hold `file` and, for a samples file, its stacks and frames files open; `false` when the
/// set is gone (its samples file is deleted first, so a set whose samples file is gone by now
/// was deleted whole, whichever of its files was missing).
fn pin_set(file: &Path) -> Result<bool> {
    let held = |p: &Path| pin::pin(p).with_context(|| format!("{}: cannot open", p.display()));
    if !held(file)? {
        return Ok(false);
    }
    if file_kind(file) == Some(FileKind::Samples) {
        for level in [
            stacks_store::stacks_path(file),
            stacks_store::frames_path(file),
        ] {
            if !held(&level)? && std::fs::symlink_metadata(file).is_err() {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Refuse samples file `samples` unless its stacks file is there and readable, with a
/// `stack_id`, and, when that file holds `frame_ids`, its frames file with a `frame_id`:
/// without them the samples' stacks are unknown.
fn check_stacks_file(samples: &Path) -> Result<()> {
    let stacks = stacks_store::stacks_path(samples);
    let meta = check_level_file(samples, &stacks, "stacks", col::STACK_ID, |dt| {
        *dt == stacks_stream::stack_id_type()
    })?;
    if meta.schema().field_with_name(frames::FRAME_IDS).is_ok() {
        check_level_file(
            samples,
            &stacks_store::frames_path(samples),
            "frames",
            frames::FRAME_ID,
            |dt| dt.is_integer(),
        )?;
    }
    Ok(())
}

/// Check `file`, the `what` file of samples file `samples`: there, a readable Parquet file,
/// with a column `key` of a type `ok` accepts. Returns its footer.
fn check_level_file(
    samples: &Path,
    file: &Path,
    what: &str,
    key: &str,
    ok: impl Fn(&DataType) -> bool,
) -> Result<ArrowReaderMetadata> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let shown = samples.display();
    match std::fs::metadata(pin::path(file)) {
        Ok(m) if m.is_file() => {}
        Ok(_) => anyhow::bail!("{shown}: its {what} file {name} is not a file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!("{shown}: its {what} file {name} is missing")
        }
        Err(e) => anyhow::bail!("{shown}: its {what} file {name} cannot be read: {e}"),
    }
    let corrupt =
        |e: anyhow::Error| anyhow::anyhow!("{shown}: its {what} file {name} is corrupt: {e:#}");
    check_footer(file).map_err(corrupt)?;
    let meta = arrow_metadata(file).map_err(corrupt)?;
    match meta.schema().field_with_name(key) {
        Ok(f) if ok(f.data_type()) => Ok(meta),
        Ok(f) => anyhow::bail!(
            "{shown}: its {what} file {name} is corrupt: column `{key}` of type {}",
            f.data_type()
        ),
        Err(_) => anyhow::bail!("{shown}: its {what} file {name} is corrupt: no `{key}` column"),
    }
}

/// The `stacks.*` schema metadata of a Parquet file (from its embedded Arrow schema and its
/// key-value metadata).
pub(crate) fn recording_metadata(file: &Path) -> Result<HashMap<String, String>> {
    Ok(stacks_metadata(arrow_metadata(file)?.schema()))
}

/// The `stacks.*` metadata of `schema`.
pub(crate) fn stacks_metadata(schema: &Schema) -> HashMap<String, String> {
    schema
        .metadata()
        .iter()
        .filter(|(k, _)| stacks_stream::meta::is_stacks_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Refuse a file whose Parquet footer cannot be right (too short, no magic, a metadata length
/// past the file's start) before any reader trusts it.
fn check_footer(file: &Path) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let name = file.display();
    let mut f =
        std::fs::File::open(pin::path(file)).with_context(|| format!("{name}: cannot open"))?;
    let len = f
        .metadata()
        .with_context(|| format!("{name}: cannot stat"))?
        .len();
    anyhow::ensure!(len >= 12, "{name}: not a Parquet file ({len} bytes)");
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8))
        .and_then(|_| f.read_exact(&mut tail))
        .with_context(|| format!("{name}: cannot read the Parquet footer"))?;
    anyhow::ensure!(
        &tail[4..] == b"PAR1",
        "{name}: not a Parquet file (no PAR1 magic at its end)"
    );
    let meta = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
    anyhow::ensure!(
        meta + 12 <= len,
        "{name}: corrupt Parquet footer length: {meta} bytes of metadata in a {len}-byte file"
    );
    Ok(())
}

/// Register the tables over `files` (samples files and first-layout files, as
/// [`stacks_files`] keeps them): [`SAMPLES`], every row without its stacks; [`STACK_TABLE`],
/// each distinct stack once; and [`TABLE`], the rows with their stacks (a view joining them).
pub async fn register(ctx: &SessionContext, files: &[PathBuf]) -> Result<()> {
    register_window(ctx, files, &Window::default()).await
}

/// [`register`], with only the rows of `window` in the tables.
pub(crate) async fn register_window(
    ctx: &SessionContext,
    files: &[PathBuf],
    window: &Window,
) -> Result<()> {
    anyhow::ensure!(!files.is_empty(), "no Parquet files to query");
    for file in files {
        check_footer(file)?;
    }
    // Rows with a stored `stack_id` (samples files, first-layout files stacks-pack wrote) are
    // read through one listing table; first-layout files without one (other writers, raw
    // streams) through another, their id computed from `stack`.
    let mut keyed = Vec::new();
    let mut loose = Vec::new();
    let mut sources = Vec::new();
    let mut stack_types: Vec<(String, DataType)> = Vec::new();
    let mut note_types = |schema: &Schema| {
        for f in schema.fields() {
            if is_stack_column(f.name()) && !stack_types.iter().any(|(n, _)| n == f.name()) {
                stack_types.push((f.name().clone(), value_type(f.data_type()).clone()));
            }
        }
    };
    for file in files {
        let meta = arrow_metadata(file)?;
        let schema = meta.schema();
        if file_kind(file) == Some(FileKind::Samples) {
            let stacks = stacks_store::stacks_path(file);
            let stacks_schema = Arc::clone(arrow_metadata(&stacks)?.schema());
            if stacks_schema.field_with_name(frames::FRAME_IDS).is_ok() {
                let frames_file = stacks_store::frames_path(file);
                let stack = frames::stack_type_of(arrow_metadata(&frames_file)?.schema());
                note_types(&Schema::new(vec![Field::new(col::STACK, stack, true)]));
                sources.push(Source::Framed {
                    stacks: pin::path(&stacks),
                    frames: pin::path(&frames_file),
                });
            } else {
                note_types(&stacks_schema);
                sources.push(Source::Stacks(pin::path(&stacks)));
            }
            keyed.push(file.clone());
            continue;
        }
        note_types(schema);
        let has_stack = schema
            .field_with_name(col::STACK)
            .is_ok_and(|f| stacks_stream::is_stack_type(f.data_type()));
        if schema.field_with_name(col::STACK_ID).is_ok() {
            if schema.fields().iter().any(|f| is_stack_column(f.name())) {
                sources.push(Source::Inline(pin::path(file)));
            }
            keyed.push(file.clone());
        } else {
            if has_stack {
                sources.push(Source::Unkeyed(pin::path(file)));
            }
            loose.push(file.clone());
        }
    }
    let stack_table = Arc::new(StackTable::new(sources, &stack_types));
    let table_schema = stack_table.schema();
    ctx.register_table(STACK_TABLE, stack_table).map_err(flat)?;

    let mut parts: Vec<(&str, SchemaRef)> = Vec::new();
    if !keyed.is_empty() {
        let merged = listing_schema(ctx, &keyed).await?;
        // The stack columns of first-layout files are never read through this table.
        let fields: Vec<FieldRef> = merged
            .fields()
            .iter()
            .filter(|f| !is_stack_column(f.name()))
            .cloned()
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, merged.metadata().clone()));
        register_listing(ctx, KEYED_TABLE, &keyed, Arc::clone(&schema))?;
        parts.push((KEYED_TABLE, schema));
    }
    if !loose.is_empty() {
        let merged = listing_schema(ctx, &loose).await?;
        register_listing(ctx, LOOSE_TABLE, &loose, Arc::clone(&merged))?;
        parts.push((LOOSE_TABLE, merged));
    }
    register_views(ctx, &parts, &table_schema, window).await
}

/// Register the tables over rows held in memory: `samples` batches (every column but the
/// stacks, with `stack_id`, as [`stacks_store::StackSplitter`] splits a stream) and
/// the distinct `stacks` they reference (stacks-file rows), of schemas `samples_schema` and
/// `stacks_schema`. The tables are those of a store: [`SAMPLES`], [`STACK_TABLE`], [`TABLE`].
pub async fn register_memory(
    ctx: &SessionContext,
    samples_schema: SchemaRef,
    samples: Vec<RecordBatch>,
    stacks_schema: SchemaRef,
    stacks: Vec<RecordBatch>,
) -> Result<()> {
    let rows = MemTable::try_new(Arc::clone(&samples_schema), vec![samples]).map_err(flat)?;
    ctx.register_table(KEYED_TABLE, Arc::new(rows))
        .map_err(flat)?;
    let table = MemTable::try_new(Arc::clone(&stacks_schema), vec![stacks]).map_err(flat)?;
    ctx.register_table(STACK_TABLE, Arc::new(table))
        .map_err(flat)?;
    register_views(
        ctx,
        &[(KEYED_TABLE, samples_schema)],
        &stacks_schema,
        &Window::default(),
    )
    .await
}

/// Register the views [`SAMPLES`] and [`TABLE`] over the registered tables `parts` (rows with a
/// stored `stack_id`, [`KEYED_TABLE`], or first-layout rows without, [`LOOSE_TABLE`]; each
/// with its schema) and the registered [`STACK_TABLE`] of `table_schema`, keeping the rows of
/// `window`.
pub(crate) async fn register_views(
    ctx: &SessionContext,
    parts: &[(&str, SchemaRef)],
    table_schema: &SchemaRef,
    window: &Window,
) -> Result<()> {
    // Every column, in the stream's order, then `stack_id`.
    let mut types: Vec<Field> = Vec::new();
    let mut add = |f: &Field| {
        if !types.iter().any(|t| t.name() == f.name()) {
            types.push(f.clone().with_nullable(true));
        }
    };
    for (_, schema) in parts {
        schema.fields().iter().for_each(|f| add(f));
    }
    table_schema.fields().iter().for_each(|f| add(f));
    let reference = stacks_stream::symbolized_schema(Default::default());
    let rank = |name: &str| match reference.index_of(name) {
        _ if name == col::STACK_ID => usize::MAX,
        Ok(i) => i,
        Err(_) => usize::MAX - 1,
    };
    types.retain(|f| {
        table_schema.field_with_name(f.name()).is_err()
            || is_stack_column(f.name())
            || f.name() == col::STACK_ID
    });
    types.sort_by_key(|f| rank(f.name()));
    let logical = types;
    if logical.iter().all(|f| f.name() != col::STACK_ID) {
        anyhow::bail!("no `stack_id` column to join the stacks on");
    }

    let key = ctx.udf("stack_key").map_err(flat)?;
    let null_of = |f: &Field| -> Result<Expr> {
        Ok(lit(ScalarValue::try_from(f.data_type()).map_err(flat)?).alias(f.name()))
    };
    let mut samples: Option<DataFrame> = None;
    let mut rows: Option<DataFrame> = None;
    for (name, schema) in parts {
        let has = |c: &str| schema.field_with_name(c).is_ok();
        let mut df = ctx.table(*name).await.map_err(flat)?;
        if let Ok(time) = schema.field_with_name(col::TIME)
            && let Some(filter) = window.filter(time.data_type())
        {
            df = df.filter(filter).map_err(flat)?;
        }
        let computed_id = || -> Result<Expr> {
            let f = logical
                .iter()
                .find(|f| f.name() == col::STACK_ID)
                .expect("checked");
            Ok(if has(col::STACK_ID) {
                column(None, col::STACK_ID)
            } else if has(col::STACK) {
                key.call(vec![column(None, col::STACK)])
                    .alias(col::STACK_ID)
            } else {
                null_of(f)?
            })
        };
        // `samples`: no stack columns.
        let mut exprs = Vec::new();
        for f in logical.iter().filter(|f| !is_stack_column(f.name())) {
            exprs.push(if f.name() == col::STACK_ID {
                computed_id()?
            } else if has(f.name()) {
                column(None, f.name())
            } else {
                null_of(f)?
            });
        }
        let part = df.clone().select(exprs).map_err(flat)?;
        samples = Some(match samples {
            None => part,
            Some(s) => s.union(part).map_err(flat)?,
        });
        // `stacks`: the rows with their stacks (joined, unless they are inline).
        let part = if *name == KEYED_TABLE {
            // `stack_table` first: joins collect their first input (see `session`) and
            // stream the second, so the samples stream through, every one kept (right join).
            let t = ctx.table(STACK_TABLE).await.map_err(flat)?;
            let joined = t
                .alias("t")
                .and_then(|t| {
                    t.join_on(
                        df.alias("s")?,
                        JoinType::Right,
                        [column(Some("s"), col::STACK_ID).eq(column(Some("t"), col::STACK_ID))],
                    )
                })
                .map_err(flat)?;
            let mut exprs = Vec::new();
            for f in &logical {
                let n = f.name().as_str();
                exprs.push(if is_stack_column(n) {
                    if table_schema.field_with_name(n).is_ok() {
                        column(Some("t"), n)
                    } else {
                        null_of(f)?
                    }
                } else if has(n) {
                    column(Some("s"), n)
                } else {
                    null_of(f)?
                });
            }
            joined.select(exprs).map_err(flat)?
        } else {
            let mut exprs = Vec::new();
            for f in &logical {
                exprs.push(if f.name() == col::STACK_ID {
                    computed_id()?
                } else if has(f.name()) {
                    column(None, f.name())
                } else {
                    null_of(f)?
                });
            }
            df.select(exprs).map_err(flat)?
        };
        rows = Some(match rows {
            None => part,
            Some(r) => r.union(part).map_err(flat)?,
        });
    }
    let (Some(samples), Some(rows)) = (samples, rows) else {
        anyhow::bail!("no Parquet files to query");
    };
    ctx.register_table(SAMPLES, samples.into_view())
        .map_err(flat)?;
    ctx.register_table(TABLE, rows.into_view()).map_err(flat)?;
    crate::views::register(ctx).await
}

/// Column `name` (of table `qualifier`), named `name`.
fn column(qualifier: Option<&str>, name: &str) -> Expr {
    Expr::Column(Column::new(qualifier, name)).alias(name)
}

/// The schema merged from `files`' Parquet footers.
async fn listing_schema(ctx: &SessionContext, files: &[PathBuf]) -> Result<SchemaRef> {
    let urls = file_urls(files)?;
    let format = parquet_format();
    let state = ctx.state();
    let store = state.runtime_env().object_store(&urls[0]).map_err(flat)?;
    let mut objects = Vec::with_capacity(urls.len());
    for (url, file) in urls.iter().zip(files) {
        let meta = store
            .head(url.prefix())
            .await
            .map_err(|e| flat(e).context(format!("{}: cannot stat", file.display())))?;
        objects.push(meta);
    }
    match format.infer_schema(&state, &store, &objects).await {
        Ok(schema) => Ok(schema),
        // DataFusion does not say which file failed: find it.
        Err(e) => match files.iter().find_map(|f| recording_metadata(f).err()) {
            Some(named) => Err(named),
            None => Err(flat(e).context("reading the Parquet file schemas")),
        },
    }
}

/// Register `files` as the listing table `name` with `schema` (their columns not in it are
/// not read).
fn register_listing(
    ctx: &SessionContext,
    name: &str,
    files: &[PathBuf],
    schema: SchemaRef,
) -> Result<()> {
    // The files are named one by one (held ones as /proc/self/fd/N): no extension to filter on.
    let options = ListingOptions::new(parquet_format()).with_file_extension("");
    let config = ListingTableConfig::new_with_multi_paths(file_urls(files)?)
        .with_listing_options(options)
        .with_schema(schema);
    let table = ListingTable::try_new(config).map_err(flat)?;
    ctx.register_table(name, Arc::new(table)).map_err(flat)?;
    Ok(())
}

/// Parquet as the store holds it: strings as Utf8 (not Utf8View) so query output matches the
/// stream contract.
pub(crate) fn parquet_format() -> Arc<ParquetFormat> {
    Arc::new(ParquetFormat::default().with_force_view_types(false))
}

/// [`parquet_format`], keeping the files' schema metadata when inferring a schema.
pub(crate) fn parquet_format_with_metadata() -> ParquetFormat {
    ParquetFormat::default()
        .with_force_view_types(false)
        .with_skip_metadata(false)
}

/// `files` as listing table URLs (held files by their descriptor, see [`pin`]).
fn file_urls(files: &[PathBuf]) -> Result<Vec<ListingTableUrl>> {
    let mut urls = Vec::with_capacity(files.len());
    for file in files {
        let abs = std::path::absolute(pin::path(file))
            .with_context(|| format!("{}: cannot resolve path", file.display()))?;
        let url = url::Url::from_file_path(&abs)
            .map_err(|()| anyhow::anyhow!("{}: cannot express as a file URL", abs.display()))?;
        urls.push(ListingTableUrl::try_new(url, None).map_err(flat)?);
    }
    Ok(urls)
}

/// The Arrow view of `file`'s Parquet footer.
fn arrow_metadata(file: &Path) -> Result<ArrowReaderMetadata> {
    let shown = file.display();
    let f = File::open(pin::path(file)).with_context(|| format!("{shown}: cannot open"))?;
    ArrowReaderMetadata::load(&f, Default::default())
        .map_err(|e| flat(e).context(format!("{shown}: not a readable Parquet file")))
}
