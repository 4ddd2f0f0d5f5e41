//! The decoder on requests made by hand: the spec's three sample shapes, a kind's count matched
//! with its value, a CPU count profile weighed by its period (the OpenTelemetry profiler's
//! shape), attributes into row columns, inlined lines, a link; and each malformation refused
//! with the field named.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampNanosecondType, UInt64Type};
use arrow_array::{Array, RecordBatch};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::*;

fn s(v: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    }
}

fn i(v: i64) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::IntValue(v)),
    }
}

/// A request of one process with `profiles`; its dictionary: strings, a binary mapping, the
/// kernel's, functions `main` (main.c), `work` inlined into `loop`, `schedule` (kernel); stack
/// 1 = work/loop ← main, stack 2 = schedule ← main; attribute 1 thread.id 7, 2 thread.name
/// "worker", 3 kernel frame type, 4 state "sleeping"; link 1.
fn request(profiles: Vec<otlp::Profile>) -> ExportProfilesServiceRequest {
    let strings: Vec<String> = [
        "",
        "samples",
        "count",
        "cpu",
        "nanoseconds",
        "/usr/bin/app",
        "main",
        "main.c",
        "work",
        "loop",
        "schedule",
        "[kernel.kallsyms]",
        semconv::THREAD_ID,
        semconv::THREAD_NAME,
        semconv::FRAME_TYPE,
        "kernel",
        "offcpu",
        "intervals",
        "state",
        "inuse_space",
        "bytes",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let function = |name, file| otlp::Function {
        name_strindex: name,
        system_name_strindex: 0,
        filename_strindex: file,
        start_line: 0,
    };
    let line = |f, l| otlp::Line {
        function_index: f,
        line: l,
        column: 0,
    };
    let kv = |k: i32, v: AnyValue| otlp::KeyValueAndUnit {
        key_strindex: k,
        value: Some(v),
        unit_strindex: 0,
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![otlp::ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![
                    KeyValue {
                        key: semconv::HOST_NAME.into(),
                        value: Some(s("h1")),
                        ..Default::default()
                    },
                    KeyValue {
                        key: semconv::PROCESS_PID.into(),
                        value: Some(i(42)),
                        ..Default::default()
                    },
                    KeyValue {
                        key: semconv::PROCESS_EXECUTABLE_NAME.into(),
                        value: Some(s("app")),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            scope_profiles: vec![otlp::ScopeProfiles {
                profiles,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(otlp::ProfilesDictionary {
            mapping_table: vec![
                otlp::Mapping::default(),
                otlp::Mapping {
                    memory_start: 0x1000,
                    memory_limit: 0x9000,
                    file_offset: 0,
                    filename_strindex: 5,
                    attribute_indices: vec![],
                },
                otlp::Mapping {
                    filename_strindex: 11,
                    ..Default::default()
                },
            ],
            location_table: vec![
                otlp::Location::default(),
                otlp::Location {
                    mapping_index: 1,
                    address: 0x1234,
                    lines: vec![line(2, 10), line(3, 20)],
                    attribute_indices: vec![],
                },
                otlp::Location {
                    mapping_index: 1,
                    address: 0x1100,
                    lines: vec![line(1, 5)],
                    attribute_indices: vec![],
                },
                otlp::Location {
                    mapping_index: 2,
                    address: 0xffff_ffff_8100_0000,
                    lines: vec![line(4, 0)],
                    attribute_indices: vec![3],
                },
            ],
            function_table: vec![
                otlp::Function::default(),
                function(6, 7),
                function(8, 7),
                function(9, 7),
                function(10, 0),
            ],
            link_table: vec![
                otlp::Link {
                    trace_id: vec![0; 16],
                    span_id: vec![0; 8],
                },
                otlp::Link {
                    trace_id: (1..=16).collect(),
                    span_id: vec![0, 0, 0, 0, 0, 0, 1, 2],
                },
            ],
            string_table: strings,
            attribute_table: vec![
                otlp::KeyValueAndUnit::default(),
                kv(12, i(7)),
                kv(13, s("worker")),
                kv(14, s("kernel")),
                kv(18, s("sleeping")),
            ],
            stack_table: vec![
                otlp::Stack::default(),
                otlp::Stack {
                    location_indices: vec![1, 2],
                },
                otlp::Stack {
                    location_indices: vec![3, 2],
                },
            ],
        }),
    }
}

fn vt(t: i32, u: i32) -> Option<otlp::ValueType> {
    Some(otlp::ValueType {
        type_strindex: t,
        unit_strindex: u,
    })
}

fn sample(stack: i32, values: Vec<i64>, times: Vec<u64>) -> otlp::Sample {
    otlp::Sample {
        stack_index: stack,
        attribute_indices: vec![1, 2],
        link_index: 0,
        values,
        timestamps_unix_nano: times,
    }
}

fn rows(r: &ExportProfilesServiceRequest) -> RecordBatch {
    decode(r, &schema()).expect("decodes")
}

fn strs(b: &RecordBatch, c: &str) -> Vec<Option<String>> {
    let a = b.column_by_name(c).unwrap().as_string::<i32>();
    (0..b.num_rows())
        .map(|r| a.is_valid(r).then(|| a.value(r).to_string()))
        .collect()
}

fn i64s(b: &RecordBatch, c: &str) -> Vec<Option<i64>> {
    let a = b.column_by_name(c).unwrap().as_primitive::<Int64Type>();
    (0..b.num_rows())
        .map(|r| a.is_valid(r).then(|| a.value(r)))
        .collect()
}

/// Folded function names of each row's stack, root first.
fn folded(b: &RecordBatch) -> Vec<String> {
    let stacks = b.column_by_name(col::STACK).unwrap().as_list::<i32>();
    (0..b.num_rows())
        .map(|r| {
            if stacks.is_null(r) {
                return String::new();
            }
            let frames = stacks.value(r);
            let f = frames.as_struct();
            let names = f.column_by_name("function").unwrap().as_string::<i32>();
            let mut v: Vec<String> = (0..f.len()).map(|i| names.value(i).to_string()).collect();
            v.reverse();
            v.join(";")
        })
        .collect()
}

#[test]
fn cpu_value_with_its_count_in_every_shape() {
    let r = request(vec![
        otlp::Profile {
            sample_type: vt(3, 4),
            samples: vec![
                sample(1, vec![10, 20], vec![100, 200]),
                sample(2, vec![30], vec![]),
            ],
            time_unix_nano: 50,
            ..Default::default()
        },
        otlp::Profile {
            sample_type: vt(1, 2),
            samples: vec![
                sample(2, vec![3], vec![]),
                sample(1, vec![1, 2], vec![100, 200]),
            ],
            time_unix_nano: 50,
            ..Default::default()
        },
    ]);
    let b = rows(&r);
    assert_eq!(b.num_rows(), 3);
    assert_eq!(strs(&b, "kind"), vec![Some("profile".to_string()); 3]);
    assert_eq!(i64s(&b, "value"), vec![Some(10), Some(20), Some(30)]);
    assert_eq!(i64s(&b, "count"), vec![Some(1), Some(2), Some(3)]);
    let t = b
        .column_by_name("time")
        .unwrap()
        .as_primitive::<TimestampNanosecondType>();
    assert_eq!(t.values().to_vec(), vec![100, 200, 50]);
    assert_eq!(
        folded(&b),
        vec!["main;loop;work", "main;loop;work", "main;schedule"]
    );
    assert_eq!(strs(&b, "host"), vec![Some("h1".to_string()); 3]);
    assert_eq!(strs(&b, "comm"), vec![Some("app".to_string()); 3]);
    assert_eq!(strs(&b, "thread"), vec![Some("worker".to_string()); 3]);
    let pid = b.column_by_name("pid").unwrap().as_primitive::<Int32Type>();
    let tid = b.column_by_name("tid").unwrap().as_primitive::<Int32Type>();
    assert_eq!((pid.value(0), tid.value(0)), (42, 7));
    // The inlined line, the file offset, the kernel frame.
    let stacks = b.column_by_name(col::STACK).unwrap().as_list::<i32>();
    let first = stacks.value(0);
    let f = first.as_struct();
    let inlined = f.column_by_name("inlined").unwrap().as_boolean();
    assert!(inlined.value(0) && !inlined.value(1) && !inlined.value(2));
    let offset = f
        .column_by_name("offset")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(offset.value(0), 0x234);
    let third = stacks.value(2);
    let k = third.as_struct();
    assert!(k.column_by_name("kernel").unwrap().as_boolean().value(0));
    assert!(k.column_by_name("offset").unwrap().is_null(0));
}

#[test]
fn a_cpu_count_alone_weighs_the_period_and_timestamps_alone_count_one() {
    // The OpenTelemetry profiler's shape: samples/count, timestamps only, a period in ns.
    let r = request(vec![otlp::Profile {
        sample_type: vt(1, 2),
        period_type: vt(3, 4),
        period: 50_000_000,
        samples: vec![sample(1, vec![], vec![1, 2, 3])],
        ..Default::default()
    }]);
    let b = rows(&r);
    assert_eq!(i64s(&b, "value"), vec![Some(50_000_000); 3]);
    assert_eq!(i64s(&b, "count"), vec![Some(1); 3]);
    assert_eq!(strs(&b, "kind"), vec![Some("profile".to_string()); 3]);
}

#[test]
fn other_sample_types_name_their_kind_and_attributes_fill_columns() {
    let mut r = request(vec![
        otlp::Profile {
            sample_type: vt(19, 20),
            samples: vec![sample(1, vec![4096], vec![])],
            ..Default::default()
        },
        otlp::Profile {
            sample_type: vt(16, 4),
            samples: vec![otlp::Sample {
                attribute_indices: vec![4],
                link_index: 1,
                ..sample(2, vec![5_000], vec![9])
            }],
            ..Default::default()
        },
    ]);
    let b = rows(&r);
    assert_eq!(
        strs(&b, "kind"),
        vec![Some("inuse_space".into()), Some("switch".into())]
    );
    assert_eq!(strs(&b, "state"), vec![None, Some("sleeping".into())]);
    assert_eq!(i64s(&b, "duration"), vec![None, Some(5_000)]);
    assert_eq!(
        strs(&b, "trace_id"),
        vec![None, Some("0102030405060708090a0b0c0d0e0f10".into())]
    );
    let span = b
        .column_by_name("span_id")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(span.value(1), 0x0102);
    // A process without pid or names: zeros and empty names, the CPU unknown.
    r.resource_profiles[0].resource = None;
    for p in &mut r.resource_profiles[0].scope_profiles[0].profiles {
        for s in &mut p.samples {
            s.attribute_indices.clear();
        }
    }
    let b = rows(&r);
    let cpu = b.column_by_name("cpu").unwrap().as_primitive::<Int32Type>();
    assert_eq!(cpu.value(0), -1);
    assert_eq!(strs(&b, "comm"), vec![Some(String::new()); 2]);
    assert_eq!(strs(&b, "host"), vec![None, None]);
}

fn profile(r: &mut ExportProfilesServiceRequest) -> &mut otlp::Profile {
    &mut r.resource_profiles[0].scope_profiles[0].profiles[0]
}

#[test]
fn malformed_requests_name_the_field() {
    let good = || {
        request(vec![otlp::Profile {
            sample_type: vt(3, 4),
            samples: vec![sample(1, vec![1], vec![])],
            ..Default::default()
        }])
    };
    let refused = |r: ExportProfilesServiceRequest| decode(&r, &schema()).unwrap_err();

    let mut r = good();
    profile(&mut r).samples[0].stack_index = 9;
    let e = refused(r);
    assert_eq!(e.cause, Cause::Index);
    assert!(
        e.detail.contains("stack_index 9 is outside stack_table"),
        "{e}"
    );

    let mut r = good();
    r.dictionary.as_mut().unwrap().stack_table[1].location_indices[0] = 77;
    let e = refused(r);
    assert!(e.detail.contains("location index 77"), "{e}");

    let mut r = good();
    r.dictionary.as_mut().unwrap().location_table[1].lines[0].function_index = -1;
    assert!(refused(r).detail.contains("lines[0].function_index -1"));

    let mut r = good();
    r.dictionary.as_mut().unwrap().function_table[1].name_strindex = 500;
    assert!(
        refused(r)
            .detail
            .contains("function_table[1].name_strindex 500")
    );

    let mut r = good();
    profile(&mut r).samples[0].attribute_indices = vec![99];
    assert!(refused(r).detail.contains("attribute_indices 99"));

    let mut r = good();
    profile(&mut r).sample_type = vt(1000, 4);
    assert!(refused(r).detail.contains("type_strindex 1000"));

    let mut r = good();
    profile(&mut r).samples[0].link_index = 5;
    assert!(refused(r).detail.contains("link_index 5"));

    let mut r = good();
    r.dictionary.as_mut().unwrap().link_table[1].trace_id = vec![1; 15];
    profile(&mut r).samples[0].link_index = 1;
    let e = refused(r);
    assert_eq!(e.cause, Cause::Shape);
    assert!(e.detail.contains("trace_id has 15 bytes"), "{e}");

    let mut r = good();
    profile(&mut r).samples[0].timestamps_unix_nano = vec![1, 2];
    let e = refused(r);
    assert_eq!(e.cause, Cause::Shape);
    assert!(e.detail.contains("has 1 values and 2 timestamps"), "{e}");

    let mut r = good();
    profile(&mut r).samples[0].values.clear();
    assert!(refused(r).detail.contains("neither values nor timestamps"));

    let e = parse(&[0x0a, 0xff, 0x01, 0x02]).unwrap_err();
    assert_eq!(e.cause, Cause::Protobuf);
}
