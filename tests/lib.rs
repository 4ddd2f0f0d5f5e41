//! Helpers for the end-to-end tests: the shared test kit (built binaries, BPF availability,
//! scratch directories, fixture rows), shell pipelines, clean-refusal checks and small raw
//! fixture streams.

pub mod s3server;
pub mod tmux;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

pub use stacks_testkit::{
    Frame, Ksym, Row, ScratchDir, UFrame, bin, bin_dir, bpf_available, bpf_serial, fuzz_case,
    read_frames, read_stream, root_available, run_command, run_tool, scratch, stack_functions,
    stream_bytes,
};

/// Start the bundled workload with `args`, its report (stdout) discarded.
pub fn spawn_workload(args: &[&str]) -> std::process::Child {
    Command::new(bin("stacks-workload"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start stacks-workload")
}

/// Run a shell pipeline with `pipefail`; returns its output.
pub fn sh(script: &str) -> Output {
    Command::new("bash")
        .arg("-o")
        .arg("pipefail")
        .arg("-c")
        .arg(script)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin_dir().display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .expect("run bash")
}

/// This crate's directory (tests/), at run time (see [`stacks_testkit::crate_dir`]).
pub fn crate_dir() -> PathBuf {
    stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR"))
}

/// Assert a command succeeded, showing its stderr otherwise.
pub fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A raw row as [`raw_rows_stream`] writes it (only the stacks vary): kind `profile`, process
/// 42 / thread 43 named `app`, 10.1 ms, at `i` ns after 2023-11-14T22:13:20Z.
fn raw_row(i: usize, r: &Row) -> Row {
    Row {
        time: 1_700_000_000_000_000_000 + i as i64,
        kind: "profile".into(),
        pid: 42,
        tid: 43,
        comm: "app".into(),
        thread: "app".into(),
        cpu: 0,
        value: 10_101_010,
        ..r.clone()
    }
}

/// A raw-schema stream (as stacks-record writes it) of `rows` (their stacks and stack errors;
/// other columns get fixed values), in batches of `batch_rows`, with `boot_id` as
/// `stacks.boot_id` when given.
pub fn raw_rows_stream(rows: &[Row], batch_rows: usize, boot_id: Option<&str>) -> Vec<u8> {
    let mut md = std::collections::HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    if let Some(b) = boot_id {
        md.insert(stacks_stream::meta::BOOT_ID.to_string(), b.to_string());
    }
    let schema = Arc::new(stacks_stream::raw_schema(md));
    let batches: Vec<_> = rows
        .chunks(batch_rows.max(1))
        .map(|chunk| {
            let rows: Vec<Row> = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| raw_row(i, r))
                .collect();
            stacks_testkit::batch(&schema, &rows)
        })
        .collect();
    stream_bytes(&schema, &batches, true)
}

/// A small raw-schema stream (as stacks-record writes) with `rows` profile rows.
pub fn raw_fixture(rows: usize, finish: bool) -> Vec<u8> {
    raw_fixture_with(rows, finish, false)
}

/// Like [`raw_fixture`] (thread `worker`, one kernel and one user frame per row); with
/// `odd_rows_fail`, every odd row has no kernel stack requested and a user stack whose capture
/// failed with EFAULT.
pub fn raw_fixture_with(rows: usize, finish: bool, odd_rows_fail: bool) -> Vec<u8> {
    let mut md = std::collections::HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    let schema = Arc::new(stacks_stream::raw_schema(md));
    let rows: Vec<Row> = (0..rows)
        .map(|i| {
            let stacks = if odd_rows_fail && i % 2 == 1 {
                Row {
                    ustack: Some(Vec::new()),
                    ustack_error: Some(-14),
                    ..Row::default()
                }
            } else {
                Row {
                    kstack: Some(vec![0xffff_ffff_8100_0000 + i as u64]),
                    ustack: Some(vec![UFrame {
                        addr: 0x5555_0000 + i as u64,
                        module: Some("/nonexistent/app".into()),
                        offset: Some(0x1000 + i as u64),
                        ..UFrame::default()
                    }]),
                    ..Row::default()
                }
            };
            Row {
                thread: "worker".into(),
                ..raw_row(i, &stacks)
            }
        })
        .collect();
    let batch = stacks_testkit::batch(&schema, &rows);
    stream_bytes(&schema, &[batch], finish)
}

/// A tmpfs mounted for a test, unmounted (lazily) on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mount a tmpfs with `options` (e.g. `size=2M`, `ro,size=1M`) on `dir` (created).
    pub fn mount(dir: &Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("create mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        check(&out, "mount -t tmpfs");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// Run a Python 3 script with `args` (pyarrow and duckdb are used by the storage tests).
pub fn python(script: &str, args: &[&str]) -> Output {
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3")
}

/// Assert `out` is a clean refusal by `tool`: exit status `code`, no panic, every stderr line
/// from the tool itself (`tool: …`), exactly one of them `tool: error: …`, containing `needle`.
pub fn assert_refused(out: &Output, tool: &str, code: i32, needle: &str, case: &str) {
    if let Some(problem) = refusal_problem(out, tool, code, needle, case) {
        panic!("{problem}");
    }
}

/// What is wrong with `out` as a clean refusal (see [`assert_refused`]), if anything.
pub fn refusal_problem(
    out: &Output,
    tool: &str,
    code: i32,
    needle: &str,
    case: &str,
) -> Option<String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("panicked") {
        return Some(format!("{tool} [{case}] panicked:\n{stderr}"));
    }
    if out.status.code() != Some(code) {
        return Some(format!(
            "{tool} [{case}]: exit {:?}, expected {code}; stderr:\n{stderr}",
            out.status
        ));
    }
    let prefix = format!("{tool}: ");
    let stray: Vec<&str> = stderr.lines().filter(|l| !l.starts_with(&prefix)).collect();
    if !stray.is_empty() {
        return Some(format!(
            "{tool} [{case}]: stderr lines not from the tool: {stray:?}\n{stderr}"
        ));
    }
    let error = format!("{tool}: error: ");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with(&error)).collect();
    if errors.len() != 1 {
        return Some(format!(
            "{tool} [{case}]: expected one error line:\n{stderr}"
        ));
    }
    if !errors[0].contains(needle) {
        return Some(format!(
            "{tool} [{case}]: expected `{needle}` in: {}",
            errors[0]
        ));
    }
    None
}

/// Write `batches` (one symbolized stream, plain stack columns) as the store's pair layout:
/// `DIR/BASE.samples.parquet` and `DIR/BASE.stacks.parquet` (the distinct stacks of those
/// samples), split by [`stacks_store::StackSplitter`], row groups of `group_rows`.
pub fn write_pair(dir: &Path, base: &str, batches: &[arrow_array::RecordBatch], group_rows: usize) {
    use stacks_store::{SAMPLES_SUFFIX, STACKS_SUFFIX, StackSplitter};
    std::fs::create_dir_all(dir).expect("create the store directory");
    let schema = batches[0].schema();
    let mut splitter = StackSplitter::new(&schema).expect("a stream with stacks");
    let mut samples = Vec::new();
    let mut ids: Vec<[u8; 16]> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for b in batches {
        let s = splitter.split(b).expect("split");
        let col = s
            .column_by_name(stacks_stream::col::STACK_ID)
            .expect("stack_id");
        let col = arrow_array::cast::AsArray::as_fixed_size_binary(col.as_ref());
        for i in 0..arrow_array::Array::len(col) {
            if arrow_array::Array::is_valid(col, i) {
                let id: [u8; 16] = col.value(i).try_into().unwrap();
                if seen.insert(id) {
                    ids.push(id);
                }
            }
        }
        samples.push(s);
    }
    let stacks = splitter.stacks(&ids).expect("the stacks");
    write_parquet_file(
        &dir.join(format!("{base}{STACKS_SUFFIX}")),
        &[stacks],
        group_rows,
    );
    write_parquet_file(
        &dir.join(format!("{base}{SAMPLES_SUFFIX}")),
        &samples,
        group_rows,
    );
}

/// Write `batch` (a symbolized stream, plain stack columns) as a store of `copies` copies of
/// its rows one after the other in time (each shifted by `shift_ns`), in the pair layout of
/// [`write_pair`]: a large store whose stacks are those of one batch, without a batch of
/// every row's stack in memory.
pub fn write_pair_copies(
    dir: &Path,
    base: &str,
    batch: &arrow_array::RecordBatch,
    copies: usize,
    shift_ns: i64,
) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::TimestampNanosecondType;
    use stacks_store::{SAMPLES_SUFFIX, STACKS_SUFFIX, StackSplitter};
    std::fs::create_dir_all(dir).expect("create the store directory");
    let mut splitter = StackSplitter::new(&batch.schema()).expect("a stream with stacks");
    let samples = splitter.split(batch).expect("split");
    let ids = samples
        .column_by_name(stacks_stream::col::STACK_ID)
        .expect("stack_id");
    let ids = ids.as_fixed_size_binary();
    let mut distinct: Vec<[u8; 16]> = (0..arrow_array::Array::len(ids))
        .filter(|&i| arrow_array::Array::is_valid(ids, i))
        .map(|i| ids.value(i).try_into().unwrap())
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    let stacks = splitter.stacks(&distinct).expect("the stacks");
    write_parquet_file(
        &dir.join(format!("{base}{STACKS_SUFFIX}")),
        &[stacks],
        65536,
    );
    let at = samples
        .schema()
        .index_of(stacks_stream::col::TIME)
        .expect("time");
    let time = samples.column(at).as_primitive::<TimestampNanosecondType>();
    let shifted: Vec<arrow_array::RecordBatch> = (0..copies as i64)
        .map(|c| {
            let t = time.unary::<_, TimestampNanosecondType>(|v| v + c * shift_ns);
            let mut columns = samples.columns().to_vec();
            columns[at] = Arc::new(t.with_timezone_opt(time.timezone()));
            arrow_array::RecordBatch::try_new(samples.schema(), columns).expect("batch")
        })
        .collect();
    write_parquet_file(
        &dir.join(format!("{base}{SAMPLES_SUFFIX}")),
        &shifted,
        65536,
    );
}

