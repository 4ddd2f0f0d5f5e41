//! Distributed execution on Apache DataFusion Ballista, against the local result on the same
//! store of three hosts (packed by stacks-pack as three hosts into a `file://` store):
//! - every bundled query on an in-process cluster (scheduler and executor in this test, plans
//!   serialized between them as between machines) gives exactly the rows of the query run
//!   locally over the store URL, and over the store's directory;
//! - `stacks-query --cluster` against our own `stacks-scheduler` and two `stacks-executor`
//!   processes on loopback gives the local result, and its Arrow output makes the same
//!   folded profile in stacks-pprof.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use futures::StreamExt;
use stacks_sql::window::Window;
use stacks_sql::{Data, queries};
use stacks_tests::{bin, check, free_port, scratch, sh, sorted_lines};

const HOSTS: [&str; 3] = ["web-1", "web-2", "db-1"];

/// A `file://` store with the fleet fixture of three hosts, three hours each; its URL and
/// directory.
fn fleet_store(dir: &Path) -> (String, std::path::PathBuf, usize) {
    let store = dir.join("bucket/fleet");
    let url = format!("file://{}", store.display());
    let mut rows = 0;
    for host in HOSTS {
        let (recorded, bytes) = stacks_tests::fleet_recording(host, 40, 3);
        rows += recorded.len();
        let input = dir.join(format!("{host}.arrow"));
        std::fs::write(&input, bytes).unwrap();
        let out = stacks_tests::pack_as_host(host, "", &url, &dir.join(host), &input);
        check(&out, &format!("stacks-pack as {host}"));
    }
    (url, store, rows)
}

/// Each row of `batches` as text, sorted (results are compared as multisets of rows).
fn row_texts(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("∅");
    let mut rows = Vec::new();
    for b in batches {
        let formatters: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for i in 0..b.num_rows() {
            let cells: Vec<String> = formatters.iter().map(|f| f.value(i).to_string()).collect();
            rows.push(cells.join(" | "));
        }
    }
    rows.sort();
    rows
}

/// Query `name` (its default parameters) in `ctx`: its column names and its rows.
async fn run(ctx: &datafusion::prelude::SessionContext, name: &str) -> (Vec<String>, Vec<String>) {
    let q = queries::resolve(name).unwrap();
    let values = stacks_sql::bind(&q, &[], false).unwrap();
    let mut stream = stacks_sql::start(ctx, &q, values)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
    let columns = stream
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut batches = Vec::new();
    while let Some(b) = stream.next().await {
        batches.push(b.unwrap_or_else(|e| panic!("{name}: {e}")));
    }
    (columns, row_texts(&batches))
}

#[test]
fn every_bundled_query_on_an_in_process_cluster_equals_the_local_result() {
    let test = "every_bundled_query_on_an_in_process_cluster_equals_the_local_result";
    if !stacks_tests::root_available(test) {
        return;
    }
    let dir = scratch("cluster-in-process");
    let (url, store, _) = fleet_store(&dir);
    // Plans are serialized and planned recursively (Ballista's binaries use 32 MiB stacks).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 << 20)
        .build()
        .unwrap();
    runtime.block_on(async {
        use ballista::prelude::SessionContextExt;
        let all = Window::default();
        let local = stacks_sql::session(None).unwrap();
        stacks_sql::open(&local, &Data::Store(url.clone()), &all)
            .await
            .unwrap();
        let files = stacks_sql::session(None).unwrap();
        stacks_sql::open(&files, &Data::Dir(store.clone()), &all)
            .await
            .unwrap();
        let state = stacks_sql::cluster_state(None).unwrap();
        let cluster = datafusion::prelude::SessionContext::standalone_with_state(state)
            .await
            .unwrap();
        let cluster = stacks_sql::with_functions(cluster).unwrap();
        stacks_sql::open(&cluster, &Data::Store(url.clone()), &all)
            .await
            .unwrap();
        let mut nonempty = 0;
        for (name, _) in queries::BUNDLED {
            let here = run(&local, name).await;
            let there = run(&cluster, name).await;
            let (dir_columns, dir_rows) = run(&files, name).await;
            assert_eq!(there.0, here.0, "{name}: columns");
            assert_eq!(
                there.1, here.1,
                "{name}: the cluster's rows differ from the local ones"
            );
            assert_eq!(dir_columns, here.0, "{name}: columns over the directory");
            assert_eq!(dir_rows, here.1, "{name}: the directory's rows differ");
            nonempty += usize::from(!here.1.is_empty());
        }
        assert!(nonempty >= 15, "most bundled queries have rows: {nonempty}");
    });
}

