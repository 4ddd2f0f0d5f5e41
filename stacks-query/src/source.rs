//! The `stacks` table: every finished Parquet file under the data directory, registered as one
//! DataFusion listing table, plus the recording metadata carried by those files.
//!
//! stacks-pack writes each file under a name starting with `.` and renames it when complete,
//! so dot-named files and directories are never read.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::object_store::ObjectStoreExt;
use datafusion::prelude::SessionContext;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use stacks_stream::col;

use crate::flat;

/// Name of the table queries read.
pub const TABLE: &str = "stacks";
/// The files themselves when `stacks` is a view over them adding `stack_id`.
const FILES_TABLE: &str = "stacks_files";

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
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("{}: cannot list", dir.display()))?;
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

/// The files of `files` that hold stacks rows; each other Parquet file (a foreign table, a
/// query result) is named on stderr and left out, so it cannot break every query on the
/// store. Fails when none is left.
pub fn stacks_files(dir: &Path, files: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    let mut kept = Vec::with_capacity(files.len());
    for file in files {
        check_footer(&file)?;
        let meta = arrow_metadata(&file)?;
        match stacks_stream::check_row_columns(meta.schema(), &file.display().to_string()) {
            Ok(()) => kept.push(file),
            Err(e) => eprintln!("stacks-query: warning: skipping {e}"),
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

/// The `stacks.*` schema metadata of a Parquet file (from its embedded Arrow schema and its
/// key-value metadata).
pub fn recording_metadata(file: &Path) -> Result<HashMap<String, String>> {
    Ok(arrow_metadata(file)?
        .schema()
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("stacks."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect())
}

/// Refuse a file whose Parquet footer cannot be right (too short, no magic, a metadata length
/// past the file's start) before any reader trusts it.
fn check_footer(file: &Path) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let name = file.display();
    let mut f = std::fs::File::open(file).with_context(|| format!("{name}: cannot open"))?;
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

/// Register `files` as the table [`TABLE`], with a schema merged from all of them.
pub async fn register(ctx: &SessionContext, files: &[PathBuf]) -> Result<()> {
    anyhow::ensure!(!files.is_empty(), "no Parquet files to query");
    let mut urls = Vec::with_capacity(files.len());
    for file in files {
        let abs = std::path::absolute(file)
            .with_context(|| format!("{}: cannot resolve path", file.display()))?;
        let url = url::Url::from_file_path(&abs)
            .map_err(|()| anyhow::anyhow!("{}: cannot express as a file URL", abs.display()))?;
        urls.push(ListingTableUrl::try_new(url, None).map_err(flat)?);
    }
    // Keep strings as Utf8 (not Utf8View) so query output matches the stream contract.
    let format = Arc::new(ParquetFormat::default().with_force_view_types(false));
    let options = ListingOptions::new(format.clone()).with_file_extension(".parquet");

    for file in files {
        check_footer(file)?;
    }
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
    let schema = match format.infer_schema(&state, &store, &objects).await {
        Ok(schema) => schema,
        // DataFusion does not say which file failed: find it.
        Err(e) => match files.iter().find_map(|f| recording_metadata(f).err()) {
            Some(named) => return Err(named),
            None => return Err(flat(e).context("reading the Parquet file schemas")),
        },
    };

    // Stores written by stacks-pack carry `stack_id`; other Parquet files with stacks get it
    // computed (slower: the stacks are decoded to group by them).
    let has_stack = schema
        .field_with_name(col::STACK)
        .is_ok_and(|f| stacks_stream::is_stack_type(f.data_type()));
    // Which files have it is only worth reading when the merged schema says some do.
    let with_id = if has_stack && schema.field_with_name(col::STACK_ID).is_ok() {
        files
            .iter()
            .map(|f| has_stack_id(f))
            .collect::<Result<Vec<bool>>>()?
    } else {
        vec![false; files.len()]
    };
    let complete = !has_stack || with_id.iter().all(|&b| b);
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema.clone());
    let table = ListingTable::try_new(config).map_err(flat)?;
    let name = if complete { TABLE } else { FILES_TABLE };
    ctx.register_table(name, Arc::new(table)).map_err(flat)?;
    if !complete {
        let id = if with_id.iter().any(|&b| b) {
            format!("coalesce({}, stack_key({}))", col::STACK_ID, col::STACK)
        } else {
            format!("stack_key({})", col::STACK)
        };
        let columns: Vec<String> = schema
            .fields()
            .iter()
            .filter(|f| f.name() != col::STACK_ID)
            .map(|f| format!("\"{}\"", f.name().replace('"', "\"\"")))
            .collect();
        let view = format!(
            "CREATE VIEW {TABLE} AS SELECT {}, {id} AS {} FROM {FILES_TABLE}",
            columns.join(", "),
            col::STACK_ID
        );
        ctx.sql(&view)
            .await
            .map_err(|e| flat(e).context("adding stack_id to the stacks table"))?;
    }
    Ok(())
}

/// The Arrow view of `file`'s Parquet footer.
fn arrow_metadata(file: &Path) -> Result<ArrowReaderMetadata> {
    let shown = file.display();
    let f = File::open(file).with_context(|| format!("{shown}: cannot open"))?;
    ArrowReaderMetadata::load(&f, Default::default())
        .map_err(|e| flat(e).context(format!("{shown}: not a readable Parquet file")))
}

/// Whether `file` has the `stack_id` column stacks-pack adds.
fn has_stack_id(file: &Path) -> Result<bool> {
    Ok(arrow_metadata(file)?
        .schema()
        .field_with_name(col::STACK_ID)
        .is_ok())
}
