//! Frames are named once: stacks-pack writes each frame's name in the frames file, and every
//! reader of a store shows the same folded stacks — stacks-query over a directory (the Rust
//! reader, `stack_table`), stacks-query over a `file://` store (the bucket SQL, which joins the
//! stored names) and explore's DuckDB views — for kernel, vDSO, JIT, Python, Go and
//! unresolved frames, and a name holding a `;`. The names are the Rust rule's
//! (`stacks_stream::frames`). A store whose frames files predate the `name` column reads the
//! same.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchReader};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;
use serde_json::Value;
use stacks_stream::frame::NAME;
use stacks_testkit::recording::{self as fixture, SEC, T0};
use stacks_tests::{Frame, Row, bin, check, scratch, write_packed};

/// Where the explore package's view definitions are, from this crate's directory.
const VIEWS: &str = "../explore/stacks_explore";

/// A frame of `module` at `offset` (address `addr`), named `function` if given.
fn frame(function: Option<&str>, module: Option<&str>, offset: Option<u64>, addr: u64) -> Frame {
    Frame {
        function: function.map(str::to_string),
        module: module.map(str::to_string),
        offset,
        addr,
        ..Frame::default()
    }
}

/// A kernel frame at `addr`, named `function` if given.
fn kernel(function: Option<&str>, addr: u64) -> Frame {
    Frame {
        kernel: true,
        ..frame(function, Some("[kernel.kallsyms]"), None, addr)
    }
}

/// Stacks (leaf first: kernel frames, then user frames) with every kind of frame.
fn stacks() -> Vec<Vec<Frame>> {
    let go = Some("/usr/bin/goserver");
    let libc = Some("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let python = |f: &str, line: u32| Frame {
        file: Some("server.py".into()),
        line: Some(line),
        ..frame(
            Some(f),
            Some("[python]"),
            None,
            0x7f00_0000_0000 + u64::from(line),
        )
    };
    vec![
        vec![
            kernel(Some("vfs_read"), 0xffff_ffff_8123_4560),
            kernel(None, 0xffff_ffff_8100_1234),
            frame(None, libc, Some(0x29d90), 0x7f12_3452_9d90),
            frame(Some("main.(*Server).Serve"), go, Some(0x4a_1234), 0x4a_1234),
            frame(Some("main.main"), go, Some(0x4a_0010), 0x4a_0010),
        ],
        vec![
            frame(None, Some("[vdso]"), Some(0xb46), 0x7ffd_1234_0b46),
            frame(
                Some("__vdso_clock_gettime"),
                Some("[vdso]"),
                Some(0xb00),
                0x7ffd_1234_0b00,
            ),
            python("handle", 42),
            python("<module>", 1),
        ],
        vec![
            frame(
                Some("LazyCompile:*render app.js:10"),
                Some("[jit]"),
                None,
                0x3f00_1234,
            ),
            frame(None, None, None, 0x3f00_9999),
            frame(None, None, Some(0x10), 0x5610_0000_0010),
            frame(
                Some("<[u8; 4] as core::fmt::Debug>::fmt"),
                Some("/usr/bin/app"),
                Some(0x1200),
                0x5610_0000_1200,
            ),
        ],
        vec![],
    ]
}

/// The store's rows: each stack sampled twice.
fn rows() -> Vec<Row> {
    stacks()
        .into_iter()
        .cycle()
        .take(8)
        .enumerate()
        .map(|(i, stack)| Row {
            kind: "profile".into(),
            time: T0 + i as i64 * SEC,
            value: 10_000_000,
            pid: 100,
            tid: 100,
            stack: Some(stack),
            ..Default::default()
        })
        .collect()
}

/// Each stack's folded text by stack id (hex), from stacks-query's `stack_table` over `store`
/// (a directory or a URL).
fn by_stacks_query(store: &str) -> BTreeMap<String, String> {
    let out = std::process::Command::new(bin("stacks-query"))
        .args(["-d", store, "-f", "ndjson", "-c"])
        .arg("SELECT lower(encode(stack_id, 'hex')) AS id, folded FROM stack_table")
        .output()
        .expect("run stacks-query");
    check(&out, &format!("stacks-query over {store}"));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (text("id"), text("folded"))
        })
        .collect()
}

