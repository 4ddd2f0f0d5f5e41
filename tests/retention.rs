//! Retention on stacks-pack itself (`--max-total`, `--retain`): whole file sets go, oldest
//! first, and what is left fits; and readers over a store that loses sets under them: a set
//! deleted after the store was opened is still read whole (stacks-sql holds its files open),
//! one deleted while the store is listed is skipped with a warning, not an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use stacks_sql::Data;
use stacks_sql::window::Window;
use stacks_testkit::recording as fixture;
use stacks_tests::{bin, run_tool, scratch, stream_bytes};

/// Rows of the fixture (every kind), as one symbolized stream.
fn stream(per_kind: usize) -> (Vec<u8>, usize) {
    let rows = fixture::rows(per_kind);
    let b = fixture::batch(&rows);
    (
        stream_bytes(&b.schema(), std::slice::from_ref(&b), true),
        rows.len(),
    )
}

/// Pack `input` into `dir` with `args` after it; stderr.
fn pack(dir: &Path, args: &[&str], input: &[u8]) -> String {
    let mut all = vec![dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = run_tool(bin("stacks-pack"), &all, input, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "stacks-pack {args:?}: {err}");
    err
}

/// The finished sets under `dir`: base name → bytes of its files.
fn sets(dir: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if let Some(base) = [".samples.parquet", ".stacks.parquet", ".frames.parquet"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
            {
                *out.entry(base.to_string()).or_default() += e.metadata().unwrap().len();
            }
        }
    }
    out
}

/// The files of set `base` in `dir`.
fn files_of(dir: &Path, base: &str) -> Vec<PathBuf> {
    ["samples", "stacks", "frames"]
        .iter()
        .map(|k| dir.join(format!("{base}.{k}.parquet")))
        .collect()
}

#[test]
fn max_total_deletes_whole_sets_oldest_first_until_the_store_fits() {
    let (input, _) = stream(400);
    let unbounded = scratch("retention-unbounded");
    pack(&unbounded, &["--max-rows", "200"], &input);
    let all = sets(&unbounded);
    assert!(all.len() >= 10, "{all:?}");
    let largest = *all.values().max().unwrap();
    let limit = largest * 4;

    let bounded = scratch("retention-bounded");
    let err = pack(
        &bounded,
        &["--max-rows", "200", "--max-total", &limit.to_string()],
        &input,
    );
    let kept = sets(&bounded);
    let total: u64 = kept.values().sum();
    assert!(total <= limit, "{total} > {limit}: {kept:?}");
    assert!(
        total + largest > limit,
        "no more deleted than needed: {kept:?}"
    );
    // The newest sets are the ones kept (names sort by sequence within one packer).
    let names: Vec<&String> = kept.keys().collect();
    let newest: Vec<String> = {
        let mut bases: Vec<String> = all
            .keys()
            .map(|b| b.rsplit('-').next().unwrap().to_string())
            .collect();
        bases.sort();
        bases.split_off(bases.len() - kept.len())
    };
    let kept_seqs: Vec<String> = names
        .iter()
        .map(|b| b.rsplit('-').next().unwrap().to_string())
        .collect();
    assert_eq!(kept_seqs, newest);
    let deleted = all.len() - kept.len();
    assert!(
        err.contains("retention: deleted") && err.contains("oldest first"),
        "{err}"
    );
    // Every deletion is counted in the log lines.
    let logged: usize = err
        .lines()
        .filter_map(|l| l.split("retention: deleted ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(logged, deleted, "{err}");
}

#[test]
fn retain_deletes_sets_older_than_the_duration_and_keeps_the_new_ones() {
    let (input, _) = stream(50);
    let dir = scratch("retention-retain");
    pack(&dir, &[], &input);
    let old = sets(&dir);
    assert_eq!(old.len(), 1);
    let old_base = old.keys().next().unwrap().clone();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    for f in files_of(&dir, &old_base) {
        let file = std::fs::File::options().write(true).open(&f).unwrap();
        file.set_modified(two_hours_ago).unwrap();
    }
    let err = pack(&dir, &["--retain", "1h"], &input);
    let now = sets(&dir);
    assert_eq!(now.len(), 1, "{now:?} {err}");
    assert!(!now.contains_key(&old_base), "{err}");
    for f in files_of(&dir, &old_base) {
        assert!(!f.exists(), "{} left", f.display());
    }
    assert!(err.contains("retention: deleted 1 file set(s)"), "{err}");
}

/// `sql` (one number) by stacks-query over `dir`, in a process of its own.
fn query_number(dir: &Path, sql: &str) -> i64 {
    let out = run_tool(
        bin("stacks-query"),
        &["-d", dir.to_str().unwrap(), "-c", sql, "-f", "csv"],
        b"",
        Duration::from_secs(120),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn a_reader_keeps_reading_sets_deleted_under_it_and_skips_those_already_gone() {
    let (input, rows) = stream(200);
    let dir = scratch("retention-reader");
    pack(&dir, &["--max-rows", "300"], &input);
    let all: Vec<String> = sets(&dir).into_keys().collect();
    assert_eq!(all.len(), rows.div_ceil(300), "{all:?}");

    // Listed, then a set deleted (its samples file first, as retention does): skipped with a
    // warning, not an error.
    let listed = stacks_sql::source::find_files(&dir).unwrap();
    std::fs::remove_file(&files_of(&dir, &all[2])[0]).unwrap();
    let kept = stacks_sql::source::stacks_files(&dir, listed).unwrap();
    assert_eq!(kept.len(), all.len() - 1, "{kept:?}");
    assert!(kept.iter().all(|f| !f.to_string_lossy().contains(&all[2])));

    // Opened, then two more sets deleted whole: the session still reads every row and stack
    // of what it opened (counted by another process before the deletion).
    let stacked_sql = "SELECT count(*) FROM stacks WHERE stack IS NOT NULL";
    let stacked = query_number(&dir, stacked_sql);
    assert!(stacked > 0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let count = |ctx: &datafusion::prelude::SessionContext, sql: &str| -> i64 {
        rt.block_on(async {
            let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            arrow_cast::display::array_value_to_string(batches[0].column(0), 0)
                .unwrap()
                .parse()
                .unwrap()
        })
    };
    let ctx = stacks_sql::session(None).unwrap();
    rt.block_on(stacks_sql::open(
        &ctx,
        &Data::Dir(dir.to_path_buf()),
        &Window::default(),
    ))
    .unwrap();
    for base in &all[..2] {
        for f in files_of(&dir, base) {
            std::fs::remove_file(f).unwrap();
        }
    }
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM stacks"),
        (rows - 300) as i64
    );
    assert_eq!(count(&ctx, stacked_sql), stacked);
    // A new reader sees what is left: the sets after the third, 300 rows each but the last
    // (the third's stacks and frames files, left without their samples file, are ignored).
    assert_eq!(
        query_number(&dir, "SELECT count(*) FROM stacks"),
        (rows - 900) as i64
    );
}
