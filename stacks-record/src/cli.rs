//! Command-line interface of stacks-record.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;

use crate::spec::{DEFAULT_SPEC, EventSpec};

/// Record stack traces with the resource they explain, as an Arrow IPC stream on stdout.
///
/// Examples:
///   sudo stacks-record -e profile:u:99 -- ./app | stacks-symbolize | stacks-pack out/
///   sudo stacks-record -p 1234 -d 10s > raw.arrow
///   sudo stacks-record myserver -d 30s | stacks-symbolize > profile.arrow
#[derive(Parser, Debug)]
#[command(name = "stacks-record", version, verbatim_doc_comment)]
pub struct Args {
    // Its help, every event's grammar, comes from the registry of kinds: see `events_help`.
    #[arg(short = 'e', long = "events", value_name = "SPEC", default_value = DEFAULT_SPEC, help = events_help())]
    pub events: String,

    /// Trace processes with these names (matched at exec and among running processes).
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,

    /// Trace these process ids (comma-separated or repeated).
    #[arg(short = 'p', long = "pid", value_name = "PID", value_delimiter = ',')]
    pub pids: Vec<u32>,

    /// Trace every process on the system.
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Trace the processes in this cgroup v2 and its descendants, filtered in the kernel: a
    /// systemd unit's or container's cgroup (`/system.slice/nginx.service`, or its directory
    /// under /sys/fs/cgroup); processes that start in it later are traced too. Repeatable (up
    /// to 8).
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,

    /// With --all: include the idle tasks (pid 0).
    #[arg(long = "idle", requires = "all")]
    pub idle: bool,

    /// Do not follow children forked by traced processes.
    #[arg(long = "no-children")]
    pub no_children: bool,

    /// Do not read the `tracing` span of events (programs using the tracing-stacks layer
    /// otherwise have theirs in `span_id`, `span_name`, `parent_span_id`, `trace_id`).
    #[arg(long = "no-spans")]
    pub no_spans: bool,

    /// Do not read the Python frames of CPython 3.11-3.15 processes (user stacks of every kind
    /// otherwise carry them, inner to the interpreter's `_PyEval_EvalFrameDefault` frames) nor
    /// the asyncio task of 3.14+ threads (`task`, `task_chain`).
    #[arg(long = "no-python")]
    pub no_python: bool,

    /// Unwind every kernel stack. By default the kernel stacks of tracepoint events (switch,
    /// wake, block, vfs, net, rss) come from a cache of the kernel's unwinds, used only when
    /// the stack holds the same return addresses in the same places (one use in 1,024 is unwound
    /// again to check; the summary counts them).
    #[arg(long = "kernel-stacks-unwound")]
    pub kernel_stacks_unwound: bool,

    /// Stop after this long.
    #[arg(short = 'd', long = "duration", value_name = "DURATION", value_parser = parse_duration,
        help = format!("Stop after this long, {}", stacks_stream::cli::DURATION_EXAMPLES))]
    pub duration: Option<Duration>,

    /// Write the stream to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Read new `-e` specifications from FILE (a pipe or FIFO, one a line) while recording
    /// and take each in place, without stopping: one that changes only profile's or state's
    /// HZ or switch's MIN (the rows carry their period or fold count, so sums stay right);
    /// any other line is refused with a warning. stacks-agent's CPU budget uses it.
    #[arg(long = "control", value_name = "FILE")]
    pub control: Option<PathBuf>,

    /// Write the rows produced so far, by kind, and the events they stand for, to FILE as one
    /// JSON object, replaced atomically about once a second and when the stream ends (`ended`
    /// then true): counted when produced, whether or not the output took them. stacks-agent
    /// compares it with what reached the store (docs/agent.md). With it, an output whose
    /// reader went away stops the recording as ^C would, what is held counted, and the
    /// recorder ends quietly
    #[arg(long = "stats", value_name = "FILE")]
    pub stats: Option<PathBuf>,

    /// Size in MiB (a power of two) of each ring buffer in use: one for CPU, off-CPU and state
    /// samples, one for IO (vfs, net, block, rss), one for probes and spans, so a flood of one
    /// never loses another's events. Raise it when `lost` rows name `ring_buffer_full` (the
    /// kernel zeroes the buffers when recording starts). vfs and net events are summed in the
    /// kernel while a quarter of the IO ring waits (exact totals, rows with `count` > 1).
    #[arg(long = "ringbuf-mb", value_name = "MIB", default_value_t = 16, value_parser = parse_ringbuf)]
    pub ringbuf_mb: u32,

    /// Bytes of user stack copied at each event for `d` stacks (from the stack pointer up;
    /// deeper frames come from the frame-pointer walk when it is valid, else the stack is
    /// marked truncated).
    #[arg(long = "ustack-bytes", value_name = "BYTES", default_value = "16K", value_parser = parse_ustack_bytes)]
    pub ustack_bytes: u32,

    /// Command to run and trace with its descendants; recording stops when it exits and
    /// stacks-record exits with its status. Its stdout goes to stderr (stdout carries data).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What to trace.
