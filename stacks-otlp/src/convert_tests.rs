//! Unit tests of the conversion: the fixture streams of stacks-testkit in, the request checked
//! against the spec's rules (zero elements, index ranges, sample shapes, timestamps inside the
//! window, merged duplicates) and against what stacks-pprof makes of the same stream.

use std::collections::{HashMap, HashSet};
use std::io::Cursor;

use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use stacks_stream::InputStream;
use stacks_testkit::events::{MS, START, event, events_stream, every_kind, fixture, stream};

use super::*;

fn request_of(bytes: Vec<u8>, kinds: &[&str]) -> ExportProfilesServiceRequest {
    let mut input = InputStream::new("fixture", Box::new(Cursor::new(bytes))).unwrap();
    let options = Options {
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        ..Options::default()
    };
    convert(&mut input, &options).unwrap()
}

fn pprof_of(bytes: Vec<u8>, kinds: &[&str]) -> stacks_pprof::proto::Profile {
    let mut input = InputStream::new("fixture", Box::new(Cursor::new(bytes))).unwrap();
    let options = stacks_pprof::Options {
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        ..Default::default()
    };
    stacks_pprof::convert(&mut input, &options).unwrap()
}

/// The spec's rules (profcheck's), each violation a line.
fn violations(r: &ExportProfilesServiceRequest) -> Vec<String> {
    let mut v = Vec::new();
    let Some(d) = &r.dictionary else {
        return vec!["no dictionary".into()];
    };
    let in_range = |i: i32, len: usize| i >= 0 && (i as usize) < len;
    if d.string_table.first().map(String::as_str) != Some("") {
        v.push("string_table[0] is not \"\"".into());
    }
    if d.mapping_table.first() != Some(&otlp::Mapping::default()) {
        v.push("mapping_table[0] is not zero".into());
    }
    if d.location_table.first() != Some(&otlp::Location::default()) {
        v.push("location_table[0] is not zero".into());
    }
    if d.function_table.first() != Some(&otlp::Function::default()) {
        v.push("function_table[0] is not zero".into());
    }
    if d.attribute_table.first() != Some(&otlp::KeyValueAndUnit::default()) {
        v.push("attribute_table[0] is not zero".into());
    }
    if d.stack_table.first() != Some(&otlp::Stack::default()) {
        v.push("stack_table[0] is not zero".into());
    }
    match d.link_table.first() {
        Some(l) if l.trace_id == [0; 16] && l.span_id == [0; 8] => {}
        _ => v.push("link_table[0] is not 16 + 8 zero bytes".into()),
    }
    for (i, l) in d.link_table.iter().enumerate() {
        if l.trace_id.len() != 16 || l.span_id.len() != 8 {
            v.push(format!(
                "link {i}: ids of {} and {} bytes",
                l.trace_id.len(),
                l.span_id.len()
            ));
        }
    }
    let strings = d.string_table.len();
    for (i, m) in d.mapping_table.iter().enumerate() {
        if !in_range(m.filename_strindex, strings) {
            v.push(format!("mapping {i}: filename out of range"));
        }
        if !(m.memory_start < m.memory_limit || (m.memory_start, m.memory_limit) == (0, 0)) {
            v.push(format!(
                "mapping {i}: bounds {:#x}-{:#x}",
                m.memory_start, m.memory_limit
            ));
        }
        for &a in &m.attribute_indices {
            if !in_range(a, d.attribute_table.len()) {
                v.push(format!("mapping {i}: attribute {a} out of range"));
            }
        }
    }
    for (i, f) in d.function_table.iter().enumerate().skip(1) {
        for s in [f.name_strindex, f.system_name_strindex, f.filename_strindex] {
            if !in_range(s, strings) {
                v.push(format!("function {i}: string {s} out of range"));
            }
        }
        if f.name_strindex == 0 && f.system_name_strindex == 0 && f.filename_strindex == 0 {
            v.push(format!("function {i}: no name, system name or file"));
        }
    }
    for (i, l) in d.location_table.iter().enumerate() {
        if !in_range(l.mapping_index, d.mapping_table.len()) {
            v.push(format!("location {i}: mapping out of range"));
        }
        for line in &l.lines {
            if !in_range(line.function_index, d.function_table.len()) {
                v.push(format!("location {i}: function out of range"));
            }
        }
        for &a in &l.attribute_indices {
            if !in_range(a, d.attribute_table.len()) {
                v.push(format!("location {i}: attribute {a} out of range"));
            }
        }
    }
    for (i, a) in d.attribute_table.iter().enumerate() {
        if !in_range(a.key_strindex, strings) || !in_range(a.unit_strindex, strings) {
            v.push(format!("attribute {i}: string out of range"));
        }
    }
    for (i, s) in d.stack_table.iter().enumerate() {
        for &l in &s.location_indices {
            if !in_range(l, d.location_table.len()) {
                v.push(format!("stack {i}: location {l} out of range"));
            }
        }
    }
    for rp in &r.resource_profiles {
        for sp in &rp.scope_profiles {
            for p in &sp.profiles {
                let Some(st) = p.sample_type else {
                    v.push("profile without sample type".into());
                    continue;
                };
                if !in_range(st.type_strindex, strings) || !in_range(st.unit_strindex, strings) {
                    v.push("sample type out of range".into());
                }
                let window = p.time_unix_nano..p.time_unix_nano + p.duration_nano;
                let mut seen = HashSet::new();
                let mut shape = None;
                for s in &p.samples {
                    if !in_range(s.stack_index, d.stack_table.len()) {
                        v.push(format!("sample: stack {} out of range", s.stack_index));
                    }
                    if !in_range(s.link_index, d.link_table.len()) {
                        v.push(format!("sample: link {} out of range", s.link_index));
                    }
                    let mut keys = HashSet::new();
                    for &a in &s.attribute_indices {
                        match d.attribute_table.get(a as usize) {
                            Some(kv) if a > 0 => {
                                if !keys.insert(kv.key_strindex) {
                                    v.push("sample: attribute key twice".into());
                                }
                            }
                            _ => v.push(format!("sample: attribute {a} out of range")),
                        }
                    }
                    let this = (s.values.is_empty(), s.timestamps_unix_nano.is_empty());
                    if shape.is_some_and(|s| s != this) {
                        v.push("samples of different shapes".into());
                    }
                    shape = Some(this);
                    match this {
                        (true, true) => v.push("sample without values or timestamps".into()),
                        (false, false) if s.values.len() != s.timestamps_unix_nano.len() => {
                            v.push("sample: values and timestamps of different lengths".into())
                        }
                        (false, true) if s.values.len() != 1 => {
                            v.push("sample: several values without timestamps".into())
                        }
                        _ => {}
                    }
                    for t in &s.timestamps_unix_nano {
                        if !window.contains(t) {
                            v.push(format!("sample: timestamp {t} outside {window:?}"));
                        }
                    }
                    let mut attrs = s.attribute_indices.clone();
                    attrs.sort_unstable();
                    if !seen.insert((s.stack_index, attrs, s.link_index)) {
                        v.push("duplicate sample identity".into());
                    }
                }
            }
        }
    }
    v
}

