//! Fleet queries, end to end, over a bucket on a local S3 server (s3s-fs) filled by three
//! packers as three hosts (each in a UTS namespace of its own): every bundled query over
//! `s3://` gives the rows it gives over the bucket's directory; `--from/--to` keep the window's
//! rows and never list the hours outside it; DuckDB reads the bucket with plain SQL and agrees;
//! and the fleet example (scripts/fleet) runs to its profile.

use std::path::Path;

use stacks_tests::s3server::{KEY, SECRET, check_layout, s3};
use stacks_tests::{Row, assert_refused, check, scratch, sh};

/// The bundled queries' names, from `stacks-query --list`'s first column.
fn bundled_queries() -> Vec<String> {
    let out = sh("stacks-query --list");
    check(&out, "stacks-query --list");
    let names: Vec<String> = stacks_sql::queries::BUNDLED
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
/// (SQL over the views `samples` and `stacks_files`, each file set's stacks folded from its
/// frames); prints CSV as stacks-query does.
const DUCKDB_OVER_S3: &str = r#"
import csv, sys, duckdb, s3fs
port, key, secret, root, sql = sys.argv[1:6]
fs = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=f"http://127.0.0.1:{port}",
                       client_kwargs={"region_name": "us-east-1"})
con = duckdb.connect()
con.register_filesystem(fs)
files = f"s3://{root}/date=*/hour=*/host=*/"
con.sql(f"CREATE VIEW samples AS SELECT * FROM read_parquet('{files}*.samples.parquet', hive_partitioning = true)")
# Each stack's folded frames, from the stacks files' frame ids and the frames files
# (docs/format.md, "The store"), named as the stack functions name frames.
con.sql(f"""CREATE VIEW stacks_files AS
    WITH refs AS (
        SELECT stack_id, set_id, unnest(frame_ids) AS frame_id, generate_subscripts(frame_ids, 1) AS i
        FROM read_parquet('{files}*.stacks.parquet')),
    named AS (
        SELECT r.stack_id, r.set_id, r.i,
               f.name
        FROM refs r JOIN read_parquet('{files}*.frames.parquet') f USING (set_id, frame_id))
    SELECT stack_id, array_to_string(list(name ORDER BY i DESC), ';') AS folded
    FROM named GROUP BY stack_id, set_id""")
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
    let script = stacks_tests::crate_dir().join("../scripts/fleet");
    let out = sh(&format!(
        "B={} FLEET_SECONDS=2 FLEET_OUT={} timeout -k 10 600 {}",
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
