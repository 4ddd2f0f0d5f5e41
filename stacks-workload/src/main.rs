//! `stacks-workload`: programs with known behaviour, the ground truth for stacks' end-to-end
//! tests and demo. Each subcommand prints what it actually did, measured by its own clock, as
//! one JSON object on stdout.

mod cpu;
mod kernel;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "stacks-workload", version)]
struct Args {
    /// Also write the JSON report to this file.
    #[arg(long, global = true, value_name = "FILE")]
    report: Option<std::path::PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Burn CPU in two distinct functions, `burn_heavy` and `burn_light`, in a fixed ratio of
    /// iterations (default 3:1), alternating in short slices.
    Cpu(cpu::CpuArgs),
    /// Spend the time in the kernel: read /dev/zero in large chunks (function `read_zero`).
    Kernel(kernel::KernelArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.cmd {
        Cmd::Cpu(a) => cpu::run(&a),
        Cmd::Kernel(a) => kernel::run(&a),
    };
    match result {
        Ok(report) => {
            println!("{report}");
            if let Some(path) = &args.report
                && let Err(e) = std::fs::write(path, format!("{report}\n"))
            {
                eprintln!("stacks-workload: error: {}: {e}", path.display());
                return ExitCode::from(1);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("stacks-workload: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