/// (type, unit) → summed values, over every profile of the request.
fn totals(r: &ExportProfilesServiceRequest) -> HashMap<(String, String), (i64, usize)> {
    let d = r.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].clone();
    let mut out: HashMap<(String, String), (i64, usize)> = HashMap::new();
    for p in r
        .resource_profiles
        .iter()
        .flat_map(|rp| &rp.scope_profiles)
        .flat_map(|sp| &sp.profiles)
    {
        let st = p.sample_type.unwrap();
        let e = out
            .entry((s(st.type_strindex), s(st.unit_strindex)))
            .or_default();
        for sample in &p.samples {
            e.0 += sample.values.iter().sum::<i64>();
            e.1 += sample.values.len();
        }
    }
    out
}

fn pprof_totals(p: &stacks_pprof::proto::Profile) -> HashMap<(String, String), i64> {
    let s = |i: i64| p.string_table[i as usize].clone();
    let mut out: HashMap<(String, String), i64> = HashMap::new();
    for (i, t) in p.sample_type.iter().enumerate() {
        let sum: i64 = p.sample.iter().map(|x| x.value[i]).sum();
        *out.entry((s(t.r#type), s(t.unit))).or_default() += sum;
    }
    out
}

#[test]
fn every_kind_follows_the_spec_and_agrees_with_pprof() {
    let rows = every_kind();
    let r = request_of(events_stream(&rows), &["all"]);
    assert_eq!(violations(&r), Vec::<String>::new());
    let p = pprof_of(events_stream(&rows), &["all"]);
    let ours = totals(&r);
    let theirs = pprof_totals(&p);
    // Kinds without rows have a pprof sample type of 0 and no OTLP profile.
    for (key, sum) in &theirs {
        assert_eq!(ours.get(key).map_or(0, |t| t.0), *sum, "{key:?}");
    }
    assert!(ours.keys().all(|k| theirs.contains_key(k)));
    // One value per row of each kind (events are not summed).
    let rows_of = |k: &str| rows.iter().filter(|r| r.kind == k).count();
    assert_eq!(
        ours[&("cpu".into(), "nanoseconds".into())].1,
        rows_of("profile")
    );
    assert_eq!(
        ours[&("offcpu".into(), "nanoseconds".into())].1,
        rows_of("switch")
    );
    assert_eq!(
        ours[&("offcpu".into(), "nanoseconds".into())].0,
        7 * MS + 400_000
    );
}

#[test]
fn events_keep_their_times_and_frames_their_types() {
    let rows = every_kind();
    let r = request_of(events_stream(&rows), &["profile"]);
    let d = r.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].as_str();
    assert_eq!(r.resource_profiles.len(), 1, "one process");
    let rp = &r.resource_profiles[0];
    let attrs: HashMap<&str, String> = rp
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(s)) => s.clone(),
                Some(Any::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.as_str(), v)
        })
        .collect();
    assert_eq!(attrs["host.name"], "testbox");
    assert_eq!(attrs["process.pid"], "10");
    assert_eq!(attrs["process.executable.name"], "app");
    let profiles = &rp.scope_profiles[0].profiles;
    assert_eq!(profiles.len(), 2, "samples/count and cpu/nanoseconds");
    let cpu = &profiles[1];
    assert_eq!(s(cpu.sample_type.unwrap().type_strindex), "cpu");
    assert_eq!(cpu.period, 1_000_000_000 / 99);
    assert_eq!(cpu.time_unix_nano, START as u64);
    // The syscall stack was hit 3 times: one sample, three events at their rows' times.
    let times: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind == "profile")
        .map(|(i, _)| i)
        .collect();
    let hot = cpu
        .samples
        .iter()
        .find(|x| x.values.len() == 3)
        .expect("a sample of three events");
    let expected: Vec<u64> = times
        .iter()
        .filter(|&&i| rows[i].stack.as_ref().is_some_and(|s| s.len() == 4))
        .map(|&i| (START + (i as i64 + 1) * MS) as u64)
        .collect();
    assert_eq!(hot.timestamps_unix_nano, expected);
    assert_eq!(hot.values, [10 * MS; 3]);
    // Its stack: the kernel frame, then `inner` inlined in `outer` (one location, inlinee
    // first), then `main`.
    let stack = &d.stack_table[hot.stack_index as usize];
    let loc = |i: usize| &d.location_table[stack.location_indices[i] as usize];
    let fname = |l: &otlp::Line| s(d.function_table[l.function_index as usize].name_strindex);
    let frame_type = |l: &otlp::Location| {
        l.attribute_indices
            .iter()
            .map(|&a| &d.attribute_table[a as usize])
            .find(|kv| s(kv.key_strindex) == "profile.frame.type")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Any::StringValue(v) => Some(v.clone()),
                _ => None,
            })
    };
    assert_eq!(stack.location_indices.len(), 3);
    assert_eq!(fname(&loc(0).lines[0]), "do_syscall_64");
    assert_eq!(frame_type(loc(0)).as_deref(), Some("kernel"));
    let names: Vec<&str> = loc(1).lines.iter().map(fname).collect();
    assert_eq!(names, ["inner", "outer"]);
    assert_eq!(frame_type(loc(1)).as_deref(), Some("native"));
    // Build ids on the app's mapping.
    let m = &d.mapping_table[loc(1).mapping_index as usize];
    assert_eq!(s(m.filename_strindex), "/usr/bin/app");
    let build_id = m
        .attribute_indices
        .iter()
        .map(|&a| &d.attribute_table[a as usize])
        .find(|kv| s(kv.key_strindex) == "process.executable.build_id.gnu");
    assert!(build_id.is_some(), "build id on the mapping");
    // Sample attributes: thread id and name.
    let keys: HashSet<&str> = hot
        .attribute_indices
        .iter()
        .map(|&a| s(d.attribute_table[a as usize].key_strindex))
        .collect();
    assert!(
        keys.contains("thread.id") && keys.contains("thread.name"),
        "{keys:?}"
    );
    assert!(!keys.contains("process.pid"), "pid is the resource's");
}

