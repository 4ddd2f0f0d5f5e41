//! `stacks-record`: records stack traces with the resource they explain, using BPF.

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-record", stacks_record::run)
}
