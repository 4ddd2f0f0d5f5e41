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
    let named = names.iter().map(|f| f.name().as_str()).zip(columns).collect();
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
