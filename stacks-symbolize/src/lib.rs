//! stacks-symbolize: reads a raw stacks stream and writes the same rows plus a `stack` column of
//! symbolized frames (function, file, line, inlined frames, module), offline, via blazesym.

#![warn(unreachable_pub)]

pub mod cli;
pub mod debuginfo;
pub mod debuginfod;
pub mod elf;
pub mod frame;
pub mod fx;
pub mod gopclntab;
pub mod kernel;
pub mod layout;
mod lookup;
pub mod pinned;
mod recent;
pub mod resolve;
pub mod table;
pub mod transform;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;

use anyhow::{Context, Result, anyhow};
use arrow_array::RecordBatch;
use stacks_stream::io::{OutputStream, Sink};
use stacks_stream::{ContractError, InputStream, check_version, meta, stage, stamp};

pub use cli::run;

/// Tool name used in messages and provenance.
pub const TOOL: &str = "stacks-symbolize";

/// How to symbolize a stream (the command line's choices, without the files to search,
/// which the [`debuginfo::Finder`] holds).
#[derive(Debug, Clone)]
pub struct Options {
    /// vmlinux with DWARF of the recording kernel: file:line for kernel frames.
    pub vmlinux: Option<PathBuf>,
    /// kallsyms for kernel frames of streams without recorded kernel symbols (used only for a
    /// stream recorded during this boot); `None`: no fallback.
    pub kallsyms: Option<PathBuf>,
    /// File and line of each frame.
    pub lines: bool,
    /// Inlined functions (with `lines`).
    pub inlines: bool,
    /// Symbolizer threads (at least 1).
    pub jobs: usize,
}

/// What a run did, for the report on stderr.
#[derive(Debug)]
pub struct Summary {
    pub stats: transform::Stats,
    /// `-b` files (and their build ids) that matched no module of the stream.
    pub unused_binaries: Vec<(PathBuf, String)>,
}

/// Symbolize `input` into the sink `open_output` creates (only once the input's layout is
/// known to be good, so a bad input clobbers no file). Three stages on their own threads:
/// decode, symbolize, encode. After an input error the output is left without its
/// end-of-stream marker, so the next tool sees a truncated stream, and the error is returned.
pub fn symbolize_stream(
    input: InputStream,
    mut finder: debuginfo::Finder,
    options: &Options,
    open_output: impl FnOnce() -> Result<Sink, ContractError>,
) -> Result<Summary> {
    let debug_dirs = finder.blazesym_debug_dirs();
    let schema = input.schema();
    check_version(&schema, input.name())?;
    // The recording host's vDSO, which its `[vdso]` frames are found in by build id.
    if let Some(hex) = schema.metadata().get(meta::VDSO) {
        let image = stacks_stream::hex::decode(hex).ok_or_else(|| {
            anyhow::anyhow!("{}: metadata {} is not hex", input.name(), meta::VDSO)
        })?;
        if let Err(e) = finder.add_image("vdso", &image) {
            eprintln!("{TOOL}: warning: {e}: vDSO frames stay unnamed");
        }
    }
    let mut metadata = schema.metadata().clone();
    stamp(
        &mut metadata,
        TOOL,
        env!("CARGO_PKG_VERSION"),
        stage::SYMBOLIZED,
    );
    let layout = transform::Layout::new(&schema, input.name(), metadata)?;
    let fallback = match &options.kallsyms {
        Some(kallsyms) => kernel::fallback_kallsyms(
            schema.metadata().get(meta::BOOT_ID).map(String::as_str),
            &stacks_stream::sys::boot_id(),
            kallsyms,
        ),
        None => Err("no kallsyms given".into()),
    };
    let resolve = resolve::Options {
        lines: options.lines,
        inlines: options.inlines,
    };
    let jobs = options.jobs.max(1);
    let kernel = transform::KernelConfig {
        vmlinux: options.vmlinux.clone(),
        fallback,
    };
    let mut sym = transform::Symbolize::new(finder, kernel).with_threads(jobs);
    let out = OutputStream::new(open_output()?, &layout.output, false)?;
    run_stages(input, out, &mut sym, &layout, jobs, resolve, debug_dirs)?;
    Ok(Summary {
        stats: sym.stats,
        unused_binaries: sym.finder().unused_binaries(),
    })
}

/// The three stages, each on its own thread: decode (reader), symbolize (the calling
/// thread, with `jobs` resolver workers), encode (writer).
fn run_stages(
    mut input: InputStream,
    out: OutputStream,
    sym: &mut transform::Symbolize,
    layout: &transform::Layout,
    jobs: usize,
    resolve: resolve::Options,
    debug_dirs: Vec<PathBuf>,
) -> Result<()> {
    let in_name = input.name().to_string();

    let complete = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let pool = resolve::Pool::start(s, jobs, resolve, debug_dirs);
        let (in_tx, in_rx) = sync_channel::<Result<RecordBatch, ContractError>>(2);
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
        let writer = s.spawn(move || -> Result<(), ContractError> {
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
                .batch(&batch, layout, &pool)
                .with_context(|| format!("{in_name}: building the symbolized batch"))?;
            if out_tx.send(done).is_err() {
                break; // the writer failed: its error is reported below
            }
        }
        if failed.is_none() {
            complete.store(true, Ordering::SeqCst);
        }
        drop(out_tx);
        writer
            .join()
            .map_err(|_| anyhow!("the writer thread panicked"))??;
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}