#[test]
fn a_query_result_without_time_sums_each_sample() {
    // stacks-testkit's `stream` has a time column: drop to a result without one by converting
    // the value column only; here the rows have times, so each keeps its own.
    let r = request_of(stream(&fixture()), &[]);
    assert_eq!(violations(&r), Vec::<String>::new());
    let t = totals(&r);
    assert_eq!(t[&("cpu".into(), "nanoseconds".into())], (70 * MS, 7));
    // Three processes, three resources.
    assert_eq!(r.resource_profiles.len(), 3);
}

#[test]
fn spans_become_links() {
    let mut rows = vec![event("profile", 10, MS), event("profile", 10, MS)];
    for r in &mut rows {
        r.stack = Some(vec![stacks_testkit::events::app("work", 3, false, 0x1100)]);
        r.span_id = Some(7);
        r.span_name = Some("handle".into());
        r.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
    }
    let r = request_of(events_stream(&rows), &["profile"]);
    assert_eq!(violations(&r), Vec::<String>::new());
    let d = r.dictionary.as_ref().unwrap();
    assert_eq!(d.link_table.len(), 2);
    assert_eq!(d.link_table[1].span_id, 7u64.to_be_bytes());
    let sample = &r.resource_profiles[0].scope_profiles[0].profiles[0].samples[0];
    assert_eq!(sample.link_index, 1);
    assert_eq!(sample.values.len(), 2, "both rows, one sample");
}

