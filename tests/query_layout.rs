//! stacks-query over the store layouts: first-layout files (stacks inline in every row),
//! samples/stacks pairs, samples/stacks/frames sets (what stacks-pack writes now), and a
//! directory mixing all three (and a `file://` store mixing pairs and frame sets, whose stacks
//! are assembled in SQL) answer every bundled query alike and give the same rows to
//! `select *`; pyarrow and DuckDB read the pair and frames files with plain SQL and agree with
//! stacks-query; a samples file without a readable stacks or frames file is a one-line error,
//! and stacks and frames files without their samples file are ignored.

use std::path::{Path, PathBuf};

use stacks_testkit::recording as fixture;
use stacks_tests::{
    assert_refused, bin, check, python, scratch, sh, write_inline, write_packed, write_pair,
};

/// Every bundled query (the fixture has every kind they read).
const QUERIES: [&str; 18] = [
    "cpu",
    "cpu-functions",
    "offcpu",
    "offcpu-states",
    "rss-growth",
    "block-bytes",
    "block-latency",
    "vfs-read",
    "vfs-write",
    "net",
    "thread-states",
    "process-states",
    "state-stacks",
    "stuck",
    "stackcount",
    "top-processes",
    "top-threads",
    "timeline",
];

/// Four stores of the same rows (in three chunks): first layout only, pairs only, frames
/// sets only (stacks-pack), and the first chunk in the first layout, the second as a pair and
/// the third as a frames set.
struct Stores {
    root: stacks_tests::ScratchDir,
    rows: Vec<stacks_tests::Row>,
}

impl Stores {
    fn new(name: &str, n: usize) -> Stores {
        let root = scratch(name);
        let rows = fixture::rows(n);
        let third = rows.len().div_ceil(3);
        let chunks: Vec<arrow_array::RecordBatch> =
            rows.chunks(third).map(fixture::batch).collect();
        for (i, c) in chunks.iter().enumerate() {
            let base = format!("stacks-test-{i:06}");
            let date = root.join("LAYOUT").join("date=2023-11-14");
            let at = |layout: &str| date.to_str().unwrap().replace("LAYOUT", layout);
            write_inline(
                Path::new(&at("inline")),
                &base,
                std::slice::from_ref(c),
                100,
            );
            write_pair(Path::new(&at("pairs")), &base, std::slice::from_ref(c), 100);
            write_packed(Path::new(&at("frames")), &base, c);
            match i {
                0 => write_inline(Path::new(&at("mixed")), &base, std::slice::from_ref(c), 100),
                1 => write_pair(Path::new(&at("mixed")), &base, std::slice::from_ref(c), 100),
                _ => write_packed(Path::new(&at("mixed")), &base, c),
            }
            // A store in object storage (`-d file://…`, the hour of the fixture's rows) mixing
            // pairs and frame sets: its stacks are assembled in SQL.
            let hour = root.join("bucket/date=2023-11-14/hour=22/host=vm");
            match i {
                1 => write_pair(&hour, &base, std::slice::from_ref(c), 100),
                _ => write_packed(&hour, &base, c),
            }
        }
        Stores { root, rows }
    }

    fn dir(&self, layout: &str) -> PathBuf {
        self.root.join(layout)
    }
}

