//! docs/architecture.md is checked against the workspace: its crate table names every member
//! and no other, each "depends on" cell is the member's workspace dependencies in its
//! Cargo.toml, and every file or directory the page names exists (in the crate whose row names
//! it, or at that path from the repository's root; elsewhere anywhere in the repository); and
//! the host's tools (the agent and the three it runs) do not depend on the query engine
//! (`cargo tree`). Each library crate's modules are checked against its `use crate::`
//! graph: no module cycles, every top-level module on the map (its crate's row), and where
//! a `lib.rs` declares its layers ("Layers, …: `a` → `b` → …"), every module placed in one
//! and using only those of the layers before it. Needs no root and no built binaries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    stacks_tests::crate_dir().join("..")
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

/// Uses that run against the layers and are known, each with its reason: the only ones
/// the module checks let through. Remove a line once its use is gone.
const KNOWN_BACK_USES: &[(&str, &str, &str)] = &[
    // probes/mod.rs implements `kinds::Run` for the probes of `-e` (#63 item 4: the impl
    // moves to kinds/probe.rs, with the alloc attacher, once the kind declarations settle).
    ("stacks-record", "probes", "kinds"),
];

/// Crates whose `lib.rs` must declare its layers.
const LAYERED: &[&str] = &["stacks-record", "stacks-top"];

/// A crate's top-level modules (declared in `lib.rs`, tests left out) and the other ones
/// each uses (`crate::m`, `super::m` at the top of a module, in `use` lines or in paths).
struct Modules {
    names: Vec<String>,
    uses: BTreeMap<String, BTreeSet<String>>,
}

/// The name of each `mod NAME;` line of `lib` (with any visibility), those under
/// `#[cfg(test)]` left out.
fn declared_modules(lib: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut test_only = false;
    for line in lib.lines() {
        let line = line.trim();
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let decl = ["pub(crate) mod ", "pub mod ", "mod "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = decl
            && !test_only
        {
            out.push(name.trim().to_string());
        }
        if !line.starts_with("#[") {
            test_only = false;
        }
    }
    out
}

/// The files of top-level module `name` under `src` with their depth (1 for `name.rs` and
/// `name/mod.rs`, 2 for `name/x.rs`, …); test files (`tests.rs`, `*_tests.rs`) left out.
fn module_files(src: &Path, name: &str) -> Vec<(PathBuf, usize)> {
    fn under(dir: &Path, depth: usize, out: &mut Vec<(PathBuf, usize)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let stem = path
                .file_stem()
                .map_or(String::new(), |s| s.to_string_lossy().into_owned());
            if path.is_dir() {
                if stem != "tests" {
                    under(&path, depth + 1, out);
                }
            } else if path.extension().is_some_and(|x| x == "rs")
                && stem != "tests"
                && !stem.ends_with("_tests")
            {
                out.push((path, if stem == "mod" { depth } else { depth + 1 }));
            }
        }
    }
    let mut out = Vec::new();
    let file = src.join(format!("{name}.rs"));
    if file.exists() {
        out.push((file, 1));
    }
    under(&src.join(name), 1, &mut out);
    out
}

/// `text` without comments and without its inline `#[cfg(test)] mod …` block (at the end of
/// a file, by the house's convention).
fn product_code(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.contains('{'))
        {
            break;
        }
        let line = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The first path segments after each `crate::` in `code`, and after each `super::` that
