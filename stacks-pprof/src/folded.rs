//! Folded stacks (`root;…;leaf value`, as flamegraph.pl, inferno and speedscope read them) and
//! SVG flame graphs (the inferno crate), both rendered from the aggregated profile so every
//! output format shows the same stacks and totals.

use std::collections::BTreeMap;
use std::io::Write;

use inferno::flamegraph::color::{BasicPalette, Palette};

use crate::Error;
use crate::proto::Profile;
use stacks_stream::frames::{NO_STACK_FRAME, push_folded as push_frame};
use stacks_stream::time::rfc3339;

/// What flamegraph.pl and bcc append to inlined function names (`--annotate`).
pub(crate) const INLINED_SUFFIX: &str = "_[i]";

/// Index of the sample type shown by default: the `default_sample_type`, else the last one.
pub fn default_index(p: &Profile) -> usize {
    p.sample_type
        .iter()
        .position(|t| t.r#type == p.default_sample_type && t.r#type != 0)
        .unwrap_or(p.sample_type.len().saturating_sub(1))
}

fn string(p: &Profile, i: i64) -> &str {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map_or("", String::as_str)
}

/// The samples as folded stacks, root first, with value `index` summed per distinct stack
/// (samples that differ by labels only merge) and sorted by stack; samples whose value is 0
/// are left out. Inlined functions are frames of their own, after the function containing
/// them; with `annotate` their names end in [`INLINED_SUFFIX`].
pub fn folded(p: &Profile, index: usize, annotate: bool) -> Vec<(String, i64)> {
    let locations: BTreeMap<u64, &crate::proto::Location> =
        p.location.iter().map(|l| (l.id, l)).collect();
    let functions: BTreeMap<u64, &str> = p
        .function
        .iter()
        .map(|f| (f.id, string(p, f.name)))
        .collect();
    let mut stacks: BTreeMap<String, i64> = BTreeMap::new();
    let mut line = String::new();
    for s in &p.sample {
        let value = s.value.get(index).copied().unwrap_or(0);
        if value == 0 {
            continue;
        }
        line.clear();
        for l in s
            .location_id
            .iter()
            .rev()
            .filter_map(|id| locations.get(id))
        {
            // Lines are innermost first; the last is the containing function.
            let last = l.line.len().saturating_sub(1);
            for (i, fl) in l.line.iter().enumerate().rev() {
                let name = functions.get(&fl.function_id).copied().unwrap_or("");
                if annotate && i < last {
                    push_frame(&mut line, &format!("{name}{INLINED_SUFFIX}"));
                } else {
                    push_frame(&mut line, name);
                }
            }
        }
        if line.is_empty() {
            push_frame(&mut line, NO_STACK_FRAME);
        }
        let sum = stacks.entry(line.clone()).or_insert(0);
        *sum = sum.saturating_add(value);
    }
    stacks.into_iter().collect()
}

/// Write folded stacks, one `stack value` line each.
pub fn write_folded(
    stacks: &[(String, i64)],
    mut out: impl Write,
    name: &str,
) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: name.into(),
        source,
    };
    for (stack, value) in stacks {
        writeln!(out, "{stack} {value}").map_err(err)?;
    }
    out.flush().map_err(err)
}

