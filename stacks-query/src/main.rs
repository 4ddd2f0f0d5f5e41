//! `stacks-query`: run SQL over a directory of stacks Parquet files.

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-query", stacks_query::run)
}
