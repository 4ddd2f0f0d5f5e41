//! End-to-end stacks-pack and stacks-query: files that pyarrow, DuckDB and DataFusion read with
//! their metadata and partitions; SIGKILL at random instants leaves only complete files; a full
//! disk and a read-only directory are clear errors that keep earlier files; every bundled query
//! through `stacks-pack | stacks-query | stacks-pprof` adds up to what the recording holds.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use stacks_testkit::recording as fixture;
use stacks_tests::{
    Row, Tmpfs, bin, check, python, root_available, run_tool, scratch, sh, stream_bytes,
};

/// The fixture rows as one symbolized Arrow stream; `tid` = row number when `numbered`, and
/// with `random_threads` every row's thread name is 12 random hex digits (incompressible).
fn stream_of(rows: &mut [Row], numbered: bool, random_threads: bool) -> Vec<u8> {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for (i, r) in rows.iter_mut().enumerate() {
        if numbered {
            r.tid = i as i32;
        }
        if random_threads {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            r.thread = format!("{:012x}", seed >> 16);
        }
    }
    let b = fixture::batch(rows);
    stream_bytes(&b.schema(), std::slice::from_ref(&b), true)
}

/// Run stacks-pack with `args` and `input` on stdin.
fn pack(args: &[&str], input: &[u8]) -> std::process::Output {
    run_tool(bin("stacks-pack"), args, input, Duration::from_secs(600))
}

/// Per visible samples file under a directory (pyarrow): rows, tid range and count, whether
/// each row group is sorted by time with matching statistics, the stacks.* metadata, and
/// whether its stacks file is there holding exactly the stack ids of its rows, each once, and
/// its frames file exactly the frames of those stacks.
const FILES: &str = r#"
import json, os, sys
import pyarrow.parquet as pq
out = []
for root, dirs, names in os.walk(sys.argv[1]):
    dirs[:] = [d for d in dirs if not d.startswith('.')]
    for n in sorted(names):
        if n.startswith('.') or not n.endswith('.samples.parquet'):
            continue
        f = pq.ParquetFile(os.path.join(root, n))
        t = f.read()
        tids = t.column('tid').to_pylist()
        ok = True
        for g in range(f.num_row_groups):
            times = f.read_row_group(g, columns=['time']).column(0).cast('int64').to_pylist()
            st = f.metadata.row_group(g).column(0).statistics
            ok &= times == sorted(times)
            ok &= st is not None and st.has_min_max
            ok &= st.min_raw == times[0] and st.max_raw == times[-1]
        kv = {k.decode(): v.decode() for k, v in (f.metadata.metadata or {}).items() if k.startswith(b'stacks.')}
        k_path = os.path.join(root, n[:-len('.samples.parquet')] + '.stacks.parquet')
        pair = os.path.exists(k_path)
        if pair:
            ids = set(x for x in t.column('stack_id').to_pylist() if x is not None)
            k = pq.read_table(k_path)
            kids = k.column('stack_id').to_pylist()
            pair = ids == set(kids) and len(kids) == len(set(kids))
            # A stacks file of frame ids needs its frames file, holding every frame it names.
            f_path = k_path[:-len('.stacks.parquet')] + '.frames.parquet'
            if 'frame_ids' in k.column_names:
                used = {i for l in k.column('frame_ids').to_pylist() for i in l}
                pair = pair and os.path.exists(f_path) and used == set(
                    pq.read_table(f_path).column('frame_id').to_pylist())
        out.append(dict(path=os.path.relpath(os.path.join(root, n), sys.argv[1]), rows=t.num_rows,
                        min=min(tids) if tids else None, max=max(tids) if tids else None,
                        distinct=len(set(tids)), sorted=bool(ok), kv=kv, pair=pair))
print(json.dumps(out))
"#;