#[derive(Debug)]
pub enum Target {
    All {
        idle: bool,
    },
    /// `--cgroup`: processes in these cgroups (paths as given).
    Cgroups(Vec<String>),
    Command(Vec<String>),
    Select {
        names: Vec<String>,
        pids: Vec<u32>,
    },
}

impl Args {
    pub fn spec(&self) -> Result<EventSpec> {
        EventSpec::parse(&self.events).map_err(|e| anyhow::anyhow!("-e: {e}"))
    }

    pub fn target(&self) -> Result<Target> {
        let selective = !self.names.is_empty() || !self.pids.is_empty();
        if !self.cgroups.is_empty() {
            if self.all || selective || !self.command.is_empty() {
                bail!(
                    "--cgroup names what to trace: do not combine it with -a, names, -p or a command"
                );
            }
            if self.cgroups.len() > 8 {
                bail!("--cgroup: at most 8 cgroups");
            }
            return Ok(Target::Cgroups(self.cgroups.clone()));
        }
        if self.all {
            if selective || !self.command.is_empty() {
                bail!("--all traces every process: do not combine it with names, -p or a command");
            }
            return Ok(Target::All { idle: self.idle });
        }
        if !self.command.is_empty() {
            if selective {
                bail!("a command after `--` cannot be combined with process names or -p");
            }
            return Ok(Target::Command(self.command.clone()));
        }
        if !selective {
            bail!(
                "nothing to trace: give process names, -p PID, -a, --cgroup PATH, or `-- COMMAND`"
            );
        }
        for n in &self.names {
            if n.is_empty() {
                bail!("empty process name");
            }
            if n.len() > 15 {
                eprintln!(
                    "stacks-record: note: the kernel keeps 15 bytes of process names: matching {n:?} as {:?}",
                    String::from_utf8_lossy(&n.as_bytes()[..15])
                );
            }
        }
        Ok(Target::Select {
            names: self.names.clone(),
            pids: self.pids.clone(),
        })
    }
}

/// `--ustack-bytes`: a size such as 8192, 8K or 16K, from 1K to 24K.
fn parse_ustack_bytes(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mult) = match t.strip_suffix(['K', 'k']) {
        Some(n) => (n, 1024),
        None => (t, 1),
    };
    num.parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|n| (1024..=crate::kernel::event::UWINDOW_MAX as u32).contains(n))
        .map(|n| n / 8 * 8)
        .ok_or_else(|| format!("`{s}`: bytes from 1K to 24K, such as 8K or 16384"))
}

/// `-d`: a positive duration in the shared grammar (`10s`, `1.5s`, a bare number of seconds).
pub use stacks_stream::cli::parse_positive_duration as parse_duration;

