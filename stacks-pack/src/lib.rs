//! `stacks-pack`: read a stacks Arrow IPC stream (raw or symbolized, plain or dictionary-
//! encoded stacks) and write it as zstd-compressed Parquet file sets — the samples (every
//! column but the stacks, plus `stack_id`), each distinct stack once (as frame ids) and each
//! distinct frame once — rotated and uniquely named in a directory, or one set with `-o`.
//! Files appear atomically (temp name, fsync, rename, fsync directory; frames, then stacks,
//! then samples), a stream that ends badly still has its received rows finalized, and SIGTERM
//! finishes cleanly.

#![warn(unreachable_pub)]

pub mod cli;
mod error;
mod fsutil;
pub mod levels;
mod naming;
mod order;
mod outage;
mod pair;
pub mod retention;
mod signals;
mod sink;
mod stale;
mod stats;
mod upkeep;
pub mod upload;

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Context;
use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::{Schema, SchemaRef};
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{KeyValue, SortingColumn};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use stacks_stream::{ContractError, InputStream, meta};

pub use cli::{Args, run};
pub use error::PackError;
pub use naming::{Namer, file_name, sanitize_host};
pub(crate) use pair::SharedSplitter;
pub use sink::{Limits, Packer, Partitioning, Summary, Target, pair_of};

use signals::StopOnTerm;
use stacks_stream::sys::SudoOwner as Owner;

/// Tool name used in messages and provenance.
pub const TOOL: &str = "stacks-pack";
/// This tool's version, recorded in `stacks.tools`.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Default (and largest) row group, in rows.
pub(crate) const MAX_ROW_GROUP_ROWS: usize = 128 * 1024;
/// A row group is also cut when the samples rows waiting for it hold this much memory as
/// Arrow arrays: the rows of a row group wait in memory to be sorted by time, and 128 Ki rows
/// of a system-wide recording (comm, thread, cgroup, paths) held about 100 MiB. At 24 MiB
/// these rows were the largest part of stacks-pack's heap at its peaks (25 of 88 MiB in a
/// 12-minute system-wide soak, beside the input's stack dictionary and the open set's frames).
pub const MAX_GROUP_BYTES: usize = 12 << 20;
/// Row group of a stacks file, in stacks (what the Parquet writer buffers before writing:
/// 16k-stack groups peaked 6% higher packing 24k distinct stacks, for 1% smaller files).
pub(crate) const STACKS_GROUP_ROWS: usize = 4 * 1024;
/// How often the packer looks at the clock (age rotation, SIGTERM) while input is idle.
const TICK: Duration = Duration::from_millis(100);

/// Where the Parquet files go.
#[derive(Debug, Clone)]
pub enum Destination {
    /// Rotated, uniquely named files in this directory (created, with parents, if missing).
    Dir(PathBuf),
    /// Exactly one file (replaced atomically if it exists).
    File(PathBuf),
    /// Object storage: rotated files partitioned by hour in a local spool directory, each
    /// finished pair uploaded (see [`upload`]).
    Store {
        url: String,
        spool: PathBuf,
        /// Bytes of finished pairs the spool may hold while the store fails.
        spool_max: u64,
        /// After the input ended, how long to keep trying before leaving pairs in the spool.
        wait: Duration,
    },
}

/// How to pack (the command line's choices).
#[derive(Debug, Clone)]
pub struct Options {
    pub destination: Destination,
    /// Start a new file after this many rows (directories only).
    pub max_rows: u64,
    /// Start a new file once one has this many bytes (directories only).
    pub max_bytes: Option<u64>,
    /// Finish a file at most this long after its first row arrived (directories only).
    pub max_age: Option<Duration>,
    /// Hive-style partition directories (directories only).
    pub partition: Option<Partitioning>,
    /// Rows per row group (each sorted by time).
    pub row_group_rows: usize,
    /// zstd compression level, 1 to 22.
    pub zstd_level: i32,
    /// What a directory store keeps (directories only).
    pub retention: retention::Policy,
    /// Where to write the packer's counters as JSON, about once a second.
    pub stats: Option<PathBuf>,
    /// A directory store that is full or read-only is waited for, its rows counted as lost
    /// meanwhile ([`outage`]), instead of ending the packer.
    pub keep_going: bool,
    /// `lost` rows (cause, events) to write into the first set: losses a supervisor counted
    /// before this packer started.
    pub lost: Vec<(String, u64)>,
}

