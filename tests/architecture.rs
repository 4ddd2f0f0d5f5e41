//! docs/architecture.md is checked against the workspace: its crate table names every member
//! and no other, each "depends on" cell is the member's workspace dependencies in its
//! Cargo.toml, and every file or directory the page names exists (in the crate whose row names
//! it, or at that path from the repository's root; elsewhere anywhere in the repository); and
//! the host's tools (the agent and the three it runs) do not depend on the query engine
//! (`cargo tree`). Needs no root and no built binaries.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The `members` of the workspace's Cargo.toml: directories.
fn members() -> Vec<String> {
    let text = read("Cargo.toml");
    let list = text
        .split("members = [")
        .nth(1)
        .and_then(|t| t.split(']').next())
        .expect("workspace members");
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The `name` of the package in `dir`.
fn package_name(dir: &str) -> String {
    read(&format!("{dir}/Cargo.toml"))
        .lines()
        .find_map(|l| {
            let v = l.strip_prefix("name")?.trim_start().strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("{dir}/Cargo.toml: no package name"))
}

/// The workspace packages in the `[dependencies]` section of `dir`'s Cargo.toml (not dev or
/// build dependencies).
fn workspace_dependencies(dir: &str, packages: &[(String, String)]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in read(&format!("{dir}/Cargo.toml")).lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps {
            continue;
        }
        let name = line
            .split(|c: char| c == '=' || c == '.' || c.is_whitespace())
            .next()
            .unwrap_or("");
        if packages.iter().any(|(_, p)| p == name) {
            out.insert(name.to_string());
        }
    }
    out
}

/// The cells of the rows of the table under `## heading`.
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let at = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/architecture.md: no `## {heading}`"));
    text[at..]
        .lines()
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

/// The backquoted words of `text` that name a file or a directory: a path ending in a file
/// extension the repository uses, or in `/`; placeholders (`<kind>`) and globs are not.
fn named_paths(text: &str) -> Vec<String> {
    const EXTENSIONS: [&str; 9] = [
        ".rs", ".h", ".c", ".sql", ".py", ".md", ".toml", ".json", ".ipynb",
    ];
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            !w.contains(['<', '*', ' ', '…', '{'])
                && (w.ends_with('/') || EXTENSIONS.iter().any(|e| w.ends_with(e)))
                && w.len() > 1
        })
        .map(str::to_string)
        .collect()
}

/// Every file and directory under `dir` (directories with a trailing `/`), relative to the
/// repository, leaving out build output and hidden directories.
fn walk(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "__pycache__" {
            continue;
        }
        let path = e.path();
        let rel = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if path.is_dir() {
            out.push(format!("{rel}/"));
            walk(&path, out);
        } else {
            out.push(rel);
        }
    }
}

/// Whether `name` is a path of `paths`, or the end of one at a `/`.
fn exists(paths: &[String], name: &str) -> bool {
    paths
        .iter()
        .any(|p| p == name || p.ends_with(&format!("/{name}")))
}

/// The member directory a crate table row is about: its first backquoted word.
fn row_member(row: &[String]) -> String {
    row[0]
        .split('`')
        .nth(1)
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string()
}

#[test]
fn crate_table_lists_every_member_and_its_dependencies() {
    let doc = read("docs/architecture.md");
    let rows = table(&doc, "The crates");
    let members = members();
    let packages: Vec<(String, String)> = members
        .iter()
        .map(|m| (m.clone(), package_name(m)))
        .collect();
    let listed: Vec<String> = rows.iter().map(|r| row_member(r)).collect();
    for m in &members {
        assert!(
            listed.contains(m),
            "docs/architecture.md's crate table has no row for workspace member `{m}`"
        );
    }
    for l in &listed {
        assert!(
            members.contains(l),
            "docs/architecture.md's crate table lists `{l}`, not a workspace member"
        );
    }
    for row in &rows {
        let member = row_member(row);
        let cell = row.get(1).map_or("", String::as_str);
        let said: BTreeSet<String> = cell
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty() && *d != "—")
            .map(|d| {
                packages
                    .iter()
                    .find(|(dir, p)| p == d || dir == d || *p == format!("stacks-{d}"))
                    .map_or_else(|| format!("(unknown: {d})"), |(_, p)| p.clone())
            })
            .collect();
        let real = workspace_dependencies(&member, &packages);
        assert_eq!(
            said, real,
            "docs/architecture.md: `{member}` depends on (its Cargo.toml's [dependencies])"
        );
    }
}

#[test]
fn every_named_file_exists() {
    let doc = read("docs/architecture.md");
    let mut all = Vec::new();
    walk(&root(), &mut all);
    let mut missing = Vec::new();
    for row in table(&doc, "The crates") {
        let member = row_member(&row);
        let prefix = format!("{member}/");
        let in_crate: Vec<String> = all
            .iter()
            .filter_map(|p| p.strip_prefix(&prefix).map(str::to_string))
            .collect();
        for name in named_paths(&row[2..].join(" | ")) {
            if !exists(&in_crate, &name) && !all.contains(&name) {
                missing.push(format!("`{name}` (in {member}/)"));
            }
        }
    }
    for name in named_paths(&doc) {
        if !exists(&all, &name) {
            missing.push(format!("`{name}`"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what does not exist: {}",
        missing.join(", ")
    );
}

/// #44: a host installs the agent and the three tools it runs without the query engine: their
/// dependency tree (normal and build dependencies, this lockfile) has no DataFusion and no
/// Ballista, so `cargo build --release -p stacks-agent -p stacks-record -p stacks-symbolize -p
/// stacks-pack` builds in minutes, not the engine's half hour.
#[test]
fn the_host_tools_build_without_the_query_engine() {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = std::process::Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--offline", "--locked", "-e", "normal,build"])
        .args(["--prefix", "none", "--format", "{p}"])
        .args(["-p", "stacks-agent", "-p", "stacks-record"])
        .args(["-p", "stacks-symbolize", "-p", "stacks-pack"])
        .output()
        .expect("cargo tree");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("stacks-agent"),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let engine: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|p| p.starts_with("datafusion") || p.starts_with("ballista"))
        .collect();
    assert!(engine.is_empty(), "the host tools depend on {engine:?}");
}
