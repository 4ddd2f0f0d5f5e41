//! `stacks-agent`: always-on recording on a host, supervising the three tools.

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-agent", stacks_agent::run)
}
