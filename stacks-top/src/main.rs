//! `stacks-top`: browse a stacks store or a live recording in the terminal.

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-top", stacks_top::run)
}
