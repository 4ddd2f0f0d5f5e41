//! Test helpers shared by the integration tests: the fixture streams (`streams.rs`, shared with
//! stacks-trace's tests) and running the `stacks-pprof` binary on them.

#![allow(dead_code)]

mod streams;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub use streams::*;

/// Run `stacks-pprof args…` with `stdin` piped in.
pub fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stacks-pprof"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stacks-pprof");
    let mut input = child.stdin.take().expect("stdin");
    // The tool may exit before reading everything (bad input); that is not a test failure.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("wait for stacks-pprof")
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stacks-pprof-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}
