//! stacks-symbolize: reads a raw stacks stream and writes the same rows plus a `stack` column of
//! symbolized frames (function, file, line, inlined frames, module), offline, via blazesym.

pub mod resolve;
pub mod transform;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use stacks_stream::{check_version, meta, open_input, open_output, stage, stamp};

/// Symbolize a raw stacks stream: every row gets a `stack` column with function names, source
/// files, lines and inlined frames for its kernel and user frames.
///
///   stacks-record -e profile -- ./app | stacks-symbolize | stacks-pack out/
///   stacks-symbolize raw.arrow -o symbolized.arrow
#[derive(Parser, Debug)]
#[command(name = "stacks-symbolize", version, verbatim_doc_comment)]
struct Args {
    /// Input stream (default: stdin).
    #[arg(value_name = "INPUT")]
    input: Option<PathBuf>,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// kallsyms file for kernel frames (must come from the boot that recorded the stream).
    #[arg(
        long = "kallsyms",
        value_name = "FILE",
        default_value = "/proc/kallsyms"
    )]
    kallsyms: PathBuf,
}

/// Entry point of the `stacks-symbolize` binary.
pub fn run() -> Result<ExitCode> {
    let args = Args::parse();
    stacks_stream::cli::ignore_sigint();
    if args.input.is_none() {
        stacks_stream::cli::refuse_tty_stdin("stacks-symbolize")?;
    }
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
    let kernel = resolve::kernel_source(
        schema.metadata().get(meta::BOOT_ID).map(String::as_str),
        Path::new(&args.kallsyms),
    );
    if let Err(why) = &kernel {
        eprintln!("stacks-symbolize: kernel frames stay unresolved: {why}");
    }
    let mut resolver = resolve::Resolver::new(kernel);
    let mut out = open_output(args.output.as_deref(), &layout.output)?;
    let mut rows = 0u64;
    while let Some(batch) = input.next_batch()? {
        let sym = transform::symbolize_batch(&batch, &layout, &mut resolver)
            .with_context(|| format!("{}: building the symbolized batch", input.name()))?;
        rows += sym.num_rows() as u64;
        out.write(&sym)?;
    }
    out.finish()?;
    eprintln!(
        "stacks-symbolize: {rows} rows, {} distinct frames resolved",
        resolver.unique_frames()
    );
    Ok(ExitCode::SUCCESS)
}
