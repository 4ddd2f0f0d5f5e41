//! Helpers for the end-to-end tests: find the built binaries, decide whether BPF tests can
//! run here, make scratch directories and small fixture streams.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StructBuilder, UInt64Builder};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_array::{TimestampNanosecondArray, builder::StringBuilder};
use arrow_schema::{DataType, Schema};

/// Directory holding the workspace's built binaries (target/debug next to `deps/`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Path of a workspace binary; fails with a hint when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace binaries first (cargo build --workspace, as scripts/test does)",
        p.display()
    );
    p
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stacks-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Whether BPF tests can run. When they cannot: panic if `STACKS_REQUIRE_BPF` is set (CI),
/// otherwise print the reason and return false so the test is skipped visibly.
pub fn bpf_available(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let reason = if unsafe { libc::geteuid() } != 0 {
        Some("not running as root")
    } else if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        Some("kernel has no BTF (/sys/kernel/btf/vmlinux)")
    } else {
        None
    };
    match reason {
        None => true,
        Some(why) => {
            if std::env::var_os("STACKS_REQUIRE_BPF").is_some() {
                panic!("{test}: BPF is required (STACKS_REQUIRE_BPF is set) but {why}");
            }
            // Written to the stderr handle directly: the test harness captures eprintln!, and a
            // skip must be visible (scripts/test counts these lines).
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: BPF unavailable: {why}");
            false
        }
    }
}

/// BPF tests run one at a time: they measure CPU time, and two cores are easily saturated.
pub fn bpf_serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read a whole Arrow stream file into batches.
pub fn read_batches(path: &Path) -> Vec<RecordBatch> {
    let input = stacks_stream::open_input(Some(path)).expect("open stream");
    input.collect::<Result<Vec<_>, _>>().expect("read stream")
}

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

/// Assert a command succeeded, showing its stderr otherwise.
pub fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A small raw-schema stream (as stacks-record writes) with `rows` profile rows.
pub fn raw_fixture(rows: usize, finish: bool) -> Vec<u8> {
    raw_fixture_with(rows, finish, false)
}

/// Like [`raw_fixture`]; with `odd_rows_fail`, every odd row has no kernel stack requested and
/// a user stack whose capture failed with EFAULT.
pub fn raw_fixture_with(rows: usize, finish: bool, odd_rows_fail: bool) -> Vec<u8> {
    let mut md = std::collections::HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    let schema = Arc::new(stacks_stream::raw_schema(md));
    let kfield = match schema.field_with_name("kstack").unwrap().data_type() {
        DataType::List(f) => f.clone(),
        _ => unreachable!(),
    };
    let ufield = match schema.field_with_name("ustack").unwrap().data_type() {
        DataType::List(f) => f.clone(),
        _ => unreachable!(),
    };
    let DataType::Struct(ufields) = ufield.data_type().clone() else {
        unreachable!()
    };
    let mut k = ListBuilder::new(UInt64Builder::new()).with_field(kfield);
    let mut u = ListBuilder::new(StructBuilder::from_fields(ufields, rows)).with_field(ufield);
    let mut kerr = Vec::with_capacity(rows);
    let mut uerr = Vec::with_capacity(rows);
    for i in 0..rows {
        if odd_rows_fail && i % 2 == 1 {
            k.append_null();
            u.append(true);
            kerr.push(None);
            uerr.push(Some(-14));
            continue;
        }
        kerr.push(None);
        uerr.push(None);
        k.values().append_value(0xffff_ffff_8100_0000 + i as u64);
        k.append(true);
        let s = u.values();
        s.field_builder::<UInt64Builder>(0)
            .unwrap()
            .append_value(0x5555_0000 + i as u64);
        s.field_builder::<StringBuilder>(1)
            .unwrap()
            .append_value("/nonexistent/app");
        s.field_builder::<StringBuilder>(2).unwrap().append_null();
        s.field_builder::<UInt64Builder>(3)
            .unwrap()
            .append_value(0x1000 + i as u64);
        s.field_builder::<StringBuilder>(4).unwrap().append_null();
        s.append(true);
        u.append(true);
    }
    let n = rows;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampNanosecondArray::from_iter_values(
                (0..n as i64).map(|i| 1_700_000_000_000_000_000 + i),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            "profile", n,
        ))),
        Arc::new(Int32Array::from_iter_values(std::iter::repeat_n(42, n))),
        Arc::new(Int32Array::from_iter_values(std::iter::repeat_n(43, n))),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n("app", n))),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            "worker", n,
        ))),
        Arc::new(Int32Array::from_iter_values(std::iter::repeat_n(0, n))),
        Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(
            10_101_010, n,
        ))),
        Arc::new(k.finish()),
        Arc::new(Int32Array::from(kerr)),
        Arc::new(u.finish()),
        Arc::new(Int32Array::from(uerr)),
    ];
    let names = stacks_stream::raw_fields();
    let named = names
        .iter()
        .map(|f| f.name().as_str())
        .zip(columns)
        .collect();
    let batch = stacks_stream::batch_by_name(schema.clone(), n, named).expect("fixture batch");
    write_stream(&schema, &[batch], finish)
}

