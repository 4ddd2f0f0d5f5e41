//! The `stacks-otlp` command line: read a stream from stdin or a file, write the serialized
//! export request to stdout (never a terminal) or `-o FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Parser;
use stacks_stream::io::{open_text_sink, stdout_sink};

use crate::{Options, convert, write_request};

/// Convert a stacks Arrow stream with symbolized stacks into OpenTelemetry profiles: an OTLP
/// `ExportProfilesServiceRequest` (profiles v1development, protobuf), as POSTed to a Collector's
/// `/v1development/profiles`.
///
/// One profile per process and sample type (the kind's event count and its value in its unit,
/// as stacks-pprof names them); each sample keeps one timestamp and one value per row. Host,
/// pid, process name and container become resource attributes; tid, thread, cpu, cgroup, span
/// name and other string columns sample attributes; trace_id and span_id a link.
#[derive(Debug, Parser)]
#[command(name = "stacks-otlp", version)]
pub struct Args {
    /// Arrow IPC stream to read; stdin when absent or `-`.
    pub input: Option<PathBuf>,

    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Column holding the stacks [default: `stack`, else the first column of symbolized stacks].
    #[arg(long, value_name = "COL")]
    pub stack: Option<String>,

    /// Column whose values a profile holds (repeatable) [default: every integer and float
    /// column except pid, tid, cpu and *_error; a count of rows when there is none]. `*_ns`
    /// columns are nanoseconds, `bytes`/`*_bytes` bytes, others counts.
    #[arg(long = "value", value_name = "COL")]
    pub values: Vec<String>,

    /// For a stream of event rows (stacks-symbolize output): convert rows of KIND
    /// [default: profile]; repeatable or comma-separated, `all` for every kind. Each kind makes
    /// a profile of its event count and one of its `value` in the kind's unit (as stacks-pprof).
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,
}

/// Entry point of the binary: parse the arguments and convert.
pub fn run() -> anyhow::Result<ExitCode> {
    run_with(stacks_stream::cli::parse_args::<Args>("stacks-otlp"))
}

/// Convert as `args` say.
pub fn run_with(args: Args) -> anyhow::Result<ExitCode> {
    let to_stdout = stacks_stream::cli::is_std(args.output.as_deref());
    // Refuse a terminal before reading anything; a file is only created once the input
    // converted, so a bad input does not clobber it.
    let early_sink = if to_stdout {
        if stacks_stream::cli::stdout_is_tty() {
            bail!(
                "refusing to write binary OTLP profiles to a terminal: redirect it to a file or give -o FILE"
            );
        }
        Some(stdout_sink()?)
    } else {
        None
    };
    let mut input = stacks_stream::cli::open_tool_input("stacks-otlp", args.input.as_deref())?;
    let options = Options {
        stack: args.stack,
        values: args.values,
        kinds: args.kind,
        ..Options::default()
    };
    let request = convert(&mut input, &options)?;
    let sink = match early_sink {
        Some(s) => s,
        None => open_text_sink(args.output.as_deref())?,
    };
    write_request(&request, sink.writer, &sink.name)?;
    Ok(ExitCode::SUCCESS)
}
