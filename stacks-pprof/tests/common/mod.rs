//! Test helpers shared by the integration tests: the fixture streams of stacks-testkit (shared
//! with stacks-trace's tests) and running the `stacks-pprof` binary on them.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

pub(crate) use stacks_testkit::events::*;

/// Run `stacks-pprof args…` with `stdin` piped in.
pub(crate) fn run(args: &[&str], stdin: &[u8]) -> Output {
    let bin = env!("CARGO_BIN_EXE_stacks-pprof");
    stacks_testkit::run_tool(bin, args, stdin, Duration::from_secs(120))
}

/// A fresh scratch directory for one test.
pub(crate) fn scratch(test: &str) -> stacks_testkit::ScratchDir {
    stacks_testkit::scratch(&format!("pprof-{test}"))
}

/// The golden files' directory, `tests/golden`.
pub(crate) fn golden_dir() -> PathBuf {
    stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}