/// Pack `batch` (a symbolized stream) with stacks-pack as the file set
/// `DIR/BASE.{samples,stacks,frames}.parquet` (`stacks-pack -o`): the store layout it writes.
pub fn write_packed(dir: &Path, base: &str, batch: &arrow_array::RecordBatch) {
    std::fs::create_dir_all(dir).expect("create the store directory");
    let input = stream_bytes(&batch.schema(), std::slice::from_ref(batch), true);
    let out = run_tool(
        bin("stacks-pack"),
        &["-o", dir.join(format!("{base}.parquet")).to_str().unwrap()],
        &input,
        std::time::Duration::from_secs(120),
    );
    check(&out, "stacks-pack -o");
}

/// Write `batches` (one symbolized stream, plain stack columns) as a first-layout file
/// `DIR/NAME.parquet`: the stream columns and the `stack_id` of each row's `stack`, as
/// stacks-pack wrote them before the pair layout.
pub fn write_inline(
    dir: &Path,
    name: &str,
    batches: &[arrow_array::RecordBatch],
    group_rows: usize,
) {
    use arrow_array::cast::AsArray;
    std::fs::create_dir_all(dir).expect("create the store directory");
    let schema = batches[0].schema();
    let mut fields: Vec<arrow_schema::Field> =
        schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(arrow_schema::Field::new(
        stacks_stream::col::STACK_ID,
        stacks_stream::stack_id_type(),
        true,
    ));
    let with_id = Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ));
    let out: Vec<arrow_array::RecordBatch> = batches
        .iter()
        .map(|b| {
            let stack = b.column_by_name(stacks_stream::col::STACK).expect("stack");
            let ids = stacks_stream::stack_key::stack_keys(stack.as_list::<i32>(), b.num_rows())
                .expect("stack keys");
            let mut columns = b.columns().to_vec();
            columns.push(Arc::new(ids));
            arrow_array::RecordBatch::try_new(Arc::clone(&with_id), columns).expect("batch")
        })
        .collect();
    write_parquet_file(&dir.join(format!("{name}.parquet")), &out, group_rows);
}

