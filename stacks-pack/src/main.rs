//! `stacks-pack`: write a stacks Arrow stream to crash-safe, rotated Parquet files.

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-pack", stacks_pack::run)
}
