//! Fleet storage, end to end: `stacks-pack URL` uploads every finished file pair under
//! `PREFIX/date=/hour=/host=/`, the stacks file first, and leaves nothing in its spool; pairs
//! a killed packer left in the spool are uploaded by the next one; against an S3 server on
//! loopback (s3s-fs, installed by scripts/setup), an outage in the middle of a run (the server
//! stopped, then started again) and a SIGKILL of the packer while pairs wait for the store
//! leave every row in the bucket exactly once.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int32Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stacks_tests::{
    Row, ScratchDir, assert_refused, bin, check, free_port, scratch, sh, stream_bytes,
};

/// 2026-11-23T06:00:00Z in ns.
const T0: i64 = 1_795_413_600_000_000_000;
const HOUR: i64 = 3_600_000_000_000;

/// A raw stream of `n` profile rows spread evenly over `hours` hours from T0, each with its own
/// `tid` (its index: rows are told apart by it), in batches of `batch`.
fn rows_stream(n: usize, hours: i64, batch: usize) -> Vec<u8> {
    let mut md = std::collections::HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    let schema = Arc::new(stacks_stream::raw_schema(md));
    let step = hours * HOUR / n.max(1) as i64;
    let rows: Vec<Row> = (0..n)
        .map(|i| Row {
            time: T0 + i as i64 * step,
            kind: "profile".into(),
            pid: 7,
            tid: i as i32,
            comm: "app".into(),
            thread: "app".into(),
            cpu: 0,
            value: 10_101_010,
            ..Row::default()
        })
        .collect();
    let batches: Vec<_> = rows
        .chunks(batch)
        .map(|c| stacks_testkit::batch(&schema, c))
        .collect();
    stream_bytes(&schema, &batches, true)
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The `tid`s of every samples file under `dir` (each row's identity), with repeats.
fn tids(dir: &Path) -> Vec<i32> {
    let mut all = Vec::new();
    for f in files(dir)
        .iter()
        .filter(|f| f.ends_with(".samples.parquet"))
    {
        let file = std::fs::File::open(dir.join(f)).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        for batch in reader.map(|b| b.unwrap()) {
            let t = batch.column_by_name("tid").expect("tid");
            let t = t.as_any().downcast_ref::<Int32Array>().expect("Int32");
            all.extend((0..t.len()).map(|i| t.value(i)));
        }
    }
    all
}

/// Every row exactly once: the tids 0..n, each once.
fn exactly_once(dir: &Path, n: usize) {
    let got = tids(dir);
    let distinct: HashSet<i32> = got.iter().copied().collect();
    assert_eq!(got.len(), n, "rows in {}: {:?}", dir.display(), files(dir));
    assert_eq!(distinct.len(), n, "no row twice");
}

/// The pairs' keys: each samples file has its stacks file, under date=/hour=/host=.
fn check_layout(bucket: &Path, prefix: &str) -> BTreeMap<String, usize> {
    let mut per_hour = BTreeMap::new();
    let all = files(bucket);
    for f in &all {
        let parts: Vec<&str> = f.split('/').collect();
        assert_eq!(
            parts.len(),
            prefix.trim_end_matches('/').split('/').count() + 4,
            "key {f}"
        );
        assert!(f.starts_with(prefix), "{f} under {prefix}");
        let n = parts.len();
        assert!(parts[n - 4].starts_with("date=2026-11-23"), "{f}");
        assert!(parts[n - 3].starts_with("hour="), "{f}");
        assert!(parts[n - 2].starts_with("host="), "{f}");
        if let Some(base) = f.strip_suffix(".samples.parquet") {
            assert!(
                all.contains(&format!("{base}.stacks.parquet")),
                "{f} has its stacks file"
            );
            *per_hour.entry(parts[n - 3].to_string()).or_default() += 1;
        }
    }
    per_hour
}

/// Pairs (complete or not) left in a spool.
fn spooled(spool: &Path) -> Vec<String> {
    files(spool)
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .collect()
}

#[test]
fn a_store_gets_every_pair_under_hour_and_host_and_the_spool_empties() {
    let dir = scratch("fleet-file-store");
    let input = dir.join("in.arrow");
    std::fs::write(&input, rows_stream(600, 3, 50)).unwrap();
    let url = format!("file://{}/bucket/fleet/prod", dir.display());
    let out = sh(&format!(
        "stacks-pack {url} --spool {d}/spool --max-rows 100 < {}",
        input.display(),
        d = dir.display()
    ));
    check(&out, "stacks-pack to file://");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("uploaded") && err.contains("600 rows"),
        "{err}"
    );
    let bucket = dir.join("bucket");
    // Three hours of rows: files never span two hours.
    let per_hour = check_layout(&bucket, "fleet/prod/");
    assert_eq!(
        per_hour.keys().collect::<Vec<_>>(),
        ["hour=06", "hour=07", "hour=08"],
        "{per_hour:?}"
    );
    exactly_once(&bucket, 600);
    assert!(spooled(&dir.join("spool")).is_empty(), "the spool is empty");
}

#[test]
fn pairs_left_in_the_spool_are_uploaded_by_the_next_packer() {
    let dir = scratch("fleet-leftovers");
    let d = dir.display();
    // A spool as a killed packer leaves it: finished pairs (packed into it as a directory,
    // partitioned by hour), the unfinished temporary file and an unpaired stacks file of a
    // dead packer.
    std::fs::write(dir.join("in.arrow"), rows_stream(300, 2, 50)).unwrap();
    check(
        &sh(&format!(
            "stacks-pack {d}/spool --partition hour --max-rows 100 < {d}/in.arrow"
        )),
        "packing into the spool",
    );
    let pairs = spooled(&dir.join("spool"))
        .iter()
        .filter(|f| f.ends_with(".samples.parquet"))
        .count();
    let host = stacks_pack::sanitize_host(&stacks_stream::sys::hostname());
    let hour = dir.join("spool/date=2026-11-23/hour=06");
    let dead = format!("stacks-20261123T060000Z-{host}-999999-000001");
    std::fs::write(
        hour.join(format!(".{dead}.samples.parquet.tmp")),
        b"partial",
    )
    .unwrap();
    std::fs::write(hour.join(format!("{dead}.stacks.parquet")), b"unpaired").unwrap();
    // The next packer's stream (here one without rows) goes to the same spool.
    std::fs::write(dir.join("none.arrow"), rows_stream(0, 1, 1)).unwrap();
    let url = format!("file://{d}/bucket/p");
    let out = sh(&format!(
        "stacks-pack {url} --spool {d}/spool < {d}/none.arrow"
    ));
    check(&out, "the next packer");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("uploaded {pairs} file pairs (300 rows")),
        "{err}"
    );
    check_layout(&dir.join("bucket"), "p/");
    exactly_once(&dir.join("bucket"), 300);
    assert!(
        spooled(&dir.join("spool")).is_empty(),
        "{:?}",
        files(&dir.join("spool"))
    );
}