/// Write `batches` to the Parquet file `path`, in row groups of at most `group_rows`.
fn write_parquet_file(path: &Path, batches: &[arrow_array::RecordBatch], group_rows: usize) {
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let file = std::fs::File::create(path).expect("create a Parquet file");
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batches[0].schema(), Some(props))
        .expect("a Parquet writer");
    for b in batches {
        w.write(b).expect("write a batch");
    }
    w.close().expect("finish a Parquet file");
}

/// 2026-11-23T06:00:00Z in ns: where the fleet fixtures start.
pub const FLEET_T0: i64 = 1_795_413_600_000_000_000;
/// An hour in ns.
pub const HOUR_NS: i64 = 3_600_000_000_000;

/// The recording fixture of host `host` (`n` rows per kind, every kind the bundled queries
/// read) spread evenly over `hours` hours from [`FLEET_T0`], each row with `host` set: its
/// rows, and them as a symbolized stream.
pub fn fleet_recording(host: &str, n: usize, hours: i64) -> (Vec<Row>, Vec<u8>) {
    let mut rows = stacks_testkit::recording::rows(n);
    let step = hours * HOUR_NS / rows.len().max(1) as i64;
    for (i, r) in rows.iter_mut().enumerate() {
        r.time = FLEET_T0 + i as i64 * step;
        r.host = Some(host.to_string());
    }
    let mut md = stacks_testkit::recording::metadata();
    md.insert(stacks_stream::meta::HOST.to_string(), host.to_string());
    let schema = Arc::new(stacks_stream::symbolized_schema(md));
    let batches: Vec<_> = rows
        .chunks(200)
        .map(|c| stacks_testkit::batch(&schema, c))
        .collect();
    let bytes = stream_bytes(&schema, &batches, true);
    (rows, bytes)
}

