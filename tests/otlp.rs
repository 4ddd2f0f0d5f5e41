//! End-to-end stacks-otlp: a recording of the mixed workload (CPU samples, off-CPU intervals,
//! file IO) through stacks-record → stacks-symbolize → stacks-otlp, decoded by OpenTelemetry's
//! own Python bindings (PyPI `opentelemetry-proto`, tests/otlp/check.py) and held against the
//! spec's rules, the recorded rows and what stacks-pprof makes of the same rows: every index in
//! range and every zero element at 0, per sample type as many values (and timestamps) as rows
//! of its kind and their sum, kernel frames typed `kernel`, the share of the hot function and
//! every total equal to pprof's. A stream without stacks is refused in one line naming the
//! column.

use std::collections::HashMap;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use stacks_tests::{
    assert_refused, bin, bpf_available, bpf_serial, check, crate_dir, read_stream, run_tool,
    scratch, sh,
};

/// Per sample type (`type/unit`): the sum of the values and the number of rows, from the rows
/// themselves (each kind's count, 1 where null, and its `value`, as stacks_stream::kinds says).
fn expected(batches: &[RecordBatch]) -> HashMap<String, (i64, usize)> {
    let mut out: HashMap<String, (i64, usize)> = HashMap::new();
    for b in batches {
        let column = |name: &str| {
            let i = b.schema().index_of(name).unwrap();
            arrow_cast::cast(b.column(i), &DataType::Int64).unwrap()
        };
        let kinds = arrow_cast::cast(
            b.column(b.schema().index_of("kind").unwrap()),
            &DataType::Utf8,
        )
        .unwrap();
        let kinds = kinds.as_string::<i32>();
        let (values, counts) = (column("value"), column("count"));
        let (values, counts) = (
            values.as_primitive::<Int64Type>(),
            counts.as_primitive::<Int64Type>(),
        );
        for row in 0..b.num_rows() {
            let kind = stacks_stream::kinds::get(kinds.value(row)).expect("a known kind");
            let key =
                |t: stacks_stream::kinds::SampleType| format!("{}/{}", t.name, t.unit.pprof());
            let value = if values.is_valid(row) {
                values.value(row)
            } else {
                0
            };
            let e = out.entry(key(kind.value)).or_default();
            e.0 += value;
            e.1 += 1;
            if let Some(counted) = kind.count {
                let count = if counts.is_valid(row) {
                    counts.value(row)
                } else {
                    1
                };
                let e = out.entry(key(counted)).or_default();
                e.0 += count;
                e.1 += 1;
            }
        }
    }
    out
}