/// A process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, name: &str, args: &[String]) -> Killed {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let exe = if name.starts_with("executor") {
        "stacks-executor"
    } else {
        "stacks-scheduler"
    };
    Killed(
        Command::new(bin(exe))
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {exe}: {e}")),
    )
}

#[test]
fn stacks_query_on_our_scheduler_and_two_executors_gives_the_local_profile() {
    let test = "stacks_query_on_our_scheduler_and_two_executors_gives_the_local_profile";
    if !stacks_tests::root_available(test) {
        return;
    }
    let dir = scratch("cluster-processes");
    let (url, _, rows) = fleet_store(&dir);
    let port = free_port();
    let _scheduler = spawn(
        &dir,
        "scheduler",
        &[
            "--bind-host".into(),
            "127.0.0.1".into(),
            "--bind-port".into(),
            port.to_string(),
        ],
    );
    let _executors: Vec<Killed> = (0..2)
        .map(|i| {
            let args: Vec<String> = [
                "--bind-host",
                "127.0.0.1",
                "--scheduler-host",
                "127.0.0.1",
                "-c",
                "1",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([
                "--scheduler-port".into(),
                port.to_string(),
                "--bind-port".into(),
                free_port().to_string(),
                "--bind-grpc-port".into(),
                free_port().to_string(),
                "--bind-health-port".into(),
                free_port().to_string(),
                "--work-dir".into(),
                dir.join(format!("work{i}")).display().to_string(),
            ])
            .collect();
            std::fs::create_dir_all(dir.join(format!("work{i}"))).unwrap();
            spawn(&dir, &format!("executor{i}"), &args)
        })
        .collect();
    let cluster = format!("df://127.0.0.1:{port}");
    // The executors register with the scheduler within a heartbeat or two.
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe = loop {
        let out = sh(&format!(
            "stacks-query --cluster {cluster} -d {url} -c 'SELECT count(*) AS n FROM samples' -f csv"
        ));
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    check(&probe, "a first query on the cluster");
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        format!("n\n{rows}")
    );
    for q in ["cpu", "offcpu", "top-threads", "timeline"] {
        let there = sh(&format!(
            "stacks-query --cluster {cluster} -d {url} {q} -f csv"
        ));
        check(&there, &format!("{q} on the cluster"));
        let here = sh(&format!("stacks-query -d {url} {q} -f csv"));
        check(&here, &format!("{q} here"));
        assert_eq!(sorted_lines(&there), sorted_lines(&here), "{q}");
    }
    // The Arrow result feeds stacks-pprof as a local one does.
    let profile = |extra: &str| {
        let out = sh(&format!(
            "stacks-query {extra} -d {url} cpu | stacks-pprof -f folded | sort"
        ));
        check(&out, &format!("cpu | stacks-pprof {extra}"));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let folded = profile("");
    assert!(folded.lines().count() >= 5, "every fixture stack: {folded}");
    assert_eq!(profile(&format!("--cluster {cluster}")), folded);
    // stacks-top's first table (with a stack column, so the stacks join too) and the stack
    // tree of its first row: the same on the cluster as here.
    for extra in ["--group comm,ufunc -l", "--group comm,kfunc --peek"] {
        let top = |c: &str| {
            let out = sh(&format!(
                "stacks-top {c} -d {url} --kind profile --once -f csv {extra}"
            ));
            check(&out, &format!("stacks-top {c} {extra}"));
            sorted_lines(&out)
        };
        let here = top("");
        assert!(here.len() >= 3, "{here:?}");
        assert_eq!(
            top(&format!("--cluster {cluster}")),
            here,
            "stacks-top {extra}"
        );
    }
    // A directory cannot be read by executors elsewhere: a one-line refusal.
    let out = sh(&format!(
        "stacks-query --cluster {cluster} -d {} cpu",
        dir.display()
    ));
    stacks_tests::assert_refused(
        &out,
        "stacks-query",
        1,
        "--cluster",
        "a directory on a cluster",
    );
}
