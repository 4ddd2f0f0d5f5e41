//! The SQL to run: a bundled query (embedded from `queries/`), a `.sql` file or inline `-c` SQL,
//! and the `--list` of bundled queries with the question each one answers.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

// `FILES`: every file of `queries/` as (name, SQL text), by name (build.rs).
include!(concat!(env!("OUT_DIR"), "/bundled.rs"));

/// Queries shipped inside the binary: (name, SQL text), in `--list` order, every file of
/// `queries/` (build.rs lists them). The first `-- ` line of each file is the one-line
/// question it answers; `-- param:` lines declare its parameters, its `-- kinds:` line the
/// kinds whose rows it reads (docs/queries.md), by whose first `--list` groups them: in the
/// registry's order of kinds (`stacks_stream::kinds::ALL`), then by name, the queries of any
/// kind (`-- kinds: any`) last.
pub static BUNDLED: std::sync::LazyLock<Vec<(&'static str, &'static str)>> =
    std::sync::LazyLock::new(|| {
        let mut all = FILES.to_vec();
        all.sort_by_key(|(name, sql)| {
            let first = header_kinds(sql).next().unwrap_or("any");
            let at = stacks_stream::kinds::ALL
                .iter()
                .position(|k| k.name == first)
                .unwrap_or(usize::MAX);
            (at, *name)
        });
        all
    });

/// The kinds the `-- kinds:` header line of `sql` names (`any`: its `kind` parameter's).
pub fn header_kinds(sql: &str) -> impl Iterator<Item = &str> {
    sql.lines()
        .find_map(|l| l.trim().strip_prefix("--")?.trim().strip_prefix("kinds:"))
        .into_iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
}

/// SQL text to run and the label that names it in error messages.
#[derive(Debug, Clone)]
pub struct Query {
    pub label: String,
    pub sql: String,
}

impl Query {
    /// The value column the query's result should open on in a profile: its
    /// `-- default-value: COLUMN` header line, if any.
    pub fn default_value(&self) -> Option<&str> {
        self.sql
            .lines()
            .map(str::trim)
            .take_while(|l| l.starts_with("--") || l.is_empty())
            .find_map(|l| l.strip_prefix("--")?.trim().strip_prefix("default-value:"))
            .map(str::trim)
            .filter(|c| !c.is_empty())
    }
}

/// The SQL given inline with `-c`.
pub fn inline(sql: &str) -> Query {
    Query {
        label: "-c".into(),
        sql: sql.into(),
    }
}

/// Resolve QUERY: an existing file is read; otherwise it names a bundled query, with or
/// without `.sql`.
pub fn resolve(arg: &str) -> Result<Query> {
    let path = Path::new(arg);
    if path.is_file() {
        let sql = std::fs::read_to_string(path)
            .with_context(|| format!("{arg}: cannot read the query file"))?;
        return Ok(Query {
            label: arg.into(),
            sql,
        });
    }
    let name = arg.strip_suffix(".sql").unwrap_or(arg);
    match BUNDLED.iter().find(|(n, _)| *n == name) {
        Some((n, sql)) => Ok(Query {
            label: (*n).to_string(),
            sql: (*sql).into(),
        }),
        None => {
            let names: Vec<&str> = BUNDLED.iter().map(|(n, _)| *n).collect();
            anyhow::bail!(
                "{arg}: no such query file, and no bundled query of that name (bundled: {}; see --list)",
                names.join(", ")
            )
        }
    }
}

/// The one-line question a query answers: its first `-- ` comment line.
pub fn question(sql: &str) -> &str {
    sql.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("--"))
        .map(str::trim)
        .unwrap_or("")
}