/// An S3 server on loopback (s3s-fs) over a directory, stopped and started again by the test.
struct S3 {
    root: PathBuf,
    port: u16,
    child: Option<Child>,
}

const KEY: &str = "stackstest";
const SECRET: &str = "stackstestsecret";

impl S3 {
    fn start(root: &Path) -> Option<S3> {
        let exe = which("s3s-fs")?;
        let port = free_port();
        std::fs::create_dir_all(root.join("bucket")).unwrap();
        let mut s = S3 {
            root: root.to_path_buf(),
            port,
            child: None,
        };
        s.child = Some(s.spawn(&exe));
        s.wait_ready();
        Some(s)
    }

    fn spawn(&self, exe: &Path) -> Child {
        Command::new(exe)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", KEY, "--secret-key", SECRET])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs")
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self) {
        self.stop();
        self.child = Some(self.spawn(&which("s3s-fs").unwrap()));
        self.wait_ready();
    }

    /// Environment for a client of this server.
    fn env(&self) -> String {
        format!(
            "AWS_ACCESS_KEY_ID={KEY} AWS_SECRET_ACCESS_KEY={SECRET} AWS_REGION=us-east-1 \
             AWS_ENDPOINT=http://127.0.0.1:{} AWS_ALLOW_HTTP=true",
            self.port
        )
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.stop();
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(dirs_home().map(|h| h.join(".cargo/bin")))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn dirs_home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// The S3 server, or why the test cannot run (a missing server is a failure under
/// STACKS_REQUIRE_BPF, as CI sets it: scripts/setup installs it).
fn s3(dir: &ScratchDir, test: &str) -> Option<S3> {
    let s = S3::start(&dir.join("s3"));
    if s.is_none() {
        assert!(
            std::env::var_os("STACKS_REQUIRE_BPF").is_none(),
            "{test}: s3s-fs is missing (scripts/setup installs it)"
        );
        eprintln!("SKIPPED {test}: s3s-fs not installed (scripts/setup installs it)");
    }
    s
}

/// Feed `bytes` to `child`'s stdin in `parts`, `gap` apart, then close it.
fn feed(child: &mut Child, bytes: &[u8], parts: usize, gap: Duration) {
    let mut stdin = child.stdin.take().unwrap();
    let chunk = bytes.len().div_ceil(parts);
    for (i, c) in bytes.chunks(chunk).enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
        }
        stdin.write_all(c).unwrap();
        stdin.flush().unwrap();
    }
}

