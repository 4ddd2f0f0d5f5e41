//! The `stacks-trace` command line: read a stream from stdin or a file, write the trace JSON
//! to stdout or `-o FILE` as the rows arrive.

use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use stacks_stream::io::Sink;

use crate::{Bound, Options, Window, convert};

/// Convert a stacks Arrow stream into Chrome Trace Event JSON for Perfetto UI
/// (ui.perfetto.dev), chrome://tracing or speedscope.
///
/// Input: stacks-symbolize output or a stacks-query result with `time`, `pid`, `tid` and
/// `kind` (plus whatever of `comm`, `thread`, `stack`, `value`, `duration`, `state`, … it has).
/// Each thread gets a track of on-CPU and off-CPU slices (from `switch` rows; off-CPU slices
/// carry the state, waker and switch-out stack), CPU samples as instants with stacks (the
/// `stackFrames` table), exec/fork/exit instants; an IO track (`THREAD io`) of vfs calls and
/// net sends/receives; block requests are async slices, RSS a counter per process.
/// Timestamps are microseconds (with ns precision) since the recording start.
///
/// An on-CPU slice spans from a thread's return to the CPU to its next recorded switch-out
/// (or its last row): off-CPU intervals shorter than the recorder's `switch` MIN are folded
/// into counts, shown as `folded short off-CPU intervals` instants, and fall inside on-CPU slices.
///
/// The output is written as rows arrive; if the input breaks off, the JSON stops there
/// (incomplete, so no reader takes it for a whole trace) and the exit status is 1.
#[derive(Debug, Parser)]
#[command(name = "stacks-trace", version)]
pub struct Args {
    /// Arrow IPC stream to read; stdin when absent or `-`.
    pub input: Option<PathBuf>,

    /// Write the trace to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Leave out events that end before TIME: RFC 3339 (2023-11-14T22:13:20Z) or an offset
    /// from the recording start (+2s, +1.5s, +250ms, +10us).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,

    /// Leave out events that start after TIME (same forms as --from).
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,
}

/// Entry point of the binary: parse the arguments and convert.
pub fn run() -> anyhow::Result<ExitCode> {
    run_with(stacks_stream::cli::parse_args::<Args>("stacks-trace"))
}

/// Convert as `args` say.
pub fn run_with(args: Args) -> anyhow::Result<ExitCode> {
    let window = Window {
        from: args
            .from
            .as_deref()
            .map(|v| Bound::parse("--from", v))
            .transpose()?,
        to: args
            .to
            .as_deref()
            .map(|v| Bound::parse("--to", v))
            .transpose()?,
    };
    let from_stdin = args.input.as_ref().is_none_or(|p| p.as_os_str() == "-");
    if from_stdin {
        stacks_stream::cli::refuse_tty_stdin("stacks-trace")?;
    }
    let mut input = stacks_stream::open_input(args.input.as_deref())?;
    // Check the columns before creating the output file, so a bad input clobbers nothing.
    crate::columns::Layout::new(&input.schema(), input.name())?;
    let (out, sink) = match args.output.as_deref() {
        Some(p) if p.as_os_str() != "-" => stacks_stream::io::open_sink(Some(p))?,
        // JSON is text: a terminal is fine.
        _ => (
            Box::new(std::io::stdout()) as Box<dyn std::io::Write + Send>,
            Sink::Stdout,
        ),
    };
    let name = match sink {
        Sink::Stdout => "stdout".to_string(),
        Sink::File(name) => name,
    };
    convert(
        &mut input,
        BufWriter::with_capacity(1 << 16, out),
        &name,
        &Options { window },
    )?;
    Ok(ExitCode::SUCCESS)
}
