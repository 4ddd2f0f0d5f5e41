//! Shared by the bundled-query and option tests: the fixture store, running the binary, and
//! reading its NDJSON output.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
pub(crate) use stacks_testkit::recording as fixture;
use stacks_testkit::{Row, Scratch};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_stacks-query");

/// Write `rows` to `dir` as `files` Parquet files (consecutive slices). Every other file has
/// the `stack_id` column stacks-pack adds (the first one does), the others not, so queries run
/// over a store that mixes both.
pub(crate) fn write_store(dir: &Path, rows: &[Row], files: usize) {
    std::fs::create_dir_all(dir).expect("create store dir");
    let per = rows.len().div_ceil(files);
    for (i, chunk) in rows.chunks(per).enumerate() {
        let mut b = fixture::batch(chunk);
        if i % 2 == 0 {
            b = with_stack_id(&b);
        }
        stacks_testkit::write_parquet(&dir.join(format!("stacks-{i:04}.parquet")), &[b]);
    }
}

/// `b` with a `stack_id` column computed from its `stack`, as stacks-pack writes it.
fn with_stack_id(b: &arrow_array::RecordBatch) -> arrow_array::RecordBatch {
    use arrow_array::cast::AsArray;
    let stack = b.column_by_name(stacks_stream::col::STACK).unwrap();
    let ids = stacks_stream::stack_key::stack_keys(stack.as_list::<i32>(), b.num_rows()).unwrap();
    let mut fields: Vec<_> = b.schema().fields().iter().cloned().collect();
    fields.push(std::sync::Arc::new(arrow_schema::Field::new(
        stacks_stream::col::STACK_ID,
        stacks_stream::stack_id_type(),
        true,
    )));
    let schema = arrow_schema::Schema::new_with_metadata(fields, b.schema().metadata().clone());
    let mut columns = b.columns().to_vec();
    columns.push(std::sync::Arc::new(ids));
    arrow_array::RecordBatch::try_new(std::sync::Arc::new(schema), columns).unwrap()
}

/// The fixture recording (60 rows per kind) as a store of three files.
pub(crate) fn store() -> (Scratch, Vec<Row>) {
    let dir = Scratch::new("query-store");
    let rows = fixture::rows(60);
    write_store(dir.path(), &rows, 3);
    (dir, rows)
}

/// Run `stacks-query -d DIR args…` (without `STACKS_DATA` from the environment).
pub(crate) fn query(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("-d").arg(dir).args(args).env_remove("STACKS_DATA");
    stacks_testkit::run_command(cmd, b"", Duration::from_secs(300))
}

/// The result rows as JSON objects (NDJSON output).
pub(crate) fn rows_of(dir: &Path, args: &[&str]) -> Vec<Value> {
    let mut argv = args.to_vec();
    argv.extend(["-f", "ndjson"]);
    let out = query(dir, &argv);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A result stack as names, leaf first (unresolved frames as the stack functions name them).
pub(crate) fn names(stack: &Value) -> String {
    stack
        .as_array()
        .unwrap()
        .iter()
        .map(|f| match f["function"].as_str() {
            Some(name) => name.to_string(),
            None => format!("[app+{:#x}]", f["offset"].as_u64().unwrap()),
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn row_stack(r: &Row, marker: &str) -> String {
    r.names()
        .map(|n| n.join(","))
        .unwrap_or_else(|| marker.to_string())
}

pub(crate) fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

pub(crate) fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

pub(crate) type Sums = BTreeMap<String, Vec<i64>>;

/// Add `values` into the entry `key`.
pub(crate) fn add(m: &mut Sums, key: String, values: &[i64]) {
    let e = m.entry(key).or_insert_with(|| vec![0; values.len()]);
    for (a, b) in e.iter_mut().zip(values) {
        *a += b;
    }
}

/// The result as key → values, checking keys are unique.
pub(crate) fn collect(rows: &[Value], key: &dyn Fn(&Value) -> String, values: &[&str]) -> Sums {
    let mut m = Sums::new();
    for r in rows {
        let k = key(r);
        let v: Vec<i64> = values.iter().map(|c| int(&r[*c])).collect();
        assert!(m.insert(k.clone(), v).is_none(), "duplicate result row {k}");
    }
    m
}

/// The single error line of a failed run (exit 1, nothing on stdout).
pub(crate) fn error_of(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}