/// Print each bundled query's name and question, one per line, then the parameters they
/// take (a name means the same thing in every query that takes it).
pub fn list(out: &mut impl Write) -> Result<()> {
    let width = BUNDLED.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, sql) in BUNDLED.iter() {
        writeln!(out, "{name:<width$}  {}", question(sql))?;
    }
    let mut seen: Vec<(crate::params::Decl, Vec<&str>)> = Vec::new();
    for (name, sql) in BUNDLED.iter() {
        for d in crate::params::declarations(name, sql)? {
            // One line per distinct declaration: a name two queries declare differently
            // (`kind`: a pattern for top-processes, one kind for timeline) gets a line each.
            let same = |s: &crate::params::Decl| {
                s.name == d.name
                    && s.ty.name() == d.ty.name()
                    && s.default_text == d.default_text
                    && s.description == d.description
            };
            match seen.iter_mut().find(|(s, _)| same(s)) {
                Some((_, users)) => users.push(name),
                None => seen.push((d, vec![name])),
            }
        }
    }
    writeln!(out, "\nParameters (--param NAME=VALUE):")?;
    let nw = seen.iter().map(|(d, _)| d.name.len()).max().unwrap_or(0);
    for (d, users) in &seen {
        let every = users.len() == BUNDLED.len();
        writeln!(
            out,
            "  {:<nw$}  {:<9}  default {:<6}  {} [{}]",
            d.name,
            d.ty.name(),
            d.default_text,
            d.description,
            if every {
                "all".to_string()
            } else {
                users.join(", ")
            }
        )?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use stacks_stream::kinds::{self, Source};

    use super::*;

    /// The kinds the one `-- kinds:` header line of `sql` names (`any`: its `kind` parameter).
    fn header_kinds(name: &str, sql: &str) -> Vec<String> {
        let lines: Vec<&str> = sql
            .lines()
            .filter_map(|l| l.trim().strip_prefix("--")?.trim().strip_prefix("kinds:"))
            .collect();
        assert_eq!(lines.len(), 1, "{name}: one `-- kinds:` line");
        super::header_kinds(sql).map(str::to_string).collect()
    }

    /// The kinds the SQL code of `sql` (comments left out) names as `kind = 'K'` or in
    /// `kind IN ('K', …)`.
    fn literal_kinds(sql: &str) -> Vec<String> {
        let code: Vec<&str> = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect();
        let code = code.join("\n");
        let one = regex::Regex::new(r"kind\s*=\s*'([a-z_]+)'").unwrap();
        let list = regex::Regex::new(r"(?i)kind\s+IN\s*\(([^)]*)\)").unwrap();
        let quoted = regex::Regex::new(r"'([a-z_]+)'").unwrap();
        let mut out: Vec<String> = one.captures_iter(&code).map(|c| c[1].to_string()).collect();
        for c in list.captures_iter(&code) {
            out.extend(quoted.captures_iter(&c[1]).map(|q| q[1].to_string()));
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    #[test]
    fn bundled_queries_say_which_kinds_they_read() {
        let named = regex::Regex::new(r"(?i)\b(?:FROM|JOIN)\s+([a-z_]+)").unwrap();
        for (name, sql) in BUNDLED.iter() {
            let mut said = header_kinds(name, sql);
            let read = literal_kinds(sql);
            if said == ["any"] {
                let decls = crate::params::declarations(name, sql).unwrap();
                assert!(
                    decls.iter().any(|d| d.name == "kind"),
                    "{name}: `-- kinds: any` takes a `kind` parameter"
                );
                assert!(read.is_empty(), "{name}: `any`, and yet it reads {read:?}");
                continue;
            }
            for k in &said {
                assert!(kinds::get(k).is_some(), "{name}: `{k}` is not a kind");
            }
            // And the kinds read through the views it names (`FROM waits`, `JOIN observed`).
            let mut read = read;
            for c in named.captures_iter(sql) {
                read.extend(
                    crate::views::kinds_through(&c[1])
                        .iter()
                        .map(|k| k.to_string()),
                );
            }
            read.sort_unstable();
            read.dedup();
            said.sort_unstable();
            assert_eq!(said, read, "{name}: its `-- kinds:` line and its SQL");
        }
    }

    #[test]
    fn every_recordable_kind_has_a_bundled_query() {
        for k in kinds::ALL {
            if !matches!(k.source, Source::Event { .. } | Source::Probes(_)) {
                continue;
            }
            assert!(
                BUNDLED
                    .iter()
                    .any(|(name, sql)| header_kinds(name, sql).iter().any(|h| h == k.name)),
                "no bundled query reads kind `{}` (stacks-sql/queries/)",
                k.name
            );
        }
    }

    #[test]
    fn every_query_file_is_bundled() {
        let dir = stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("queries");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort_unstable();
        let mut bundled: Vec<String> = BUNDLED.iter().map(|(n, _)| format!("{n}.sql")).collect();
        bundled.sort_unstable();
        assert_eq!(files, bundled, "stacks-sql/queries/ and queries::BUNDLED");
        for (name, sql) in BUNDLED.iter() {
            let file = std::fs::read_to_string(dir.join(format!("{name}.sql"))).unwrap();
            assert_eq!(&file, sql, "{name}: BUNDLED embeds another file");
        }
    }

    #[test]
    fn bundled_queries_have_questions() {
        for (name, sql) in BUNDLED.iter() {
            assert!(!question(sql).is_empty(), "{name} has no question line");
        }
        assert_eq!(
            question(BUNDLED[0].1),
            "CPU profile by stack: samples and on-CPU time per process, thread and stack."
        );
    }

    #[test]
    fn names_resolve_with_and_without_suffix() {
        assert!(resolve("cpu").unwrap().sql.contains("FROM samples"));
        assert!(resolve("cpu.sql").unwrap().label.contains("cpu"));
        let err = resolve("no-such-query").unwrap_err().to_string();
        assert!(err.contains("bundled: cpu"), "{err}");
    }

    #[test]
    fn bundled_declarations_parse_and_list() {
        for (name, sql) in BUNDLED.iter() {
            crate::params::declarations(name, sql).unwrap();
        }
        let mut out = Vec::new();
        list(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().any(|l| l.starts_with("  comm ")), "{text}");
        // `kind` is declared two ways; each line names its own default and its own queries.
        let kinds: Vec<&str> = text.lines().filter(|l| l.starts_with("  kind ")).collect();
        assert_eq!(kinds.len(), 2, "{text}");
        assert!(
            kinds
                .iter()
                .any(|l| l.contains("'profile'") && l.ends_with("[timeline]")),
            "{kinds:?}"
        );
        assert!(
            kinds
                .iter()
                .any(|l| l.contains("'%'") && l.ends_with("[top-processes, top-threads]")),
            "{kinds:?}"
        );
    }
}
