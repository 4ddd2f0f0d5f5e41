//! `stacks-otlp`: convert a stacks Arrow stream into OpenTelemetry profiles, or receive them back
//! into one (see the library).

use std::process::ExitCode;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-otlp", stacks_otlp::cli::run)
}
