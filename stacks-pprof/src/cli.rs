//! The `stacks-pprof` command line: read a stream from stdin or a file, write the gzipped
//! profile (never to a terminal), folded stacks or an SVG flame graph to stdout or `-o FILE`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Parser, ValueEnum};
use stacks_stream::io::{open_text_sink, stdout_sink};

use crate::{Options, convert, default_index, folded, write_folded, write_profile, write_svg};

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Gzipped pprof protobuf (go tool pprof, speedscope, Pyroscope…).
    Pprof,
    /// Folded stacks, `root;…;leaf value` per line (flamegraph.pl, inferno, speedscope).
    Folded,
    /// An SVG flame graph.
    Svg,
}

/// Convert a stacks Arrow stream with symbolized stacks into a gzipped pprof profile, folded
/// stacks or an SVG flame graph.
///
/// Rows with the same stack and labels become one sample whose values are summed. Read the
/// result with `go tool pprof`, speedscope, Grafana/Pyroscope or any other pprof reader.
/// Folded stacks and flame graphs show one value: the profile's default sample type (the last
/// value column; with several kinds, the first kind's `value`).
#[derive(Debug, Parser)]
#[command(name = "stacks-pprof", version)]
pub struct Args {
    /// Arrow IPC stream to read; stdin when absent or `-`.
    pub input: Option<PathBuf>,

    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Pprof)]
    pub format: Format,

    /// Column holding the stacks [default: `stack`, else the first column of symbolized stacks].
    #[arg(long, value_name = "COL")]
    pub stack: Option<String>,

    /// Column to sum as a sample value (repeatable) [default: every integer and float column
    /// except pid, tid, cpu and *_error; a count of rows when there is none]. `*_ns` columns
    /// are nanoseconds, `bytes`/`*_bytes` bytes, others counts. The last one is shown by default.
    #[arg(long = "value", value_name = "COL")]
    pub values: Vec<String>,

    /// Do not turn string columns and pid/tid/cpu into sample labels.
    #[arg(long)]
    pub no_labels: bool,

    /// For a stream of event rows (stacks-symbolize output): convert rows of KIND
    /// [default: profile]; repeatable or comma-separated, `all` for every kind. Each kind adds
    /// its event count
    /// (the `count` column, 1 where null) and its `value` in the kind's unit: profile
    /// samples + cpu ns, switch intervals + offcpu ns, rss rss_events + rss_growth bytes,
    /// block block_requests + bytes, vfs/net vfs_calls/net_calls + bytes; lost, exec, fork,
    /// exit count themselves. Rows without a stack count under `[no stack]`, folded short
    /// off-CPU intervals under `[folded short off-CPU intervals]`.
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,

    /// Append `_[k]` to kernel function names (and, in folded stacks and flame graphs, `_[i]`
    /// to inlined ones), as bcc's -a and flamegraph.pl's colors expect.
    #[arg(short, long)]
    pub annotate: bool,

    /// Root every stack at a frame named after the process (the `comm` column), as bcc does.
    #[arg(long)]
    pub process_name: bool,

    /// Put a `-` frame between the kernel and the user frames of a stack (bcc's -d).
    #[arg(long)]
    pub delimiter: bool,
}

/// Entry point of the binary: parse the arguments and convert.
pub fn run() -> anyhow::Result<ExitCode> {
    run_with(stacks_stream::cli::parse_args::<Args>("stacks-pprof"))
}

/// Convert as `args` say.
pub fn run_with(args: Args) -> anyhow::Result<ExitCode> {
    let to_stdout = stacks_stream::cli::is_std(args.output.as_deref());
    // Refuse a terminal before reading anything; a file is only created once the input
    // converted, so a bad input does not clobber it. Folded stacks and SVG are text.
    let early_sink = if to_stdout {
        if args.format == Format::Pprof && stacks_stream::cli::stdout_is_tty() {
            bail!(
                "refusing to write a binary pprof profile to a terminal: redirect it to a file or give -o FILE"
            );
        }
        Some(stdout_sink()?)
    } else {
        None
    };
    let mut input = stacks_stream::cli::open_tool_input("stacks-pprof", args.input.as_deref())?;
    let options = Options {
        stack: args.stack,
        values: args.values,
        no_labels: args.no_labels,
        kinds: args.kind,
        annotate: args.annotate,
        process_name: args.process_name,
        delimiter: args.delimiter,
    };
    let profile = convert(&mut input, &options)?;
    // Rendered before the output file is created, for the same reason.
    let index = default_index(&profile);
    let stacks = match args.format {
        Format::Pprof => Vec::new(),
        Format::Folded | Format::Svg => folded(&profile, index, args.annotate),
    };
    let mut rendered = Vec::new();
    if args.format == Format::Svg {
        write_svg(&profile, index, &stacks, &mut rendered, "memory")?;
    }
    let sink = match early_sink {
        Some(s) => s,
        None => open_text_sink(args.output.as_deref())?,
    };
    let (out, name) = (sink.writer, sink.name);
    match args.format {
        Format::Pprof => write_profile(&profile, out, &name)?,
        Format::Folded => write_folded(&stacks, std::io::BufWriter::new(out), &name)?,
        Format::Svg => {
            let mut out = out;
            out.write_all(&rendered)
                .and_then(|()| out.flush())
                .map_err(|source| crate::Error::Write { path: name, source })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