/// Each stack's folded text by stack id (hex), from explore's `stack_table` view over `dir`.
fn by_explore(dir: &Path) -> BTreeMap<String, String> {
    const SCRIPT: &str = r#"
import json, sys, types
# views.py as a module of its package (it imports bundled.py beside it), without the
# package's __init__ (the notebooks' plotting: matplotlib, pandas).
package = types.ModuleType("stacks_explore")
package.__path__ = [sys.argv[1]]
sys.modules["stacks_explore"] = package
import duckdb
from stacks_explore import views
con = duckdb.connect()
views.create_views(con, sys.argv[2])
for i, f in con.execute("SELECT lower(hex(stack_id)), folded FROM stack_table").fetchall():
    print(json.dumps([i, f]))
"#;
    let views = stacks_tests::crate_dir().join(VIEWS);
    let out = stacks_tests::python(SCRIPT, &[views.to_str().unwrap(), dir.to_str().unwrap()]);
    check(&out, "explore's views");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<(String, Option<String>)>(l).unwrap())
        .map(|(id, folded)| (id, folded.unwrap_or_default()))
        .collect()
}

/// Rewrite every frames file under `dir` without its `name` column, as stacks-pack wrote them
/// before it (metadata kept).
fn drop_names(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            drop_names(&path);
            continue;
        }
        if !path.to_str().unwrap().ends_with(".frames.parquet") {
            continue;
        }
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let schema = reader.schema();
        let keep: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| schema.field(i).name() != NAME)
            .collect();
        assert!(keep.len() < schema.fields().len(), "{path:?} has `{NAME}`");
        let batches: Vec<RecordBatch> =
            reader.map(|b| b.unwrap().project(&keep).unwrap()).collect();
        let projected = Arc::new(schema.project(&keep).unwrap());
        let file = std::fs::File::create(&path).unwrap();
        let props = WriterProperties::builder().build();
        let mut w = ArrowWriter::try_new(file, projected, Some(props)).unwrap();
        for b in &batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }
}

/// The three readers' folded stacks of the store at `dir` (packed also under `bucket`), each
/// checked against `want`.
fn assert_readers_agree(dir: &Path, bucket: &Path, want: &[String], what: &str) {
    let rust = by_stacks_query(dir.to_str().unwrap());
    let mut folded: Vec<String> = rust.values().cloned().collect();
    folded.sort();
    assert_eq!(folded, want, "stacks-query over {what}");
    let sql = by_stacks_query(&format!("file://{}", bucket.display()));
    assert_eq!(sql, rust, "the bucket SQL and stacks-query over {what}");
    let explore = by_explore(dir);
    assert_eq!(
        explore, rust,
        "explore's views and stacks-query over {what}"
    );
}

#[test]
fn every_reader_shows_the_frames_names_stacks_pack_wrote() {
    let root = scratch("frame-names");
    let batch = fixture::batch(&rows());
    let dir = root.join("dir");
    let bucket = root.join("bucket");
    // The fixture's hour: 2023-11-14T22.
    write_packed(&dir.join("date=2023-11-14"), "stacks-names-000000", &batch);
    write_packed(
        &bucket.join("date=2023-11-14/hour=22/host=vm"),
        "stacks-names-000000",
        &batch,
    );
    // What the Rust rule names them (stacks_stream::frames), root first.
    let mut want: Vec<String> = stacks()
        .iter()
        .map(|s| {
            let names: Vec<String> = s.iter().rev().map(Frame::name).collect();
            stacks_stream::frames::fold(names.iter().map(String::as_str))
        })
        .collect();
    want.sort();
    let shown = want.join("\n");
    for name in [
        "vfs_read",
        "[kernel 0xffffffff81001234]",
        "[libc.so.6+0x29d90]",
        "main.(*Server).Serve",
        "[vdso+0xb46]",
        "__vdso_clock_gettime",
        "handle",
        "LazyCompile:*render app.js:10",
        "[0x3f009999]",
        "[unknown+0x10]",
        "<[u8: 4] as core::fmt::Debug>::fmt",
    ] {
        assert!(shown.contains(name), "{name} in {shown}");
    }
    assert_readers_agree(&dir, &bucket, &want, "a store");

    // Frames files written before the `name` column: every reader names their frames alike.
    drop_names(&dir);
    drop_names(&bucket);
    assert_readers_agree(&dir, &bucket, &want, "a store without frame names");
    let _ = std::fs::remove_dir_all(&root);
}