/// climbs `depth` levels (to the crate's root): `crate::{a, b::{c}}` gives `a` and `b`.
fn root_segments(code: &str, depth: usize) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut starts = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if !code[..i].ends_with('$') && !code[..i].ends_with(|c: char| c.is_alphanumeric()) {
            starts.push(i + "crate::".len());
        }
    }
    let mut i = 0;
    while let Some(at) = code[i..].find("super::") {
        let begin = i + at;
        let mut end = begin;
        let mut climbs = 0;
        while code[end..].starts_with("super::") {
            climbs += 1;
            end += "super::".len();
        }
        if climbs == depth && !code[..begin].ends_with(|c: char| c.is_alphanumeric()) {
            starts.push(end);
        }
        i = end;
    }
    for start in starts {
        let rest = &code[start..];
        if let Some(group) = rest.strip_prefix('{') {
            // The names at the group's first level.
            let mut level = 1;
            let mut expect = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' => {
                        level -= 1;
                        if level == 0 {
                            break;
                        }
                    }
                    ',' if level == 1 => expect = true,
                    c if expect && level == 1 && (c.is_alphanumeric() || c == '_') => {
                        out.insert(ident(&group[j..]));
                        expect = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// The modules of the library crate in `dir` and what each uses.
fn modules(dir: &str) -> Modules {
    let src = root().join(dir).join("src");
    let names = declared_modules(&read(&format!("{dir}/src/lib.rs")));
    let mut uses = BTreeMap::new();
    for name in &names {
        let mut used = BTreeSet::new();
        for (file, depth) in module_files(&src, name) {
            let text = std::fs::read_to_string(&file).unwrap();
            for seg in root_segments(&product_code(&text), depth) {
                if seg != *name && names.contains(&seg) {
                    used.insert(seg);
                }
            }
        }
        uses.insert(name.clone(), used);
    }
    Modules { names, uses }
}

/// The members with a library (`src/lib.rs`).
fn libraries() -> Vec<String> {
    members()
        .into_iter()
        .filter(|m| root().join(m).join("src/lib.rs").exists())
        .collect()
}

/// Whether `from` → `to` in `krate` is a known back use.
fn known(krate: &str, from: &str, to: &str) -> bool {
    KNOWN_BACK_USES.contains(&(krate, from, to))
}

/// The strongly connected components of more than one module (Tarjan), the known back
/// uses of `krate` left out.
fn cycles(krate: &str, m: &Modules) -> Vec<Vec<String>> {
    struct State<'a> {
        krate: &'a str,
        m: &'a Modules,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        for w in &s.m.uses[v] {
            let w = w.as_str();
            if known(s.krate, v, w) {
                continue;
            }
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        krate,
        m,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in &m.names {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The layers `lib` declares, bottom-up: the paragraph of `//!` lines from the one starting
/// "Layers", cut at each `→`, each module in the layer where it is first named in
/// backquotes (`` `m` `` or [`` `m` ``]). `None` when it declares none.
fn declared_layers(lib: &str, names: &[String]) -> Option<BTreeMap<String, usize>> {
    let docs: Vec<&str> = lib
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let first = docs.iter().position(|l| l.starts_with("Layers"))?;
    let paragraph = docs[first..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    let mut layer_of = BTreeMap::new();
    for (layer, part) in paragraph.split('→').enumerate() {
        for word in part.split('`').skip(1).step_by(2) {
            if names.iter().any(|n| n == word) && !layer_of.contains_key(word) {
                layer_of.insert(word.to_string(), layer);
            }
        }
    }
    Some(layer_of)
}

#[test]
fn no_module_cycles() {
    let mut found = Vec::new();
    for krate in libraries() {
        let m = modules(&krate);
        for comp in cycles(&krate, &m) {
            let edges: Vec<String> = comp
                .iter()
                .flat_map(|a| {
                    m.uses[a]
                        .iter()
                        .filter(|b| comp.contains(b))
                        .map(move |b| format!("{a} → {b}"))
                })
                .collect();
            found.push(format!("{krate}: {}", edges.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules that use each other (`use crate::`), directly or around a circle:\n{}",
        found.join("\n")
    );
}

#[test]
fn declared_layers_are_the_use_graph() {
    let mut wrong = Vec::new();
    for krate in libraries() {
        let lib = read(&format!("{krate}/src/lib.rs"));
        let m = modules(&krate);
        let Some(layer_of) = declared_layers(&lib, &m.names) else {
            assert!(
                !LAYERED.contains(&krate.as_str()),
                "{krate}/src/lib.rs declares no layers (a `//! Layers …` paragraph)"
            );
            continue;
        };
        for name in &m.names {
            let Some(&at) = layer_of.get(name) else {
                wrong.push(format!("{krate}: `{name}` is in no layer of lib.rs"));
                continue;
            };
            for used in &m.uses[name] {
                let there = layer_of.get(used).copied().unwrap_or(usize::MAX);
                if there >= at && !known(&krate, name, used) {
                    wrong.push(format!(
                        "{krate}: `{name}` (layer {at}) uses `{used}` (layer {there}): not before it"
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_module_is_on_the_map() {
    let doc = read("docs/architecture.md");
    let rows = table(&doc, "The crates");
    // What every tool has (`cli.rs`) is said once, under the table.
    let shape = doc
        .split("\n\n")
        .find(|p| p.starts_with("Every tool has the same shape"))
        .expect("docs/architecture.md: no paragraph on every tool's shape");
    let mut missing = Vec::new();
    for krate in libraries() {
        let Some(row) = rows.iter().find(|r| row_member(r) == krate) else {
            continue;
        };
        let mut named = named_paths(&row[2..].join(" | "));
        if root().join(&krate).join("src/main.rs").exists() {
            named.extend(named_paths(shape));
        }
        for name in modules(&krate).names {
            let here = named.iter().any(|p| {
                let p = p.trim_end_matches('/');
                p == name || p == format!("{name}.rs") || p.ends_with(&format!("/{name}.rs"))
            });
            if !here {
                missing.push(format!("{krate}: `{name}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md's crate table names no file of these modules:\n{}",
        missing.join("\n")
    );
}

/// The module checks find what they look for: grouped imports, climbing `super::`, test
/// code left out.
#[test]
fn the_use_graph_reads_imports() {
    let code = product_code(
        "use crate::{app::{App, Mode}, views};\nfn f() { super::super::fmt::x(); crate::ui::draw(); }\n\
         // crate::comment\n#[cfg(test)]\nmod tests {\n    use crate::cli;\n}\n",
    );
    let got = root_segments(&code, 2);
    let want: BTreeSet<String> = ["app", "views", "fmt", "ui"].map(String::from).into();
    assert_eq!(got, want);
    assert!(root_segments(&code, 1).iter().all(|s| s != "fmt"));
}

/// `text` without its comments, by the file's language (`rs`, `h`/`c`, `sql`, `py`): Rust as
/// [`product_code`], C's `/* … */` and `//`, SQL's `--`, Python's `#` and docstrings.
fn code_of(ext: &str, text: &str) -> String {
    match ext {
        "rs" => product_code(text),
        "h" | "c" => {
            let mut out = String::new();
            let mut rest = text;
            while let Some(i) = rest.find("/*") {
                out.push_str(&rest[..i]);
                rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
            }
            out.push_str(rest);
            out.lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n")
        }
        "sql" => text
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n"),
        "py" => text
            .split("\"\"\"")
            .step_by(2)
            .flat_map(str::lines)
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Whether `code` names the kind `name` as a word of its own (`uring`, `URING`,
/// `STACKS_EV_URING`, `kind::URING`), not inside a longer name (`io_uring_enter`, `during`).
fn names_kind(code: &str, name: &str) -> bool {
    let lower = code.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    lower.match_indices(name).any(|(at, _)| {
        let before = lower[..at].trim_end_matches('_');
        let joined = before.len() < at;
        let prev_ok = before
            .bytes()
            .last()
            .is_none_or(|b| !b.is_ascii_alphanumeric() || (joined && !before.ends_with("io")));
        let next_ok = bytes
            .get(at + name.len())
            .is_none_or(|b| !b.is_ascii_alphabetic());
        prev_ok && next_ok
    })
}

/// A new kind is its own files: the product code naming `uring`, the newest kind, is its BPF
/// file and record, its Rust module, its registry entry and its queries — and `block`'s BPF
/// file, which gives block requests an io_uring worker issues their submitter (docs/uring.md).
/// Everything else reads the registry. A file that starts naming it fails here.
#[test]
fn the_newest_kind_is_named_only_in_its_own_files() {
    let mut files = Vec::new();
    for dir in [
        "bpf",
        "stacks-sql/queries",
        "stacks-sql/views",
        "explore/stacks_explore",
    ] {
        walk(&root().join(dir), &mut files);
    }
    for krate in members() {
        walk(&root().join(&krate).join("src"), &mut files);
    }
    let mut naming: Vec<String> = files
        .iter()
        // Tests, and the kernel's types (generated by bpftool).
        .filter(|f| !f.contains("/tests/") && !f.ends_with("_tests.rs"))
        .filter(|f| !f.ends_with("vmlinux.h"))
        .filter(|f| {
            let ext = f.rsplit('.').next().unwrap_or("");
            let text = std::fs::read_to_string(root().join(f)).unwrap_or_default();
            names_kind(&code_of(ext, &text), "uring")
        })
        .cloned()
        .collect();
    naming.sort();
    let own = [
        "bpf/kinds/block.bpf.h",
        "bpf/kinds/uring.bpf.h",
        "bpf/stacks.h",
        "stacks-record/src/kinds/uring.rs",
        "stacks-sql/queries/uring-latency.sql",
        "stacks-sql/queries/uring.sql",
        "stacks-stream/src/kinds/table.rs",
    ];
    assert_eq!(naming, own, "the product files naming kind `uring` in code");
    assert!(names_kind("x = STACKS_EV_URING;", "uring"));
    assert!(names_kind("kind::URING", "uring"));
    assert!(!names_kind("io_uring_enter(); during", "uring"));
}

/// The string literals of Rust `code` (product code, [`product_code`]): `"…"` with its
/// escapes, raw strings `r"…"`/`r#"…"#` read as plain ones.
fn string_literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        // A char literal `'"'` holds no string.
        if c == '\'' && chars.peek() == Some(&'"') {
            chars.next();
            prev = '"';
            continue;
        }
        if c == '"' && prev != '\\' {
            let mut s = String::new();
            let mut escaped = false;
            for c in chars.by_ref() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => break,
                    _ => {}
                }
                s.push(c);
            }
            out.push(s);
        }
        prev = c;
    }
    out
}

/// The agent sheds along the registry's declarations (stacks-agent/src/budget.rs: a kind's
/// sampling, ring and argument grammar), never by a kind's name: no string in its product
/// code names a kind `-e` records, but for its `--help` text's example (the clap attributes).
#[test]
fn the_agent_names_no_kind() {
    let mut files = Vec::new();
    walk(&root().join("stacks-agent/src"), &mut files);
    assert!(files.len() > 3, "{files:?}");
    let mut naming = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(root().join(f)).unwrap();
        let code = product_code(&text);
        // Without the `#[command(…)]` and `#[arg(…)]` attributes: --help's text.
        let mut kept = String::new();
        let mut in_attr = false;
        for line in code.lines() {
            let t = line.trim_start();
            if t.starts_with("#[command(") || t.starts_with("#[arg(") {
                in_attr = !t.trim_end().ends_with(")]");
                continue;
            }
            if in_attr {
                in_attr = !t.trim_end().ends_with(")]");
                continue;
            }
            kept.push_str(line);
            kept.push('\n');
        }
        for s in string_literals(&kept) {
            for k in stacks_stream::kinds::recordable() {
                if names_kind(&s, k.name) {
                    naming.push(format!("{f}: \"{s}\" names {}", k.name));
                }
            }
        }
    }
    assert!(naming.is_empty(), "{naming:#?}");
    assert_eq!(
        string_literals(r#"let a = "x \" y"; let c = '"'; f("switch's MIN");"#),
        ["x \\\" y", "switch's MIN"]
    );
}
