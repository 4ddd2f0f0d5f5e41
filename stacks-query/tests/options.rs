//! Query options over the synthetic recording: parameters (typed, defaults, hostile values
//! stay values), the stack and time functions, Parquet output and the memory limit.

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;
use stacks_testkit::Row;
use stacks_testkit::recording::{SEC, T0};

#[test]
fn parameters_filter_and_hostile_values_stay_values() {
    let (dir, rows) = store();
    let cpu_total = |rows: &[Value]| rows.iter().map(|v| int(&v["samples"])).sum::<i64>();
    let profile = |f: &dyn Fn(&Row) -> bool| {
        rows.iter().filter(|r| r.kind == "profile" && f(r)).count() as i64
    };

    // A process name with a quote in it, matched exactly.
    let got = rows_of(dir.path(), &["cpu", "--param", "comm=o'brien"]);
    assert_eq!(cpu_total(&got), profile(&|r| r.comm == "o'brien"));
    assert!(cpu_total(&got) > 0);
    // SQL in a value is a value: nothing matches, nothing else happens.
    for hostile in [
        "x' OR '1'='1",
        "%' OR 1=1 --",
        "'; DROP TABLE stacks; --",
        "$comm",
    ] {
        let got = rows_of(dir.path(), &["cpu", "--param", &format!("comm={hostile}")]);
        assert!(got.is_empty(), "{hostile}: {got:?}");
    }
    let got = rows_of(dir.path(), &["-c", "SELECT $v AS v", "-p", "v=1; SELECT 2"]);
    assert_eq!(got, vec![serde_json::json!({"v": "1; SELECT 2"})]);

    // pid and a time window.
    let got = rows_of(dir.path(), &["cpu", "-p", "pid=100"]);
    assert_eq!(cpu_total(&got), profile(&|r| r.pid == 100));
    let from = "2023-11-14T22:13:21Z";
    let to = "2023-11-14T22:13:23.5Z";
    let got = rows_of(
        dir.path(),
        &[
            "cpu",
            "-p",
            &format!("from={from}"),
            "-p",
            &format!("to={to}"),
        ],
    );
    let want = profile(&|r| r.time >= T0 + SEC && r.time < T0 + 3 * SEC + SEC / 2);
    assert_eq!(cpu_total(&got), want);
    assert!(want > 0 && want < profile(&|_| true));
    // An empty value is NULL: the default "every process" again.
    let got = rows_of(dir.path(), &["cpu", "-p", "pid="]);
    assert_eq!(cpu_total(&got), profile(&|_| true));

    // Inline SQL: types inferred from the values.
    let got = rows_of(
        dir.path(),
        &[
            "-c",
            "SELECT count(*) AS n FROM stacks WHERE pid = $p AND time >= $t AND value > $f",
            "-p",
            "p=200",
            "-p",
            "t=2023-11-14T22:13:22Z",
            "-p",
            "f=0.5",
        ],
    );
    let want = rows
        .iter()
        .filter(|r| r.pid == 200 && r.time >= T0 + 2 * SEC && r.value > 0)
        .count() as i64;
    assert_eq!(int(&got[0]["n"]), want);
}