/// Serialize batches as an Arrow IPC stream; without `finish` the end marker is missing.
pub fn write_stream(schema: &Arc<Schema>, batches: &[RecordBatch], finish: bool) -> Vec<u8> {
    let mut buf = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, schema).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        if finish {
            w.finish().unwrap();
        }
    }
    buf
}

/// Each row's `stack` as (function, is kernel frame) pairs; empty for a null stack.
pub fn stack_functions(batches: &[RecordBatch]) -> Vec<Vec<(Option<String>, bool)>> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let mut out = Vec::new();
    for b in batches {
        let stack = b
            .column_by_name("stack")
            .expect("stack column")
            .as_list::<i32>();
        for row in 0..b.num_rows() {
            if stack.is_null(row) {
                out.push(Vec::new());
                continue;
            }
            let frames = stack.value(row);
            let frames = frames.as_struct();
            let func = frames
                .column_by_name("function")
                .unwrap()
                .as_string::<i32>();
            let kernel = frames.column_by_name("kernel").unwrap().as_boolean();
            out.push(
                (0..frames.len())
                    .map(|i| {
                        (
                            func.is_valid(i).then(|| func.value(i).to_string()),
                            kernel.value(i),
                        )
                    })
                    .collect(),
            );
        }
    }
    out
}

/// One user frame of a raw row built by [`raw_rows_stream`].
#[derive(Clone, Debug, Default)]
pub struct RawUFrame {
    pub addr: u64,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub offset: Option<u64>,
    pub error: Option<String>,
}

/// A kernel symbol recorded for one `kstack` address: symbol, offset into it, module.
pub type RecordedKsym = (String, u64, Option<String>);

/// One raw row of [`raw_rows_stream`]: stacks only (other columns get fixed values).
/// `ksyms`, when given, must have one entry per `kstack` address (`None`: not in kallsyms).
#[derive(Clone, Debug, Default)]
pub struct RawRow {
    pub kstack: Option<Vec<u64>>,
    pub kstack_error: Option<i32>,
    pub ksyms: Option<Vec<Option<RecordedKsym>>>,
    pub ustack: Option<Vec<RawUFrame>>,
    pub ustack_error: Option<i32>,
}

/// A raw-schema stream (as stacks-record writes it) of `rows`, in batches of `batch_rows`,
/// with `boot_id` as `stacks.boot_id` when given.
pub fn raw_rows_stream(rows: &[RawRow], batch_rows: usize, boot_id: Option<&str>) -> Vec<u8> {
    use arrow_array::Array;
    let mut md = std::collections::HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    if let Some(b) = boot_id {
        md.insert(stacks_stream::meta::BOOT_ID.to_string(), b.to_string());
    }
    let schema = Arc::new(stacks_stream::raw_schema(md));
    let list_field = |name: &str| match schema.field_with_name(name).unwrap().data_type() {
        DataType::List(f) => f.clone(),
        _ => unreachable!(),
    };
    let struct_fields = |f: &arrow_schema::FieldRef| match f.data_type() {
        DataType::Struct(s) => s.clone(),
        _ => unreachable!(),
    };
    let mut batches = Vec::new();
    for chunk in rows.chunks(batch_rows.max(1)) {
        let n = chunk.len();
        let kfield = list_field("kstack");
        let sfield = list_field("kstack_symbols");
        let ufield = list_field("ustack");
        let mut k = ListBuilder::new(UInt64Builder::new()).with_field(kfield);
        let mut ks = ListBuilder::new(StructBuilder::from_fields(struct_fields(&sfield), 0))
            .with_field(sfield);
        let mut u = ListBuilder::new(StructBuilder::from_fields(struct_fields(&ufield), 0))
            .with_field(ufield);
        for r in chunk {
            match &r.kstack {
                Some(addrs) => {
                    for a in addrs {
                        k.values().append_value(*a);
                    }
                    k.append(true);
                }
                None => k.append_null(),
            }
            match &r.ksyms {
                Some(syms) => {
                    for s in syms {
                        let b = ks.values();
                        match s {
                            Some((name, off, module)) => {
                                b.field_builder::<StringBuilder>(0)
                                    .unwrap()
                                    .append_value(name);
                                b.field_builder::<UInt64Builder>(1)
                                    .unwrap()
                                    .append_value(*off);
                                b.field_builder::<StringBuilder>(2)
                                    .unwrap()
                                    .append_option(module.as_deref());
                                b.append(true);
                            }
                            None => {
                                b.field_builder::<StringBuilder>(0)
                                    .unwrap()
                                    .append_value("");
                                b.field_builder::<UInt64Builder>(1).unwrap().append_value(0);
                                b.field_builder::<StringBuilder>(2).unwrap().append_null();
                                b.append(false);
                            }
                        }
                    }
                    ks.append(true);
                }
                None => ks.append_null(),
            }
            match &r.ustack {
                Some(frames) => {
                    for f in frames {
                        let s = u.values();
                        s.field_builder::<UInt64Builder>(0)
                            .unwrap()
                            .append_value(f.addr);
                        s.field_builder::<StringBuilder>(1)
                            .unwrap()
                            .append_option(f.module.as_deref());
                        s.field_builder::<StringBuilder>(2)
                            .unwrap()
                            .append_option(f.build_id.as_deref());
                        s.field_builder::<UInt64Builder>(3)
                            .unwrap()
                            .append_option(f.offset);
                        s.field_builder::<StringBuilder>(4)
                            .unwrap()
                            .append_option(f.error.as_deref());
                        s.append(true);
                    }
                    u.append(true);
                }
                None => u.append_null(),
            }
        }
        let kstack = k.finish();
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "time",
                Arc::new(
                    TimestampNanosecondArray::from_iter_values(
                        (0..n as i64).map(|i| 1_700_000_000_000_000_000 + i),
                    )
                    .with_timezone("UTC"),
                ),
            ),
            (
                "kind",
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                    "profile", n,
                ))),
            ),
            ("pid", Arc::new(Int32Array::from(vec![42; n]))),
            ("tid", Arc::new(Int32Array::from(vec![43; n]))),
            (
                "comm",
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n("app", n))),
            ),
            (
                "thread",
                Arc::new(StringArray::from_iter_values(std::iter::repeat_n("app", n))),
            ),
            ("cpu", Arc::new(Int32Array::from(vec![0; n]))),
            ("value", Arc::new(Int64Array::from(vec![10_101_010; n]))),
            (
                "kstack_error",
                Arc::new(Int32Array::from(
                    chunk.iter().map(|r| r.kstack_error).collect::<Vec<_>>(),
                )),
            ),
            (
                "ustack_error",
                Arc::new(Int32Array::from(
                    chunk.iter().map(|r| r.ustack_error).collect::<Vec<_>>(),
                )),
            ),
            ("kstack_symbols", Arc::new(ks.finish())),
            ("ustack", Arc::new(u.finish())),
        ];
        assert_eq!(kstack.len(), n);
        let mut columns = columns;
        columns.push(("kstack", Arc::new(kstack)));
        batches.push(
            stacks_stream::batch_by_name(schema.clone(), n, columns).expect("raw rows batch"),
        );
    }
    write_stream(&schema, &batches, true)
}

