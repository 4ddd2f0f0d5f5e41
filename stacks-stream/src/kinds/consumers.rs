//! Tests that everything outside the Rust code that lists kinds lists the registry's: the kind
//! tables of docs/format.md and docs/top.md, and explore's `kinds.json`, which is generated
//! from [`ALL`] (`STACKS_BLESS=1` rewrites it).

use super::{ALL, Kind, Top, Unit, get, shown};
use crate::schema::col;

/// A file of the workspace, from the crate's directory at run time when cargo says it (a test
/// binary built from a clone at another path keeps that path compiled in).
fn workspace_file(rel: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("..")
        .join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(workspace_file(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The rows of the table under heading `heading` of markdown `text`, as cells (trimmed).
fn table_rows(text: &str, heading: &str) -> Vec<Vec<String>> {
    let start = text
        .lines()
        .position(|l| l.trim_start_matches('#').trim() == heading && l.starts_with('#'))
        .unwrap_or_else(|| panic!("no heading `{heading}`"));
    text.lines()
        .skip(start + 1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            // Cells split at `|`, an escaped `\|` kept in its cell.
            l.trim()
                .trim_matches('|')
                .replace("\\|", "\u{0}")
                .split('|')
                .map(|c| c.trim().replace('\u{0}', "|"))
                .collect()
        })
        .collect()
}

/// The first backquoted word of a cell.
fn first_code(cell: &str) -> &str {
    cell.split('`').nth(1).unwrap_or("")
}

#[test]
fn format_md_has_a_row_per_kind() {
    let rows = table_rows(&read("docs/format.md"), "Kinds");
    let mut listed: Vec<&str> = rows.iter().map(|r| first_code(&r[0])).collect();
    let mut want: Vec<&str> = ALL.iter().map(|k| k.name).collect();
    listed.sort_unstable();
    want.sort_unstable();
    assert_eq!(
        listed, want,
        "docs/format.md's Kinds table and stacks_stream::kinds::ALL"
    );
}

/// docs/top.md's cell of a kind's thread time: the column in backquotes, or nothing.
fn thread_ns_cell(cell: &str) -> Option<&str> {
    Some(first_code(cell)).filter(|c| !c.is_empty())
}

#[test]
fn top_md_says_what_the_registry_says() {
    let rows = table_rows(&read("docs/top.md"), "Kinds");
    for row in &rows {
        let [kind, group, thread_ns, bytes, latency] = &row[..] else {
            panic!("docs/top.md Kinds row of 5 cells: {row:?}");
        };
        let name = first_code(kind);
        let k = get(name).unwrap_or_else(|| panic!("docs/top.md: `{name}` is not a kind"));
        let top = k
            .top
            .unwrap_or_else(|| panic!("docs/top.md lists `{name}`, which stacks-top never shows"));
        assert_eq!(*group, top.group.join(", "), "{name}: default grouping");
        assert_eq!(thread_ns_cell(thread_ns), top.thread_ns, "{name}: avg_thr");
        assert_eq!(bytes == "✓", k.unit == Unit::Bytes, "{name}: bytes");
        assert_eq!(!latency.is_empty(), top.latency, "{name}: latency");
    }
    for (k, _) in shown() {
        assert!(
            rows.iter().any(|r| first_code(&r[0]) == k.name),
            "docs/top.md's Kinds table has no row for `{}`",
            k.name
        );
    }
}

/// `s` as a JSON string.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_list(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|s| json_str(s)).collect();
    format!("[{}]", items.join(", "))
}

fn json_opt(s: Option<&str>) -> String {
    s.map_or("null".to_string(), json_str)
}

fn json_top(top: Option<&Top>) -> String {
    match top {
        None => "null".to_string(),
        Some(t) => format!(
            "{{\"thread_ns\": {}, \"latency\": {}, \"group\": {}}}",
            json_opt(t.thread_ns),
            t.latency,
            json_list(t.group)
        ),
    }
}

fn json_kind(k: &Kind) -> String {
    [
        format!("      \"name\": {}", json_str(k.name)),
        format!("      \"description\": {}", json_str(k.description)),
        format!("      \"unit\": {}", json_str(k.unit.short())),
        format!("      \"value\": {}", json_str(k.value.name)),
        format!("      \"count\": {}", json_opt(k.count.map(|c| c.name))),
        format!("      \"stacks\": {}", k.stacks),
        format!(
            "      \"columns\": {}",
            json_list(&k.columns.iter().map(|(c, _)| *c).collect::<Vec<_>>())
        ),
        format!("      \"top\": {}", json_top(k.top.as_ref())),
        format!(
            "      \"ring\": {}",
            json_opt(k.ring.map(|r| match r {
                super::Ring::Samples => "samples",
                super::Ring::Io => "io",
                super::Ring::Probes => "probes",
            }))
        ),
        format!(
            "      \"sampling\": {}",
            json_str(match k.sampling {
                super::Sampling::Event => "event",
                super::Sampling::Rate => "rate",
                super::Sampling::Passes => "passes",
                super::Sampling::OneIn => "one_in",
                super::Sampling::KeptOneIn { .. } => "kept_one_in",
            })
        ),
    ]
    .join(",\n")
}

/// explore's copy of the registry: what the notebooks need of each kind.
fn kinds_json() -> String {
    let kinds: Vec<String> = ALL
        .iter()
        .map(|k| format!("    {{\n{}\n    }}", json_kind(k)))
        .collect();
    format!(
        "{{\n  \"about\": {},\n  \"kinds\": [\n{}\n  ]\n}}\n",
        json_str(
            "Generated from stacks_stream::kinds (stacks-stream/src/kinds/): \
             STACKS_BLESS=1 cargo test -p stacks-stream kinds_json rewrites it."
        ),
        kinds.join(",\n")
    )
}

#[test]
fn explore_kinds_json_is_up_to_date() {
    const REL: &str = "explore/stacks_explore/kinds.json";
    let want = kinds_json();
    if std::env::var_os("STACKS_BLESS").is_some() {
        std::fs::write(workspace_file(REL), &want).expect(REL);
        return;
    }
    let have = std::fs::read_to_string(workspace_file(REL)).unwrap_or_default();
    assert!(
        have == want,
        "{REL} is not the registry's (STACKS_BLESS=1 cargo test -p stacks-stream kinds_json \
         rewrites it); it should be:\n{want}"
    );
}

#[test]
fn top_groups_name_row_or_computed_columns() {
    for (k, top) in shown() {
        for g in top.group {
            assert!(
                crate::table::column(g).is_some() || [super::UFUNC, super::KFUNC].contains(g),
                "{}: group column `{g}`",
                k.name
            );
        }
        if let Some(c) = top.thread_ns {
            assert!([col::VALUE, col::DURATION].contains(&c), "{}: {c}", k.name);
        }
    }
}
