//! The `stacks-trace` command line: read a stream from stdin or a file, write the trace (JSON
//! or Perfetto protobuf) to stdout or `-o FILE` as the rows arrive; a file is written under a
//! temporary name and renamed once whole, so a broken conversion leaves no trace that looks
//! complete.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::{Bound, Format, Options, Window, convert};

/// Convert a stacks Arrow stream into Chrome Trace Event JSON for Perfetto UI
/// (ui.perfetto.dev), chrome://tracing or speedscope, or (`-f perfetto`) into a native Perfetto
/// protobuf trace for Perfetto UI and trace_processor.
///
/// Input: stacks-symbolize output or a stacks-query result with `time`, `pid`, `tid` and
/// `kind` (plus whatever of `comm`, `thread`, `stack`, `value`, `duration`, `state`, … it has).
/// Each thread gets a track of on-CPU and off-CPU slices (from `switch` rows; off-CPU slices
/// carry the state, waker and switch-out stack), CPU samples as instants with stacks (the
/// `stackFrames` table), exec/fork/exit instants; an IO track (`THREAD io`) of vfs calls and
/// net sends/receives; block and io_uring requests are async slices (io_uring ones with how they ran, a worker's block requests with their submitter), RSS a counter per process; sampled
/// allocations and their frees (`alloc`) instants `alloc` and `free` with address and size.
/// Timestamps are microseconds (with ns precision) since the recording start.
///
/// An on-CPU slice spans from a thread's return to the CPU to its next recorded switch-out
/// (or its last row): off-CPU intervals shorter than the recorder's `switch` MIN are folded
/// into counts, shown as `folded short off-CPU intervals` instants, and fall inside on-CPU slices.
///
/// `-f perfetto` writes the same rows as Perfetto packets: stacks interned once (frames with
/// their kind, mappings with build ids), off-CPU slices with their switch-out stack, wakeups as
/// flows from the waker to the woken thread (`wake` rows), thread states as task-state events,
/// CPU samples as perf samples, probe hits and allocations weighted, lost events as data loss;
/// about a tenth of the JSON's size.
///
/// The output is written as rows arrive; if the input breaks off, the exit status is 1 and
/// `-o FILE` is left alone (the trace was written to `.FILE.partial`, removed); on stdout the
/// JSON stops there (incomplete, so no reader takes it for a whole trace).
#[derive(Debug, Parser)]
#[command(name = "stacks-trace", version)]
pub struct Args {
    /// Arrow IPC stream to read; stdin when absent or `-`.
    pub input: Option<PathBuf>,

    /// Write the trace to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The trace format: `json` (Chrome Trace Event) or `perfetto` (native protobuf; binary,
    /// refused on a terminal).
    #[arg(short, long, value_enum, default_value_t = Format::Json)]
    pub format: Format,

    /// Leave out events that end before TIME: a time, or + and a duration after the recording
    /// start.
    #[arg(long, value_name = "TIME", help = format!(
        "Leave out events that end before TIME: a time ({}), or + and a duration after the recording start (+2s, +1.5s, +250ms; {})",
        stacks_stream::time::TIME_EXAMPLES,
        stacks_stream::cli::DURATION_EXAMPLES
    ))]
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
    let window = window(&args)?;
    let mut input = stacks_stream::cli::open_tool_input("stacks-trace", args.input.as_deref())?;
    // Check the columns before creating the output file, so a bad input clobbers nothing.
    crate::columns::Layout::new(&input.schema(), input.name())?;
    let options = Options {
        window,
        format: args.format,
    };
    let Some(path) = args
        .output
        .as_deref()
        .filter(|p| !stacks_stream::cli::is_std(Some(p)))
    else {
        // stdout: JSON is text, a terminal is fine; a Perfetto trace is not.
        let sink = match args.format {
            Format::Json => stacks_stream::io::open_text_sink(None)?,
            Format::Perfetto => stacks_stream::io::open_sink(None)?,
        };
        write(&mut input, sink, &options)?;
        return Ok(ExitCode::SUCCESS);
    };
    // A device or FIFO (`-o /dev/null`) is written in place; a file aside, then renamed over
    // the file (a symbolic link's target) once whole.
    let target = match std::fs::metadata(path) {
        Ok(m) if !m.file_type().is_file() => {
            write(
                &mut input,
                stacks_stream::io::open_text_sink(Some(path))?,
                &options,
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        Ok(_) => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        Err(_) => path.to_path_buf(),
    };
    let partial = partial_path(&target);
    let mut sink = stacks_stream::io::open_text_sink(Some(&partial))?;
    sink.name = path.display().to_string();
    if let Err(e) = write(&mut input, sink, &options) {
        let _ = std::fs::remove_file(&partial);
        return Err(e.into());
    }
    std::fs::rename(&partial, &target)
        .with_context(|| format!("renaming {} to {}", partial.display(), target.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// Convert `input` into `sink`, buffered.
fn write(
    input: &mut stacks_stream::InputStream,
    sink: stacks_stream::io::Sink,
    options: &Options,
) -> Result<u64, crate::Error> {
    convert(
        input,
        BufWriter::with_capacity(1 << 16, sink.writer),
        &sink.name,
        options,
    )
}

/// Where the trace for `path` is written until whole: `.NAME.partial` beside it.
fn partial_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "trace".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.partial"))
}

/// The `--from`/`--to` window of `args`.
fn window(args: &Args) -> Result<Window, crate::Error> {
    Ok(Window {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_flags_use_the_shared_grammar() {
        let w = |flag: &str, v: &str| {
            let args = Args::try_parse_from(["stacks-trace", flag, v]).unwrap();
            window(&args).map(|w| w.from.or(w.to))
        };
        const DAY: i64 = 1_735_776_000_000_000_000; // 2025-01-02T00:00:00Z
        assert_eq!(w("--from", "2025-01-02").unwrap(), Some(Bound::At(DAY)));
        assert_eq!(
            w("--to", "2025-01-02T00:00:01Z").unwrap(),
            Some(Bound::At(DAY + 1_000_000_000))
        );
        assert_eq!(
            w("--from", "+1.5s").unwrap(),
            Some(Bound::After(1_500_000_000))
        );
        assert_eq!(
            w("--from", "+90").unwrap(),
            Some(Bound::After(90_000_000_000))
        );
        assert_eq!(
            w("--to", "+1d").unwrap(),
            Some(Bound::After(86_400_000_000_000))
        );
        assert!(w("--from", "yesterday").is_err() && w("--to", "+-1s").is_err());
    }
}