/// One symbolized frame as [`stack_frames`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct SymFrameOut {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub inlined: bool,
    pub kernel: bool,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub offset: Option<u64>,
    pub addr: u64,
    pub error: Option<String>,
    /// The raw symbol, when the stream's stack elements have the field.
    pub symbol: Option<String>,
}

/// Each row's `stack` frames with every field; `None` for a null stack.
pub fn stack_frames(batches: &[RecordBatch]) -> Vec<Option<Vec<SymFrameOut>>> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};
    let mut out = Vec::new();
    for b in batches {
        let stack = b
            .column_by_name("stack")
            .expect("stack column")
            .as_list::<i32>();
        for row in 0..b.num_rows() {
            if stack.is_null(row) {
                out.push(None);
                continue;
            }
            let v = stack.value(row);
            let s = v.as_struct();
            let text = |name: &str, i: usize| {
                s.column_by_name(name).and_then(|c| {
                    let c = c.as_string::<i32>();
                    c.is_valid(i).then(|| c.value(i).to_string())
                })
            };
            let u64s = |name: &str, i: usize| {
                let c = s.column_by_name(name).unwrap().as_primitive::<UInt64Type>();
                c.is_valid(i).then(|| c.value(i))
            };
            let line = s
                .column_by_name("line")
                .unwrap()
                .as_primitive::<UInt32Type>();
            let inlined = s.column_by_name("inlined").unwrap().as_boolean();
            let kernel = s.column_by_name("kernel").unwrap().as_boolean();
            out.push(Some(
                (0..s.len())
                    .map(|i| SymFrameOut {
                        function: text("function", i),
                        file: text("file", i),
                        line: line.is_valid(i).then(|| line.value(i)),
                        inlined: inlined.value(i),
                        kernel: kernel.value(i),
                        module: text("module", i),
                        build_id: text("build_id", i),
                        offset: u64s("offset", i),
                        addr: u64s("addr", i).expect("addr is never null"),
                        error: text("error", i),
                        symbol: text("symbol", i),
                    })
                    .collect(),
            ));
        }
    }
    out
}

/// Whether a test that needs root (mounts) can run; like [`bpf_available`], a skip is printed
/// (and is a failure when `STACKS_REQUIRE_BPF` is set, as in CI, which runs as root).
pub fn root_available(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var_os("STACKS_REQUIRE_BPF").is_some() {
        panic!("{test}: root is required (STACKS_REQUIRE_BPF is set)");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: needs root (mount)");
    false
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

/// Run `cmd` with `input` on its stdin and its output captured; kill it and fail the test if
/// it has not exited after `timeout` (a hang is a bug, never a slow pass).
pub fn run_with_timeout(mut cmd: Command, input: &[u8], timeout: std::time::Duration) -> Output {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {shown}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let data = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err_reader.join().unwrap_or_default();
            panic!(
                "{shown} hung: killed after {timeout:?}; stderr:\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let _ = writer.join();
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
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
