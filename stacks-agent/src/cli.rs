//! The `stacks-agent` command line: flags over the configuration file, the checks made before
//! anything starts (configuration, the tools, the metrics address: exit status 2 and one line
//! when one fails), then the supervisor.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use crate::config::{self, Config, Keys, Targets};
use crate::stage::{self, Which};
use crate::supervise::{self, Plan};
use crate::{TOOL, metrics};

/// Command line of `stacks-agent`.
#[derive(Debug, Parser)]
#[command(
    name = "stacks-agent",
    version,
    about = "Always-on recording on a host: stacks-record | stacks-symbolize | stacks-pack, supervised",
    long_about = "Always-on recording on a host.\n\n\
        Runs stacks-record | stacks-symbolize | stacks-pack as child processes joined by pipes \
        (the tools are found next to this executable, else on PATH), restarts the pipeline with \
        backoff when a stage dies (the packer finishes its file set whole), deletes old file \
        sets (--retain, --max-total) and serves /metrics in the Prometheus text format. Every \
        key of the configuration file (-c) is also a flag; flags win. SIGTERM stops the \
        recorder, lets what it holds reach the store and exits within 10 s. Example:\n  \
        stacks-agent -a -e profile:u:49,state:uk:5 --store /var/lib/stacks --max-age 1m \
        --retain 7d --max-total 20G --metrics 127.0.0.1:9464\n\
        See docs/agent.md."
)]
pub(crate) struct Args {
    /// Configuration file (TOML; keys: events, all, names, cgroups, store, max_age,
    /// max_bytes, max_rows, partition, retain, max_total, metrics, budget_cpu, budget_window, ringbuf_mb)
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the effective configuration as TOML and exit
    #[arg(long)]
    pub print_config: bool,

    /// Events to record (stacks-record's -e) [key: events]
    #[arg(short = 'e', long = "events", value_name = "SPEC")]
    pub events: Option<String>,

    /// Record every process [key: all]
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Record the processes with these names [key: names]
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    /// Record the processes of this cgroup v2 and its descendants; repeatable [key: cgroups]
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,

    /// Where the file sets go: a directory, or a bucket URL (s3://, gs://, az://, file://)
    /// [key: store]
    #[arg(long, value_name = "DIR|URL")]
    pub store: Option<String>,

    /// Finish a file set at most this long after its first row [key: max_age]
    #[arg(long, value_name = "DURATION")]
    pub max_age: Option<String>,

    /// Finish a file set once its samples file has this many bytes [key: max_bytes]
    #[arg(long, value_name = "SIZE")]
    pub max_bytes: Option<String>,

    /// Finish a file set after this many rows [key: max_rows]
    #[arg(long, value_name = "N")]
    pub max_rows: Option<u64>,

    /// Partition directories: date or hour [key: partition]
    #[arg(long, value_name = "BY")]
    pub partition: Option<String>,

    /// Delete file sets finished longer ago than this (a directory store) [key: retain]
    #[arg(long, value_name = "DURATION")]
    pub retain: Option<String>,

    /// Delete the oldest file sets while the store holds more than this (a directory store)
    /// [key: max_total]
    #[arg(long, value_name = "SIZE")]
    pub max_total: Option<String>,

    /// Serve /metrics on HOST:PORT, or `off` [key: metrics] [default: 127.0.0.1:9464]
    #[arg(long, value_name = "HOST:PORT|off")]
    pub metrics: Option<String>,

    /// CPU budget: a percentage of the host's CPUs (`1%`) for the three stages and the BPF
    /// programs together; over it for a window, the agent sheds events in a fixed order; it
    /// restores a level when that level is estimated to fit, for six windows (docs/agent.md);
    /// needs -e [key: budget_cpu]
    #[arg(long, value_name = "PERCENT|off")]
    pub budget_cpu: Option<String>,

    /// The budget's window: over budget on average this long sheds a level [key:
    /// budget_window] [default: 10s]
    #[arg(long, value_name = "DURATION")]
    pub budget_window: Option<String>,

    /// Size in MiB of each of the recorder's ring buffers (stacks-record's --ringbuf-mb)
    /// [key: ringbuf_mb] [default: 8]
    #[arg(long, value_name = "MIB")]
    pub ringbuf_mb: Option<u32>,
}

impl Args {
    /// The keys the flags set.
    pub(crate) fn keys(&self) -> Keys {
        let list = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        Keys {
            events: self.events.clone(),
            all: self.all.then_some(true),
            names: list(&self.names),
            cgroups: list(&self.cgroups),
            store: self.store.clone(),
            max_age: self.max_age.clone(),
            max_bytes: self.max_bytes.clone(),
            max_rows: self.max_rows,
            partition: self.partition.clone(),
            retain: self.retain.clone(),
            max_total: self.max_total.clone(),
            metrics: self.metrics.clone(),
            budget_cpu: self.budget_cpu.clone(),
            budget_window: self.budget_window.clone(),
            ringbuf_mb: self.ringbuf_mb,
        }
    }
}

/// A check made before anything starts failed: one line, exit status 2.
fn refuse(message: impl std::fmt::Display) -> anyhow::Result<ExitCode> {
    eprintln!("{TOOL}: error: {message}");
    Ok(ExitCode::from(2))
}

