//! Every bundled query over a synthetic recording of every row kind: the answers must equal
//! what the fixture rows add up to (computed here, independently of the SQL).

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;
use stacks_testkit::recording::SEC;
use stacks_testkit::{Row, Scratch};

#[test]
fn cpu_by_stack() {
    let (dir, rows) = store();
    let got = rows_of(dir.path(), &["cpu"]);
    let mut want = Sums::new();
    for r in rows.iter().filter(|r| r.kind == "profile") {
        add(
            &mut want,
            format!("{} {} {}", r.tid, span_of(r), row_stack(r, "")),
            &[1, r.value],
        );
    }
    let key = |v: &Value| {
        format!(
            "{} {} {}",
            int(&v["tid"]),
            s(&v["span_name"]),
            names(&v["stack"])
        )
    };
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
        let key = format!(
            "{} {} {} {}",
            r.tid,
            r.state.as_deref().unwrap(),
            span_of(r),
            row_stack(r, marker)
        );
        add(&mut want, key, &[c, r.value]);
    }
    assert!(folded > 0, "the fixture has folded rows");
    let key = |v: &Value| {
        format!(
            "{} {} {} {}",
            int(&v["tid"]),
            s(&v["state"]),
            s(&v["span_name"]),
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
            format!("{} {}", r.pid, r.state.as_deref().unwrap()),
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
        let key = format!(
            "{} {} {}",
            r.tid,
            r.op.as_deref().unwrap(),
            row_stack(r, "[no stack]")
        );
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
            r.op.as_deref().unwrap(),
            r.dev.as_deref().unwrap(),
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
        for r in rows
            .iter()
            .filter(|r| r.kind == "vfs" && r.op.as_deref() == Some(op))
        {
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
            r.protocol.as_deref().unwrap(),
            r.op.as_deref().unwrap(),
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
        let e = per.entry((r.kind.as_str(), entity(r))).or_default();
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

/// A fixture row's span name as the JSON output shows it (`null`: none).
fn span_of(r: &stacks_testkit::Row) -> &str {
    r.span_name.as_deref().unwrap_or("null")
}

/// The views every query builds on (stacks-sql/views/): `waits` links a `switch` row by its
/// switch-out and a `state` row by its `offcpu_since` to the `wake` row with that thread as
/// `wakee` and `time − duration` = the switch-out, a folded row to none; `observed` is one
/// row per pass and process with the pass's period. `offwake` reads `waits`.
#[test]
fn waits_and_observed_link_as_the_format_says() {
    const T: i64 = 1_700_000_000_000_000_000;
    let row = |kind: &str, tid: i32, thread: &str, at: i64| Row {
        time: T + at,
        kind: kind.into(),
        pid: if tid == 22 { 20 } else { 10 },
        tid,
        comm: "app".into(),
        thread: thread.into(),
        ..Default::default()
    };
    let switch = |at: i64, ns: i64| Row {
        state: Some("sleeping".into()),
        value: ns,
        duration: Some(ns),
        count: Some(1),
        stack: Some(fixture::stack(&["wait_a"])),
        ..row("switch", 11, "a", at)
    };
    let wake = |at: i64, waited: i64| Row {
        wakee: Some(11),
        value: waited,
        duration: Some(waited),
        stack: Some(fixture::stack(&["wake_b"])),
        ..row("wake", 22, "b", at)
    };
    let state = |at: i64, since: Option<i64>, pid: i32| Row {
        state: Some("sleeping".into()),
        value: 50_000,
        offcpu_since: since.map(|s| T + s),
        pid,
        ..row("state", 11, "a", at)
    };
    let rows = vec![
        switch(0, 1000),
        wake(800, 800),
        switch(5000, 300),
        // A folded row is no one interval: a wake row at its time is not its.
        Row {
            state: Some("sleeping".into()),
            value: 500,
            count: Some(3),
            ..row("switch", 11, "a", 9000)
        },
        wake(9100, 100),
        state(500, Some(0), 10),
        state(500, Some(0), 30),
        state(6000, None, 10),
    ];
    let dir = Scratch::new("query-waits");
    write_store(dir.path(), &rows, 2);
    let got = rows_of(
        dir.path(),
        &[
            "-c",
            "SELECT kind, pid, epoch_ns(time) - 1700000000000000000 AS t, wake_tid, wake_thread, \
             wake_value FROM waits ORDER BY kind, t, pid",
        ],
    );
    let shown: Vec<String> = got
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {} {} {}",
                s(&v["kind"]),
                int(&v["pid"]),
                int(&v["t"]),
                v["wake_tid"],
                v["wake_thread"],
                v["wake_value"]
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            "state 10 500 22 \"b\" 800",
            "state 30 500 22 \"b\" 800",
            "state 10 6000 null null null",
            "switch 10 0 22 \"b\" 800",
            "switch 10 5000 null null null",
            "switch 10 9000 null null null",
        ]
    );
    let got = rows_of(
        dir.path(),
        &[
            "-c",
            "SELECT host, pid, epoch_ns(time) - 1700000000000000000 AS t, period \
             FROM observed ORDER BY t, pid",
        ],
    );
    let shown: Vec<String> = got
        .iter()
        .map(|v| {
            format!(
                "{} {} {} {}",
                v["host"],
                int(&v["pid"]),
                int(&v["t"]),
                int(&v["period"])
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            "\"\" 10 500 50000",
            "\"\" 30 500 50000",
            "\"\" 10 6000 50000"
        ]
    );
    let got = rows_of(dir.path(), &["offwake"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (
            s(&got[0]["waker_thread"]),
            int(&got[0]["intervals"]),
            int(&got[0]["offcpu_ns"]),
            int(&got[0]["waited_ns"])
        ),
        ("b".to_string(), 1, 1000, 800)
    );
}
