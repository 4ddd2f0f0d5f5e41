//! Every bundled query over a synthetic recording of every row kind: the answers must equal
//! what the fixture rows add up to (computed here, independently of the SQL). Also
//! parameters (typed, defaults, hostile values stay values), Parquet output and the memory
//! limit.

mod fixture;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use fixture::{Row, SEC, T0};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_stacks-query");

fn store() -> (tempfile::TempDir, Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let rows = fixture::rows(60);
    fixture::write_store(dir.path(), &rows, 3);
    (dir, rows)
}

fn query(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("-d")
        .arg(dir)
        .args(args)
        .env_remove("STACKS_DATA")
        .output()
        .unwrap()
}

/// The result rows as JSON objects (NDJSON output).
fn rows_of(dir: &Path, args: &[&str]) -> Vec<Value> {
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
fn names(stack: &Value) -> String {
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

fn row_stack(r: &Row, marker: &str) -> String {
    r.names()
        .map(|n| n.join(","))
        .unwrap_or_else(|| marker.to_string())
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

type Sums = BTreeMap<String, Vec<i64>>;

/// Add `values` into the entry `key`.
fn add(m: &mut Sums, key: String, values: &[i64]) {
    let e = m.entry(key).or_insert_with(|| vec![0; values.len()]);
    for (a, b) in e.iter_mut().zip(values) {
        *a += b;
    }
}

/// The result as key → values, checking keys are unique.
fn collect(rows: &[Value], key: &dyn Fn(&Value) -> String, values: &[&str]) -> Sums {
    let mut m = Sums::new();
    for r in rows {
        let k = key(r);
        let v: Vec<i64> = values.iter().map(|c| int(&r[*c])).collect();
        assert!(m.insert(k.clone(), v).is_none(), "duplicate result row {k}");
    }
    m
}

#[test]
fn cpu_by_stack() {
    let (dir, rows) = store();
    let got = rows_of(dir.path(), &["cpu"]);
    let mut want = Sums::new();
    for r in rows.iter().filter(|r| r.kind == "profile") {
        add(
            &mut want,
            format!("{} {}", r.tid, row_stack(r, "")),
            &[1, r.value],
        );
    }
    let key = |v: &Value| format!("{} {}", int(&v["tid"]), names(&v["stack"]));
    assert_eq!(collect(&got, &key, &["samples", "cpu_ns"]), want);
    let samples: Vec<i64> = got.iter().map(|v| int(&v["samples"])).collect();
    assert!(
        samples.windows(2).all(|w| w[0] >= w[1]),
        "sorted by samples"
    );
}

#[test]
fn cpu_by_function_flat_and_cumulative() {
    let (dir, rows) = store();
    let got = rows_of(dir.path(), &["cpu-functions"]);
    let mut want = Sums::new();
    for r in rows.iter().filter(|r| r.kind == "profile") {
        let n = r.names().unwrap();
        add(&mut want, n[0].clone(), &[1, r.value, 0, 0]);
        let mut distinct = n.clone();
        distinct.sort();
        distinct.dedup();
        for f in distinct {
            add(&mut want, f, &[0, 0, 1, r.value]);
        }
    }
    let key = |v: &Value| s(&v["function"]);
    let cols = ["flat_samples", "flat_ns", "cum_samples", "cum_ns"];
    assert_eq!(collect(&got, &key, &cols), want);
    // `fib` recurses: counted once per sample in the cumulative figures.
    let fib = &want["fib"];
    let fib_samples = rows
        .iter()
        .filter(|r| r.kind == "profile" && r.names().unwrap()[0] == "fib")
        .count() as i64;
    assert_eq!(fib[2], fib_samples);
}

#[test]
fn offcpu_by_stack_includes_folded_intervals() {
    let (dir, rows) = store();
    let got = rows_of(dir.path(), &["offcpu"]);
    let mut want = Sums::new();
    let mut folded = 0;
    for r in rows.iter().filter(|r| r.kind == "switch") {
        let c = r.count.unwrap_or(1);
        let marker = if c > 1 {
            "[folded short off-CPU intervals]"
        } else {
            "[no stack]"
        };
        folded += i64::from(c > 1);
        let key = format!("{} {} {}", r.tid, r.state.unwrap(), row_stack(r, marker));
        add(&mut want, key, &[c, r.value]);
    }
    assert!(folded > 0, "the fixture has folded rows");
    let key = |v: &Value| {
        format!(
            "{} {} {}",
            int(&v["tid"]),
            s(&v["state"]),
            names(&v["stack"])
        )
    };
    assert_eq!(collect(&got, &key, &["intervals", "offcpu_ns"]), want);
    let total: i64 = rows
        .iter()
        .filter(|r| r.kind == "switch")
        .map(|r| r.value)
        .sum();
    assert_eq!(got.iter().map(|v| int(&v["offcpu_ns"])).sum::<i64>(), total);
}

#[test]
fn offcpu_by_state() {
    let (dir, rows) = store();
    let got = rows_of(dir.path(), &["offcpu-states"]);
    let mut want = Sums::new();
    for r in rows.iter().filter(|r| r.kind == "switch") {
        add(
            &mut want,
            format!("{} {}", r.pid, r.state.unwrap()),
            &[r.count.unwrap_or(1), r.value],
        );
    }
    let key = |v: &Value| format!("{} {}", int(&v["pid"]), s(&v["state"]));
    assert_eq!(collect(&got, &key, &["intervals", "offcpu_ns"]), want);
    for v in &got {
        assert_eq!(
            int(&v["mean_ns"]),
            int(&v["offcpu_ns"]) / int(&v["intervals"])
        );
    }
}

#[test]
fn rss_growth_by_stack() {
    let (dir, rows) = store();
    let got = rows_of(dir.path(), &["rss-growth"]);
    let mut want = Sums::new();
    for r in rows.iter().filter(|r| r.kind == "rss" && r.value > 0) {
        let key = format!("{} {} {}", r.tid, r.op.unwrap(), row_stack(r, "[no stack]"));
        add(&mut want, key, &[r.count.unwrap_or(1), r.value]);
    }
    let key = |v: &Value| format!("{} {} {}", int(&v["tid"]), s(&v["op"]), names(&v["stack"]));
    assert_eq!(collect(&got, &key, &["events", "rss_growth_bytes"]), want);
}

#[test]
fn block_bytes_and_latency() {
    let (dir, rows) = store();
    let block: Vec<&Row> = rows.iter().filter(|r| r.kind == "block").collect();
    let key_of = |r: &Row| {
        format!(
            "{} {} {} {}",
            r.tid,
            r.op.unwrap(),
            r.dev.unwrap(),
            row_stack(r, "[no stack]")
        )
    };
    let key = |v: &Value| {
        format!(
            "{} {} {} {}",
            int(&v["tid"]),
            s(&v["op"]),
            s(&v["dev"]),
            names(&v["stack"])
        )
    };

    let mut want = Sums::new();
    for r in &block {
        add(&mut want, key_of(r), &[1, r.value]);
    }
    let got = rows_of(dir.path(), &["block-bytes"]);
    assert_eq!(collect(&got, &key, &["requests", "bytes"]), want);

    let mut want = Sums::new();
    for r in block.iter().filter(|r| r.duration.is_some()) {
        add(&mut want, key_of(r), &[r.duration.unwrap(), 1, r.value]);
    }
    let got = rows_of(dir.path(), &["block-latency"]);
    assert_eq!(
        collect(&got, &key, &["latency_ns", "requests", "bytes"]),
        want
    );
}

#[test]
fn vfs_reads_and_writes() {
    let (dir, rows) = store();
    for op in ["read", "write"] {
        let mut want = Sums::new();
        for r in rows.iter().filter(|r| r.kind == "vfs" && r.op == Some(op)) {
            add(
                &mut want,
                format!("{} {}", r.tid, row_stack(r, "[no stack]")),
                &[
                    r.value,
                    1,
                    i64::from(r.errno.is_some()),
                    r.duration.unwrap(),
                ],
            );
        }
        let got = rows_of(dir.path(), &[&format!("vfs-{op}")]);
        let key = |v: &Value| format!("{} {}", int(&v["tid"]), names(&v["stack"]));
        let cols = ["bytes", "calls", "errors", "syscall_ns"];
        assert_eq!(collect(&got, &key, &cols), want, "vfs-{op}");
    }
}

#[test]
fn net_by_protocol_and_direction() {
    let (dir, rows) = store();
    let mut want = Sums::new();
    for r in rows.iter().filter(|r| r.kind == "net") {
        let key = format!(
            "{} {} {} {}",
            r.tid,
            r.protocol.unwrap(),
            r.op.unwrap(),
            row_stack(r, "[no stack]")
        );
        add(&mut want, key, &[r.value, 1]);
    }
    let got = rows_of(dir.path(), &["net"]);
    let key = |v: &Value| {
        format!(
            "{} {} {} {}",
            int(&v["tid"]),
            s(&v["protocol"]),
            s(&v["direction"]),
            names(&v["stack"])
        )
    };
    assert_eq!(collect(&got, &key, &["bytes", "calls"]), want);
}

/// Per kind, the entities ranked by total value: (kind, rank) → (entity, events, total).
fn ranking(rows: &[Row], entity: &dyn Fn(&Row) -> String, top: usize) -> Vec<String> {
    let mut per: BTreeMap<(&str, String), (i64, i64)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.kind != "lost") {
        let e = per.entry((r.kind, entity(r))).or_default();
        e.0 += r.count.unwrap_or(1);
        e.1 += r.value;
    }
    let mut out = Vec::new();
    let kinds: std::collections::BTreeSet<&str> = per.keys().map(|(k, _)| *k).collect();
    for kind in kinds {
        let mut list: Vec<(&String, &(i64, i64))> = per
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, e), v)| (e, v))
            .collect();
        list.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(b.1.0.cmp(&a.1.0)).then(a.0.cmp(b.0)));
        for (rank, (e, (events, total))) in list.into_iter().take(top).enumerate() {
            out.push(format!("{kind} {} {e} {events} {total}", rank + 1));
        }
    }
    out
}