/// The output of `stacks-query -d DIR ARGS`, its lines sorted (rows tied in a query's order may
/// come in any order).
fn sorted_output(dir: &Path, args: &str) -> Vec<String> {
    let res = sh(&format!("stacks-query -d {} {args}", dir.display()));
    check(&res, &format!("stacks-query {args} on {}", dir.display()));
    let text = String::from_utf8(res.stdout).expect("UTF-8 output");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn every_bundled_query_answers_alike_over_each_layout() {
    let stores = Stores::new("layout-bundled", 80);
    for q in QUERIES {
        let top = if q.starts_with("top-") {
            " -p top=1000"
        } else {
            ""
        };
        let args = format!("{q}{top} -f ndjson");
        let inline = sorted_output(&stores.dir("inline"), &args);
        assert!(inline.len() > 1, "{q}: the fixture gives rows: {inline:?}");
        for layout in ["pairs", "frames", "mixed"] {
            let other = sorted_output(&stores.dir(layout), &args);
            assert_eq!(other, inline, "{q} over {layout} and over the first layout");
        }
        let url = format!("file://{}", stores.dir("bucket").display());
        let bucket = sorted_output(Path::new(&url), &args);
        assert_eq!(bucket, inline, "{q} over {url} and over the first layout");
    }
    // The totals are the recording's (the stores hold each row once).
    let want: i64 = stores
        .rows
        .iter()
        .filter(|r| r.kind == "switch")
        .map(|r| r.value)
        .sum();
    for layout in ["inline", "pairs", "frames", "mixed"] {
        let res = sh(&format!(
            "stacks-query -d {} offcpu -f csv | tail -n +2 | awk -F, '{{s += $NF}} END {{print s}}'",
            stores.dir(layout).display()
        ));
        check(&res, "offcpu totals");
        assert_eq!(
            String::from_utf8_lossy(&res.stdout).trim(),
            want.to_string(),
            "offcpu total over {layout}"
        );
    }
    let _ = std::fs::remove_dir_all(&stores.root);
}

#[test]
fn select_star_gives_the_same_rows_and_columns_over_each_layout() {
    let stores = Stores::new("layout-star", 40);
    // Every column but the raw stacks: a frames-layout store keeps `stack` only (each frame
    // carries the address, module, build id and offset those columns hold).
    let raw = ["kstack", "ustack", "kstack_symbols"];
    let names = {
        let b = fixture::batch(&stores.rows[..1]);
        let mut names: Vec<String> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        names.push("stack_id".into());
        names
    };
    let kept: Vec<String> = names
        .iter()
        .filter(|n| !raw.contains(&n.as_str()))
        .map(|n| format!("\"{n}\""))
        .collect();
    let args = format!("-c 'SELECT {} FROM stacks' -f ndjson", kept.join(", "));
    let inline = sorted_output(&stores.dir("inline"), &args);
    assert_eq!(inline.len(), stores.rows.len());
    for layout in ["pairs", "frames", "mixed"] {
        assert_eq!(
            sorted_output(&stores.dir(layout), &args),
            inline,
            "{layout}"
        );
    }
    // The columns, in order: the stream's, then `stack_id`; without the raw stacks in a
    // frames-layout store.
    let columns = "-c 'SELECT * FROM stacks LIMIT 0' -f csv";
    for layout in ["inline", "pairs", "frames", "mixed"] {
        let want: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| layout != "frames" || !raw.contains(n))
            .collect();
        let res = sh(&format!(
            "stacks-query -d {} {columns}",
            stores.dir(layout).display()
        ));
        check(&res, "select * columns");
        assert_eq!(
            String::from_utf8_lossy(&res.stdout).trim(),
            want.join(","),
            "{layout}"
        );
    }
    // `samples` has every column but the stacks; `stack_table` one row per distinct stack.
    let distinct =
        "-c 'SELECT count(*) AS n, count(DISTINCT stack_id) AS d FROM stack_table' -f csv";
    let stack_rows = sorted_output(&stores.dir("pairs"), distinct);
    let n = stack_rows[0].split(',').next().unwrap().to_string();
    assert_eq!(stack_rows[0], format!("{n},{n}"), "one row per stack_id");
    // Read with no column at all (the projection is empty).
    for layout in ["mixed", "frames"] {
        let count = sorted_output(
            &stores.dir(layout),
            "-c 'SELECT count(*) AS n FROM stack_table' -f csv",
        );
        assert_eq!(count, [n.clone(), "n".into()], "{layout}");
    }
    for layout in ["inline", "frames", "mixed"] {
        assert_eq!(
            sorted_output(&stores.dir(layout), distinct),
            stack_rows,
            "{layout}"
        );
    }
    // The summaries stacks-top shows are the same whether stored (pairs) or computed from the
    // assembled frames.
    let sums = "-c 'SELECT stack_id, folded, leaf, depth FROM stack_table' -f ndjson";
    let want = sorted_output(&stores.dir("pairs"), sums);
    for layout in ["inline", "frames", "mixed"] {
        assert_eq!(sorted_output(&stores.dir(layout), sums), want, "{layout}");
    }
    let _ = std::fs::remove_dir_all(&stores.root);
}

