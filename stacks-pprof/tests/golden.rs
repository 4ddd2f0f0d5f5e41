//! Golden files: what `stacks-pprof` makes of a stream of every event kind, in every format,
//! compared with `tests/golden/*`. `STACKS_BLESS=1 cargo test -p stacks-pprof --test golden`
//! rewrites them after a deliberate change (review the diff). The totals are also checked
//! against the fixture's known numbers, so a blessed mistake still fails.

mod common;

use std::collections::BTreeMap;

use common::*;
use stacks_pprof::proto::Profile;

/// Compare `actual` with the golden file `name`, or rewrite it under `STACKS_BLESS=1`.
fn golden(name: &str, actual: &str) {
    stacks_testkit::golden::check_text(&golden_dir(), name, actual);
}

fn s(p: &Profile, i: i64) -> &str {
    &p.string_table[i as usize]
}

/// A readable, deterministic rendering of a profile: header facts, mappings, then one line per
/// sample: values, stack root → leaf (`(inline)` marks inlined lines, `@kernel` frames of the
/// kernel mapping, `@-` frames without mapping), labels.
fn dump(p: &Profile) -> String {
    let mut out = String::new();
    let types: Vec<String> = p
        .sample_type
        .iter()
        .map(|t| format!("{}/{}", s(p, t.r#type), s(p, t.unit)))
        .collect();
    out.push_str(&format!("sample types: {}\n", types.join(" ")));
    out.push_str(&format!("default: {}\n", s(p, p.default_sample_type)));
    if let Some(pt) = &p.period_type {
        out.push_str(&format!(
            "period: {} {}/{}\n",
            p.period,
            s(p, pt.r#type),
            s(p, pt.unit)
        ));
    }
    out.push_str(&format!(
        "time: {} duration: {}\n",
        p.time_nanos, p.duration_nanos
    ));
    for c in &p.comment {
        out.push_str(&format!("comment: {}\n", s(p, *c)));
    }
    for m in &p.mapping {
        out.push_str(&format!(
            "mapping {}: {} {} {:#x}-{:#x}\n",
            m.id,
            s(p, m.filename),
            s(p, m.build_id),
            m.memory_start,
            m.memory_limit
        ));
    }
    let kernel_mapping = p
        .mapping
        .iter()
        .find(|m| s(p, m.filename) == "[kernel.kallsyms]")
        .map(|m| m.id);
    let functions: BTreeMap<u64, &str> = p.function.iter().map(|f| (f.id, s(p, f.name))).collect();
    let mut lines: Vec<String> = p
        .sample
        .iter()
        .map(|x| {
            let mut frames = Vec::new();
            for id in x.location_id.iter().rev() {
                let l = p.location.iter().find(|l| l.id == *id).expect("location");
                let at = match l.mapping_id {
                    0 => "@-".to_string(),
                    m if Some(m) == kernel_mapping => "@kernel".to_string(),
                    _ => format!("@{:#x}", l.address),
                };
                for (i, line) in l.line.iter().enumerate().rev() {
                    let inline = if i + 1 < l.line.len() {
                        " (inline)"
                    } else {
                        ""
                    };
                    frames.push(format!(
                        "{}:{}{inline}{at}",
                        functions[&line.function_id], line.line
                    ));
                }
            }
            let mut labels: Vec<String> = x
                .label
                .iter()
                .map(|l| {
                    if l.str != 0 {
                        format!("{}={}", s(p, l.key), s(p, l.str))
                    } else {
                        format!("{}={}", s(p, l.key), l.num)
                    }
                })
                .collect();
            labels.sort();
            format!("{:?} {} [{}]", x.value, frames.join(";"), labels.join(" "))
        })
        .collect();
    lines.sort();
    out.push_str(&lines.join("\n"));
    out.push('\n');
    out
}

fn pprof(args: &[&str]) -> Profile {
    let o = run(args, &events_stream(&every_kind()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    stacks_pprof::decode(&o.stdout).expect("decode")
}

fn text(args: &[&str]) -> String {
    let o = run(args, &events_stream(&every_kind()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 output")
}

fn total(p: &Profile, name: &str) -> i64 {
    let i = p
        .sample_type
        .iter()
        .position(|t| s(p, t.r#type) == name)
        .unwrap_or_else(|| panic!("no sample type {name}"));
    p.sample.iter().map(|x| x.value[i]).sum()
}

#[test]
fn profile_rows() {
    let p = pprof(&[]);
    assert_eq!(total(&p, "samples"), 4);
    assert_eq!(total(&p, "cpu"), 40 * MS);
    assert_eq!(p.period, 1_000_000_000 / 99);
    // The recording start to the last row (the 17th, 1 ms apart).
    assert_eq!((p.time_nanos, p.duration_nanos), (START, 17 * MS));
    golden("profile.pprof.txt", &dump(&p));
}

#[test]
fn switch_rows_with_folded_short_intervals() {
    let p = pprof(&["--kind", "switch"]);
    assert_eq!(
        total(&p, "intervals"),
        2 + 4,
        "the folded row counts its intervals"
    );
    assert_eq!(total(&p, "offcpu"), 7 * MS + 400_000, "exact off-CPU time");
    assert!(p.period_type.is_none(), "switch rows are not sampled");
    let short = stacks_pprof::cumulative_function_totals(&p, 1);
    assert_eq!(short[stacks_pprof::SHORT_OFFCPU_FRAME], 400_000);
    assert_eq!(short["schedule"], 7 * MS);
    golden("switch.pprof.txt", &dump(&p));
}

#[test]
fn every_kind_at_once() {
    let p = pprof(&[
        "--kind",
        "profile,switch,rss",
        "--kind",
        "block",
        "--kind=vfs,net,exec,fork,exit,lost,probe",
    ]);
    for (name, want) in [
        ("samples", 4),
        ("cpu", 40 * MS),
        ("intervals", 6),
        ("offcpu", 7 * MS + 400_000),
        ("rss_events", 20),
        ("rss_growth", 81920),
        ("block_requests", 1),
        ("block", 8192),
        ("vfs_calls", 1),
        ("vfs", 100),
        ("net_calls", 1),
        ("net", 1500),
        ("exec", 1),
        ("fork", 1),
        ("exit", 1),
        ("lost", 2),
        ("hits", 3),
    ] {
        assert_eq!(total(&p, name), want, "{name}");
    }
    assert_eq!(p.period, 1_000_000_000 / 99, "profile rows are sampled");
    golden("every-kind.pprof.txt", &dump(&p));
}

#[test]
fn folded_bcc_style() {
    let out = text(&[
        "--format",
        "folded",
        "--annotate",
        "--process-name",
        "--delimiter",
    ]);
    assert!(
        out.contains("app;main;outer;inner_[i];-;do_syscall_64_[k] 30000000\n"),
        "{out}"
    );
    assert!(out.contains("app;main;busy 10000000\n"), "{out}");
    golden("profile-bcc.folded", &out);

    let out = text(&["--format", "folded", "--kind", "switch"]);
    let sum: i64 = out
        .lines()
        .map(|l| {
            l.rsplit_once(' ')
                .expect("value")
                .1
                .parse::<i64>()
                .expect("number")
        })
        .sum();
    assert_eq!(sum, 7 * MS + 400_000);
    assert!(
        out.contains("[folded short off-CPU intervals] 400000\n"),
        "{out}"
    );
    golden("switch.folded", &out);
}

#[test]
fn svg_flame_graph_with_metadata_title() {
    let out = text(&["--format", "svg", "--kind", "block"]);
    assert!(out.starts_with("<?xml"), "{}", &out[..out.len().min(200)]);
    assert!(out.trim_end().ends_with("</svg>"));
    assert!(
        out.contains("stacks: block (bytes)"),
        "title names the value"
    );
    assert!(out.contains(" on testbox"), "title names the host");
    assert!(
        out.contains("2023-11-14T22:13:20Z to"),
        "subtitle: time range"
    );
    assert!(
        out.contains("all (8,192 bytes, 100%)"),
        "total of the block rows"
    );
    assert!(out.contains("submit_bio"));
}

/// The fixture stream itself is kept as `every-kind.arrow`, for tests outside this crate (the
/// end-to-end rendering test) and for trying the tools by hand; it must stay what
/// [`every_kind`] builds.
#[test]
fn fixture_stream_file() {
    let stream = events_stream(&every_kind());
    assert!(
        stacks_testkit::golden::compare_bytes(&golden_dir(), "every-kind.arrow", &stream).is_none(),
        "tests/golden/every-kind.arrow is not what every_kind() builds: STACKS_BLESS=1 rewrites it"
    );
}

/// inferno reads every folded line stacks-pprof writes: its flame graph's total is the sum.
#[test]
fn inferno_accepts_folded_output() {
    for args in [
        &["--format", "folded"][..],
        &[
            "--format",
            "folded",
            "--kind",
            "switch",
            "--annotate",
            "--process-name",
        ],
        &[
            "--format",
            "folded",
            "--kind",
            "rss,block,vfs,net",
            "--delimiter",
        ],
    ] {
        let out = text(args);
        let total: i64 = out
            .lines()
            .map(|l| {
                l.rsplit_once(' ')
                    .expect("value")
                    .1
                    .parse::<i64>()
                    .expect("number")
            })
            .sum();
        let mut options = inferno::flamegraph::Options::default();
        options.count_name = "units".into();
        let mut svg = Vec::new();
        inferno::flamegraph::from_reader(&mut options, out.as_bytes(), &mut svg)
            .unwrap_or_else(|e| panic!("inferno refused {args:?}: {e}\n{out}"));
        let svg = String::from_utf8(svg).expect("utf-8 svg");
        let want = format!("all ({} units, 100%)", group_thousands(total));
        assert!(
            svg.contains(&want),
            "{args:?}: {want} not in the flame graph"
        );
    }
}

/// `1234567` → `1,234,567`, as inferno writes counts.
fn group_thousands(n: i64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A dictionary-encoded stack column (schema version 2) converts to the same output as the
/// plain one, in every format.
#[test]
fn dictionary_stacks_give_the_same_output() {
    let plain = events_stream(&every_kind());
    let encoded = stacks_testkit::events::events_stream_encoded(&every_kind());
    assert_ne!(plain, encoded);
    for args in [
        &[][..],
        &[
            "--format",
            "folded",
            "--annotate",
            "--process-name",
            "--delimiter",
        ][..],
        &["--format", "folded", "--kind", "switch"][..],
        &["--format", "svg"][..],
    ] {
        let (a, b) = (run(args, &plain), run(args, &encoded));
        assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
        assert!(a.status.success());
        if args.is_empty() {
            let (pa, pb) = (
                stacks_pprof::decode(&a.stdout).expect("decode"),
                stacks_pprof::decode(&b.stdout).expect("decode"),
            );
            assert_eq!(dump(&pb), dump(&pa));
            assert_eq!(pb, pa, "the same profile");
        } else {
            assert_eq!(
                String::from_utf8_lossy(&b.stdout),
                String::from_utf8_lossy(&a.stdout),
                "{args:?}"
            );
        }
    }
}