#[test]
fn top_processes_and_threads_per_resource() {
    let (dir, rows) = store();
    let got: Vec<String> = rows_of(dir.path(), &["top-processes", "--param", "top=2"])
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {} {} {}",
                s(&v["kind"]),
                int(&v["rank"]),
                s(&v["comm"]),
                int(&v["pid"]),
                int(&v["events"]),
                int(&v["total"])
            )
        })
        .collect();
    let want = ranking(&rows, &|r| format!("{} {}", r.comm, r.pid), 2);
    assert_eq!(got, want);

    let got: Vec<String> = rows_of(dir.path(), &["top-threads", "-p", "kind=switch"])
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {} {} {} {} {}",
                s(&v["kind"]),
                int(&v["rank"]),
                s(&v["comm"]),
                int(&v["pid"]),
                int(&v["tid"]),
                s(&v["thread"]),
                int(&v["events"]),
                int(&v["total"])
            )
        })
        .collect();
    let switches: Vec<Row> = rows
        .iter()
        .filter(|r| r.kind == "switch")
        .cloned()
        .collect();
    let want = ranking(
        &switches,
        &|r| format!("{} {} {} {}", r.comm, r.pid, r.tid, r.thread),
        10,
    );
    assert_eq!(got, want);
}

#[test]
fn timeline_per_bucket() {
    let (dir, rows) = store();
    for (kind, interval, width) in [("profile", None, SEC), ("net", Some("500ms"), SEC / 2)] {
        let mut args = vec!["timeline".to_string(), "-p".into(), format!("kind={kind}")];
        if let Some(i) = interval {
            args.extend(["-p".into(), format!("interval={i}")]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let got: Vec<Vec<i64>> = rows_of(dir.path(), &argv)
            .iter()
            .map(|v| vec![int(&v["events"]), int(&v["total"])])
            .collect();
        let mut want: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.kind == kind) {
            let e = want
                .entry(r.time - r.time.rem_euclid(width))
                .or_insert(vec![0, 0]);
            e[0] += r.count.unwrap_or(1);
            e[1] += r.value;
        }
        assert_eq!(got, want.into_values().collect::<Vec<_>>(), "{kind}");
    }
}

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

fn error_of(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
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
    let dir = tempfile::tempdir().unwrap();
    let mut rows = fixture::rows(4000);
    for (i, r) in rows.iter_mut().enumerate() {
        r.tid = i as i32;
    }
    fixture::write_store(dir.path(), &rows, 2);
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