/// Run `stacks-pack URL` on `input` as host `host` would: in a UTS namespace of its own
/// named `host` (the packer puts its host name in its keys), with `env` (store settings).
/// Needs root, as the BPF tests do.
pub fn pack_as_host(host: &str, env: &str, url: &str, spool: &Path, input: &Path) -> Output {
    sh(&format!(
        "unshare -u bash -c 'hostname {host} && exec env {env} stacks-pack {url} --spool {} \
         --max-rows 300' < {}",
        spool.display(),
        input.display()
    ))
}

/// A command's stdout as its lines, sorted: the rows of a CSV result in an order of their own.
pub fn sorted_lines(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// A TCP port free on 127.0.0.1 (for servers the tests start).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// perf's share of samples whose call chain has a frame named `symbol` (`perf script`: one
/// block of frames per sample).
pub fn perf_share(script: &str, symbol: &str) -> (f64, u64) {
    perf_share_by(script, |name| {
        name.split_whitespace().next() == Some(symbol)
    })
}

/// perf's share of samples whose call chain has a frame whose name (`perf script -F ip,sym`:
/// what follows the address) `names` finds in.
pub fn perf_share_by(script: &str, names: impl Fn(&str) -> bool) -> (f64, u64) {
    let (mut hit, mut all) = (0u64, 0u64);
    for block in script.split("\n\n").filter(|b| !b.trim().is_empty()) {
        all += 1;
        if block.lines().any(|l| {
            l.trim_start()
                .split_once(' ')
                .is_some_and(|(_, name)| names(name.trim_start()))
        }) {
            hit += 1;
        }
    }
    (hit as f64 / all.max(1) as f64, all)
}

/// Share of a folded profile's samples (`root;…;leaf N` lines, N a weight) whose stack `hit`
/// holds, and the total weight.
pub fn folded_share(folded: &str, hit: impl Fn(&str) -> bool) -> (f64, u64) {
    let (mut hits, mut all) = (0u64, 0u64);
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.parse().unwrap_or(0);
        all += n;
        if hit(stack) {
            hits += n;
        }
    }
    (hits as f64 / all.max(1) as f64, all)
}

/// The child of `parent` running `tool` (its argv[0] ends with it), found in /proc.
pub fn child_running(parent: u32, tool: &str) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        let argv0 = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0.split(|b| *b == 0).next().unwrap_or_default())
            .into_owned();
        if ppid == Some(parent) && argv0.ends_with(tool) {
            return Some(pid);
        }
    }
    None
}

/// `/metrics` of the agent on 127.0.0.1:`port`: `name{labels}` → value (empty when it does not
/// answer).
pub fn agent_metrics(port: u16) -> std::collections::BTreeMap<String, f64> {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return Default::default();
    };
    let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    let _ = write!(c, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let mut text = String::new();
    let _ = c.read_to_string(&mut text);
    metric_samples(&text)
}

/// The samples of `/metrics` text: `name{labels}` → value.
pub fn metric_samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The switches a recording's summary (stacks-record's stderr) says the sched_switch
/// tracepoint did not report (0 when none): on 6.18 under CPU contention a switch now and then
/// runs no program, and an interval whose switch-in was not reported closes at the thread's
/// next switch-out (docs/format.md).
pub fn unreported_switches(stderr: &str) -> i64 {
    stderr
        .split("off-CPU time of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
