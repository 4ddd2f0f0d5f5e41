//! The `stacks-pprof` binary on good and bad input: stdin to stdout, one-line errors that name
//! the problem, no panics, no clobbered output file, quiet success on a closed pipe.

mod common;

use std::process::Output;

use common::*;
use stacks_testkit::Row;

/// Assert a failed run: exit 1, nothing on stdout, exactly one stderr line starting with
/// `stacks-pprof: error:` and containing `needle`.
fn assert_error(o: &Output, needle: &str) {
    stacks_testkit::assert_one_line_error(o, "stacks-pprof", 1, needle);
}

#[test]
fn stdin_to_stdout_round_trip() {
    let o = run(&[], &stream(&fixture()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "quiet on success: {:?}", o.stderr);
    assert_eq!(&o.stdout[..2], &[0x1f, 0x8b], "gzip output");
    let p = stacks_pprof::decode(&o.stdout).expect("decode");
    let flat = stacks_pprof::leaf_function_totals(&p, 0);
    assert_eq!(flat["do_syscall_64"], 30_000_000);
    assert_eq!(flat["busy"], 20_000_000);
    assert_eq!(flat[UNRESOLVED], 10_000_000);
    let cum = stacks_pprof::cumulative_function_totals(&p, 0);
    assert_eq!(cum["main"], 60_000_000);
    assert_eq!(cum["inner"], 30_000_000);
    // Rows of stack 1 (three, over two batches) are one sample.
    assert_eq!(p.sample.len(), 4);
}

#[test]
fn value_option_picks_the_sample_type() {
    let o = run(
        &["--value", "cpu_ns", "--value", "pid"],
        &stream(&fixture()),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = stacks_pprof::decode(&o.stdout).expect("decode");
    let name = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (name(t.r#type), name(t.unit)))
        .collect();
    assert_eq!(types, [("cpu", "nanoseconds"), ("pid", "count")]);
    assert_eq!(name(p.default_sample_type), "pid");
    let pids = stacks_pprof::leaf_function_totals(&p, 1);
    assert_eq!(pids["busy"], 4, "pid 2 twice");
}

#[test]
fn garbage_input() {
    assert_error(
        &run(&[], b"hello world, not arrow\n"),
        "not an Arrow IPC stream",
    );
}

#[test]
fn empty_input() {
    assert_error(&run(&[], b""), "empty input");
}

#[test]
fn truncated_input() {
    let full = stream(&fixture());
    assert_error(&run(&[], &full[..full.len() / 2]), "truncated");
}

#[test]
fn stream_without_stack_column() {
    assert_error(
        &run(&[], &stream_without_stack()),
        "stdin: missing column `stack`",
    );
}

#[test]
fn missing_stack_option_column() {
    assert_error(
        &run(&["--stack", "frames"], &stream(&fixture())),
        "missing column `frames`",
    );
}

#[test]
fn non_numeric_value_column() {
    assert_error(
        &run(&["--value", "comm"], &stream(&fixture())),
        "value column `comm`",
    );
}

#[test]
fn missing_input_file() {
    let dir = scratch("missing");
    let path = dir.join("nope.arrow");
    let o = run(&[path.to_str().expect("utf-8 path")], b"");
    assert_error(&o, "nope.arrow");
}

#[test]
fn bad_input_leaves_no_output_file() {
    let dir = scratch("nofile");
    let out = dir.join("out.pb.gz");
    let o = run(
        &["-o", out.to_str().expect("utf-8 path")],
        &stream_without_stack(),
    );
    assert_error(&o, "missing column `stack`");
    assert!(!out.exists(), "output file created despite the error");
}

#[test]
fn closed_stdout_is_quiet_success() {
    // The reading end is closed before the tool writes anything.
    let (o, fed) = stacks_testkit::run_with_closed_stdout(
        env!("CARGO_BIN_EXE_stacks-pprof"),
        &[],
        &stream(&fixture()),
    );
    fed.expect("feed input");
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn process_name_needs_comm() {
    // A stream with a stack and values but no `comm` column.
    let full = stream(&fixture());
    let batches: Vec<_> =
        stacks_stream::InputStream::new("fixture", Box::new(std::io::Cursor::new(full)))
            .expect("read fixture")
            .collect::<Result<_, _>>()
            .expect("batches");
    let keep: Vec<usize> = ["time", "pid", "cpu_ns", "stack"]
        .iter()
        .map(|c| batches[0].schema().index_of(c).expect("column"))
        .collect();
    let projected: Vec<_> = batches
        .iter()
        .map(|b| b.project(&keep).expect("project"))
        .collect();
    let buf = stacks_testkit::stream_bytes(&projected[0].schema(), &projected, true);
    assert_error(
        &run(&["--process-name", "--format", "folded"], &buf),
        "missing column `comm` (required: --process-name",
    );
}

#[test]
fn unknown_kind_lists_the_known_ones() {
    let events = events_stream(&every_kind());
    assert_error(
        &run(&["--kind", "profile,bogus"], &events),
        "unknown --kind `bogus` (known: profile, switch",
    );
    // --kind on a stream that is not made of event rows.
    assert_error(&run(&["--kind", "switch"], &stream(&fixture())), "--kind");
}

#[test]
fn svg_of_nothing_is_an_error() {
    // No exit rows carry stacks, but they count: a flame graph of `[no stack]`. Nothing at
    // all to draw only when no row of the kind is there.
    let events: Vec<Row> = every_kind()
        .into_iter()
        .filter(|e| e.kind != "exit")
        .collect();
    assert_error(
        &run(
            &["--format", "svg", "--kind", "exit"],
            &events_stream(&events),
        ),
        "nothing to draw",
    );
}

#[test]
fn text_formats_go_to_stdout() {
    let o = run(&["--format", "folded"], &stream(&fixture()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).expect("folded text");
    assert!(text.contains("main;busy 20000000\n"), "{text}");
    assert!(text.contains("[no stack] 10000000\n"), "{text}");
}

#[test]
fn broken_dictionaries_are_refused_or_read_as_no_stack() {
    let streams = stacks_testkit::events::broken_dictionary_streams();
    assert!(streams.len() >= 3, "{}", streams.len());
    for (what, bytes) in streams {
        let o = run(&["--format", "folded"], &bytes);
        let stderr = String::from_utf8_lossy(&o.stderr);
        if what.ends_with("null entry") {
            assert!(o.status.success(), "{what}: {stderr}");
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.lines().count() > 0, "{what}: {out}");
        } else {
            assert_error(&o, "invalid Arrow stream");
        }
    }
}
