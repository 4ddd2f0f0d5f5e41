//! `stacks-trace`: convert a stacks Arrow stream into Chrome Trace Event JSON (see the library).

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-trace", stacks_trace::cli::run)
}
