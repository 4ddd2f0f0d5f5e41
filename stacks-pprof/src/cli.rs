//! The `stacks-pprof` command line: read a stream from stdin or a file, write the gzipped
//! profile to stdout (never a terminal) or `-o FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Parser;
use stacks_stream::io::{Sink, open_sink};

use crate::{Options, convert, write_profile};

/// Convert a stacks Arrow stream with symbolized stacks into a gzipped pprof profile.
///
/// Rows with the same stack and labels become one sample whose values are summed. Read the
/// result with `go tool pprof`, speedscope, Grafana/Pyroscope or any other pprof reader.
#[derive(Debug, Parser)]
#[command(name = "stacks-pprof", version)]
pub struct Args {
    /// Arrow IPC stream to read; stdin when absent or `-`.
    pub input: Option<PathBuf>,

    /// Write the profile to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

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

    /// For a stream of event rows (stacks-symbolize output): convert rows of this kind
    /// [default: profile]; `value` is then read in that kind's unit (profile: cpu nanoseconds).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
}

/// Entry point of the binary: parse the arguments and convert.
pub fn run() -> anyhow::Result<ExitCode> {
    run_with(Args::parse())
}

/// Convert as `args` say.
pub fn run_with(args: Args) -> anyhow::Result<ExitCode> {
    let to_stdout = args.output.as_ref().is_none_or(|p| p.as_os_str() == "-");
    // Refuse a terminal before reading anything; a file is only created once the input
    // converted, so a bad input does not clobber it.
    let early_sink = if to_stdout {
        if stacks_stream::cli::stdout_is_tty() {
            bail!(
                "refusing to write a binary pprof profile to a terminal: redirect it to a file or give -o FILE"
            );
        }
        Some(open_sink(None)?)
    } else {
        None
    };
    let from_stdin = args.input.as_ref().is_none_or(|p| p.as_os_str() == "-");
    if from_stdin {
        stacks_stream::cli::refuse_tty_stdin("stacks-pprof")?;
    }
    let mut input = stacks_stream::open_input(args.input.as_deref())?;
    let options = Options {
        stack: args.stack,
        values: args.values,
        no_labels: args.no_labels,
        kind: args.kind,
    };
    let profile = convert(&mut input, &options)?;
    let (out, sink) = match early_sink {
        Some(s) => s,
        None => open_sink(args.output.as_deref())?,
    };
    let name = match sink {
        Sink::Stdout => "stdout".to_string(),
        Sink::File(name) => name,
    };
    write_profile(&profile, out, &name)?;
    Ok(ExitCode::SUCCESS)
}
