//! Distributed execution on Apache DataFusion Ballista, against the local result on the same
//! store of three hosts (packed by stacks-pack as three hosts into a `file://` store):
//! - every bundled query on an in-process cluster (scheduler and executor in this test, plans
//!   serialized between them as between machines) gives exactly the rows of the query run
//!   locally over the store URL, and over the store's directory;
//! - `stacks-query --cluster` against our own `stacks-scheduler` and two `stacks-executor`
//!   processes on loopback gives the local result, and its Arrow output makes the same
//!   folded profile in stacks-pprof;
//! - one of the two executors SIGKILLed in a `cpu` query, once it has run a task of it: the
//!   same answer, at most the time to find it dead (6 s) and the undisturbed query's time
//!   (2 s slack) after the kill (Ballista's scheduler patched to give the surviving
//!   executor's task slots back and to forget a rolled-back stage's earlier outputs,
//!   vendor/README.md), and stacks-query says the executor was lost.

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
        for (name, _) in queries::BUNDLED.iter() {
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

/// Our `stacks-scheduler` and two `stacks-executor`s (`slots` task slots each) on loopback,
/// logging into `dir`, once a query over `url` runs on it;
/// the scheduler's `df://` address and the processes.
fn start_cluster(dir: &Path, url: &str, slots: u32) -> (String, Killed, Vec<Killed>) {
    let port = free_port();
    let scheduler = spawn(
        dir,
        "scheduler",
        &[
            "--bind-host".into(),
            "127.0.0.1".into(),
            "--bind-port".into(),
            port.to_string(),
        ],
    );
    let executors: Vec<Killed> = (0..2)
        .map(|i| {
            let args: Vec<String> = ["--bind-host", "127.0.0.1", "--scheduler-host", "127.0.0.1"]
                .iter()
                .map(|s| s.to_string())
                .chain([
                    "-c".into(),
                    slots.to_string(),
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
            spawn(dir, &format!("executor{i}"), &args)
        })
        .collect();
    let cluster = format!("df://127.0.0.1:{port}");
    // The executors register with the scheduler as they start (waiting for it to listen):
    // both have once its log says so.
    let deadline = Instant::now() + Duration::from_secs(60);
    let registered = || {
        std::fs::read_to_string(dir.join("scheduler.log"))
            .unwrap_or_default()
            .matches("Received register executor request")
            .count()
    };
    while registered() < executors.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        registered(),
        executors.len(),
        "executors registered with the scheduler (logs in {})",
        dir.display()
    );
    loop {
        let out = sh(&format!(
            "stacks-query --cluster {cluster} -d {url} -c 'SELECT count(*) AS n FROM samples' -f csv"
        ));
        if out.status.success() || Instant::now() > deadline {
            check(&out, "a first query on the cluster");
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    (cluster, scheduler, executors)
}

#[test]
fn stacks_query_on_our_scheduler_and_two_executors_gives_the_local_profile() {
    let test = "stacks_query_on_our_scheduler_and_two_executors_gives_the_local_profile";
    if !stacks_tests::root_available(test) {
        return;
    }
    let dir = scratch("cluster-processes");
    let (url, _, rows) = fleet_store(&dir);
    let (cluster, _scheduler, _executors) = start_cluster(&dir, &url, 1);
    let probe = sh(&format!(
        "stacks-query --cluster {cluster} -d {url} -c 'SELECT count(*) AS n FROM samples' -f csv"
    ));
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

/// Rows of the `cpu` profile in the store of [`a_lost_executor_costs_seconds`] (each fixture
/// row of six kinds; a sixth are `profile` rows): tasks enough for both executors (a query of
/// 2 s in the test build).
const LOST_EXECUTOR_ROWS: usize = 2_400_000;

#[test]
fn a_lost_executor_costs_seconds() {
    let test = "a_lost_executor_costs_seconds";
    if !stacks_tests::root_available(test) {
        return;
    }
    let dir = scratch("cluster-lost-executor");
    let store = dir.join("bucket/big");
    let url = format!("file://{}", store.display());
    let (_, bytes) = stacks_tests::fleet_recording("big-1", LOST_EXECUTOR_ROWS / 6, 3);
    let input = dir.join("big.arrow");
    std::fs::write(&input, bytes).unwrap();
    // Files of 100,000 rows: tasks enough for both executors.
    let out = sh(&format!(
        "stacks-pack {url} --spool {} --max-rows 100000 < {}",
        dir.join("spool").display(),
        input.display()
    ));
    check(&out, "stacks-pack of the big store");
    let (cluster, _scheduler, mut executors) = start_cluster(&dir, &url, 2);
    let query = format!("stacks-query --cluster {cluster} -d {url} cpu -f csv");
    let started = Instant::now();
    let undisturbed = sh(&query);
    let undisturbed_s = started.elapsed().as_secs_f64();
    check(&undisturbed, "cpu on the cluster");
    let expected = sorted_lines(&undisturbed);
    assert!(expected.len() >= 5, "cpu rows: {}", expected.len());
    // Both executors ran tasks of it (their work directories hold its shuffle).
    for i in 0..2 {
        let work = dir.join(format!("work{i}"));
        assert!(
            std::fs::read_dir(&work).is_ok_and(|mut d| d.next().is_some()),
            "executor {i} ran no task of the query ({})",
            work.display()
        );
    }

    // The same query, one executor SIGKILLed once it has run tasks of it: the new job in its
    // work directory (its shuffle output, which the scheduler must then have made again). At a
    // fixed 2 s into the query the kill came after its end once the query took 2 s.
    let lost_work = dir.join("work1");
    let entries = || -> std::collections::BTreeSet<std::ffi::OsString> {
        std::fs::read_dir(&lost_work)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
            .unwrap_or_default()
    };
    let before = entries();
    let started = Instant::now();
    let stderr = dir.join("disturbed.err");
    let stdout = dir.join("disturbed.csv");
    let mut child = Command::new(bin("stacks-query"))
        .args(["--cluster", &cluster, "-d", &url, "cpu", "-f", "csv"])
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    // A new entry (the job's directory; the old job's may go meanwhile), and half the
    // undisturbed time: killed at once (0.1 s), it had run nothing yet and the other executor
    // did it all before the scheduler found it dead.
    while entries().is_subset(&before) || started.elapsed().as_secs_f64() < 0.5 * undisturbed_s {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the query ended before executor 1 ran a task of it (logs in {})",
            dir.display()
        );
        assert!(
            started.elapsed().as_secs_f64() < 2.0 * undisturbed_s + 5.0,
            "executor 1 ran no task of the query (logs in {})",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut lost = executors.pop().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the query ended before the kill"
    );
    lost.0.kill().unwrap();
    let killed_at = started.elapsed().as_secs_f64();
    // A scheduler that stops offering tasks hangs the query: it gets twice the allowed time.
    // The executor is found dead 5-6 s after its last heartbeat (the scheduler's timeout of
    // 5 s, looked at every second); its tasks, and the stages whose output it held, are then
    // redone: at most the whole query again. Seconds, not the minutes of Ballista's defaults.
    let bound = killed_at + 6.0 + undisturbed_s + 2.0;
    let deadline = started + Duration::from_secs_f64(2.0 * bound);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the query with an executor lost had not ended after {:.1} s (undisturbed \
                 {undisturbed_s:.1} s; logs in {})",
                started.elapsed().as_secs_f64(),
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let disturbed_s = started.elapsed().as_secs_f64();
    let disturbed = std::process::Output {
        status,
        stdout: std::fs::read(&stdout).unwrap(),
        stderr: Vec::new(),
    };
    let err = std::fs::read_to_string(&stderr).unwrap_or_default();
    eprintln!(
        "cpu on two executors: {undisturbed_s:.1} s; one SIGKILLed at {killed_at:.1} s: \
         {disturbed_s:.1} s; stderr: {err}"
    );
    assert!(
        disturbed.status.success(),
        "the query with an executor lost: {err}"
    );
    // stacks-query says so as the scheduler takes the executor for dead.
    assert!(
        err.lines()
            .any(|l| l.starts_with("stacks-query: executor 127.0.0.1:") && l.contains(") lost")),
        "stacks-query did not say the executor was lost: {err}"
    );
    assert_eq!(
        sorted_lines(&disturbed),
        expected,
        "the answer with an executor lost"
    );
    assert!(
        disturbed_s <= bound,
        "with an executor lost at {killed_at:.1} s the query took {disturbed_s:.1} s, \
         undisturbed {undisturbed_s:.1} s (bound {bound:.1} s)"
    );
}
