//! End-to-end `stacks-trace -f perfetto`: the demo's mixed workload recorded with every kind a
//! thread timeline draws (CPU samples, off-CPU intervals and their wakers, thread states, block
//! and file IO, RSS), symbolized, converted, and decoded by Perfetto's own Python bindings
//! (PyPI `perfetto`, through stacks-trace/tests/perfetto_check.py, which checks the interning,
//! tracks, slices and flows as trace_processor reads them). Per thread, the trace holds as many
//! off-CPU slices, state events and CPU samples as the stream has rows, its off-CPU slices add
//! up to the rows' `duration`, and every wakeup flow joins the two threads its `wake` row
//! names; the workload's named threads are tracks, the sleeper's off-CPU slices carry its
//! nanosleep, the writer's block writes their bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use serde_json::Value;
use stacks_tests::{bpf_available, bpf_serial, check, crate_dir, read_stream, scratch, sh};

/// Per thread: what the stream's rows say the trace must hold.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    offcpu: u64,
    offcpu_ns: i64,
    states: u64,
    samples: u64,
    block_bytes: i64,
}

fn ints(batch: &RecordBatch, name: &str) -> Vec<Option<i64>> {
    let a = batch.column_by_name(name).expect(name);
    let a = arrow_cast::cast(a, &DataType::Int64).expect("cast to Int64");
    let a = a.as_primitive::<Int64Type>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

fn strs(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let a = batch.column_by_name(name).expect(name);
    let a = arrow_cast::cast(a, &DataType::Utf8).expect("cast to Utf8");
    let a = a.as_string::<i32>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
        .collect()
}

/// The rows of `stream`, counted per thread as the trace must show them; the `wake` rows'
/// (waker, wakee) pairs.
fn expected(stream: &Path) -> (BTreeMap<i64, Expected>, Vec<(i64, i64)>) {
    let mut per = BTreeMap::<i64, Expected>::new();
    let mut wakes = Vec::new();
    for b in read_stream(stream) {
        let (kind, tid, duration) = (strs(&b, "kind"), ints(&b, "tid"), ints(&b, "duration"));
        let (value, wakee, state) = (ints(&b, "value"), ints(&b, "wakee"), strs(&b, "state"));
        for i in 0..b.num_rows() {
            let Some(tid) = tid[i] else { continue };
            let e = per.entry(tid).or_default();
            match kind[i].as_deref() {
                Some("switch") => {
                    if let Some(d) = duration[i] {
                        e.offcpu += 1;
                        e.offcpu_ns += d.max(0);
                    }
                }
                // `other` is no task state Perfetto knows: only on the state lane.
                Some("state") if state[i].as_deref().is_some_and(|s| s != "other") => e.states += 1,
                Some("profile") => e.samples += 1,
                Some("block") => e.block_bytes += value[i].unwrap_or(0),
                Some("wake") => wakes.extend(wakee[i].map(|w| (tid, w))),
                _ => {}
            }
        }
    }
    per.retain(|_, e| *e != Expected::default());
    (per, wakes)
}

/// What the decoded trace holds per thread, as [`Expected`].
fn found(v: &Value) -> BTreeMap<i64, Expected> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let mut per = BTreeMap::<i64, Expected>::new();
    for (tid, t) in v["per_thread"].as_object().expect("per_thread") {
        let e = per.entry(tid.parse().unwrap()).or_default();
        for (name, s) in t["slices"].as_object().unwrap() {
            if name.starts_with("off-CPU") {
                e.offcpu += n(&s[0]);
                e.offcpu_ns += s[1].as_i64().unwrap();
            }
        }
        if let Some(block) = t["lanes"]["block"].as_object() {
            e.block_bytes = block.values().map(|s| s[2].as_i64().unwrap()).sum();
        }
    }
    for (key, field) in [("states", 0), ("perf_samples", 1)] {
        for (tid, count) in v[key].as_object().unwrap() {
            let e = per.entry(tid.parse().unwrap()).or_default();
            match field {
                0 => e.states = n(count),
                _ => e.samples = n(count),
            }
        }
    }
    per.retain(|_, e| *e != Expected::default());
    per
}