fn files_of(dir: &Path) -> Vec<Value> {
    let out = python(FILES, &[dir.to_str().unwrap()]);
    check(&out, "pyarrow reading the files");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The same store read whole by pyarrow (hive partitions) and DuckDB, samples joined with
/// their stacks on `stack_id`.
const READERS: &str = r#"
import glob, json, sys
import pyarrow.dataset as ds
import duckdb
d = sys.argv[1]
samples = sorted(glob.glob(d + '/**/*.samples.parquet', recursive=True))
stacks = sorted(glob.glob(d + '/**/*.stacks.parquet', recursive=True))
t = ds.dataset(samples, format='parquet', partitioning='hive', partition_base_dir=d).to_table()
k = ds.dataset(stacks, format='parquet').to_table(columns=['stack_id', 'frame_ids'])
depth = {i: len(s) for i, s in zip(k.column('stack_id').to_pylist(), k.column('frame_ids').to_pylist())}
frames = sum(depth[i] for i in t.column('stack_id').to_pylist() if i is not None)
con = duckdb.connect()
glob_s = d + '/**/*.samples.parquet'
glob_k = d + '/**/*.stacks.parquet'
n, dates, dframes, profile_ns = con.execute(
    "SELECT count(*), count(DISTINCT date), sum(coalesce(len(k.frame_ids), 0)), "
    "sum(CASE WHEN kind = 'profile' THEN value ELSE 0 END) "
    "FROM read_parquet(?, hive_partitioning = true) s LEFT JOIN "
    "(SELECT DISTINCT ON (stack_id) stack_id, frame_ids FROM read_parquet(?)) k USING (stack_id)",
    [glob_s, glob_k]).fetchone()
hosts = {r[0].decode() if isinstance(r[0], bytes) else r[0] for r in con.execute(
    "SELECT value FROM parquet_kv_metadata(?) WHERE key = 'stacks.host'", [glob_s]).fetchall()}
print(json.dumps(dict(
    pyarrow_rows=t.num_rows, pyarrow_dates=sorted(set(str(x) for x in t.column('date').to_pylist())),
    pyarrow_frames=frames, duckdb_rows=n, duckdb_dates=dates, duckdb_frames=int(dframes),
    duckdb_profile_ns=int(profile_ns), duckdb_hosts=sorted(hosts))))
"#;

#[test]
fn packed_store_is_read_by_pyarrow_duckdb_and_datafusion() {
    let dir = scratch("store-readers");
    let out = dir.join("out");
    // Rows over two UTC dates: the fixture is shifted to end 2.5 s after midnight.
    let mut rows = fixture::rows(50);
    let midnight = 1_700_006_400 * fixture::SEC; // 2023-11-15T00:00:00Z
    for r in rows.iter_mut() {
        r.time += midnight - fixture::T0 - 5 * fixture::SEC / 2;
    }
    let input = stream_of(&mut rows, true, false);
    let res = pack(
        &[
            out.to_str().unwrap(),
            "--partition",
            "date",
            "--max-rows",
            "64",
        ],
        &input,
    );
    check(&res, "stacks-pack --partition date");

    let files = files_of(&out);
    assert!(files.len() >= 5, "{files:?}");
    for f in &files {
        let path = f["path"].as_str().unwrap();
        assert!(path.starts_with("date=2023-11-1"), "{path}");
        assert!(f["sorted"].as_bool().unwrap(), "{path}: row groups sorted");
        assert_eq!(
            f["pair"], true,
            "{path}: its stacks file holds exactly its stacks"
        );
        assert_eq!(f["kv"]["stacks.host"], "fixturehost", "{path}");
        assert_eq!(f["kv"]["stacks.stage"], "symbolized", "{path}");
        assert_eq!(
            f["kv"]["stacks.schema_version"],
            stacks_stream::SCHEMA_VERSION,
            "{path}"
        );
        assert!(
            f["kv"]["stacks.events"]
                .as_str()
                .unwrap()
                .contains("switch")
        );
        assert!(
            f["kv"]["stacks.tools"]
                .as_str()
                .unwrap()
                .contains("stacks-pack")
        );
    }

    let out_readers = python(READERS, &[out.to_str().unwrap()]);
    check(&out_readers, "pyarrow dataset and DuckDB");
    let r: Value = serde_json::from_slice(&out_readers.stdout).unwrap();
    let frames: usize = rows
        .iter()
        .map(|r| r.stack.as_ref().map_or(0, Vec::len))
        .sum();
    let profile_ns: i64 = rows
        .iter()
        .filter(|r| r.kind == "profile")
        .map(|r| r.value)
        .sum();
    assert_eq!(r["pyarrow_rows"], rows.len());
    assert_eq!(r["duckdb_rows"], rows.len());
    assert_eq!(
        r["pyarrow_dates"],
        serde_json::json!(["2023-11-14", "2023-11-15"])
    );
    assert_eq!(r["duckdb_dates"], 2);
    assert_eq!(r["pyarrow_frames"], frames);
    assert_eq!(r["duckdb_frames"], frames);
    assert_eq!(r["duckdb_profile_ns"], profile_ns);
    assert_eq!(r["duckdb_hosts"], serde_json::json!(["fixturehost"]));

    // DataFusion (stacks-query) over the partitioned directory.
    let q = sh(&format!(
        "stacks-query -d {} -f csv -c \"SELECT count(*) AS n, sum(stack_depth(stack)) AS f FROM stacks\"",
        out.display()
    ));
    check(&q, "stacks-query over partitions");
    assert_eq!(
        String::from_utf8_lossy(&q.stdout),
        format!("n,f\n{},{frames}\n", rows.len())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn time_window_queries_prune_row_groups() {
    let dir = scratch("store-prune");
    let out = dir.join("out");
    let mut rows = fixture::rows(200);
    let input = stream_of(&mut rows, true, false);
    let res = pack(
        &[out.to_str().unwrap(), "-i", "-", "--row-group-rows", "100"],
        &input,
    );
    check(&res, "stacks-pack");
    let from = "2023-11-14T22:13:24Z";
    let sql =
        format!("EXPLAIN ANALYZE SELECT count(*) FROM stacks WHERE time >= TIMESTAMP '{from}'");
    let q = sh(&format!(
        "stacks-query -d {} -f csv -c \"{sql}\"",
        out.display()
    ));
    check(&q, "EXPLAIN ANALYZE");
    let text = String::from_utf8_lossy(&q.stdout);
    // 1200 rows over 5 s in 12 row groups: the last second's rows are in 3 of them.
    let pruned = text
        .split("row_groups_pruned_statistics=")
        .nth(1)
        .unwrap_or_else(|| panic!("no pruning metrics: {text}"));
    let total: usize = rows.len().div_ceil(100);
    let kept = rows
        .chunks(100)
        .filter(|c| c.last().unwrap().time >= fixture::T0 + 4 * fixture::SEC)
        .count();
    assert!(
        pruned.starts_with(&format!("{total} total \u{2192} {kept} matched")),
        "want {kept} of {total} row groups matched: {}",
        &pruned[..pruned.len().min(80)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_at_random_instants_leaves_only_complete_files() {
    let dir = scratch("store-kill");
    let mut rows = fixture::rows(15_000);
    let input = dir.join("big.arrows");
    std::fs::write(&input, stream_of(&mut rows, true, false)).unwrap();
    let per_file = 10_000;
    let args = |out: &Path| -> Vec<String> {
        vec![
            out.display().to_string(),
            "-i".into(),
            input.display().to_string(),
            "--max-rows".into(),
            per_file.to_string(),
            "--row-group-rows".into(),
            "2500".into(),
        ]
    };
    // How long a whole run takes, to spread the kills over it.
    let t0 = Instant::now();
    let full = Command::new(bin("stacks-pack"))
        .args(args(&dir.join("full")))
        .output()
        .unwrap();
    check(&full, "stacks-pack, uninterrupted");
    let span = t0.elapsed().as_micros() as u64;

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill instants from seed {seed} over {span} µs");
    let mut g = seed | 1;
    let hidden = |d: &Path| {
        std::fs::read_dir(d)
            .map(|es| {
                es.filter(|e| {
                    let name = e.as_ref().unwrap().file_name();
                    let name = name.to_string_lossy();
                    name.ends_with(".parquet.tmp")
                        || name
                            .strip_suffix(".stacks.parquet")
                            .or_else(|| name.strip_suffix(".frames.parquet"))
                            .is_some_and(|base| !d.join(format!("{base}.samples.parquet")).exists())
                })
                .count()
            })
            .unwrap_or(0)
    };
    let mut complete_files = 0;
    // At least 12 kills; more (up to 48) until one lands while a file is being written, so
    // the check below does not depend on the luck of 12 random instants.
    let mut rounds = 0;
    for round in 0..48 {
        rounds = round + 1;
        g = g
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let at = Duration::from_micros((g >> 33) % span.max(1));
        let out = dir.join(format!("k{round}"));
        let mut child = Command::new(bin("stacks-pack"))
            .args(args(&out))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        if !out.exists() {
            continue;
        }
        let files = files_of(&out);
        let mut starts: Vec<i64> = Vec::new();
        for f in &files {
            // Every visible file is whole: the rows of one rotation slot (the last slot of the
            // stream is shorter), each once.
            let path = f["path"].as_str().unwrap();
            let min = f["min"].as_i64().unwrap();
            assert_eq!(min % per_file as i64, 0, "round {round}: {path}");
            let want = (rows.len() as i64 - min).min(per_file as i64);
            assert_eq!(f["rows"], want, "round {round} ({at:?}): {path}");
            assert_eq!(f["distinct"], want, "round {round}: {path}");
            assert_eq!(f["max"].as_i64().unwrap() - min + 1, want);
            assert!(f["sorted"].as_bool().unwrap());
            assert_eq!(
                f["pair"], true,
                "round {round}: {path} without exactly its stacks"
            );
            starts.push(min);
        }
        starts.sort();
        let prefix: Vec<i64> = (0..starts.len() as i64)
            .map(|k| k * per_file as i64)
            .collect();
        assert_eq!(
            starts, prefix,
            "round {round}: files are the stream's first slots"
        );
        complete_files += files.len();
        if rounds >= 12 && (0..rounds).any(|r| hidden(&dir.join(format!("k{r}"))) > 0) {
            break;
        }
    }
    eprintln!("{complete_files} complete files seen across the kills");

    // What the killed packers left unfinished is hidden (temporary files) or unused (stacks and
    // frames files whose samples file never appeared: killed between the set's renames), and
    // the next packer on the directory removes it.
    let Some(left) = (0..rounds)
        .map(|round| dir.join(format!("k{round}")))
        .find(|d| hidden(d) > 0)
    else {
        panic!("no kill landed while a file was being written");
    };
    let empty = {
        let mut none: Vec<Row> = Vec::new();
        stream_of(&mut none, false, false)
    };
    let before = hidden(&left);
    let res = pack(&[left.to_str().unwrap()], &empty);
    check(&res, "stacks-pack after a kill");
    assert_eq!(hidden(&left), 0, "leftovers of the killed packer removed");
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(
        err.contains(&format!("removed {before} unfinished file")),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn full_disk_is_one_clear_error_and_earlier_files_stay_whole() {
    if !root_available("full_disk_is_one_clear_error_and_earlier_files_stay_whole") {
        return;
    }
    let dir = scratch("store-full");
    let mnt = Tmpfs::mount(&dir.join("small"), "size=2M");
    let mut rows = fixture::rows(20_000);
    let input = stream_of(&mut rows, true, true);
    let out = mnt.0.join("out");
    let res = pack(
        &[
            out.to_str().unwrap(),
            "--max-rows",
            "20000",
            "--row-group-rows",
            "5000",
        ],
        &input,
    );
    let err = String::from_utf8_lossy(&res.stderr).into_owned();
    assert_eq!(res.status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(errors[0].starts_with("stacks-pack: error: "), "{err}");
    assert!(errors[0].contains("No space left on device"), "{err}");
    assert!(
        errors[0].contains(out.to_str().unwrap()),
        "names the path: {err}"
    );

    let files = files_of(&out);
    assert!(
        !files.is_empty(),
        "some files fit before the disk filled: {err}"
    );
    for (k, f) in files.iter().enumerate() {
        assert_eq!(f["rows"], 20_000);
        assert_eq!(f["min"], k * 20_000);
        assert_eq!(f["pair"], true, "{f}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    drop(mnt);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_directory_is_one_clear_error() {
    if !root_available("read_only_directory_is_one_clear_error") {
        return;
    }
    let dir = scratch("store-ro");
    let mnt = Tmpfs::mount(&dir.join("ro"), "ro,size=1M");
    let mut rows = fixture::rows(5);
    let input = stream_of(&mut rows, false, false);
    for (target, want) in [
        (mnt.0.clone(), "cannot write to directory"),
        (mnt.0.join("sub"), "cannot create directory"),
    ] {
        let res = pack(&[target.to_str().unwrap()], &input);
        let err = String::from_utf8_lossy(&res.stderr).into_owned();
        assert_eq!(res.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("stacks-pack: error: {want} {}", target.display())),
            "{err}"
        );
        assert!(err.contains("Read-only file system"), "{err}");
    }
    drop(mnt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sum of the sample values of type `name` in a gzipped pprof.
fn pprof_total(bytes: &[u8], name: &str) -> i64 {
    let p = stacks_pprof::decode(bytes).expect("a pprof profile");
    let types: Vec<&str> = p
        .sample_type
        .iter()
        .map(|t| p.string_table[t.r#type as usize].as_str())
        .collect();
    let i = types
        .iter()
        .position(|t| *t == name)
        .unwrap_or_else(|| panic!("no sample type {name} in {types:?}"));
    p.sample.iter().map(|s| s.value[i]).sum()
}

#[test]
fn bundled_queries_through_pack_and_pprof_add_up() {
    let dir = scratch("store-queries");
    let out = dir.join("out");
    let mut rows = fixture::rows(80);
    let input = stream_of(&mut rows, false, false);
    check(
        &pack(&[out.to_str().unwrap(), "--max-rows", "100"], &input),
        "stacks-pack",
    );
    let sum = |f: &dyn Fn(&Row) -> Option<i64>| rows.iter().filter_map(f).sum::<i64>();
    let of = |kind: &'static str, op: Option<&'static str>| {
        move |r: &Row| {
            (r.kind == kind && (op.is_none() || r.op.as_deref() == op)).then_some(r.value)
        }
    };
    let cases: Vec<(&str, &str, i64)> = vec![
        ("cpu", "cpu", sum(&of("profile", None))),
        (
            "cpu",
            "samples",
            sum(&|r| (r.kind == "profile").then_some(1)),
        ),
        ("offcpu", "offcpu", sum(&of("switch", None))),
        (
            "offcpu",
            "intervals",
            sum(&|r| (r.kind == "switch").then(|| r.count.unwrap_or(1))),
        ),
        (
            "rss-growth",
            "rss_growth_bytes",
            sum(&|r| (r.kind == "rss" && r.value > 0).then_some(r.value)),
        ),
        ("block-bytes", "bytes", sum(&of("block", None))),
        (
            "block-latency",
            "latency",
            sum(&|r| (r.kind == "block").then_some(r.duration).flatten()),
        ),
        ("vfs-read", "bytes", sum(&of("vfs", Some("read")))),
        ("vfs-write", "bytes", sum(&of("vfs", Some("write")))),
        ("net", "bytes", sum(&of("net", None))),
    ];
    for (q, sample, want) in cases {
        assert!(want > 0, "{q}: the fixture has data");
        let res = sh(&format!(
            "stacks-query -d {} {q} | stacks-pprof",
            out.display()
        ));
        check(&res, q);
        assert_eq!(pprof_total(&res.stdout, sample), want, "{q}: {sample}");
    }
    // Each profile opens on the sample type its query is named for, as `go tool pprof` sees
    // it (`[dflt]` marks the default type in -raw output).
    let defaults = [
        ("cpu", "cpu/nanoseconds"),
        ("offcpu", "offcpu/nanoseconds"),
        ("rss-growth", "rss_growth_bytes/bytes"),
        ("block-bytes", "bytes/bytes"),
        ("block-latency", "latency/nanoseconds"),
        ("vfs-read", "bytes/bytes"),
        ("vfs-write", "bytes/bytes"),
        ("net", "bytes/bytes"),
    ];
    for (q, want) in defaults {
        let profile = dir.join(format!("{q}.pb.gz"));
        let res = sh(&format!(
            "stacks-query -d {} {q} | stacks-pprof > {} && go tool pprof -symbolize=none -raw {}",
            out.display(),
            profile.display(),
            profile.display()
        ));
        check(
            &res,
            &format!("{q} | stacks-pprof | go tool pprof -raw (needs Go: scripts/setup)"),
        );
        let raw = String::from_utf8_lossy(&res.stdout);
        let types = raw
            .lines()
            .skip_while(|l| *l != "Samples:")
            .nth(1)
            .unwrap_or_else(|| panic!("{q}: no sample types in:\n{raw}"));
        let default = types
            .split_whitespace()
            .find_map(|t| t.strip_suffix("[dflt]"))
            .unwrap_or_else(|| panic!("{q}: no default sample type in `{types}`"));
        assert_eq!(default, want, "{q}: sample types `{types}`");
    }
    // The table queries give the same totals as text.
    let res = sh(&format!(
        "stacks-query -d {} top-processes -p kind=net -p top=100 -f csv | tail -n +2 | cut -d, -f6 | awk '{{s += $1}} END {{print s}}'",
        out.display()
    ));
    check(&res, "top-processes");
    assert_eq!(
        String::from_utf8_lossy(&res.stdout).trim(),
        sum(&of("net", None)).to_string()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs argv[1:] with stdout read as an Arrow stream; prints the exit code, the child's peak
/// RSS in KiB (wait4), the rows and the sum of the `samples` column. The child starts before
/// pyarrow is imported: a forked child's peak counts its parent's RSS at the fork.
const PEAK: &str = r#"
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
import pyarrow.ipc as ipc, pyarrow.compute as pc
rows = samples = 0
for b in ipc.open_stream(p.stdout):
    rows += b.num_rows
    samples += pc.sum(b.column(b.schema.get_field_index('samples'))).as_py() or 0
_, status, ru = os.wait4(p.pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss, rows, samples)
"#;

/// The cpu query over a store where every sample is its own (thread, stack) group, with deep
/// stacks of long names: the result is hundreds of MB, yet the query's memory stays bounded
/// (counts are sorted without stacks; each distinct stack is decoded and held once). Before,
/// `first_value(stack)` kept every group's input batch alive and the result was sorted with
/// its stacks: the same query took over 1.5 GB here.
#[test]
fn cpu_query_memory_is_bounded_by_distinct_stacks_not_groups() {
    const ROWS: usize = 50_000;
    const DEPTH: usize = 32;
    // Eight distinct stacks of 32 frames with 100-character names.
    let names: Vec<&'static str> = (0..DEPTH + 8)
        .map(|i| {
            &*Box::leak(
                format!("deep::module::path::function_{i:03}_{}", "x".repeat(64)).into_boxed_str(),
            )
        })
        .collect();
    let stacks: Vec<Vec<stacks_tests::Frame>> = (0..8)
        .map(|s| fixture::stack(&names[s..s + DEPTH]))
        .collect();
    let mut rows: Vec<Row> = (0..ROWS)
        .map(|i| Row {
            time: fixture::T0 + i as i64 * 1000,
            kind: "profile".into(),
            pid: 100,
            tid: i as i32,
            comm: "deep".into(),
            thread: "deep".into(),
            value: 1_000_000,
            stack: Some(stacks[i % 8].clone()),
            ..Default::default()
        })
        .collect();
    let dir = scratch("store-bounded");
    let out = dir.join("out");
    let input = stream_of(&mut rows, false, false);
    check(&pack(&[out.to_str().unwrap()], &input), "stacks-pack");
    let query = bin("stacks-query");
    let (q, d) = (query.to_str().unwrap(), out.to_str().unwrap());
    for limit in [None, Some("64M")] {
        let mut args = vec![q, "-d", d, "cpu", "-f", "arrow"];
        args.extend(limit.iter().flat_map(|l| ["--memory-limit", *l]));
        let res = python(PEAK, &args);
        check(&res, "stacks-query cpu under wait4");
        let text = String::from_utf8_lossy(&res.stdout);
        let f: Vec<i64> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(
            f[0],
            0,
            "stacks-query failed ({limit:?}): {}",
            String::from_utf8_lossy(&res.stderr)
        );
        assert_eq!(
            (f[2], f[3]),
            (ROWS as i64, ROWS as i64),
            "rows and samples ({limit:?})"
        );
        let peak_mib = f[1] / 1024;
        // The result alone is 50,000 stacks × 32 frames (over 300 MB as Arrow).
        assert!(
            peak_mib < 400,
            "stacks-query cpu peaked at {peak_mib} MiB with --memory-limit {limit:?}"
        );
        eprintln!("cpu over {ROWS} groups, --memory-limit {limit:?}: peak {peak_mib} MiB");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
