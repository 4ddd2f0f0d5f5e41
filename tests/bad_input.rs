//! Bad input end to end: failed stack captures stay visible, a closed pipe is quiet, the
//! recorder and the query tool name bad arguments. The corpus of broken streams (garbage, empty,
//! truncated, wrong schema…) given to every stream tool is in robustness.rs.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use stacks_tests::{
    bin, raw_fixture, raw_fixture_with, run_command, run_tool, scratch, stack_functions,
};

fn run_with_stdin(tool: &str, args: &[&str], input: &[u8]) -> Output {
    run_tool(bin(tool), args, input, Duration::from_secs(300))
}

fn assert_one_line_error(out: &Output, tool: &str, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{tool}: exit {:?}, stderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{tool} panicked:\n{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(
        errors.len(),
        1,
        "{tool}: expected one error line:\n{stderr}"
    );
    assert!(
        errors[0].starts_with(&format!("{tool}: error: ")),
        "{tool}: {stderr}"
    );
    assert!(
        errors[0].contains(needle),
        "{tool}: expected `{needle}` in: {}",
        errors[0]
    );
}

#[test]
fn complete_fixture_passes_symbolize_with_reasons() {
    // The fixture's module does not exist: frames stay, unresolved, with a reason.
    let out = run_with_stdin("stacks-symbolize", &[], &raw_fixture(20, true));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut s =
        stacks_stream::InputStream::new("out", Box::new(std::io::Cursor::new(out.stdout))).unwrap();
    let mut rows = 0;
    while let Some(b) = s.next_batch().unwrap() {
        rows += b.num_rows();
        let stack = b.column_by_name("stack").unwrap();
        let txt = format!("{:?}", stack);
        assert!(txt.contains("not found on this machine"), "{txt}");
    }
    assert_eq!(rows, 20);
}

#[test]
fn failed_stack_captures_stay_visible() {
    let out = run_with_stdin("stacks-symbolize", &[], &raw_fixture_with(10, true, true));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s =
        stacks_stream::InputStream::new("out", Box::new(std::io::Cursor::new(out.stdout))).unwrap();
    let batches: Vec<_> = s.map(Result::unwrap).collect();
    let stacks = stack_functions(&batches);
    assert_eq!(stacks.len(), 10);
    for (row, frames) in stacks.iter().enumerate() {
        if row % 2 == 1 {
            // Not requested kernel stack: nothing; failed user stack: one marker frame.
            let marker = (Some("[missed user stack: Bad address]".to_string()), false);
            assert_eq!(frames, &vec![marker], "row {row}");
        } else {
            // One kernel and one user frame; the fixture's module does not exist.
            assert_eq!(frames.len(), 2, "row {row}");
            assert!(frames[0].1 && !frames[1].1, "row {row}: {frames:?}");
            assert_eq!(frames[1].0, None, "row {row}");
        }
    }
}

#[test]
fn closed_pipe_downstream_is_quiet_success() {
    let script = format!(
        "{} < /dev/stdin | head -c 10 > /dev/null",
        bin("stacks-symbolize").display()
    );
    let mut bash = Command::new("bash");
    bash.args(["-o", "pipefail", "-c", &script]);
    let out = run_command(bash, &raw_fixture(20_000, true), Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    assert!(!stderr.contains("error"), "{stderr}");
}

#[test]
fn recorder_rejects_bad_event_specs_by_token() {
    for (spec, needle) in [
        ("profile:x:99", "`x`"),
        ("profile:u:0", "`0`"),
        ("cycles", "`cycles`"),
        ("profile,profile", "twice"),
    ] {
        let out = Command::new(bin("stacks-record"))
            .args(["-e", spec, "-p", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_one_line_error(&out, "stacks-record", needle);
    }
}

#[test]
fn query_reports_sql_errors_and_missing_dirs() {
    let dir = scratch("q");
    let out = Command::new(bin("stacks-query"))
        .args([
            "-d",
            dir.join("nope").to_str().unwrap(),
            "-c",
            "select 1",
            "--format",
            "csv",
        ])
        .output()
        .unwrap();
    assert_one_line_error(&out, "stacks-query", "nope");
}
