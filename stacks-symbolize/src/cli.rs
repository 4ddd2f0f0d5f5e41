//! The `stacks-symbolize` command line: parse the arguments, check them, open the input and
//! the output, symbolize with [`crate::symbolize_stream`] and report what was done.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Parser;

use crate::{Options, TOOL, debuginfo, debuginfod, elf, symbolize_stream};

/// Symbolize a raw stacks stream: every row gets a `stack` column with function names, source
/// files, lines and inlined frames for its kernel and user frames. Each distinct stack is
/// symbolized and written once per stream (stack columns dictionary-encoded, schema version 2).
///
///   stacks-record -e profile -- ./app | stacks-symbolize | stacks-pack out/
///   stacks-symbolize raw.arrow -o symbolized.arrow --debug-dir ./debug
///
/// User frames are matched to files by build id, first found: -b files, --debug-dir trees,
/// the recorded path (while its build id matches), /usr/lib/debug/.build-id, .gnu_debuglink,
/// then debuginfod servers in DEBUGINFOD_URLS (cached in $XDG_CACHE_HOME/stacks/debuginfod;
/// DEBUGINFOD_TIMEOUT seconds per download, default 30). Kernel frames use the symbols the
/// recorder took from its kernel's kallsyms.
#[derive(Parser, Debug)]
#[command(name = "stacks-symbolize", version, verbatim_doc_comment)]
pub struct Args {
    /// Input stream (default: stdin).
    #[arg(value_name = "INPUT")]
    pub input: Option<PathBuf>,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// A binary or debug file for the recorded module with the same build id (repeatable);
    /// used only where its build id matches.
    #[arg(short = 'b', long = "binary", value_name = "PATH")]
    pub binaries: Vec<PathBuf>,
    /// Directory searched recursively for debug files, matched by build id (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// vmlinux with DWARF of the recording kernel: adds file:line to kernel frames.
    #[arg(long = "vmlinux", value_name = "PATH")]
    pub vmlinux: Option<PathBuf>,
    /// kallsyms for kernel frames of streams without recorded kernel symbols (only used when
    /// the stream was recorded during this boot).
    #[arg(
        long = "kallsyms",
        value_name = "FILE",
        default_value = "/proc/kallsyms"
    )]
    pub kallsyms: PathBuf,
    /// Do not expand inlined functions (faster).
    #[arg(long = "no-inlines")]
    pub no_inlines: bool,
    /// No file, line or inlined functions: function names only (fastest).
    #[arg(long = "no-lines")]
    pub no_lines: bool,
    /// Symbolizer threads (default: available cores).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: Option<u16>,
}

/// Entry point of the `stacks-symbolize` binary.
pub fn run() -> Result<ExitCode> {
    // Its minute peaks: 5-10 MiB lower (docs/cost.md, Memory).
    stacks_stream::sys::map_large_allocations();
    run_with(stacks_stream::cli::parse_args::<Args>(TOOL))
}

/// Symbolize as `args` say.
pub fn run_with(args: Args) -> Result<ExitCode> {
    stacks_stream::cli::ignore_sigint();
    if let Some(v) = &args.vmlinux {
        let info = elf::read(v).map_err(|e| anyhow!("--vmlinux {e}"))?;
        if !info.has_symbols {
            return Err(anyhow!("--vmlinux {}: has no symbol table", v.display()));
        }
    }
    let debuginfod = debuginfod::Debuginfod::from_env();
    let finder = debuginfo::Finder::new(&args.binaries, &args.debug_dirs, debuginfod)
        .map_err(|e| anyhow!(e))?;
    let input = stacks_stream::cli::open_tool_input(TOOL, args.input.as_deref())?;
    let options = Options {
        vmlinux: args.vmlinux,
        kallsyms: Some(args.kallsyms),
        lines: !args.no_lines,
        inlines: !args.no_inlines,
        jobs: args.jobs.map(usize::from).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }),
    };
    let output = args.output;
    let summary = symbolize_stream(input, finder, &options, || {
        stacks_stream::io::open_sink(output.as_deref())
    })?;
    for (b, id) in summary.unused_binaries {
        eprintln!(
            "{TOOL}: -b {}: its build id {id} matches no module of the stream: not used",
            b.display()
        );
    }
    let st = summary.stats;
    let restarts = match st.restarts {
        0 => String::new(),
        n => format!("; stack dictionaries full and started afresh {n} times"),
    };
    let restarts = match st.forgotten {
        0 => restarts,
        n => format!(
            "{restarts}; resolved frames forgotten {n} times (module, frame and memory limits)"
        ),
    };
    let restarts = match st.files_dropped {
        0 => restarts,
        n => format!("{restarts}; {n} parsed files dropped after a period without a lookup"),
    };
    let restarts = match st.modules_on_fuse {
        0 => restarts,
        n => format!(
            "{restarts}; {n} module paths on FUSE file systems not opened (their frames unresolved, reason on_fuse)"
        ),
    };
    eprintln!(
        "{TOOL}: {} rows, {} distinct frames resolved ({} distinct stacks: {} stack elements in, {} frames out){restarts}",
        st.rows, st.unique, st.stacks, st.frames_in, st.frames_out
    );
    Ok(ExitCode::SUCCESS)
}
