//! The command-line flags of every tool that reads a store (stacks-query, stacks-top): which
//! rows (`--from`/`--to`) and where the queries run (`--cluster`), with their checks.

use anyhow::{Result, bail};

use crate::Data;
use crate::window::Window;

/// `--from`, `--to` and `--cluster`, flattened into a tool's arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StoreArgs {
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true,
        help = format!("Only rows at or after TIME ({}; or {}); over a store URL, only the hour prefixes of --from/--to are listed", stacks_stream::time::TIME_EXAMPLES, stacks_stream::time::AGO_EXAMPLES))]
    pub from: Option<i64>,

    /// Only rows before this time (as --from)
    #[arg(long, value_name = "TIME", value_parser = parse_time, allow_hyphen_values = true)]
    pub to: Option<i64>,

    /// Run the queries on the Apache DataFusion Ballista cluster whose scheduler is at
    /// df://HOST:PORT (stacks-scheduler), reading a store URL (-d); the results are the same
    #[arg(long, value_name = "df://HOST:PORT", value_parser = crate::parse_cluster)]
    pub cluster: Option<String>,
}

/// A time, in the shared grammar, or before now (`now`, `-1h`).
fn parse_time(text: &str) -> std::result::Result<i64, String> {
    stacks_stream::time::parse_time_ago(text, stacks_stream::time::now_ns())
}

impl StoreArgs {
    /// The window of `--from`/`--to`; an error when it is empty.
    pub fn window(&self) -> Result<Window> {
        if let (Some(from), Some(to)) = (self.from, self.to)
            && from >= to
        {
            bail!("--from must be before --to");
        }
        Ok(Window {
            from: self.from,
            to: self.to,
        })
    }

    /// Refuse `--cluster` over a directory: the executors elsewhere cannot read it.
    pub fn check_cluster(&self, data: &Data) -> Result<()> {
        if let (Some(cluster), Data::Dir(dir)) = (&self.cluster, data) {
            bail!(
                "--cluster {cluster}: the executors read a store URL, not the directory {}: give \
                 -d s3://BUCKET/PREFIX (or file:///PATH of a store stacks-pack uploaded to)",
                dir.display()
            );
        }
        Ok(())
    }
}