/// Per sample type of a pprof profile, the sum of its values.
fn pprof_totals(p: &stacks_pprof::proto::Profile) -> HashMap<String, i64> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let mut out = HashMap::new();
    for (i, t) in p.sample_type.iter().enumerate() {
        let sum: i64 = p.sample.iter().map(|x| x.value[i]).sum();
        *out.entry(format!("{}/{}", s(t.r#type), s(t.unit)))
            .or_default() += sum;
    }
    out
}

/// tests/otlp/check.py's summary of `request`, with cumulative totals for `functions`.
fn decode(request: &Path, functions: &[&str]) -> serde_json::Value {
    let script = crate_dir().join("otlp/check.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(request)
        .args(functions)
        .output()
        .expect("python3");
    check(&out, "otlp/check.py (pip install opentelemetry-proto)");
    serde_json::from_slice(&out.stdout).expect("check.py's JSON")
}

#[test]
fn recording_decodes_and_agrees_with_rows_and_pprof() {
    if !bpf_available("recording_decodes_and_agrees_with_rows_and_pprof") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("otlp");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let rows = dir.join("rows.arrow");
    let rec = sh(&format!(
        "stacks-record -e profile:uk:499,switch:uk,vfs:u -- \
         stacks-workload mixed --dir {data} --seconds 3 | stacks-symbolize > {rows}",
        data = data.display(),
        rows = rows.display()
    ));
    check(&rec, "record | symbolize");
    let request = dir.join("all.otlp");
    let pb = dir.join("all.pb.gz");
    let conv = sh(&format!(
        "stacks-otlp --kind all {rows} -o {request} && stacks-pprof --kind all {rows} -o {pb}",
        rows = rows.display(),
        request = request.display(),
        pb = pb.display()
    ));
    check(&conv, "stacks-otlp, stacks-pprof");
    let profile = stacks_pprof::decode(&std::fs::read(&pb).unwrap()).unwrap();
    let samples = profile
        .sample_type
        .iter()
        .position(|t| profile.string_table[t.r#type as usize] == "samples")
        .expect("a samples/count sample type");
    let pprof_cumulative = stacks_pprof::cumulative_function_totals(&profile, samples);
    let (heavy, heavy_pprof) = pprof_cumulative
        .iter()
        .find(|(name, _)| name.ends_with("burn_heavy"))
        .map(|(n, v)| (n.clone(), *v))
        .expect("burn_heavy among the CPU samples");

    let summary = decode(&request, &[&heavy]);
    assert_eq!(
        summary["violations"],
        serde_json::json!([]),
        "the request breaks the spec's rules"
    );

    // Per sample type: one value and one timestamp per row of its kind, and their sum.
    let truth = expected(&read_stream(&rows));
    let totals = summary["totals"].as_object().expect("totals");
    assert_eq!(
        totals.len(),
        truth.len(),
        "sample types: {totals:?} vs {truth:?}"
    );
    for (key, (sum, n)) in &truth {
        let t = &totals[key];
        assert_eq!(t[0].as_i64(), Some(*sum), "{key}: sum of values");
        assert_eq!(t[1].as_u64(), Some(*n as u64), "{key}: values");
        assert_eq!(t[2].as_u64(), Some(*n as u64), "{key}: timestamps");
    }
    assert!(truth["cpu/nanoseconds"].1 > 100, "CPU samples: {truth:?}");
    assert!(
        truth["offcpu/nanoseconds"].1 > 10,
        "off-CPU intervals: {truth:?}"
    );

    // pprof of the same rows: the same totals, and the same CPU samples in burn_heavy.
    // (A kind without rows is a pprof sample type of 0 and no OTLP profile.)
    for (key, sum) in pprof_totals(&profile) {
        let otlp = totals.get(&key).map_or(Some(0), |t| t[0].as_i64());
        assert_eq!(otlp, Some(sum), "{key}: pprof vs OTLP");
    }
    assert_eq!(
        summary["cumulative"]["samples/count"][&heavy].as_i64(),
        Some(heavy_pprof),
        "samples in {heavy}"
    );

    // Frame types: kernel frames (the switch rows' schedule) typed `kernel`, the workload's
    // own `native`, none the other way round.
    assert_eq!(summary["kernel_mismatch"], 0);
    assert!(
        summary["frame_types"]["kernel"].as_u64() > Some(0),
        "{summary}"
    );
    assert!(
        summary["frame_types"]["native"].as_u64() > Some(0),
        "{summary}"
    );
    let keys = summary["resource_keys"].to_string();
    for key in ["host.name", "process.pid", "process.executable.name"] {
        assert!(keys.contains(key), "resource attribute {key}: {keys}");
    }
}

/// Folded stacks of `stacks-pprof --format folded ARGS` over `input`, sorted.
fn folded(input: &Path, args: &str) -> Vec<String> {
    let out = sh(&format!(
        "stacks-pprof --format folded {args} {}",
        input.display()
    ));
    check(&out, "stacks-pprof --format folded");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_query_and_a_store_round_trip_through_otlp() {
    if !bpf_available("a_query_and_a_store_round_trip_through_otlp") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("otlp-round-trip");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (rows, store) = (dir.join("rows.arrow"), dir.join("store"));
    let rec = sh(&format!(
        "stacks-record -e profile:uk:499,switch:uk,vfs:u -- \
         stacks-workload mixed --dir {data} --seconds 2 | stacks-symbolize > {rows} && \
         stacks-pack {store} < {rows}",
        data = data.display(),
        rows = rows.display(),
        store = store.display()
    ));
    check(&rec, "record | symbolize, pack");

    // stacks-query … | stacks-otlp | stacks-otlp --decode: the query's folded stacks and totals.
    let (cpu, back) = (dir.join("cpu.arrow"), dir.join("cpu.back.arrow"));
    let q = sh(&format!(
        "stacks-query -d {store} cpu --format arrow > {cpu} && \
         stacks-otlp {cpu} | stacks-otlp --decode > {back}",
        store = store.display(),
        cpu = cpu.display(),
        back = back.display()
    ));
    check(&q, "stacks-query cpu | stacks-otlp | stacks-otlp --decode");
    let before = folded(&cpu, "");
    assert!(before.len() > 5, "{before:?}");
    assert_eq!(before, folded(&back, ""), "the cpu query's folded stacks");

    // The rows pushed to the receiver, packed into a store: the same store, query by query.
    let received = dir.join("received");
    let err = dir.join("listen.err");
    let mut listen = std::process::Command::new(bin("stacks-otlp"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut pack = std::process::Command::new(bin("stacks-pack"))
        .arg(&received)
        .stdin(listen.stdout.take().unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let port = (0..200)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let text = std::fs::read_to_string(&err).unwrap_or_default();
            text.split("127.0.0.1:")
                .nth(1)
                .and_then(|r| r.split(':').next())
                .and_then(|p| p.parse::<u16>().ok())
        })
        .expect("the receiver's port");
    let push = sh(&format!(
        "stacks-otlp --kind all {rows} --endpoint http://127.0.0.1:{port} --gzip",
        rows = rows.display()
    ));
    check(&push, "stacks-otlp --endpoint to the receiver");
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &listen.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let listened = listen.wait().unwrap();
    let packed = pack.wait().unwrap();
    let log = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(listened.success() && packed.success(), "{log}");
    assert!(
        log.contains("received 1 requests") && log.contains("refused 0"),
        "{log}"
    );
    for query in ["cpu", "offcpu"] {
        let (a, b) = (
            dir.join(format!("{query}.a")),
            dir.join(format!("{query}.b")),
        );
        let q = sh(&format!(
            "stacks-query -d {store} {query} --format arrow > {a} && \
             stacks-query -d {received} {query} --format arrow > {b}",
            store = store.display(),
            received = received.display(),
            a = a.display(),
            b = b.display()
        ));
        check(&q, query);
        assert_eq!(folded(&a, ""), folded(&b, ""), "{query} over both stores");
    }
}

#[test]
fn a_stream_without_stacks_is_refused_naming_the_column() {
    let input = stacks_tests::stream_bytes(
        &arrow_schema::Schema::new(vec![arrow_schema::Field::new("n", DataType::Int64, false)]),
        &[],
        true,
    );
    let out = run_tool(
        bin("stacks-otlp"),
        &["-o", "/dev/null"],
        &input,
        std::time::Duration::from_secs(60),
    );
    assert_refused(&out, "stacks-otlp", 1, "`stack`", "no stack column");
    let out = run_tool(
        bin("stacks-otlp"),
        &["--kind", "bogus", "-o", "/dev/null"],
        &stacks_testkit_events_stream(),
        std::time::Duration::from_secs(60),
    );
    assert_refused(&out, "stacks-otlp", 1, "`bogus`", "unknown kind");
}

/// A small symbolized stream of every kind (stacks-testkit's fixture).
fn stacks_testkit_events_stream() -> Vec<u8> {
    stacks_testkit::events::events_stream(&stacks_testkit::events::every_kind())
}