#[test]
fn the_join_builds_on_the_distinct_stacks_and_time_windows_prune_samples() {
    let stores = Stores::new("layout-plan", 200);
    let dir = stores.dir("pairs");
    let res = sh(&format!(
        "stacks-query -d {} -f csv -c 'EXPLAIN SELECT count(*) FROM stacks WHERE stack IS NOT NULL'",
        dir.display()
    ));
    check(&res, "explain");
    let plan = String::from_utf8_lossy(&res.stdout).to_string();
    // The hash join's first (build) input is the stack table (built in memory when first
    // asked for); the samples stream in.
    let join = plan
        .find("HashJoinExec")
        .unwrap_or_else(|| panic!("no hash join: {plan}"));
    let after = &plan[join..];
    let memory = after.find("LazyMemoryExec").unwrap_or(usize::MAX);
    let parquet = after.find("file_groups").unwrap_or(usize::MAX);
    assert!(
        memory < parquet,
        "the join builds on the stack table, not the samples:\n{plan}"
    );
    // Queries on `samples` never read a stack.
    let res = sh(&format!(
        "stacks-query -d {} -f csv -c 'EXPLAIN SELECT count(*) FROM samples'",
        dir.display()
    ));
    check(&res, "explain samples");
    let plan = String::from_utf8_lossy(&res.stdout).to_string();
    assert!(
        !plan.contains("stack_table") && !plan.contains("HashJoin"),
        "{plan}"
    );
    // A time window prunes the samples files' row groups: 3 chunks of 400 rows in groups of 100.
    let from = "2023-11-14T22:13:24Z";
    let res = sh(&format!(
        "stacks-query -d {} -f csv -c \"EXPLAIN ANALYZE SELECT count(*) FROM stacks WHERE time >= TIMESTAMP '{from}'\"",
        dir.display()
    ));
    check(&res, "explain analyze");
    let text = String::from_utf8_lossy(&res.stdout);
    let pruned = text
        .split("row_groups_pruned_statistics=")
        .nth(1)
        .unwrap_or_else(|| panic!("no pruning metrics: {text}"));
    // The first two files end before the window: pruned whole by their statistics; the last
    // one's row groups are pruned by theirs.
    assert!(
        text.contains("files_ranges_pruned_statistics=3 total \u{2192} 1 matched"),
        "two of three files pruned: {text}"
    );
    let third = stores.rows.len().div_ceil(3);
    let last = stores.rows.chunks(third).last().unwrap();
    let groups: Vec<&[stacks_tests::Row]> = last.chunks(100).collect();
    let kept = groups
        .iter()
        .filter(|g| g.last().unwrap().time >= fixture::T0 + 4 * fixture::SEC)
        .count();
    assert!(kept < groups.len(), "the window leaves some groups out");
    assert!(
        pruned.starts_with(&format!("{} total \u{2192} {kept} matched", groups.len())),
        "want {kept} of {} row groups matched: {}",
        groups.len(),
        &pruned[..pruned.len().min(80)]
    );
    let _ = std::fs::remove_dir_all(&stores.root);
}

/// Per-leaf profile totals from the pair files: pyarrow (joining the samples and stacks
/// tables), then DuckDB (plain SQL), one `leaf,total` line each, sorted.
const LEAF_TOTALS: &str = r#"
import sys, glob
import pyarrow.dataset as ds
import duckdb
d = sys.argv[1]
samples = ds.dataset(glob.glob(d + '/**/*.samples.parquet', recursive=True), format='parquet').to_table()
stacks = ds.dataset(glob.glob(d + '/**/*.stacks.parquet', recursive=True), format='parquet').to_table(
    columns=['stack_id', 'leaf'])
leaf_of = dict(zip(stacks.column('stack_id').to_pylist(), stacks.column('leaf').to_pylist()))
totals = {}
for kind, value, sid in zip(samples.column('kind').to_pylist(), samples.column('value').to_pylist(),
                            samples.column('stack_id').to_pylist()):
    if kind == 'profile' and sid is not None:
        leaf = leaf_of[sid]
        totals[leaf] = totals.get(leaf, 0) + value
for leaf in sorted(totals):
    print(f'pyarrow {leaf},{totals[leaf]}')
rows = duckdb.connect().execute(
    "SELECT k.leaf, sum(s.value) FROM read_parquet(?) s "
    "JOIN (SELECT DISTINCT stack_id, leaf FROM read_parquet(?)) k ON k.stack_id = s.stack_id "
    "WHERE s.kind = 'profile' GROUP BY k.leaf ORDER BY k.leaf",
    [d + '/**/*.samples.parquet', d + '/**/*.stacks.parquet']).fetchall()
for leaf, total in rows:
    print(f'duckdb {leaf},{total}')
"#;