/// Entry point of the binary.
pub fn run() -> anyhow::Result<ExitCode> {
    let args = stacks_stream::cli::parse_args::<Args>(TOOL);
    let config = match config::load(args.config.as_deref(), args.keys()) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    if args.print_config {
        print!("{}", config.to_toml());
        return Ok(ExitCode::SUCCESS);
    }
    let mut exes = Vec::new();
    for which in Which::ALL {
        match stage::find_tool(which.tool()) {
            Some(exe) => exes.push(exe),
            None => {
                return refuse(format_args!(
                    "{}: not found next to this executable nor on PATH",
                    which.tool()
                ));
            }
        }
    }
    stacks_stream::sys::catch_signals(&[libc::SIGINT, libc::SIGTERM])
        .context("installing the SIGINT/SIGTERM handlers")?;
    let shared: metrics::Shared = Arc::default();
    let served = match config.metrics {
        Some(addr) => match metrics::serve(addr, Arc::clone(&shared)) {
            Ok(bound) => Some(bound),
            Err(e) => return refuse(format_args!("metrics: cannot listen on {addr}: {e}")),
        },
        None => None,
    };
    let work = std::env::temp_dir().join(format!("stacks-agent-{}", std::process::id()));
    std::fs::create_dir_all(&work)
        .with_context(|| format!("creating the working directory {}", work.display()))?;
    let plan = plan(&config, exes, &work);
    eprintln!(
        "{TOOL}: recording ({}) into {}{}",
        match &config.targets {
            Targets::All => "every process".to_string(),
            Targets::Names(n) => format!("processes named {}", n.join(", ")),
            Targets::Cgroups(c) => format!("cgroups {}", c.join(", ")),
        },
        config.store,
        match served {
            Some(a) => format!("; metrics on http://{a}/metrics"),
            None => String::new(),
        }
    );
    let result = supervise::run(&plan, shared);
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// Each stage's executable and arguments; the recorder's and the packer's `--stats` files in
/// `work`.
pub(crate) fn plan(config: &Config, exes: Vec<PathBuf>, work: &std::path::Path) -> Plan {
    let record_stats = work.join("record-stats.json");
    let pack_stats = work.join("pack-stats.json");
    let k = &config.keys;
    let mut record = Vec::new();
    if let Some(e) = &k.events {
        record.extend(["-e".to_string(), e.clone()]);
    }
    let ring = k.ringbuf_mb.unwrap_or(crate::config::RINGBUF_MB);
    record.extend(["--ringbuf-mb".to_string(), ring.to_string()]);
    // What left the recorder, compared with what reached the store when a run ends.
    record.extend(["--stats".to_string(), record_stats.display().to_string()]);
    match &config.targets {
        Targets::All => record.push("-a".into()),
        Targets::Names(names) => record.extend(names.iter().cloned()),
        Targets::Cgroups(cgroups) => {
            for c in cgroups {
                record.extend(["--cgroup".to_string(), c.clone()]);
            }
        }
    }
    let mut pack = vec![config.store.clone()];
    let flags = [
        ("--max-age", k.max_age.clone()),
        ("--max-bytes", k.max_bytes.clone()),
        ("--max-rows", k.max_rows.map(|n| n.to_string())),
        ("--partition", k.partition.clone()),
        ("--retain", k.retain.clone()),
        ("--max-total", k.max_total.clone()),
    ];
    for (flag, value) in flags {
        if let Some(v) = value {
            pack.extend([flag.to_string(), v]);
        }
    }
    pack.extend(["--stats".to_string(), pack_stats.display().to_string()]);
    // A directory store that is full or read-only for a while is waited for by the packer,
    // its rows counted as lost meanwhile, rather than a restart (docs/agent.md, Faults).
    let store_dir =
        (!stacks_store::objstore::is_url(&config.store)).then(|| PathBuf::from(&config.store));
    if store_dir.is_some() {
        pack.push("--keep-going".to_string());
    }
    let mut exes = exes.into_iter();
    let mut next = || exes.next().unwrap_or_default();
    Plan {
        stages: [(next(), record), (next(), Vec::new()), (next(), pack)],
        record_stats,
        pack_stats,
        store_dir,
        budget: config
            .budget_cpu
            .zip(k.events.as_deref())
            .map(|(limit, events)| {
                (
                    limit,
                    crate::budget::ladder(events),
                    crate::controller::Timing::from_window(config.budget_window),
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_become_the_tools_arguments() {
        Args::command().debug_assert();
        let dir = std::env::temp_dir().join(format!("stacks-agent-cli-{}", std::process::id()));
        let args = Args::try_parse_from([
            "stacks-agent",
            "-a",
            "-e",
            "profile:u:49",
            "--store",
            dir.to_str().unwrap(),
            "--max-age",
            "5s",
            "--max-total",
            "2M",
            "--metrics",
            "off",
        ])
        .unwrap();
        let config = config::check(args.keys()).unwrap();
        let exes = vec!["r".into(), "s".into(), "p".into()];
        let plan = plan(&config, exes, std::path::Path::new("w"));
        assert_eq!(
            plan.stages[0].1,
            [
                "-e",
                "profile:u:49",
                "--ringbuf-mb",
                "8",
                "--stats",
                "w/record-stats.json",
                "-a"
            ]
        );
        assert!(plan.stages[1].1.is_empty());
        assert_eq!(
            plan.stages[2].1,
            [
                dir.to_str().unwrap(),
                "--max-age",
                "5s",
                "--max-total",
                "2M",
                "--stats",
                "w/pack-stats.json",
                "--keep-going"
            ]
        );
        assert_eq!(config.metrics, None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
