//! The `stacks-query` command line: parse the arguments, resolve the query and its
//! parameters, open the store, and run it with [`stacks_sql::query`].

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;

use stacks_sql::cluster_watch::{Watch, unreachable};
use stacks_sql::output::Format;
use stacks_sql::{
    Data, bind, cluster_session, first_batch, open, params, queries, query, session, write_result,
};

use crate::TOOL;

/// How long a query that an executor's death failed waits for the scheduler to take the
/// executor for dead before it runs again (stacks-scheduler's timeout is 5 s, Ballista's 180 s:
/// past this the error stands).
const EXECUTOR_LOSS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Command line of `stacks-query`.
#[derive(Debug, Parser)]
#[command(
    name = "stacks-query",
    version,
    about = "Run SQL over a directory of stacks Parquet files (tables `stacks`, `samples`, `stack_table`)",
    after_help = "Examples:\n  stacks-query cpu | stacks-pprof > cpu.pb.gz\n  \
                  stacks-query offcpu --param comm=nginx --param from=2025-01-02T03:00:00Z | stacks-pprof > off.pb.gz\n  \
                  stacks-query timeline --param kind=block --param interval=100ms -f csv\n  \
                  stacks-query -c \"SELECT stack_fold(stack) AS folded, count(*) AS samples FROM stacks GROUP BY 1\"\n  \
                  stacks-query -c \"SELECT t.leaf, sum(s.value) AS ns FROM samples s JOIN stack_table t USING (stack_id) GROUP BY 1\"\n  \
                  stacks-query --list\n\n\
                  Queries and functions: docs/queries.md"
)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["query", "sql", "list"]))]
pub struct Args {
    /// Directory of Parquet files written by stacks-pack, searched recursively (names starting
    /// with `.` are unfinished files and skipped), or a single Parquet file; or the URL of a
    /// store stacks-pack uploads to (s3://BUCKET/PREFIX, gs://…, az://…, file:///…), where
    /// `date` and `hour` are columns too
    #[arg(
        short = 'd',
        long = "dir",
        value_name = "DIR|URL",
        env = "STACKS_DATA",
        default_value = "out"
    )]
    pub dir: String,

    #[command(flatten)]
    pub store: stacks_sql::args::StoreArgs,

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

    /// Memory for query execution: sorts and aggregations beyond it spill to temporary files
    #[arg(long, value_name = "SIZE", value_parser = parse_size,
        help = format!("Memory for query execution ({}): sorts and aggregations beyond it spill to temporary files [default: unlimited]", stacks_stream::cli::SIZE_EXAMPLES))]
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
    run_with(stacks_stream::cli::parse_args::<Args>(TOOL))
}

/// Run the query `args` name.
pub fn run_with(args: Args) -> Result<ExitCode> {
    if args.list {
        queries::list(&mut std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    let q = match (&args.query, &args.sql) {
        (_, Some(sql)) => queries::inline(sql),
        (Some(q), None) => queries::resolve(q)?,
        (None, None) => anyhow::bail!("give a QUERY or -c SQL (see --help)"),
    };
    let values = bind(&q, &args.params, args.sql.is_some())?;
    let format = args
        .format
        .unwrap_or(if stacks_stream::cli::stdout_is_tty() {
            Format::Table
        } else {
            Format::Arrow
        });

    let data = Data::parse(&args.dir);
    args.store.check_cluster(&data)?;
    let window = args.store.window()?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the query runtime")?;
    runtime.block_on(async {
        let ctx = match &args.store.cluster {
            Some(url) => cluster_session(url, args.memory_limit).await?,
            None => session(args.memory_limit)?,
        };
        let mut metadata = open(&ctx, &data, &window).await?;
        stacks_stream::stamp(
            &mut metadata,
            TOOL,
            env!("CARGO_PKG_VERSION"),
            stacks_stream::stage::QUERY,
        );
        let Some(url) = args.store.cluster.as_deref() else {
            return query(&ctx, &q, values, format, metadata).await;
        };
        // On a cluster: an executor that dies under the query fails it before the scheduler
        // takes the executor for dead; once it has, the query runs again on the others
        // (nothing is written before the first batch, so nothing twice).
        let watch = Watch::start(url, TOOL);
        let started = match first_batch(&ctx, &q, values.clone()).await {
            Err(e) if unreachable(&e) && watch.lost_one(EXECUTOR_LOSS_PATIENCE).await => {
                eprintln!("{TOOL}: running the query again without the lost executor ({e:#})");
                first_batch(&ctx, &q, values).await?
            }
            started => started?,
        };
        write_result(started, &q, format, metadata).await
    })?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_take_times_before_now() {
        let parse = |a: &[&str]| {
            let mut argv = vec!["stacks-query", "--list"];
            argv.extend_from_slice(a);
            Args::try_parse_from(argv)
        };
        let before = stacks_stream::time::now_ns();
        let args = parse(&["--from", "-1h", "--to", "now"]).unwrap();
        let after = stacks_stream::time::now_ns();
        let (from, to) = (args.store.from.unwrap(), args.store.to.unwrap());
        assert!(from >= before - 3_600_000_000_000 && from <= after - 3_600_000_000_000);
        assert!(to >= before && to <= after);
        let at = parse(&["--from", "2026-11-23T07:00:00Z"])
            .unwrap()
            .store
            .from;
        assert_eq!(at, Some(1_795_417_200_000_000_000));
        assert!(parse(&["--to", "soon"]).is_err());
    }

    #[test]
    fn memory_limit_uses_the_shared_size_grammar() {
        let parse = |v: &str| Args::try_parse_from(["stacks-query", "--list", "--memory-limit", v]);
        assert_eq!(parse("64M").unwrap().memory_limit, Some(64 << 20));
        assert_eq!(parse("4096").unwrap().memory_limit, Some(4096));
        assert!(parse("0").is_err() && parse("5X").is_err());
    }
}