#[test]
fn mixed_workload_trace_matches_its_rows() {
    if !bpf_available("mixed_workload_trace_matches_its_rows") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("perfetto-mixed");
    let d = dir.display();
    let rec = sh(&format!(
        "stacks-record -e profile:uk:99,switch:uk,wake:k,state:uk:20,block:uk,vfs:u,rss:u:29 \
         -- stacks-workload --report {d}/report.json mixed --dir {d} --seconds 3 \
         | stacks-symbolize > {d}/sym.arrow"
    ));
    check(&rec, "recording the mixed workload");
    let trace = dir.join("trace.pftrace");
    let conv = sh(&format!(
        "stacks-trace -f perfetto {d}/sym.arrow -o {}",
        trace.display()
    ));
    check(&conv, "stacks-trace -f perfetto");
    let checker = crate_dir().join("../stacks-trace/tests/perfetto_check.py");
    let o = std::process::Command::new("python3")
        .arg(&checker)
        .arg(&trace)
        .arg("--stacks")
        .output()
        .expect("run python3");
    check(
        &o,
        "perfetto_check.py (scripts/setup installs PyPI perfetto)",
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("checker JSON");
    assert_eq!(v["errors"], serde_json::json!([]), "{}", v["errors"]);

    // Per thread, the trace has what the rows have.
    let (want, wakes) = expected(&dir.join("sym.arrow"));
    assert_eq!(found(&v), want);
    // Every flow joins the two threads its wake row names.
    let count = |pairs: &mut dyn Iterator<Item = (i64, i64)>| {
        let mut m = HashMap::<(i64, i64), u64>::new();
        for p in pairs {
            *m.entry(p).or_default() += 1;
        }
        m
    };
    let flows = count(
        &mut v["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f[0].as_i64().unwrap(), f[1].as_i64().unwrap())),
    );
    assert!(!wakes.is_empty(), "no wake rows");
    assert_eq!(flows, count(&mut wakes.into_iter()));

    // The workload's named threads are tracks.
    let tid_of = |name: &str| -> String {
        v["threads"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, t)| t["name"] == name)
            .unwrap_or_else(|| panic!("no thread track `{name}`: {}", v["threads"]))
            .0
            .clone()
    };
    for name in ["burn", "sleeper", "writer", "toucher", "tcp-client"] {
        tid_of(name);
    }
    // The sleeper's off-CPU slices carry its nanosleep.
    let stacks = v["per_thread"][tid_of("sleeper")]["offcpu_stacks"]
        .as_array()
        .unwrap()
        .clone();
    let sleeping = stacks
        .iter()
        .filter(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .any(|f| f.as_str().unwrap().contains("nanosleep"))
        })
        .count();
    assert!(
        sleeping >= 20 && sleeping * 10 >= stacks.len() * 9,
        "{sleeping} of {} off-CPU slices in nanosleep: {stacks:?}",
        stacks.len()
    );
    // The writer's block writes, with their bytes.
    let writer = &v["per_thread"][tid_of("writer")];
    let bytes: i64 = writer["lanes"]["block"]
        .as_object()
        .map(|b| {
            b.iter()
                .filter(|(name, _)| name.starts_with("block write"))
                .map(|(_, s)| s[2].as_i64().unwrap())
                .sum()
        })
        .unwrap_or(0);
    assert!(bytes > 0, "writer's block lane: {}", writer["lanes"]);
    // RSS counters, stacks interned with their kinds.
    assert!(v["counters"]["rss"].as_u64() > Some(0), "{}", v["counters"]);
    assert!(v["frame_kinds"]["KIND_KERNEL"].as_u64() > Some(0));
    assert!(v["frame_kinds"]["KIND_NATIVE"].as_u64() > Some(0));
}
