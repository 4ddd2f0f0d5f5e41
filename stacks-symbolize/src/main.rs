//! `stacks-symbolize`: adds function, file, line and inlined frames to a raw stacks stream.

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-symbolize", stacks_symbolize::run)
}
