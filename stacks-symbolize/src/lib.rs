//! stacks-symbolize: reads a raw stacks stream and writes the same rows plus a `stack` column of
//! symbolized frames (function, file, line, inlined frames, module), offline, via blazesym.

pub mod debuginfo;
pub mod debuginfod;
pub mod elf;
pub mod fx;
pub mod kernel;
pub mod layout;
mod lookup;
pub mod output;
pub mod resolve;
pub mod table;
pub mod transform;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;

use anyhow::{Context, Result, anyhow};
use arrow_array::RecordBatch;
use clap::Parser;
use stacks_stream::{check_version, meta, open_input, stage, stamp};

/// Symbolize a raw stacks stream: every row gets a `stack` column with function names, source
/// files, lines and inlined frames for its kernel and user frames.
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
struct Args {
    /// Input stream (default: stdin).
    #[arg(value_name = "INPUT")]
    input: Option<PathBuf>,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// A binary or debug file for the recorded module with the same build id (repeatable);
    /// used only where its build id matches.
    #[arg(short = 'b', long = "binary", value_name = "PATH")]
    binaries: Vec<PathBuf>,
    /// Directory searched recursively for debug files, matched by build id (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR")]
    debug_dirs: Vec<PathBuf>,
    /// vmlinux with DWARF of the recording kernel: adds file:line to kernel frames.
    #[arg(long = "vmlinux", value_name = "PATH")]
    vmlinux: Option<PathBuf>,
    /// kallsyms for kernel frames of streams without recorded kernel symbols (only used when
    /// the stream was recorded during this boot).
    #[arg(
        long = "kallsyms",
        value_name = "FILE",
        default_value = "/proc/kallsyms"
    )]
    kallsyms: PathBuf,
    /// Do not expand inlined functions (faster).
    #[arg(long = "no-inlines")]
    no_inlines: bool,
    /// No file, line or inlined functions: function names only (fastest).
    #[arg(long = "no-lines")]
    no_lines: bool,
    /// Symbolizer threads (default: available cores).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: Option<u16>,
}

/// Entry point of the `stacks-symbolize` binary.
pub fn run() -> Result<ExitCode> {
    let args = stacks_stream::cli::parse_args::<Args>("stacks-symbolize");
    stacks_stream::cli::ignore_sigint();
    if args.input.is_none() {
        stacks_stream::cli::refuse_tty_stdin("stacks-symbolize")?;
    }
    if let Some(v) = &args.vmlinux {
        let info = elf::read(v).map_err(|e| anyhow!("--vmlinux {e}"))?;
        if !info.has_symbols {
            return Err(anyhow!("--vmlinux {}: has no symbol table", v.display()));
        }
    }
    let debuginfod = debuginfod::Debuginfod::from_env();
    let finder = debuginfo::Finder::new(&args.binaries, &args.debug_dirs, debuginfod)
        .map_err(|e| anyhow!(e))?;
    let debug_dirs = finder.blazesym_debug_dirs();

    let mut input = open_input(args.input.as_deref())?;
    let schema = input.schema();
    check_version(&schema, input.name())?;
    let mut metadata = schema.metadata().clone();
    stamp(
        &mut metadata,
        "stacks-symbolize",
        env!("CARGO_PKG_VERSION"),
        stage::SYMBOLIZED,
    );
    let layout = transform::Layout::new(&schema, input.name(), metadata)?;
    let fallback = kernel::fallback_kallsyms(
        schema.metadata().get(meta::BOOT_ID).map(String::as_str),
        &kernel::live_boot_id(),
        Path::new(&args.kallsyms),
    );
    let opts = resolve::Options {
        lines: !args.no_lines,
        inlines: !args.no_inlines,
    };
    let jobs = args.jobs.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let kernel = transform::KernelConfig {
        vmlinux: args.vmlinux.clone(),
        fallback,
    };
    let mut sym = transform::Symbolize::new(finder, kernel).with_threads(jobs);
    let out = output::Output::open(args.output.as_deref(), &layout.output)?;
    let out_name = out.name().to_string();
    let in_name = input.name().to_string();

    // Three stages on their own threads: decode (reader), symbolize (here), encode (writer).
    let complete = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let pool = resolve::Pool::start(s, jobs, opts, debug_dirs);
        let (in_tx, in_rx) = sync_channel::<Result<RecordBatch, stacks_stream::ContractError>>(2);
        let (out_tx, out_rx) = sync_channel::<RecordBatch>(2);
        s.spawn(move || {
            while let Some(b) = input.next_batch().transpose() {
                let stop = b.is_err();
                if in_tx.send(b).is_err() || stop {
                    break;
                }
            }
        });
        let complete = &complete;
        let writer = s.spawn(move || -> Result<()> {
            let mut out = out;
            for b in out_rx {
                out.write(&b)?;
            }
            // The end-of-stream marker only for a whole input: after an input error the next
            // tool must see a truncated stream, not a complete one.
            if complete.load(Ordering::SeqCst) {
                out.finish()?;
            } else {
                out.abandon()?;
            }
            Ok(())
        });
        let mut failed = None;
        for b in in_rx {
            let batch = match b {
                Ok(b) => b,
                Err(e) => {
                    failed = Some(anyhow::Error::new(e));
                    break;
                }
            };
            let done = sym
                .batch(&batch, &layout, &pool)
                .with_context(|| format!("{in_name}: building the symbolized batch"))?;
            if out_tx.send(done).is_err() {
                break; // the writer failed: its error is reported below
            }
        }
        if failed.is_none() {
            complete.store(true, Ordering::SeqCst);
        }
        drop(out_tx);
        let written = writer
            .join()
            .map_err(|_| anyhow!("the writer thread panicked"))?;
        written.with_context(|| format!("writing {out_name}"))?;
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })?;

    for (b, id) in sym.finder().unused_binaries() {
        eprintln!(
            "stacks-symbolize: -b {}: its build id {id} matches no module of the stream: not used",
            b.display()
        );
    }
    let st = sym.stats;
    eprintln!(
        "stacks-symbolize: {} rows, {} distinct frames resolved ({} stack elements in, {} frames out)",
        st.rows, st.unique, st.frames_in, st.frames_out
    );
    Ok(ExitCode::SUCCESS)
}