/// The title of a flame graph of `p`: what was recorded and where, from the stream metadata.
pub(crate) fn title(p: &Profile, index: usize) -> (String, String) {
    let comment = |key: &str| {
        p.comment
            .iter()
            .map(|c| string(p, *c))
            .find_map(|c| c.strip_prefix(key)?.strip_prefix('='))
    };
    let what = p
        .sample_type
        .get(index)
        .map(|t| format!("{} ({})", string(p, t.r#type), string(p, t.unit)))
        .unwrap_or_default();
    let mut title = format!("stacks: {what}");
    if let Some(events) = comment("events") {
        title.push_str(&format!(" — {events}"));
    }
    if let Some(host) = comment("host") {
        title.push_str(&format!(" on {host}"));
    }
    let subtitle = if p.time_nanos > 0 && p.duration_nanos == 0 {
        // Rows without times (a query that sums over them): only the recording's start.
        format!("recorded from {}", rfc3339(p.time_nanos))
    } else if p.time_nanos > 0 {
        let end = p.time_nanos.saturating_add(p.duration_nanos);
        format!(
            "{} to {} ({:.3} s)",
            rfc3339(p.time_nanos),
            rfc3339(end),
            p.duration_nanos as f64 / 1e9
        )
    } else {
        String::new()
    };
    (title, subtitle)
}

/// Write an SVG flame graph of the folded `stacks` of `p` (value `index`).
pub fn write_svg(
    p: &Profile,
    index: usize,
    stacks: &[(String, i64)],
    out: impl Write,
    name: &str,
) -> Result<(), Error> {
    let (title, subtitle) = title(p, index);
    let (kind, unit) = p
        .sample_type
        .get(index)
        .map_or(("", ""), |t| (string(p, t.r#type), string(p, t.unit)));
    let mut options = inferno::flamegraph::Options::default();
    options.title = title;
    options.subtitle = (!subtitle.is_empty()).then_some(subtitle);
    options.count_name = match unit {
        "nanoseconds" => "ns".into(),
        "count" => kind.into(),
        other => other.into(),
    };
    options.colors = Palette::Basic(match (kind, unit) {
        ("cpu" | "samples", _) => BasicPalette::Hot,
        ("rss_growth", _) => BasicPalette::Mem,
        (_, "nanoseconds" | "bytes") => BasicPalette::Io,
        _ => BasicPalette::Hot,
    });
    options.hash = true;
    // inferno takes whole counts and adds them up in a usize; negative sums (never written by
    // stacks) are left out. Totals that would overflow are drawn scaled down by a power of two,
    // which the count name says.
    let total: u128 = stacks
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(_, v)| *v as u128)
        .sum();
    let mut shift = 0;
    while total >> shift > (usize::MAX as u128) / 4 {
        shift += 1;
    }
    if shift > 0 {
        options.count_name = format!("{} ×2^{shift}", options.count_name);
    }
    let lines: Vec<String> = stacks
        .iter()
        .filter(|(_, v)| *v >> shift > 0)
        .map(|(s, v)| format!("{s} {}", v >> shift))
        .collect();
    if lines.is_empty() {
        return Err(Error::NothingToDraw);
    }
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out).map_err(
        |source| Error::Write {
            path: name.into(),
            source,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Function, Line, Location, Sample, ValueType};

    fn profile() -> Profile {
        let strings = ["", "main", "outer", "inner", "a;b", "cpu", "nanoseconds"];
        let function = (1..=4)
            .map(|i| Function {
                id: i,
                name: i as i64,
                system_name: i as i64,
                ..Default::default()
            })
            .collect();
        let line = |f| Line {
            function_id: f,
            line: 0,
            column: 0,
        };
        let location = vec![
            Location {
                id: 1,
                line: vec![line(3), line(2)],
                ..Default::default()
            },
            Location {
                id: 2,
                line: vec![line(1)],
                ..Default::default()
            },
            Location {
                id: 3,
                line: vec![line(4)],
                ..Default::default()
            },
        ];
        let sample = |ids: Vec<u64>, v| Sample {
            location_id: ids,
            value: vec![v],
            label: vec![],
        };
        Profile {
            sample_type: vec![ValueType { r#type: 5, unit: 6 }],
            default_sample_type: 5,
            sample: vec![
                sample(vec![1, 2], 10),
                sample(vec![1, 2], 5),
                sample(vec![3, 2], 7),
                sample(vec![], 3),
                sample(vec![2], 0),
            ],
            location,
            function,
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn folds_root_first_with_inlined_frames() {
        let p = profile();
        assert_eq!(default_index(&p), 0);
        let f = folded(&p, 0, false);
        assert_eq!(
            f,
            [
                ("[no stack]".to_string(), 3),
                ("main;a:b".to_string(), 7),
                ("main;outer;inner".to_string(), 15),
            ]
        );
        let f = folded(&p, 0, true);
        assert_eq!(f[2].0, "main;outer;inner_[i]");
    }

    #[test]
    fn svg_has_title_and_total() {
        let p = profile();
        let stacks = folded(&p, 0, false);
        let mut svg = Vec::new();
        write_svg(&p, 0, &stacks, &mut svg, "mem").expect("svg");
        let svg = String::from_utf8(svg).expect("utf-8");
        assert!(svg.starts_with("<?xml"), "{}", &svg[..100]);
        assert!(svg.contains("stacks: cpu (nanoseconds)"));
        assert!(svg.contains("all (25 ns, 100%)"), "total of every line");
        let err = write_svg(&p, 0, &[], &mut Vec::new(), "mem").unwrap_err();
        assert!(err.to_string().contains("no stack"), "{err}");
    }
}
