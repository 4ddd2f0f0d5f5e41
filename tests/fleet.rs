//! Fleet storage, end to end: `stacks-pack URL` uploads every finished file pair under
//! `PREFIX/date=/hour=/host=/`, the stacks file first, and leaves nothing in its spool; pairs
//! a killed packer left in the spool are uploaded by the next one; against an S3 server on
//! loopback (s3s-fs, installed by scripts/setup), an outage in the middle of a run (the server
//! stopped, then started again) and a SIGKILL of the packer while pairs wait for the store
//! leave every row in the bucket exactly once.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Array, Int32Array};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stacks_tests::s3server::{S3, check_layout, files, s3};
use stacks_tests::{Row, assert_refused, bin, check, scratch, sh, stream_bytes};

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
        err.contains(&format!("uploaded {pairs} file sets (300 rows")),
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