#[test]
fn parameter_errors_name_the_parameter() {
    let (dir, _) = store();
    let err = error_of(&query(dir.path(), &["cpu", "-p", "pid=many"]));
    assert!(
        err.starts_with("stacks-query: error: --param pid=many: cpu takes an integer"),
        "{err}"
    );
    let err = error_of(&query(dir.path(), &["cpu", "-p", "colour=red"]));
    assert!(err.contains("cpu has no parameter `colour`"), "{err}");
    assert!(err.contains("comm, pid, from, to"), "{err}");
    let err = error_of(&query(dir.path(), &["-c", "SELECT $nothing FROM stacks"]));
    assert!(
        err.contains("$nothing has no value: give --param nothing=VALUE"),
        "{err}"
    );
    let err = error_of(&query(dir.path(), &["cpu", "-p", "from=yesterday"]));
    assert!(err.contains("a timestamp"), "{err}");
    let bad = query(dir.path(), &["cpu", "-p", "novalue"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn parquet_output_keeps_rows_and_metadata() {
    let (dir, rows) = store();
    let out = query(dir.path(), &["cpu", "-f", "parquet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = dir.path().join("result.parquet.out");
    std::fs::write(&file, &out.stdout).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&file).unwrap(),
    )
    .unwrap();
    let kv: BTreeMap<String, String> = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(kv["stacks.host"], "fixturehost");
    assert_eq!(kv["stacks.stage"], "query");
    let batches: Vec<_> = reader.build().unwrap().collect::<Result<_, _>>().unwrap();
    let samples: i64 = batches
        .iter()
        .map(|b| {
            arrow_array::cast::AsArray::as_primitive::<arrow_array::types::Int64Type>(
                b.column_by_name("samples").unwrap(),
            )
            .values()
            .iter()
            .sum::<i64>()
        })
        .sum();
    assert_eq!(
        samples,
        rows.iter().filter(|r| r.kind == "profile").count() as i64
    );
}

#[test]
fn memory_limit_spills_instead_of_failing() {
    // Enough distinct groups that a 1 MiB pool cannot hold the aggregation.
    let dir = stacks_testkit::Scratch::new("query");
    let mut rows = fixture::rows(4000);
    for (i, r) in rows.iter_mut().enumerate() {
        r.tid = i as i32;
    }
    write_store(dir.path(), &rows, 2);
    let sql = "SELECT tid, count(*) AS n, sum(value) AS v FROM stacks GROUP BY tid ORDER BY tid";
    let limited = rows_of(dir.path(), &["-c", sql, "--memory-limit", "4M"]);
    assert_eq!(limited.len(), rows.len());
    assert_eq!(int(&limited[7]["v"]), rows[7].value);
    let bad = query(dir.path(), &["-c", sql, "--memory-limit", "lots"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a size"));
}

#[test]
fn stack_functions_fold_filter_and_measure() {
    let (dir, rows) = store();
    let sql = "SELECT stack_fold(stack) AS folded, stack_fold(stack, ' <- ') AS arrows, \
               stack_leaf(stack) AS leaf, stack_root(stack) AS root, stack_depth(stack) AS depth, \
               stack_fold(stack_keep(stack, '^(run|main)$')) AS kept, \
               stack_fold(stack_drop(stack, '^fib$|app$')) AS dropped, \
               stack_fold(stack_or(stack, 'none')) AS marked \
               FROM stacks WHERE kind IN ('profile', 'block') ORDER BY time";
    let got = rows_of(dir.path(), &["-c", sql]);
    let want: Vec<&Row> = rows
        .iter()
        .filter(|r| r.kind == "profile" || r.kind == "block")
        .collect();
    assert_eq!(got.len(), want.len());
    for (v, r) in got.iter().zip(want) {
        let Some(names) = r.names() else {
            for col in ["folded", "leaf", "root", "depth", "kept", "dropped"] {
                assert_eq!(v[col], Value::Null, "{col} of a null stack");
            }
            assert_eq!(v["marked"], "none");
            continue;
        };
        let root_first: Vec<&str> = names.iter().rev().map(String::as_str).collect();
        assert_eq!(v["folded"], root_first.join(";"));
        assert_eq!(v["arrows"], root_first.join(" <- "));
        assert_eq!(v["marked"], root_first.join(";"));
        assert_eq!(v["leaf"], names[0].as_str());
        assert_eq!(v["root"], names[names.len() - 1].as_str());
        assert_eq!(int(&v["depth"]), names.len() as i64);
        let kept: Vec<&str> = root_first
            .iter()
            .copied()
            .filter(|f| *f == "run" || *f == "main")
            .collect();
        assert_eq!(v["kept"], kept.join(";"));
        // Every frame's module is /usr/bin/app: `app$` drops them all.
        assert_eq!(v["dropped"], "");
    }

    // stack_key: one key per distinct stack (null for none).
    let got = rows_of(
        dir.path(),
        &[
            "-c",
            "SELECT count(DISTINCT stack_key(stack)) AS keys, count(stack_key(stack)) AS keyed FROM stacks",
        ],
    );
    let mut distinct: Vec<Vec<String>> = rows.iter().filter_map(Row::names).collect();
    let keyed = distinct.len() as i64;
    distinct.sort();
    distinct.dedup();
    assert_eq!(int(&got[0]["keys"]), distinct.len() as i64);
    assert_eq!(int(&got[0]["keyed"]), keyed);

    let err = error_of(&query(
        dir.path(),
        &["-c", "SELECT stack_keep(stack, '(') FROM stacks"],
    ));
    assert!(err.contains("stack_keep: bad pattern"), "{err}");
    let err = error_of(&query(
        dir.path(),
        &["-c", "SELECT stack_leaf(pid) FROM stacks"],
    ));
    assert!(
        err.contains("stack_leaf: the first argument must be a stack"),
        "{err}"
    );
    let err = error_of(&query(
        dir.path(),
        &["-c", "SELECT time_bucket(time, 'soon') FROM stacks"],
    ));
    assert!(err.contains("is not an interval"), "{err}");
}