/// The `-e` help: the grammar of every event `stacks_stream::kinds` says stacks-record can
/// record, with its defaults, and the kinds recorded whatever `-e` says.
fn events_help() -> String {
    use stacks_stream::kinds::{ALL, Source};
    let mut help = String::from(
        "Events to record, comma-separated NAME[:STACKS][:ARG]. STACKS picks the stacks\n\
         captured at each event: u (user, by frame pointers), k (kernel) or uk (both); d or\n\
         dk: the user stack unwound with the files' CFI (.eh_frame, .debug_frame) from a\n\
         copy of the stack (--ustack-bytes), continued by frame pointers where it ends;\n\
         needs no frame pointers (every event with stacks, probes and span included; not\n\
         with a probe's :count); n: no stacks, the cheapest (the event's own fields only).\n",
    );
    for k in ALL {
        let Source::Event {
            stacks,
            arg,
            help: what,
            ..
        } = k.source
        else {
            continue;
        };
        let (form, defaults) = match (arg, k.one_in_arg()) {
            (Some(a), Some(n)) => (
                format!("{}[:STACKS][:{}[:{}]]", k.name, a.name, n.name),
                format!(
                    "STACKS default {stacks}; {} default {}: {}; {} default {}: {}.",
                    a.name, a.default, a.meaning, n.name, n.default, n.meaning
                ),
            ),
            (Some(a), None) => (
                format!("{}[:STACKS][:{}]", k.name, a.name),
                format!(
                    "STACKS default {stacks}; {} default {}: {}.",
                    a.name, a.default, a.meaning
                ),
            ),
            (None, _) => (
                format!("{}[:STACKS]", k.name),
                format!("STACKS default {stacks}; no ARG."),
            ),
        };
        // A form too long for its column has a line of its own.
        let mut head = form.as_str();
        if head.len() >= 24 {
            help.push_str(&format!("  {head}\n"));
            head = "";
        }
        for line in wrap(&format!("{what} {defaults}"), 62) {
            help.push_str(&format!("  {head:<24}{line}\n"));
            head = "";
        }
    }
    for k in ALL {
        let Source::Probes(forms) = k.source else {
            continue;
        };
        let intro = "Probes, any number, each a row per hit (kind probe, value 1, args); with \
                     :count the kernel counts hits per thread and stacks and sends a row per \
                     second instead:";
        for line in wrap(intro, 86) {
            help.push_str(&format!("{line}\n"));
        }
        for f in forms {
            let form = format!("{}:{}[:STACKS][:count]", f.prefix, f.fields);
            let what = format!("{} STACKS default {}.", f.help, f.stacks);
            help.push_str(&format!("  {form}\n"));
            for line in wrap(&what, 62) {
                help.push_str(&format!("  {:<24}{line}\n", ""));
            }
        }
    }
    let always: Vec<&str> = ALL
        .iter()
        .filter(|k| k.source == Source::Always)
        .map(|k| k.name)
        .collect();
    if let Some((last, first)) = always.split_last() {
        let names = if first.is_empty() {
            last.to_string()
        } else {
            format!("{} and {last}", first.join(", "))
        };
        help.push_str(&format!("{names} of traced processes are always recorded."));
    }
    help
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn parse_ringbuf(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("bad size `{s}`"))?;
    if !n.is_power_of_two() || n > 1024 {
        return Err(format!("{n} MiB: must be a power of two up to 1024"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_documents_every_event_kind_and_the_default() {
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        for name in crate::spec::event_names() {
            assert!(
                help.contains(&format!("  {name}[:STACKS]")),
                "--help does not document `{name}`:\n{help}"
            );
        }
        assert!(help.contains(DEFAULT_SPEC), "{help}");
        for form in [
            "tp:CATEGORY:NAME[:STACKS][:count]",
            "uprobe:PATH:SYMBOL[:STACKS][:count]",
            "uretprobe:PATH:SYMBOL[:STACKS][:count]",
            "usdt:PATH:PROVIDER:NAME[:STACKS][:count]",
        ] {
            assert!(
                help.contains(form),
                "--help does not document `{form}`:\n{help}"
            );
        }
        assert!(help.contains("HZ default 99"), "{help}");
        assert!(
            help.contains("exec, fork and exit of traced processes are always recorded"),
            "{help}"
        );
    }

    #[test]
    fn absurd_durations_are_errors() {
        assert!(
            parse_duration("99999999999999999999999")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5x").unwrap_err().contains("`x`"));
        assert!(parse_duration("s").is_err());
        let d =
            |v: &str| Args::try_parse_from(["stacks-record", "-a", "-d", v]).map(|a| a.duration);
        assert_eq!(d("90").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(d("1.5s").unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(d("1d").unwrap(), Some(Duration::from_secs(86_400)));
        assert!(d("0").is_err() && d("-1s").is_err() && d("soon").is_err());
    }

    #[test]
    fn target_rules() {
        let a = Args::try_parse_from(["r", "-a", "-p", "1"]).unwrap();
        assert!(a.target().is_err());
        let a = Args::try_parse_from(["r"]).unwrap();
        assert!(
            a.target()
                .unwrap_err()
                .to_string()
                .contains("nothing to trace")
        );
        let a = Args::try_parse_from(["r", "--", "sleep", "1"]).unwrap();
        assert!(matches!(a.target().unwrap(), Target::Command(c) if c == ["sleep", "1"]));
        let a = Args::try_parse_from(["r", "-p", "1,2", "nginx"]).unwrap();
        assert!(
            matches!(a.target().unwrap(), Target::Select { names, pids } if names == ["nginx"] && pids == [1, 2])
        );
        assert!(Args::try_parse_from(["r", "--idle", "-p", "1"]).is_err());
        let a = Args::try_parse_from(["r", "-e", "bogus", "-a"]).unwrap();
        assert!(a.spec().unwrap_err().to_string().contains("bogus"));
    }
}
