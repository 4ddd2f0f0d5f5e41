//! `stacks-pprof`: convert a stacks Arrow stream into a gzipped pprof profile (see the library).

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-pprof", stacks_pprof::cli::run)
}
