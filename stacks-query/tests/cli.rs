//! End-to-end tests of the `stacks-query` binary over a fixture directory of Parquet files
//! written with the symbolized row schema.

mod common;

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_ipc::reader::StreamReader;
use arrow_schema::{DataType, Schema};
use common::{BIN, query};
use serde_json::Value;
use stacks_stream::meta;
use stacks_testkit::{Frame, Row};

/// A symbolized frame of `/usr/bin/app`, for the fixture rows.
fn frame(function: &str, line: u32, addr: u64) -> Frame {
    Frame {
        function: Some(function.into()),
        file: Some("src/main.rs".into()),
        line: Some(line),
        module: Some("/usr/bin/app".into()),
        build_id: Some("abcd".into()),
        offset: Some(addr),
        addr,
        ..Frame::default()
    }
}

/// One profile or lost row at 2025-01-02T03:04:05.000000006Z.
fn row(kind: &str, pid: i32, tid: i32, comm: &str, value: i64, stack: Option<&[Frame]>) -> Row {
    Row {
        time: 1_735_787_045_000_000_006,
        kind: kind.into(),
        pid,
        tid,
        comm: comm.into(),
        thread: format!("{comm}-t"),
        cpu: 1,
        value,
        stack: stack.map(<[Frame]>::to_vec),
        ..Row::default()
    }
}

fn metadata() -> HashMap<String, String> {
    HashMap::from([
        (meta::SCHEMA_VERSION.to_string(), "1".to_string()),
        (meta::STAGE.to_string(), "symbolized".to_string()),
        (meta::HOST.to_string(), "testhost".to_string()),
        (meta::BOOT_ID.to_string(), "boot-123".to_string()),
        (
            meta::TOOLS.to_string(),
            "stacks-record 0.1.0,stacks-symbolize 0.1.0,stacks-pack 0.1.0".to_string(),
        ),
        ("unrelated.key".to_string(), "dropped".to_string()),
    ])
}

fn write_parquet(path: &Path, rows: &[Row]) {
    let schema = Arc::new(stacks_stream::symbolized_schema(metadata()));
    stacks_testkit::write_parquet(path, &[stacks_testkit::batch(&schema, rows)]);
}

fn stack_a() -> Vec<Frame> {
    vec![frame("work", 10, 0x1010), frame("main", 20, 0x1020)]
}

fn stack_b() -> Vec<Frame> {
    vec![frame("idle", 30, 0x2030), frame("main", 20, 0x1020)]
}

/// The fixture: stack A (pid 100) has 3 samples worth 7 ms, stack B (pid 200) 2 samples worth
/// 20 ms, spread over two files (one in a subdirectory), plus a profile row without a stack, a
/// `lost` row, an unfinished dot-named Parquet file full of extra samples, and garbage files.
fn fixture() -> stacks_testkit::Scratch {
    let dir = stacks_testkit::Scratch::new("query-cli");
    let (a, b) = (stack_a(), stack_b());
    write_parquet(
        &dir.path().join("stacks-0001.parquet"),
        &[
            row("profile", 100, 101, "alpha", 1_000_000, Some(&a)),
            row("profile", 200, 200, "beta", 10_000_000, Some(&b)),
            row("profile", 100, 101, "alpha", 2_000_000, Some(&a)),
            row("lost", 0, 0, "", 42, None),
        ],
    );
    std::fs::create_dir(dir.path().join("2025")).unwrap();
    write_parquet(
        &dir.path().join("2025/stacks-0002.parquet"),
        &[
            row("profile", 100, 101, "alpha", 4_000_000, Some(&a)),
            row("profile", 200, 200, "beta", 10_000_000, Some(&b)),
            row("profile", 300, 300, "gamma", 5_000_000, None),
        ],
    );
    // Readable but unfinished: must never be read, or stack A's counts change.
    write_parquet(
        &dir.path().join(".stacks-0003.parquet"),
        &[row("profile", 100, 101, "alpha", 1, Some(&a))],
    );
    std::fs::write(dir.path().join(".stacks-0004.parquet.tmp"), b"PAR1 garbage").unwrap();
    std::fs::write(dir.path().join("README.txt"), b"not data").unwrap();
    dir
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}, stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The single stderr line of a failed run, checked to be in the `stacks-query: error:` form.
fn error_line(out: &Output, code: i32) -> String {
    stacks_testkit::assert_one_line_error(out, "stacks-query", code, "")
}