/// The lines of a reader script's output that start with `tool`, without it.
fn lines_of(text: &str, tool: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(tool))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn pyarrow_and_duckdb_read_the_pairs_with_plain_sql_and_agree() {
    let stores = Stores::new("layout-readers", 80);
    let dir = stores.dir("pairs");
    let res = python(LEAF_TOTALS, &[dir.to_str().unwrap()]);
    check(&res, "pyarrow and DuckDB over the pair files");
    let text = String::from_utf8_lossy(&res.stdout).to_string();
    let (pyarrow, duckdb) = (lines_of(&text, "pyarrow "), lines_of(&text, "duckdb "));
    assert!(pyarrow.len() > 1, "several leaves: {text}");
    assert_eq!(pyarrow, duckdb);
    // stacks-query's flat CPU per function (leaf of the decoded stack) for each layout.
    for layout in ["pairs", "inline", "mixed"] {
        let res = sh(&format!(
            "stacks-query -d {} cpu-functions -f csv | tail -n +2 | awk -F, '$3 > 0 {{print $1 \",\" $3}}' | sort",
            stores.dir(layout).display()
        ));
        check(&res, "cpu-functions");
        let ours: Vec<String> = String::from_utf8_lossy(&res.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        assert_eq!(ours, pyarrow, "stacks-query cpu-functions over {layout}");
    }
    let _ = std::fs::remove_dir_all(&stores.root);
}

/// The frames layout read directly, as docs/format.md shows: each stack's frames joined from
/// its file set's frames file by (`set_id`, `frame_id`), in `frame_ids` order; printed as
/// `hex(stack_id),folded` lines (root first, `;`-joined, frames named as the stack functions
/// name them), by pyarrow and by DuckDB.
const FRAMES_READERS: &str = r#"
import sys, glob
import pyarrow.dataset as ds
import duckdb
d = sys.argv[1]
frames = ds.dataset(glob.glob(d + '/**/*.frames.parquet', recursive=True), format='parquet').to_table()
by_id = {(s, i): n for s, i, n in zip(
    *(frames.column(c).to_pylist() for c in ['set_id', 'frame_id', 'name']))}
stacks = ds.dataset(glob.glob(d + '/**/*.stacks.parquet', recursive=True), format='parquet').to_table()
out = {}
for sid, ids, s in zip(*(stacks.column(c).to_pylist() for c in ['stack_id', 'frame_ids', 'set_id'])):
    out[sid.hex()] = ';'.join(by_id[(s, i)] for i in reversed(ids))
for k in sorted(out):
    print(f'pyarrow {k},{out[k]}')
rows = duckdb.connect().execute("""
    WITH refs AS (
        SELECT stack_id, set_id, unnest(frame_ids) AS frame_id,
               generate_subscripts(frame_ids, 1) AS i
        FROM read_parquet(?)),
    named AS (
        SELECT r.stack_id, r.set_id, r.i,
               f.name
        FROM refs r JOIN read_parquet(?) f USING (set_id, frame_id))
    SELECT DISTINCT ON (stack_id) lower(hex(stack_id)),
           array_to_string(list(name ORDER BY i DESC), ';')
    FROM named GROUP BY stack_id, set_id ORDER BY 1
""", [d + '/**/*.stacks.parquet', d + '/**/*.frames.parquet']).fetchall()
for sid, folded in rows:
    print(f'duckdb {sid},{folded}')
"#;

#[test]
fn pyarrow_and_duckdb_join_samples_stacks_and_frames_as_documented() {
    let stores = Stores::new("layout-frames-readers", 80);
    let dir = stores.dir("frames");
    let res = python(FRAMES_READERS, &[dir.to_str().unwrap()]);
    check(&res, "pyarrow and DuckDB over the frames files");
    let text = String::from_utf8_lossy(&res.stdout).to_string();
    let (pyarrow, duckdb) = (lines_of(&text, "pyarrow "), lines_of(&text, "duckdb "));
    // Stacks of no frames are nothing to DuckDB's join: compare those with frames.
    let with_frames: Vec<String> = pyarrow
        .iter()
        .filter(|l| !l.ends_with(','))
        .cloned()
        .collect();
    assert!(with_frames.len() > 5, "several stacks: {text}");
    assert_eq!(duckdb, with_frames);
    // stacks-query's folded stacks of the same store, and of the first layout.
    for layout in ["frames", "inline"] {
        let res = sh(&format!(
            "stacks-query -d {} -f csv -c \"SELECT lower(encode(stack_id, 'hex')) AS id, \
             stack_fold(stack) AS f FROM stack_table\" | tail -n +2 | sort",
            stores.dir(layout).display()
        ));
        check(&res, "stacks-query folded stacks");
        let ours: Vec<String> = String::from_utf8_lossy(&res.stdout)
            .lines()
            .map(|l| l.replace('"', ""))
            .collect();
        assert_eq!(ours, pyarrow, "stacks-query over {layout}");
    }
    let _ = std::fs::remove_dir_all(&stores.root);
}

/// `stacks-query -d DIR ARGS`.
fn query(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin("stacks-query"))
        .arg("-d")
        .arg(dir)
        .args(args)
        .output()
        .expect("run stacks-query")
}

