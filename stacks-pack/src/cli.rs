//! The `stacks-pack` command line: parse the arguments into [`crate::Options`] and pack with
//! [`crate::pack`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser};

use crate::{Destination, MAX_ROW_GROUP_ROWS, Options, Partitioning, TOOL, pack};

/// Command line of `stacks-pack`.
#[derive(Debug, Parser)]
#[command(
    name = "stacks-pack",
    version,
    about = "Write a stacks stream to crash-safe, rotated Parquet files",
    long_about = "Write a stacks stream to crash-safe, rotated Parquet files.\n\n\
        Reads an Arrow IPC stream (stdin by default), e.g.\n  \
        stacks-record … | stacks-symbolize | stacks-pack out/\n\
        and writes zstd-compressed Parquet file sets named \
        stacks-<UTC time of the first row>-<host>-<pid>-<seq>.{samples,stacks,frames}.parquet \
        into DIR: the samples (every column but the stacks, plus a 128-bit stack_id), each \
        distinct stack of those samples once (the ids of its frames) and each distinct frame \
        of those stacks once. A new set starts when one reaches --max-rows, --max-bytes or \
        --max-age; with -o FILE.parquet, exactly one set, FILE.samples.parquet + \
        FILE.stacks.parquet + FILE.frames.parquet. Row groups are sorted by time. Files only \
        appear once complete (written as .NAME.tmp, fsynced, renamed; frames first, samples \
        last). ^C is ignored (the stream's end finishes the job); SIGTERM finishes the current \
        set and exits."
)]
#[command(group(ArgGroup::new("destination").required(true).args(["dir", "output"])))]
pub struct Args {
    /// Directory for the Parquet files (created, with parents, if missing), or an object
    /// store URL: s3://BUCKET/PREFIX, gs://…, az://…, file:///… (credentials and endpoint from
    /// the usual environment variables: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ENDPOINT, AWS_ALLOW_HTTP, GOOGLE_*, AZURE_*). A store gets the file sets under
    /// PREFIX/date=YYYY-MM-DD/hour=HH/host=NAME/, each uploaded once finished in the --spool
    /// directory, the samples file last
    #[arg(value_name = "DIR|URL")]
    pub dir: Option<PathBuf>,

    /// With a store URL: the local directory finished file sets wait in until uploaded (kept
    /// across runs: a later stacks-pack with the same spool uploads what is left) [default:
    /// /var/tmp/stacks-spool/<the URL, sanitized>]
    #[arg(long, value_name = "DIR")]
    pub spool: Option<PathBuf>,

    /// With a store URL: bytes of finished file sets the spool may hold while the store cannot be
    /// reached; past it the oldest are dropped (counted and reported) [default: 4G]
    #[arg(long, value_name = "SIZE", value_parser = stacks_stream::cli::parse_size)]
    pub spool_max: Option<u64>,

    /// With a store URL: after the input ends, how long to keep retrying uploads before
    /// leaving the rest in the spool [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = stacks_stream::cli::parse_positive_duration)]
    pub upload_wait: Option<Duration>,

    /// Write everything to one file set instead: FILE.samples.parquet, FILE.stacks.parquet
    /// and FILE.frames.parquet (each replaced atomically if it exists)
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE.parquet",
        conflicts_with_all = ["max_rows", "max_bytes", "max_age", "partition"]
    )]
    pub output: Option<PathBuf>,

    /// Arrow IPC stream to read (`-` or absent: stdin)
    #[arg(short = 'i', long = "input", value_name = "INPUT")]
    pub input: Option<PathBuf>,

    /// Start a new file set after this many rows
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1_000_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub max_rows: u64,

    /// Start a new file set once its samples file has this many bytes (checked after each row
    /// group)
    #[arg(
        long,
        value_name = "SIZE",
        value_parser = stacks_stream::cli::parse_size,
        help = format!("Start a new file set once its samples file has this many bytes (checked after each row group), {}", stacks_stream::cli::SIZE_EXAMPLES)
    )]
    pub max_bytes: Option<u64>,

    /// Finish a file at most this long after its first row arrived, even if input is idle
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = stacks_stream::cli::parse_positive_duration,
        help = format!("Finish a file at most this long after its first row arrived, even if input is idle, {}", stacks_stream::cli::DURATION_EXAMPLES)
    )]
    pub max_age: Option<Duration>,

    /// Put files in hive-style partition directories: `date` = date=YYYY-MM-DD/, `hour` =
    /// date=YYYY-MM-DD/hour=HH/ (UTC date and hour of each row's time; a store URL always
    /// partitions by hour)
    #[arg(long, value_enum, value_name = "BY")]
    pub partition: Option<Partitioning>,

    /// Delete file sets finished longer ago than this, oldest first, whole (the directory's
    /// every finished set, whichever packer wrote it; never the set being written)
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = stacks_stream::cli::parse_positive_duration,
        conflicts_with = "output"
    )]
    pub retain: Option<Duration>,

    /// Delete the oldest file sets, whole, while the directory's finished sets together hold
    /// more than this, never the newest (the set being written comes on top)
    #[arg(
        long,
        value_name = "SIZE",
        value_parser = stacks_stream::cli::parse_size,
        conflicts_with = "output"
    )]
    pub max_total: Option<u64>,

    /// Write the packer's counters (rows by kind, lost events by cause, sets and bytes
    /// written, in the store and deleted) to FILE as one JSON object, replaced atomically
    /// about once a second (docs/agent.md)
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,

    /// When the directory's file system is full or read-only, do not end: give up the set
    /// being written, count the rows that arrive and drop them until it can be written again
    /// (checked every second), then write them as `lost` rows (cause `store_full:KIND`,
    /// `store_read_only:KIND`) in the next set (stacks-agent runs the packer so)
    #[arg(long, conflicts_with = "output")]
    pub keep_going: bool,

    /// Write a `lost` row of CAUSE whose value is EVENTS into the first file set (its time
    /// when the packer started): events a supervisor counted as lost before this packer, such
    /// as stacks-agent's `stage_died:KIND` of a stage that died. Repeatable; they are rows of
    /// kind `lost` in --stats, not counted again in its `lost`
    #[arg(long = "lost", value_name = "CAUSE=EVENTS", value_parser = parse_lost)]
    pub lost: Vec<(String, u64)>,

    /// Rows per row group, or fewer when they hold 12 MiB in memory; each row group is sorted
    /// by time
    #[arg(
        long,
        value_name = "N",
        default_value_t = MAX_ROW_GROUP_ROWS as u64,
        value_parser = clap::value_parser!(u64).range(1..=(MAX_ROW_GROUP_ROWS as u64) * 8)
    )]
    pub row_group_rows: u64,

    /// zstd compression level, 1 (fast) to 22 (small)
    #[arg(
        long,
        value_name = "L",
        default_value_t = 3,
        value_parser = clap::value_parser!(i32).range(1..=22)
    )]
    pub zstd_level: i32,
}