fn json_rows(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn read_arrow(bytes: &[u8]) -> (Arc<Schema>, Vec<RecordBatch>) {
    let reader = StreamReader::try_new(Cursor::new(bytes.to_vec()), None).unwrap();
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().unwrap();
    (schema, batches)
}

fn function_names(stack: &Value) -> Vec<&str> {
    stack
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect()
}

#[test]
fn cpu_query_as_json_has_exact_counts() {
    let dir = fixture();
    for name in ["cpu", "cpu.sql"] {
        let rows = json_rows(&stdout_ok(&query(dir.path(), &[name, "-f", "ndjson"])));
        let array: Value =
            serde_json::from_str(&stdout_ok(&query(dir.path(), &[name, "-f", "json"]))).unwrap();
        assert_eq!(
            array,
            Value::Array(rows.clone()),
            "json = ndjson rows in an array"
        );
        assert_eq!(rows.len(), 2, "{rows:?}");
        let (a, b) = (&rows[0], &rows[1]);
        assert_eq!(a["comm"], "alpha");
        assert_eq!(a["pid"], 100);
        assert_eq!(a["tid"], 101);
        assert_eq!(a["thread"], "alpha-t");
        assert_eq!(a["samples"], 3);
        assert_eq!(a["cpu_ns"], 7_000_000);
        assert_eq!(function_names(&a["stack"]), ["work", "main"]);
        assert_eq!(a["stack"][0]["line"], 10);
        assert_eq!(a["stack"][0]["column"], Value::Null);
        assert_eq!(b["comm"], "beta");
        assert_eq!(b["samples"], 2);
        assert_eq!(b["cpu_ns"], 20_000_000);
        assert_eq!(function_names(&b["stack"]), ["idle", "main"]);
    }
}

#[test]
fn cpu_query_as_csv() {
    let dir = fixture();
    let text = stdout_ok(&query(dir.path(), &["cpu", "--format", "csv"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[0],
        "comm,pid,tid,thread,span_name,stack,samples,cpu_ns"
    );
    assert!(
        lines[1].starts_with("alpha,100,101,alpha-t,,\"["),
        "{}",
        lines[1]
    );
    assert!(lines[1].ends_with("]\",3,7000000"), "{}", lines[1]);
    assert!(lines[1].contains("function: work"), "{}", lines[1]);
    assert!(lines[2].starts_with("beta,200,200,beta-t,"), "{}", lines[2]);
    assert!(lines[2].ends_with(",2,20000000"), "{}", lines[2]);
}

#[test]
fn cpu_query_as_table() {
    let dir = fixture();
    let text = stdout_ok(&query(dir.path(), &["cpu", "-f", "table"]));
    let header = text.lines().nth(1).unwrap();
    for col in ["comm", "pid", "tid", "thread", "stack", "samples", "cpu_ns"] {
        assert!(header.contains(&format!(" {col} ")), "{header}");
    }
    let alpha = text.lines().find(|l| l.contains("alpha")).unwrap();
    assert!(alpha.contains("function: work"), "{alpha}");
    assert!(
        alpha.trim_end().ends_with("| 3       | 7000000  |"),
        "{alpha}"
    );
    let beta = text.lines().find(|l| l.contains("beta")).unwrap();
    assert!(
        beta.trim_end().ends_with("| 2       | 20000000 |"),
        "{beta}"
    );
}

#[test]
fn arrow_output_is_the_default_on_a_pipe_and_carries_metadata() {
    let dir = fixture();
    let explicit = query(dir.path(), &["cpu", "-f", "arrow"]);
    let default = query(dir.path(), &["cpu"]);
    assert!(default.status.success() && explicit.status.success());
    assert_eq!(default.stdout, explicit.stdout);
    assert_eq!(&default.stdout[..4], &[0xff; 4], "not an Arrow IPC stream");
    let (schema, batches) = read_arrow(&default.stdout);

    let md = schema.metadata();
    assert_eq!(md[meta::HOST], "testhost");
    assert_eq!(md[meta::BOOT_ID], "boot-123");
    assert_eq!(md[meta::STAGE], "query");
    assert_eq!(md[meta::SCHEMA_VERSION], "1");
    let tools = &md[meta::TOOLS];
    assert!(tools.starts_with("stacks-record 0.1.0,"), "{tools}");
    assert!(
        tools.ends_with(&format!(",stacks-query {}", env!("CARGO_PKG_VERSION"))),
        "{tools}"
    );
    assert!(!md.contains_key("unrelated.key"), "{md:?}");

    assert_eq!(
        schema.field_with_name("comm").unwrap().data_type(),
        &DataType::Utf8
    );
    let stack = schema.field_with_name("stack").unwrap();
    assert!(stacks_stream::is_stack_type(stack.data_type()), "{stack:?}");

    let batch = arrow_select_concat(&schema, &batches);
    let samples = batch["samples"].as_primitive::<Int64Type>();
    let cpu = batch["cpu_ns"].as_primitive::<Int64Type>();
    assert_eq!(samples.values().as_ref(), &[3, 2]);
    assert_eq!(cpu.values().as_ref(), &[7_000_000, 20_000_000]);
    let comm = batch["comm"].as_string::<i32>();
    assert_eq!(comm.value(0), "alpha");
    assert_eq!(batch["stack"].as_list::<i32>().value(0).len(), 2);
}

/// All batches as one (the result is tiny).
fn arrow_select_concat(schema: &Arc<Schema>, batches: &[RecordBatch]) -> RecordBatch {
    let nonempty: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
    assert_eq!(
        nonempty.len(),
        1,
        "expected one non-empty batch: {batches:?}"
    );
    assert_eq!(nonempty[0].schema().fields(), schema.fields());
    nonempty[0].clone()
}

#[test]
fn inline_sql_in_every_format() {
    let dir = fixture();
    let sql = "-- rows per kind\nSELECT kind, count(*) AS n, sum(value) AS total \
               FROM stacks GROUP BY kind ORDER BY kind; -- trailing comment";

    let rows = json_rows(&stdout_ok(&query(dir.path(), &["-c", sql, "-f", "ndjson"])));
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0],
        serde_json::json!({"kind": "lost", "n": 1, "total": 42})
    );
    assert_eq!(
        rows[1],
        serde_json::json!({"kind": "profile", "n": 6, "total": 32_000_000})
    );

    let csv = stdout_ok(&query(dir.path(), &["-c", sql, "-f", "csv"]));
    assert_eq!(csv, "kind,n,total\nlost,1,42\nprofile,6,32000000\n");

    let table = stdout_ok(&query(dir.path(), &["-c", sql, "-f", "table"]));
    let expected = "\
+---------+---+----------+
| kind    | n | total    |
+---------+---+----------+
| lost    | 1 | 42       |
| profile | 6 | 32000000 |
+---------+---+----------+
";
    assert_eq!(table, expected);

    let out = query(dir.path(), &["-c", sql, "-f", "arrow"]);
    let (schema, batches) = read_arrow(&out.stdout);
    assert_eq!(schema.metadata()[meta::STAGE], "query");
    let batch = arrow_select_concat(&schema, &batches);
    assert_eq!(batch["kind"].as_string::<i32>().value(1), "profile");
    assert_eq!(
        batch["n"].as_primitive::<Int64Type>().values().as_ref(),
        &[1, 6]
    );
}

#[test]
fn empty_result_keeps_the_header() {
    let dir = fixture();
    let sql = "SELECT pid, stack FROM stacks WHERE pid < 0";
    assert_eq!(
        stdout_ok(&query(dir.path(), &["-c", sql, "-f", "csv"])),
        "pid,stack\n"
    );
    assert_eq!(
        stdout_ok(&query(dir.path(), &["-c", sql, "-f", "ndjson"])),
        ""
    );
    assert_eq!(
        stdout_ok(&query(dir.path(), &["-c", sql, "-f", "json"])),
        "[]\n"
    );
    let table = stdout_ok(&query(dir.path(), &["-c", sql, "-f", "table"]));
    assert!(table.contains("| pid | stack |"), "{table}");
    let (schema, batches) = read_arrow(&query(dir.path(), &["-c", sql]).stdout);
    assert_eq!(schema.fields().len(), 2);
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
}

#[test]
fn query_file_and_data_dir_from_the_environment() {
    let dir = fixture();
    let file = dir.path().join("lost.sql");
    std::fs::write(
        &file,
        "-- events lost\nSELECT sum(value) AS lost FROM stacks WHERE kind = 'lost'\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg(&file)
        .args(["-f", "csv"])
        .env("STACKS_DATA", dir.path())
        .output()
        .unwrap();
    assert_eq!(stdout_ok(&out), "lost\n42\n");
}

#[test]
fn a_single_parquet_file_can_stand_for_the_directory() {
    let dir = fixture();
    let file = dir.path().join("stacks-0001.parquet");
    let out = query(
        &file,
        &["-c", "SELECT count(*) AS n FROM stacks", "-f", "csv"],
    );
    assert_eq!(stdout_ok(&out), "n\n4\n");
}

#[test]
fn bad_sql_is_one_line_naming_the_query() {
    let dir = fixture();
    // Errors point at the SQL: QUERY:LINE:COLUMN.
    let err = error_line(&query(dir.path(), &["-c", "SELEC nonsense FROM"]), 1);
    assert!(err.starts_with("stacks-query: error: -c:1:1: "), "{err}");
    assert!(err.contains("SELEC") && !err.contains("Line:"), "{err}");

    let err = error_line(
        &query(
            dir.path(),
            &["-c", "SELECT pid,\n  no_such_column FROM stacks"],
        ),
        1,
    );
    assert!(err.starts_with("stacks-query: error: -c:2:3: "), "{err}");
    assert!(err.contains("no_such_column"), "{err}");

    let file = dir.path().join("broken.sql");
    std::fs::write(&file, "-- broken\nSELECT count(*) FROM no_such_table\n").unwrap();
    let err = error_line(&query(dir.path(), &[file.to_str().unwrap()]), 1);
    assert!(
        err.contains(&format!("error: {}:2:22: ", file.display())),
        "{err}"
    );
    assert!(err.contains("no_such_table"), "{err}");

    let err = error_line(&query(dir.path(), &["-c", "SELECT 1; SELECT 2"]), 1);
    assert!(err.starts_with("stacks-query: error: -c: "), "{err}");

    // Fails while running, not planning: still no (truncated) output in any format.
    for format in ["arrow", "csv", "json", "ndjson", "parquet", "table"] {
        let sql = "SELECT value / (pid - pid) AS boom FROM stacks";
        let err = error_line(&query(dir.path(), &["-c", sql, "-f", format]), 1);
        assert!(err.starts_with("stacks-query: error: -c: "), "{err}");
        assert!(err.to_lowercase().contains("divide by zero"), "{err}");
    }
}

#[test]
fn statements_that_change_things_are_refused() {
    let dir = fixture();
    for sql in [
        "CREATE TABLE t AS SELECT 1",
        "DROP TABLE stacks",
        "SET datafusion.execution.batch_size = 1",
    ] {
        let err = error_line(&query(dir.path(), &["-c", sql]), 1);
        assert!(err.starts_with("stacks-query: error: -c: "), "{sql}: {err}");
    }
}

#[test]
fn unknown_query_name_is_explained() {
    let dir = fixture();
    let err = error_line(&query(dir.path(), &["no-such-query"]), 1);
    assert!(err.contains("no-such-query"), "{err}");
    assert!(err.contains("bundled: cpu"), "{err}");
}

#[test]
fn missing_or_empty_directory_is_explained() {
    let base = stacks_testkit::Scratch::new("query");
    let missing = base.path().join("nowhere");
    let err = error_line(&query(&missing, &["cpu"]), 1);
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(
        err.contains(&format!("stacks-pack {}`", missing.display())),
        "{err}"
    );

    // Only unfinished files: nothing to read.
    let empty = base.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join(".x.parquet"), b"PAR1").unwrap();
    let err = error_line(&query(&empty, &["cpu"]), 1);
    assert!(err.contains(&empty.display().to_string()), "{err}");
    assert!(err.contains("no Parquet files"), "{err}");
    assert!(err.contains("stacks-pack"), "{err}");
}

#[test]
fn corrupt_parquet_file_is_named() {
    let dir = fixture();
    std::fs::write(dir.path().join("zz-broken.parquet"), b"this is not parquet").unwrap();
    let err = error_line(&query(dir.path(), &["cpu"]), 1);
    assert!(err.contains("zz-broken.parquet"), "{err}");
}

/// A Parquet file that is not stacks rows (here `{x, name}`, as pyarrow would write it) is
/// named on stderr and left out; the rest of the store still answers.
#[test]
fn foreign_parquet_file_is_named_and_skipped() {
    let dir = fixture();
    let before = stdout_ok(&query(
        dir.path(),
        &["-f", "csv", "-c", "SELECT count(*) AS n FROM stacks"],
    ));
    let schema = Arc::new(Schema::new(vec![
        arrow_schema::Field::new("x", arrow_schema::DataType::Int64, true),
        arrow_schema::Field::new("name", arrow_schema::DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(arrow_array::Int64Array::from(vec![1, 2, 3])),
            Arc::new(arrow_array::StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .unwrap();
    let path = dir.path().join("foreign.parquet");
    stacks_testkit::write_parquet(&path, &[b]);
    let out = query(
        dir.path(),
        &["-f", "csv", "-c", "SELECT count(*) AS n FROM stacks"],
    );
    assert_eq!(stdout_ok(&out), before);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: skipping")
            && err.contains("foreign.parquet")
            && err.contains("missing column `time`"),
        "{err}"
    );
    // Every bundled stack query still runs.
    for q in [
        "cpu",
        "offcpu",
        "rss-growth",
        "block-bytes",
        "vfs-read",
        "net",
    ] {
        stdout_ok(&query(dir.path(), &[q, "-f", "csv"]));
    }
    // A directory of nothing else is an error naming the directory.
    let only = stacks_testkit::Scratch::new("query");
    std::fs::copy(&path, only.path().join("foreign.parquet")).unwrap();
    let err = String::from_utf8_lossy(&query(only.path(), &["cpu"]).stderr).into_owned();
    assert!(err.contains("no stacks files"), "{err}");
}

#[test]
fn list_shows_bundled_queries() {
    let out = Command::new(BIN).arg("--list").output().unwrap();
    let text = stdout_ok(&out);
    let cpu = text.lines().find(|l| l.starts_with("cpu ")).unwrap();
    assert!(
        cpu.ends_with(
            "CPU profile by stack: samples and on-CPU time per process, thread and stack."
        ),
        "{cpu}"
    );
}

#[test]
fn query_and_command_are_exclusive_and_one_is_required() {
    let dir = fixture();
    let both = query(dir.path(), &["cpu", "-c", "SELECT 1"]);
    assert_eq!(both.status.code(), Some(2), "{both:?}");
    let neither = query(dir.path(), &[]);
    assert_eq!(neither.status.code(), Some(2), "{neither:?}");
    assert!(!String::from_utf8_lossy(&neither.stderr).is_empty());
}

#[test]
fn closed_pipe_ends_quietly() {
    let dir = fixture();
    for format in ["arrow", "csv", "json", "ndjson", "parquet", "table"] {
        let dir = dir.path().to_str().expect("utf-8 path");
        let args = ["-d", dir, "cpu", "-f", format];
        let (out, _) = stacks_testkit::run_with_closed_stdout(BIN, &args, b"");
        assert!(out.status.success(), "{format}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "{format}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