#[test]
fn bad_input_names_the_column() {
    let bytes = stacks_testkit::events::stream_without_stack();
    let mut input = InputStream::new("in.arrow", Box::new(Cursor::new(bytes))).unwrap();
    let err = convert(&mut input, &Options::default()).err().unwrap();
    let msg = err.to_string();
    assert!(msg.starts_with("in.arrow: missing column `stack`"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
}

#[test]
fn python_go_and_jit_frames_are_typed() {
    use stacks_testkit::Frame;
    let frame = |function: &str, file: &str, module: &str, offset: u64| Frame {
        function: Some(function.into()),
        file: Some(file.into()),
        line: Some(1),
        module: Some(module.into()),
        offset: Some(offset),
        addr: 0x1000 + offset,
        ..Frame::default()
    };
    let mut row = event("profile", 10, MS);
    row.stack = Some(vec![
        frame(
            "handler",
            "app.py",
            stacks_stream::frames::PYTHON_MODULE,
            0x10,
        ),
        frame("compiled", "", stacks_stream::frames::JIT_MODULE, 0x20),
        frame("main.serve", "/src/server/main.go", "/usr/bin/server", 0x30),
        frame("main", "src/main.c", "/usr/bin/server", 0x40),
    ]);
    let r = request_of(events_stream(&[row]), &["profile"]);
    assert_eq!(violations(&r), Vec::<String>::new());
    let d = r.dictionary.as_ref().unwrap();
    let s = |i: i32| d.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = d.location_table[1..]
        .iter()
        .map(|l| {
            let f = &d.function_table[l.lines[0].function_index as usize];
            let kv = &d.attribute_table[l.attribute_indices[0] as usize];
            assert_eq!(s(kv.key_strindex), "profile.frame.type");
            let Some(Any::StringValue(t)) = kv.value.as_ref().and_then(|v| v.value.as_ref()) else {
                panic!("a string frame type")
            };
            (s(f.name_strindex), t.as_str())
        })
        .collect();
    assert_eq!(
        types,
        [
            ("handler", "cpython"),
            ("compiled", "jit"),
            ("main.serve", "go"),
            ("main", "native")
        ]
    );
}