/// What the reading thread hands over.
enum Incoming {
    Batch(RecordBatch),
    End,
    Failed(ContractError),
}

/// Pack the stream at `input` (stdin for none or `-`) as `options` say: the destination is
/// made ready before the input is read, ^C is ignored and SIGTERM finishes the current file.
/// Exit status 0 only once every file is on disk.
pub fn pack(input: Option<&Path>, options: &Options) -> anyhow::Result<ExitCode> {
    stacks_stream::cli::ignore_sigint();
    signals::install_sigterm().context("installing the SIGTERM handler")?;
    let owner = Owner::from_sudo(TOOL);
    // The store is opened (its URL and configuration checked) before anything is read; the
    // uploader starts at once with what an earlier packer left in the spool.
    let uploader = match &options.destination {
        Destination::Store {
            url,
            spool,
            spool_max,
            wait,
        } => Some((
            upload::StoreDest::open(url)?,
            spool.clone(),
            *spool_max,
            *wait,
        )),
        _ => None,
    };
    let (target, shown, limits) = prepare_target(options, owner.as_ref())?;
    let uploader = uploader
        .map(|(dest, spool, spool_max, wait)| {
            let shown = dest.shown.clone();
            let opts = upload::UploadOptions { spool_max, wait };
            upload::Uploader::start(dest, spool.clone(), opts)
                .map(|u| (u, shown, spool))
                .context("starting the uploader")
        })
        .transpose()?;

    let cut = Arc::new(AtomicBool::new(false));
    let input = match open_input(input, cut.clone()) {
        Ok(input) => input,
        Err(_) if cut.load(Ordering::SeqCst) => {
            eprintln!("{TOOL}: terminated (SIGTERM) before the stream began; nothing written");
            finish_upload(uploader);
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => {
            // What earlier packers left in the spool still goes up.
            finish_upload(uploader);
            return Err(e);
        }
    };
    let packed = pack_into(input, target, limits, options, owner, &cut);
    if let Ok((summary, _)) = &packed {
        eprintln!("{}", describe(summary, &shown));
    }
    // Whatever happened to the stream, the finished pairs go up.
    finish_upload(uploader);
    let (_, upstream) = packed?;
    match upstream {
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Upload what is left in the spool (bounded by the uploader's wait) and report.
fn finish_upload(uploader: Option<(upload::Uploader, String, PathBuf)>) {
    if let Some((uploader, shown, spool)) = uploader {
        eprintln!("{}", upload::describe(&uploader.finish(), &shown, &spool));
    }
}

/// Pack `input`, already open, as `options` say (without the signal handling and sudo
/// ownership of [`pack`]); an input that breaks off still has its rows finalized, and the
/// error is returned after.
pub fn pack_stream(input: InputStream, options: &Options) -> anyhow::Result<Summary> {
    let (target, _, limits) = prepare_target(options, None)?;
    let (summary, upstream) = pack_into(
        input,
        target,
        limits,
        options,
        None,
        &AtomicBool::new(false),
    )?;
    match upstream {
        Some(e) => Err(e.into()),
        None => Ok(summary),
    }
}

/// Check the input's schema, then pack it into `target`; returns what was written and the
/// input's error, if it broke off (`cut`: the break was ours, SIGTERM).
fn pack_into(
    input: InputStream,
    target: Target,
    limits: Limits,
    options: &Options,
    owner: Option<Owner>,
    cut: &AtomicBool,
) -> anyhow::Result<(Summary, Option<ContractError>)> {
    let incoming = input.schema();
    let input_name = input.name().to_string();
    // A store holds stacks rows only: one foreign file would break every query over it.
    stacks_stream::check_row_stream(&incoming, input.name())?;
    storable(&incoming).map_err(|detail| PackError::Schema {
        input: input.name().to_string(),
        detail,
    })?;
    ArrowSchemaConverter::new()
        .convert(&incoming)
        .map_err(|e| PackError::Schema {
            input: input.name().to_string(),
            detail: error::parquet_detail(&e),
        })?;
    if options.partition.is_some() && !has_time_column(&incoming) {
        return Err(PackError::Schema {
            input: input.name().to_string(),
            detail: "--partition needs a `time` column of type Timestamp(ns)".into(),
        }
        .into());
    }
    // Batches are split into samples rows and distinct stacks on the reading thread.
    let schema = stamped_schema(&incoming);
    let samples = stacks_store::samples_schema(&schema);
    let props = writer_properties(&samples, options.zstd_level, limits.group_rows)?;
    let levels = levels::Levels::new(&schema, options.zstd_level)?;
    let mut packer = Packer::new(
        target,
        &schema,
        props,
        levels,
        limits,
        options.partition,
        owner,
    )?;
    let splitter = packer.splitter();
    let mut upkeep = upkeep::Upkeep::new(
        packer_dir(options),
        options.retention,
        options.stats.as_deref(),
    );
    if !options.lost.is_empty() {
        // Before the first row of the stream: in the first set, whatever the stream holds.
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let lost: Vec<(String, i64)> = options
            .lost
            .iter()
            .map(|(c, n)| (c.clone(), i64::try_from(*n).unwrap_or(i64::MAX)))
            .collect();
        let rows = outage::lost_rows(&schema, at, &lost).map_err(|e| PackError::Schema {
            input: input_name.clone(),
            detail: e.to_string(),
        })?;
        upkeep.wrote_lost_rows(rows.num_rows() as u64);
        packer.write(&rows)?;
    }

    // Reading happens on its own thread so that idle input still lets files reach --max-age.
    let (tx, rx) = mpsc::sync_channel::<Incoming>(2);
    std::thread::Builder::new()
        .name("read".into())
        .spawn(move || read_all(input, splitter, tx))
        .context("starting the reading thread")?;

    let mut upstream = None;
    // The directory store being waited for (`--keep-going`).
    let mut down: Option<outage::Outage> = None;
    let keep_going = options.keep_going.then(|| packer_dir(options)).flatten();
    // A write failed: with --keep-going and a store that is full or read-only, the set is
    // given up and its rows counted, else the error ends the packer.
    let failed = |e: PackError,
                  packer: &mut Packer,
                  upkeep: &mut upkeep::Upkeep,
                  down: &mut Option<outage::Outage>|
     -> Result<(), PackError> {
        let (Some(dir), Some(why)) = (&keep_going, outage::Why::of(&e)) else {
            return Err(e);
        };
        let given_up = packer.abandon();
        upkeep.dropped(why.cause(), &given_up);
        upkeep.unwritable(Some(why.cause()));
        *down = Some(outage::Outage::begin(
            dir,
            why,
            &e,
            given_up,
            packer.largest_set(),
        ));
        Ok(())
    };
    loop {
        if signals::terminated() {
            // What was already read is accepted: keep it.
            while let Ok(Incoming::Batch(batch)) = rx.try_recv() {
                upkeep.count(&batch);
                if let Err(e) = take(&batch, &mut packer, &mut upkeep, &mut down) {
                    failed(e, &mut packer, &mut upkeep, &mut down)?;
                }
            }
            break;
        }
        if down.as_mut().is_some_and(|o| o.over())
            && let Some(o) = down.take()
        {
            upkeep.unwritable(None);
            let lost = o.end(&schema).map_err(|e| PackError::Schema {
                input: input_name.clone(),
                detail: e.to_string(),
            })?;
            upkeep.wrote_lost_rows(lost.num_rows() as u64);
            if let Err(e) = packer.write(&lost) {
                failed(e, &mut packer, &mut upkeep, &mut down)?;
            }
        }
        let (sets, bytes) = packer.written();
        upkeep.tick(sets, bytes, false, || packer.unfinished());
        match rx.recv_timeout(TICK) {
            Ok(Incoming::Batch(batch)) => {
                upkeep.count(&batch);
                if let Err(e) = take(&batch, &mut packer, &mut upkeep, &mut down) {
                    failed(e, &mut packer, &mut upkeep, &mut down)?;
                }
            }
            Ok(Incoming::End) | Err(RecvTimeoutError::Disconnected) => break,
            Ok(Incoming::Failed(_)) if cut.load(Ordering::SeqCst) => break,
            Ok(Incoming::Failed(e)) => {
                upstream = Some(e);
                break;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if down.is_none()
            && let Err(e) = packer.tick(Instant::now())
        {
            failed(e, &mut packer, &mut upkeep, &mut down)?;
        }
    }
    if signals::terminated() {
        eprintln!(
            "{TOOL}: terminated (SIGTERM): finishing with the {} rows received",
            packer.rows()
        );
    }
    if let Some(o) = &down {
        let rows: u64 = o.dropped.values().map(|v| v.0).sum();
        let (sets, bytes) = packer.written();
        upkeep.tick(sets, bytes, true, || packer.unfinished());
        return Err(PackError::Write {
            path: keep_going.unwrap_or_default().display().to_string(),
            detail: format!(
                "the store could not be written until the input ended ({}): {rows} rows dropped, counted in the --stats as lost",
                o.why.cause()
            ),
        }
        .into());
    }
    let summary = packer.finish()?;
    upkeep.tick(summary.files, summary.bytes, true, outage::Tally::default);
    Ok((summary, upstream))
}

/// A batch of samples rows taken: written, or counted and dropped while the store is down.
fn take(
    batch: &RecordBatch,
    packer: &mut Packer,
    upkeep: &mut upkeep::Upkeep,
    down: &mut Option<outage::Outage>,
) -> Result<(), PackError> {
    match down {
        Some(o) => {
            let mut t = outage::Tally::default();
            outage::tally(batch, &mut t);
            upkeep.dropped(o.why.cause(), &t);
            o.drop_rows(batch);
            packer.discard_samples();
            Ok(())
        }
        None => packer.write_samples(batch),
    }
}

/// The directory a directory store is written to.
fn packer_dir(options: &Options) -> Option<PathBuf> {
    match &options.destination {
        Destination::Dir(dir) => Some(dir.clone()),
        _ => None,
    }
}

/// Whether `schema` has a `time` column of type Timestamp(ns), as `--partition` needs.
pub fn has_time_column(schema: &Schema) -> bool {
    order::time_column(schema).is_some()
}

/// Read every batch of `input`, split it into samples rows (remembering its new stacks) and
/// send those on; stops when the receiver is gone.
fn read_all(mut input: InputStream, splitter: SharedSplitter, tx: mpsc::SyncSender<Incoming>) {
    loop {
        let msg = match input.next_batch() {
            Ok(Some(batch)) => match pair::lock(&splitter)
                .split(&batch)
                .and_then(|samples| detach(&samples))
            {
                Ok(samples) => Incoming::Batch(samples),
                Err(e) => Incoming::Failed(ContractError::Invalid {
                    input: input.name().to_string(),
                    detail: format!("splitting the stacks out: {e}"),
                }),
            },
            Ok(None) => Incoming::End,
            Err(e) => Incoming::Failed(e),
        };
        let last = !matches!(msg, Incoming::Batch(_));
        if tx.send(msg).is_err() || last {
            return;
        }
    }
}

/// `batch` with its columns copied into buffers of their own. Arrays read from an IPC stream
/// are views of the whole message, stacks included: kept as they are, a row group of samples
/// rows would hold every stack of their batches in memory.
fn detach(batch: &RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let all = UInt32Array::from_iter_values(0..batch.num_rows() as u32);
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &all, None))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(batch.schema(), columns)
}

/// Create or check the destination before any input is read, so a bad path fails at once.
fn prepare_target(
    options: &Options,
    owner: Option<&Owner>,
) -> Result<(Target, String, Limits), PackError> {
    let group_rows = options.row_group_rows;
    let dir = match &options.destination {
        Destination::Dir(dir) => dir,
        Destination::Store { spool, .. } => spool,
        Destination::File(path) => {
            if path.is_dir() {
                return Err(PackError::Create {
                    path: path.display().to_string(),
                    err: io::Error::from(io::ErrorKind::IsADirectory),
                });
            }
            fsutil::check_writable(&fsutil::parent_dir(path))?;
            let samples = pair_of(path);
            let shown = format!(
                "{} + {} + {}",
                samples.display(),
                stacks_store::stacks_path(&samples).display(),
                stacks_store::frames_path(&samples).display()
            );
            let target = Target::File(path.clone());
            return Ok((target, shown, Limits::single_file(group_rows)));
        }
    };
    for created in fsutil::create_dir_tracked(dir)? {
        if let Some(owner) = owner {
            owner.chown_path(&created);
        }
    }
    fsutil::check_writable(dir)?;
    let namer = Namer::for_this_process();
    let removed = stale::clean(dir, namer.host());
    if matches!(options.destination, Destination::Store { .. }) {
        upload::prune_empty(dir);
    }
    if removed > 0 {
        eprintln!(
            "{TOOL}: removed {removed} unfinished file(s) left in {} by packers that were killed",
            dir.display()
        );
    }
    let target = Target::Dir {
        dir: dir.clone(),
        namer,
    };
    let limits = Limits {
        max_rows: options.max_rows,
        max_bytes: options.max_bytes,
        max_age: options.max_age,
        group_rows,
    };
    let shown = match &options.destination {
        Destination::Store { .. } => format!("the spool {}", dir.display()),
        _ => dir.display().to_string(),
    };
    Ok((target, shown, limits))
}

/// Open `path` (stdin for none or `-`) so that SIGTERM ends it cleanly.
fn open_input(path: Option<&Path>, cut: Arc<AtomicBool>) -> anyhow::Result<InputStream> {
    match path {
        Some(p) if !stacks_stream::cli::is_std(path) => {
            let name = p.display().to_string();
            let file = File::open(p).map_err(|err| PackError::Open {
                path: name.clone(),
                err,
            })?;
            Ok(InputStream::new(
                &name,
                Box::new(StopOnTerm::new(file, cut)),
            )?)
        }
        _ => {
            stacks_stream::cli::refuse_tty_stdin(TOOL)?;
            Ok(InputStream::new(
                "stdin",
                Box::new(StopOnTerm::new(io::stdin(), cut)),
            )?)
        }
    }
}

/// The stream schema with `stacks-pack` added to `stacks.tools` and `stacks.schema_version`
/// the current one (the pair layout is version 2's, whatever version the input was);
/// `stacks.stage` stays as received (and absent if it was absent).
pub fn stamped_schema(schema: &Schema) -> SchemaRef {
    let mut md = schema.metadata().clone();
    let stage = md.get(meta::STAGE).cloned();
    md.insert(
        meta::SCHEMA_VERSION.into(),
        stacks_stream::SCHEMA_VERSION.into(),
    );
    stacks_stream::stamp(&mut md, TOOL, VERSION, stage.as_deref().unwrap_or_default());
    if stage.is_none() {
        md.remove(meta::STAGE);
    }
    // The vDSO image is what names a raw stream's vDSO frames; a symbolized stream's frames
    // are named, and the image (about 16 KB of hex, twice in a footer) was most of a short
    // recording's samples file.
    if stage.as_deref() == Some(stacks_stream::stage::SYMBOLIZED) {
        md.remove(meta::VDSO);
    }
    Arc::new(Schema::new_with_metadata(schema.fields().clone(), md))
}

/// What the Parquet writer would panic on instead of refusing: a column name given twice (per-
/// column settings are by name) and union types (not representable in Parquet).
pub(crate) fn storable(schema: &Schema) -> Result<(), String> {
    fn has_union(dt: &arrow_schema::DataType) -> bool {
        use arrow_schema::DataType::*;
        match dt {
            Union(..) => true,
            List(f)
            | LargeList(f)
            | FixedSizeList(f, _)
            | ListView(f)
            | LargeListView(f)
            | Map(f, _) => has_union(f.data_type()),
            Struct(fields) => fields.iter().any(|f| has_union(f.data_type())),
            Dictionary(_, v) => has_union(v),
            RunEndEncoded(_, v) => has_union(v.data_type()),
            _ => false,
        }
    }
    let mut seen = std::collections::HashSet::new();
    for f in schema.fields() {
        if !seen.insert(f.name().as_str()) {
            return Err(format!("column `{}` appears twice", f.name()));
        }
        if has_union(f.data_type()) {
            return Err(format!(
                "column `{}` holds a union type, which Parquet cannot store",
                f.name()
            ));
        }
    }
    Ok(())
}

/// How rows are encoded: zstd; dictionaries for every column (strings, and the fields of
/// nested stacks, which repeat from sample to sample); `time` delta-encoded (it grows within a
/// sorted row group) with page-level statistics and a page index, every other column with
/// chunk statistics; each row group declared sorted by `time`; the `stacks.*` keys as Parquet
/// key-value metadata (the writer adds the whole Arrow schema as `ARROW:schema`).
pub fn writer_properties(
    schema: &Schema,
    zstd_level: i32,
    group_rows: usize,
) -> Result<WriterProperties, PackError> {
    let level = ZstdLevel::try_new(zstd_level).map_err(|e| PackError::Schema {
        input: "--zstd-level".into(),
        detail: error::parquet_detail(&e),
    })?;
    let kv = stacks_kv(schema);
    let mut builder = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(group_rows.max(1)))
        .set_key_value_metadata(Some(kv));
    if order::time_column(schema).is_some() {
        let time = ColumnPath::from(stacks_stream::col::TIME);
        builder = builder
            .set_column_dictionary_enabled(time.clone(), false)
            .set_column_encoding(time.clone(), Encoding::DELTA_BINARY_PACKED)
            .set_column_statistics_enabled(time, EnabledStatistics::Page);
        if let Some(leaf) = time_leaf(schema) {
            builder = builder.set_sorting_columns(Some(vec![SortingColumn {
                column_idx: leaf,
                descending: false,
                nulls_first: true,
            }]));
        }
    }
    Ok(builder.build())
}

/// The `stacks.*` metadata of `schema`, sorted by key, as Parquet key-value metadata.
pub(crate) fn stacks_kv(schema: &Schema) -> Vec<KeyValue> {
    let mut kv: Vec<KeyValue> = schema
        .metadata()
        .iter()
        .filter(|(k, _)| stacks_stream::meta::is_stacks_key(k))
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    kv.sort_by(|a, b| a.key.cmp(&b.key));
    kv
}

/// Index of the `time` leaf column in the Parquet schema of `schema`.
fn time_leaf(schema: &Schema) -> Option<i32> {
    let descr = ArrowSchemaConverter::new().convert(schema).ok()?;
    let leaf = (0..descr.num_columns())
        .find(|&i| descr.column(i).path().parts() == [stacks_stream::col::TIME])?;
    i32::try_from(leaf).ok()
}

/// The closing stderr line.
pub fn describe(summary: &Summary, dest: &str) -> String {
    if summary.files == 0 {
        return format!("{TOOL}: the stream had no rows; no file written to {dest}");
    }
    let plural = |n: u64, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    format!(
        "{TOOL}: {} in {} ({} bytes; {}) to {dest}",
        plural(summary.rows, "row"),
        plural(summary.files, "file set"),
        summary.bytes,
        match summary.distinct_estimated {
            true => format!("about {}", plural(summary.distinct, "distinct stack")),
            false => plural(summary.distinct, "distinct stack"),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};
    use std::collections::HashMap;

    #[test]
    fn quantities_use_the_shared_grammar() {
        let parse = |flag: &str, v: &str| Args::try_parse_from(["stacks-pack", "d", flag, v]);
        for (text, want) in [
            ("90", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("250ms", Duration::from_millis(250)),
            ("10m", Duration::from_secs(600)),
            ("1d", Duration::from_secs(86_400)),
        ] {
            assert_eq!(
                parse("--max-age", text).unwrap().max_age,
                Some(want),
                "{text}"
            );
        }
        for bad in ["0", "-1s", "5x", "soon"] {
            assert!(parse("--max-age", bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse("--max-bytes", "64M").unwrap().max_bytes,
            Some(64 << 20)
        );
        assert!(parse("--max-bytes", "0").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
        assert!(Args::try_parse_from(["stacks-pack"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "d", "-o", "f.parquet"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "-o", "f", "--max-rows", "5"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "d", "--max-rows", "0"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "d", "--zstd-level", "23"]).is_err());
        for flag in [
            ["--max-bytes", "1M"],
            ["--max-age", "1s"],
            ["--partition", "date"],
        ] {
            let argv = ["stacks-pack", "-o", "f", flag[0], flag[1]];
            assert!(Args::try_parse_from(argv).is_err(), "{argv:?}");
        }
        assert!(Args::try_parse_from(["stacks-pack", "d", "--max-bytes", "lots"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "d", "--max-age", "0s"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "-o", "f", "--retain", "1d"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "d", "--max-total", "0"]).is_err());
        assert!(Args::try_parse_from(["stacks-pack", "d", "--retain", "a week"]).is_err());
        let a = Args::try_parse_from(["stacks-pack", "d", "--retain", "7d", "--max-total", "20G"])
            .unwrap();
        assert_eq!(
            a.options().retention,
            retention::Policy {
                retain: Some(Duration::from_secs(7 * 86_400)),
                max_total: Some(20 << 30),
            }
        );
        let url = Args::try_parse_from(["stacks-pack", "s3://b/p", "--retain", "1d"]).unwrap();
        let refused = cli::run_with(url).unwrap_err().to_string();
        assert_eq!(
            refused,
            "--retain is for a directory store, not a store URL"
        );
        let a = Args::try_parse_from(["stacks-pack", "d", "-i", "x"]).unwrap();
        assert_eq!((a.max_rows, a.zstd_level), (1_000_000, 3));
        assert_eq!((a.max_bytes, a.max_age, a.partition), (None, None, None));
        let a = Args::try_parse_from([
            "stacks-pack",
            "d",
            "--max-bytes",
            "64M",
            "--max-age",
            "90s",
            "--partition",
            "date",
        ])
        .unwrap();
        assert_eq!(a.max_bytes, Some(64 << 20));
        assert_eq!(a.max_age, Some(Duration::from_secs(90)));
        assert_eq!(a.partition, Some(Partitioning::Date));
    }

    #[test]
    fn stamping_keeps_stage_and_appends_tool() {
        let mut md = HashMap::new();
        md.insert(meta::STAGE.to_string(), "symbolized".to_string());
        md.insert(meta::TOOLS.to_string(), "stacks-record 0.1.0".to_string());
        md.insert("other".to_string(), "x".to_string());
        md.insert(meta::SCHEMA_VERSION.to_string(), "1".to_string());
        let s = stamped_schema(&stacks_stream::symbolized_schema(md));
        assert_eq!(s.metadata()[meta::STAGE], "symbolized");
        assert_eq!(
            s.metadata()[meta::SCHEMA_VERSION],
            stacks_stream::SCHEMA_VERSION,
            "stored in the current layout"
        );
        assert_eq!(
            s.metadata()[meta::TOOLS],
            format!("stacks-record 0.1.0,stacks-pack {VERSION}")
        );
        let props = writer_properties(&s, 3, 10).unwrap();
        assert_eq!(props.max_row_group_row_count(), Some(10));
        let time = ColumnPath::from("time");
        assert_eq!(props.statistics_enabled(&time), EnabledStatistics::Page);
        assert!(!props.dictionary_enabled(&time));
        assert!(props.dictionary_enabled(&ColumnPath::from("comm")));
        let sorted = props.sorting_columns().unwrap();
        assert_eq!((sorted[0].column_idx, sorted[0].descending), (0, false));
        let keys: Vec<_> = props
            .key_value_metadata()
            .unwrap()
            .iter()
            .map(|kv| kv.key.as_str())
            .collect();
        assert!(
            keys.contains(&meta::TOOLS) && !keys.contains(&"other"),
            "{keys:?}"
        );

        let bare = stamped_schema(&Schema::empty());
        assert!(!bare.metadata().contains_key(meta::STAGE));
        let bare_props = writer_properties(&bare, 3, MAX_ROW_GROUP_ROWS).unwrap();
        assert!(
            bare_props.sorting_columns().is_none(),
            "no time column, no order"
        );
    }

    #[test]
    fn single_file_names_a_pair() {
        for (given, samples) in [
            ("d/x.parquet", "d/x.samples.parquet"),
            ("d/x", "d/x.samples.parquet"),
            ("x.samples.parquet", "x.samples.parquet"),
            ("x.stacks.parquet", "x.samples.parquet"),
            ("x.arrow", "x.arrow.samples.parquet"),
        ] {
            let got = pair_of(Path::new(given));
            assert_eq!(got, Path::new(samples), "{given}");
            assert_eq!(
                stacks_store::file_kind(&stacks_store::stacks_path(&got)),
                Some(stacks_store::FileKind::Stacks)
            );
        }
    }

    #[test]
    fn summary_line() {
        let s = Summary {
            rows: 12345,
            files: 1,
            bytes: 456789,
            stacks: 17,
            distinct: 17,
            distinct_estimated: false,
            paths: Vec::new(),
        };
        assert_eq!(
            describe(&s, "out/"),
            "stacks-pack: 12345 rows in 1 file set (456789 bytes; 17 distinct stacks) to out/"
        );
        let many = Summary {
            distinct: 123456,
            distinct_estimated: true,
            ..s
        };
        assert!(describe(&many, "out/").contains("(456789 bytes; about 123456 distinct stacks)"));
        assert!(describe(&Summary::default(), "out/").contains("no rows"));
    }
}