/// Remove the third chunk's samples file from the `layout` store, as a pack killed between
/// its renames leaves it: its stacks (and frames) file is ignored, quietly, and the other two
/// chunks answer. Returns the store's partition directory.
fn orphans_are_ignored(stores: &Stores, layout: &str) -> PathBuf {
    let dir = stores.dir(layout);
    let date = dir.join("date=2023-11-14");
    std::fs::remove_file(date.join("stacks-test-000002.samples.parquet")).unwrap();
    let out = query(&dir, &["-c", "SELECT count(*) FROM stacks", "-f", "csv"]);
    check(&out, &format!("a {layout} store with orphan files"));
    let third = stores.rows.len().div_ceil(3);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("count(*)\n{}\n", 2 * third)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    date
}

#[test]
fn a_samples_file_without_its_stacks_is_refused_and_orphan_stacks_ignored() {
    let stores = Stores::new("layout-broken", 30);
    let dir = stores.dir("pairs");
    let date = orphans_are_ignored(&stores, "pairs");
    let run = |args: &[&str]| query(&dir, args);
    // A corrupt stacks file.
    let stacks = date.join("stacks-test-000001.stacks.parquet");
    let good = std::fs::read(&stacks).unwrap();
    std::fs::write(&stacks, b"not a parquet file at all").unwrap();
    let samples = date.join("stacks-test-000001.samples.parquet");
    for args in [&["cpu"][..], &["-c", "SELECT count(*) FROM samples"][..]] {
        let out = run(args);
        assert_refused(
            &out,
            "stacks-query",
            1,
            &format!(
                "{}: its stacks file stacks-test-000001.stacks.parquet is corrupt",
                samples.display()
            ),
            "a corrupt stacks file",
        );
    }
    // A missing one.
    std::fs::remove_file(&stacks).unwrap();
    let out = run(&["cpu"]);
    assert_refused(
        &out,
        "stacks-query",
        1,
        &format!(
            "{}: its stacks file stacks-test-000001.stacks.parquet is missing",
            samples.display()
        ),
        "a missing stacks file",
    );
    // Put back, the store answers again.
    std::fs::write(&stacks, good).unwrap();
    check(&run(&["cpu", "-f", "csv"]), "the store restored");
    let _ = std::fs::remove_dir_all(&stores.root);
}

#[test]
fn a_samples_file_without_its_frames_is_refused_and_orphan_frames_ignored() {
    let stores = Stores::new("layout-broken-frames", 30);
    let dir = stores.dir("frames");
    let date = orphans_are_ignored(&stores, "frames");
    let run = |args: &[&str]| query(&dir, args);
    let frames = date.join("stacks-test-000001.frames.parquet");
    let samples = date.join("stacks-test-000001.samples.parquet");
    let good = std::fs::read(&frames).unwrap();
    std::fs::write(&frames, b"not a parquet file at all").unwrap();
    assert_refused(
        &run(&["cpu"]),
        "stacks-query",
        1,
        &format!(
            "{}: its frames file stacks-test-000001.frames.parquet is corrupt",
            samples.display()
        ),
        "a corrupt frames file",
    );
    std::fs::remove_file(&frames).unwrap();
    assert_refused(
        &run(&["cpu"]),
        "stacks-query",
        1,
        &format!(
            "{}: its frames file stacks-test-000001.frames.parquet is missing",
            samples.display()
        ),
        "a missing frames file",
    );
    std::fs::write(&frames, good).unwrap();
    check(&run(&["cpu", "-f", "csv"]), "the store restored");
    let _ = std::fs::remove_dir_all(&stores.root);
}