/// Entry point of the binary: parse the command line and pack.
pub fn run() -> anyhow::Result<ExitCode> {
    run_with(stacks_stream::cli::parse_args::<Args>(TOOL))
}

/// Pack as `args` say.
pub fn run_with(args: Args) -> anyhow::Result<ExitCode> {
    let options = args.options();
    let store = matches!(options.destination, Destination::Store { .. });
    if store && args.partition == Some(Partitioning::Date) {
        anyhow::bail!("--partition date: a store URL is always partitioned by hour");
    }
    let spool_flags = [
        ("--spool", args.spool.is_some()),
        ("--spool-max", args.spool_max.is_some()),
        ("--upload-wait", args.upload_wait.is_some()),
    ];
    if store
        && let Some(flag) = [
            ("--retain", args.retain.is_some()),
            ("--max-total", args.max_total.is_some()),
        ]
        .iter()
        .find_map(|(flag, given)| given.then_some(flag))
    {
        anyhow::bail!("{flag} is for a directory store, not a store URL");
    }
    if let Some((flag, _)) = spool_flags.iter().find(|(_, given)| *given && !store) {
        anyhow::bail!(
            "{flag} is for a store URL (s3://…, gs://…, az://…, file://…), not a directory"
        );
    }
    pack(args.input.as_deref(), &options)
}

impl Args {
    /// What to pack into, and how.
    pub fn options(&self) -> Options {
        let destination = match (&self.dir, &self.output) {
            (Some(dir), _) => match dir.to_str().filter(|d| stacks_store::objstore::is_url(d)) {
                Some(url) => Destination::Store {
                    url: url.to_string(),
                    spool: self.spool.clone().unwrap_or_else(|| default_spool(url)),
                    spool_max: self.spool_max.unwrap_or(4 << 30),
                    wait: self.upload_wait.unwrap_or(Duration::from_secs(60)),
                },
                None => Destination::Dir(dir.clone()),
            },
            (None, output) => Destination::File(output.clone().unwrap_or_default()),
        };
        let partition = match destination {
            Destination::Store { .. } => Some(Partitioning::Hour),
            _ => self.partition,
        };
        Options {
            destination,
            max_rows: self.max_rows,
            max_bytes: self.max_bytes,
            max_age: self.max_age,
            partition,
            row_group_rows: usize::try_from(self.row_group_rows).unwrap_or(MAX_ROW_GROUP_ROWS),
            zstd_level: self.zstd_level,
            retention: crate::retention::Policy {
                retain: self.retain,
                max_total: self.max_total,
            },
            stats: self.stats.clone(),
            keep_going: self.keep_going,
            lost: self.lost.clone(),
        }
    }
}

/// `--lost CAUSE=EVENTS`: a cause (no control characters) and a positive count.
fn parse_lost(s: &str) -> Result<(String, u64), String> {
    let bad = || format!("`{s}`: CAUSE=EVENTS, such as stage_died:switch=120");
    let (cause, events) = s.rsplit_once('=').ok_or_else(bad)?;
    let events: u64 = events.trim().parse().map_err(|_| bad())?;
    if cause.is_empty() || cause.chars().any(char::is_control) || events == 0 {
        return Err(bad());
    }
    Ok((cause.to_string(), events))
}

/// The spool of a store URL when --spool is not given: one directory per URL.
fn default_spool(url: &str) -> PathBuf {
    PathBuf::from("/var/tmp/stacks-spool").join(crate::sanitize_host(url))
}