fn pack_cmd(env: &str, url: &str, spool: &Path, extra: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(format!(
            "exec env {env} {} {url} --spool {} {extra}",
            bin("stacks-pack").display(),
            spool.display()
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn an_outage_of_the_store_loses_nothing_and_duplicates_nothing() {
    let dir = scratch("fleet-outage");
    let Some(mut server) = s3(
        &dir,
        "an_outage_of_the_store_loses_nothing_and_duplicates_nothing",
    ) else {
        return;
    };
    let bytes = rows_stream(900, 1, 30);
    let spool = dir.join("spool");
    let mut pack = pack_cmd(&server.env(), "s3://bucket/fleet", &spool, "--max-age 1s")
        .spawn()
        .unwrap();
    // The stream arrives in three parts, 3 s apart (a pair finishes 1 s after each): the
    // server is stopped after the first part's pair is up, and started again before the end.
    let stopper = {
        let bucket = dir.join("s3/bucket");
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !files(&bucket)
                .iter()
                .any(|f| f.ends_with(".samples.parquet"))
            {
                assert!(Instant::now() < deadline, "no pair uploaded");
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    feed_then(&mut pack, &bytes, &mut server, stopper);
    let out = pack.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("failed") && err.contains("reachable again"),
        "the outage was seen and ended: {err}"
    );
    check_layout(&dir.join("s3/bucket"), "fleet/");
    exactly_once(&dir.join("s3/bucket"), 900);
    assert!(spooled(&spool).is_empty(), "{:?}", files(&spool));
}

/// Feed the pack its stream in three parts; stop the server once `first_up` returns (the first
/// pair is in the bucket) and start it again 4 s later, while the last part is packed.
fn feed_then(
    pack: &mut Child,
    bytes: &[u8],
    server: &mut S3,
    first_up: std::thread::JoinHandle<()>,
) {
    let mut stdin = pack.stdin.take().unwrap();
    let chunk = bytes.len().div_ceil(3);
    let parts: Vec<&[u8]> = bytes.chunks(chunk).collect();
    stdin.write_all(parts[0]).unwrap();
    stdin.flush().unwrap();
    first_up.join().unwrap();
    server.stop();
    stdin.write_all(parts[1]).unwrap();
    stdin.flush().unwrap();
    std::thread::sleep(Duration::from_secs(4));
    server.restart();
    for p in &parts[2..] {
        stdin.write_all(p).unwrap();
    }
    drop(stdin);
}

#[test]
fn a_killed_packer_leaves_its_pairs_for_the_next_one() {
    let dir = scratch("fleet-sigkill");
    let Some(mut server) = s3(&dir, "a_killed_packer_leaves_its_pairs_for_the_next_one") else {
        return;
    };
    let spool = dir.join("spool");
    let env = server.env();
    // The store is down: every pair waits in the spool; the packer is killed while retrying.
    server.stop();
    let mut pack = pack_cmd(&env, "s3://bucket/fleet", &spool, "--max-rows 100")
        .spawn()
        .unwrap();
    feed(&mut pack, &rows_stream(500, 2, 50), 1, Duration::ZERO);
    // Every row in a finished pair (three per hour: 100, 100 and 50 rows), then the kill.
    let deadline = Instant::now() + Duration::from_secs(20);
    while spooled(&spool)
        .iter()
        .filter(|f| f.ends_with(".samples.parquet"))
        .count()
        < 6
    {
        assert!(Instant::now() < deadline, "pairs never reached the spool");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = pack.kill(); // SIGKILL
    let _ = pack.wait();
    server.restart();
    // The next packer (a stream without rows of its own) uploads what the killed one left.
    std::fs::write(dir.join("none.arrow"), rows_stream(0, 1, 1)).unwrap();
    let out = sh(&format!(
        "{env} stacks-pack s3://bucket/fleet --spool {} < {}/none.arrow",
        spool.display(),
        dir.display()
    ));
    check(&out, "the next packer");
    check_layout(&dir.join("s3/bucket"), "fleet/");
    exactly_once(&dir.join("s3/bucket"), 500);
    assert!(spooled(&spool).is_empty(), "{:?}", files(&spool));
}

#[test]
fn bad_store_arguments_are_one_line_errors() {
    let dir = scratch("fleet-bad-args");
    let d = dir.display();
    for (args, needle) in [
        (
            format!("ftp://host/x --spool {d}/s"),
            "unknown scheme `ftp`",
        ),
        (
            format!("{d}/out --spool {d}/s"),
            "--spool is for a store URL",
        ),
        (
            format!("{d}/out --upload-wait 5s"),
            "--upload-wait is for a store URL",
        ),
        (
            format!("file://{d}/b --spool {d}/s --partition date"),
            "always partitioned by hour",
        ),
    ] {
        let out = sh(&format!("stacks-pack {args} < /dev/null"));
        assert_refused(&out, "stacks-pack", 1, needle, &args);
    }
}

/// The bundled queries' names, from `stacks-query --list`'s first column.
fn bundled_queries() -> Vec<String> {
    let out = sh("stacks-query --list");
    check(&out, "stacks-query --list");
    let names: Vec<String> = stacks_query::queries::BUNDLED
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    for n in &names {
        assert!(listed.contains(n.as_str()), "--list names {n}");
    }
    names
}

/// Rows per host of the fleet fixtures: 6 kinds × this.
const FLEET_N: usize = 60;
const HOSTS: [&str; 3] = ["web-1", "web-2", "db-1"];

/// Pack the fleet fixture of every host of [`HOSTS`] into `url` as that host; the rows of each.
fn fill_fleet(dir: &Path, env: &str, url: &str) -> Vec<Vec<Row>> {
    let mut all = Vec::new();
    for host in HOSTS {
        let (rows, bytes) = stacks_tests::fleet_recording(host, FLEET_N, 3);
        let input = dir.join(format!("{host}.arrow"));
        std::fs::write(&input, bytes).unwrap();
        let out = stacks_tests::pack_as_host(host, env, url, &dir.join(host), &input);
        check(&out, &format!("stacks-pack as {host}"));
        all.push(rows);
    }
    all
}

#[test]
fn queries_over_a_bucket_equal_the_local_store_and_a_window_lists_only_its_hours() {
    let test = "queries_over_a_bucket_equal_the_local_store_and_a_window_lists_only_its_hours";
    let dir = scratch("fleet-query");
    if !stacks_tests::root_available(test) {
        return;
    }
    let Some(s3) = s3(&dir, test) else {
        return;
    };
    let env = s3.env();
    let url = "s3://bucket/fleet";
    let hosts = fill_fleet(&dir, &env, url);
    let local = s3.root.join("bucket/fleet");
    let per_hour = check_layout(&s3.root.join("bucket"), "fleet/");
    assert_eq!(per_hour.len(), 3, "{per_hour:?}");

    // Every bundled query: the bucket through S3 gives the local store's rows.
    for q in bundled_queries() {
        let remote = sh(&format!("env {env} stacks-query -d {url} {q} -f csv"));
        check(&remote, &format!("{q} over {url}"));
        let here = sh(&format!("stacks-query -d {} {q} -f csv", local.display()));
        check(&here, &format!("{q} over the local copy"));
        let (r, h) = (
            stacks_tests::sorted_lines(&remote),
            stacks_tests::sorted_lines(&here),
        );
        assert_eq!(r, h, "{q}: the bucket and the local store differ");
        assert!(!r.is_empty(), "{q}: a header at least");
    }

    // `host`, `date` and `hour` are columns; --from/--to keep the rows of the window.
    let from = "2026-11-23T07:00:00Z";
    let to = "2026-11-23T08:00:00Z";
    let (t1, t2) = (
        stacks_stream::time::parse_time(from).unwrap(),
        stacks_stream::time::parse_time(to).unwrap(),
    );
    let sql = "SELECT host, date, hour, count(*) AS n FROM samples GROUP BY 1, 2, 3 ORDER BY 1";
    let mut expected: Vec<String> = HOSTS
        .iter()
        .zip(&hosts)
        .map(|(h, rows)| {
            let n = rows.iter().filter(|r| r.time >= t1 && r.time < t2).count();
            format!("{h},2026-11-23,07,{n}")
        })
        .collect();
    expected.sort();
    expected.insert(0, "host,date,hour,n".to_string());
    let windowed = |extra: &str| {
        let out = sh(&format!(
            "env {env} stacks-query -d {url} --from {from} {extra} -c '{sql}' -f csv"
        ));
        check(&out, &format!("the window {from} {extra}"));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(windowed(&format!("--to {to}")), expected);
    let local_window = sh(&format!(
        "stacks-query -d {} --from {from} --to {to} -c 'SELECT count(*) AS n FROM stacks' -f csv",
        local.display()
    ));
    check(&local_window, "a window over a directory");
    let total: usize = hosts
        .iter()
        .flatten()
        .filter(|r| r.time >= t1 && r.time < t2)
        .count();
    assert_eq!(
        String::from_utf8_lossy(&local_window.stdout).trim(),
        format!("n\n{total}")
    );

    // DuckDB reads the bucket with plain SQL (no stack functions) and agrees: rows per host
    // and hour, and CPU by folded stack (samples joined with the distinct stacks).
    let folded_sql = "SELECT t.folded, sum(s.value) AS ns FROM samples s JOIN \
        (SELECT DISTINCT stack_id, folded FROM stacks_files) t USING (stack_id) \
        WHERE s.kind = 'profile' GROUP BY 1 ORDER BY 2 DESC, 1";
    let duck = stacks_tests::python(
        DUCKDB_OVER_S3,
        &[
            &s3.port.to_string(),
            KEY,
            SECRET,
            "bucket/fleet",
            folded_sql,
        ],
    );
    check(&duck, "DuckDB over the bucket");
    let ours = sh(&format!(
        "env {env} stacks-query -d {url} -f csv -c \"SELECT host, hour, count(*) AS n FROM samples \
         GROUP BY 1, 2 ORDER BY 1, 2\" && env {env} stacks-query -d {url} -f csv -c \"{}\"",
        folded_sql.replace("stacks_files", "stack_table")
    ));
    check(&ours, "the same questions to stacks-query");
    let (d, o) = (
        String::from_utf8_lossy(&duck.stdout).to_string(),
        String::from_utf8_lossy(&ours.stdout).to_string(),
    );
    assert_eq!(d, o, "DuckDB and stacks-query over the bucket");
    assert!(d.lines().count() > 10, "{d}");

    // Hours outside the window are never listed: an unreadable object in one (and a whole
    // day before the window) breaks the open query, not the windowed ones.
    for key in [
        "date=2026-11-23/hour=06/host=web-1/broken.samples.parquet",
        "date=2026-11-22/hour=23/host=web-1/broken.samples.parquet",
    ] {
        let path = local.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"not parquet").unwrap();
    }
    assert_eq!(windowed(&format!("--to {to}")), expected);
    // Only --from: the hours are found by listing date=/hour= prefixes, from the window's day.
    let open_end = windowed("");
    assert_eq!(
        open_end.len(),
        1 + 2 * HOSTS.len(),
        "hours 07 and 08: {open_end:?}"
    );
    let all = sh(&format!("env {env} stacks-query -d {url} cpu -f csv"));
    assert_refused(
        &all,
        "stacks-query",
        1,
        "broken.samples.parquet",
        "an unwindowed query",
    );
}

/// DuckDB over the S3 bucket through fsspec's s3fs: argv PORT KEY SECRET BUCKET/PREFIX SQL
/// (SQL over the views `samples` and `stacks_files`); prints CSV as stacks-query does.
const DUCKDB_OVER_S3: &str = r#"
import csv, sys, duckdb, s3fs
port, key, secret, root, sql = sys.argv[1:6]
fs = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=f"http://127.0.0.1:{port}",
                       client_kwargs={"region_name": "us-east-1"})
con = duckdb.connect()
con.register_filesystem(fs)
files = f"s3://{root}/date=*/hour=*/host=*/"
con.sql(f"CREATE VIEW samples AS SELECT * FROM read_parquet('{files}*.samples.parquet', hive_partitioning = true)")
con.sql(f"CREATE VIEW stacks_files AS SELECT * FROM read_parquet('{files}*.stacks.parquet')")
out = csv.writer(sys.stdout, lineterminator="\n")
def show(q):
    r = con.sql(q)
    out.writerow(r.columns)
    for row in r.fetchall():
        out.writerow(["" if v is None else v for v in row])
show("SELECT host, hour, count(*) AS n FROM samples GROUP BY 1, 2 ORDER BY 1, 2")
show(sql)
"#;

#[test]
fn the_fleet_example_runs_three_hosts_into_a_bucket_and_queries_them_on_a_cluster() {
    let test = "the_fleet_example_runs_three_hosts_into_a_bucket_and_queries_them_on_a_cluster";
    if !stacks_tests::bpf_available(test) {
        return;
    }
    let _serial = stacks_tests::bpf_serial();
    let dir = scratch("fleet-example");
    let profile = dir.join("fleet-cpu.pb.gz");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fleet");
    let out = sh(&format!(
        "B={} FLEET_SECONDS=2 FLEET_OUT={} {}",
        stacks_tests::bin_dir().display(),
        profile.display(),
        script.display()
    ));
    check(&out, "scripts/fleet");
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    for host in ["fleet-a", "fleet-b", "fleet-c"] {
        assert!(
            table
                .lines()
                .any(|l| l.contains(host) && l.contains("profile")),
            "{host} has profile rows on the cluster: {table}"
        );
    }
    // The profile of the three hosts holds the workload's CPU burner.
    let top = sh(&format!(
        "go tool pprof -top -symbolize=none {}",
        profile.display()
    ));
    check(&top, "go tool pprof over the fleet profile");
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(top.contains("burn"), "{top}");
}
