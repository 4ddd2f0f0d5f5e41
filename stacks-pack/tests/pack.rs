//! End-to-end tests of the `stacks-pack` binary: rotation and round trip, truncated input,
//! single-file mode, empty streams, unwritable destinations, and signals.

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use common::*;
use parquet::basic::Compression;
use stacks_stream::meta;

fn no_temp_files(dir: &Path) {
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n.ends_with(".tmp"))
        .collect();
    assert!(
        left.is_empty(),
        "temporary files left in {}: {left:?}",
        dir.display()
    );
}

fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("error")).collect()
}

#[test]
fn rotates_and_round_trips_every_value() {
    let scratch = Scratch::new("rotate");
    let out = scratch.path().join("nested/out");
    let schema = symbolized();
    let input = batches(&schema, &[4, 9, 1, 11]);
    let (bytes, _) = stream(&schema, &input, true);

    let res = run(&[out.to_str().unwrap(), "--max-rows", "7"], bytes);
    let err = stderr(&res);
    assert!(res.status.success(), "{err}");
    assert!(res.stdout.is_empty(), "stdout must carry nothing");
    no_temp_files(&out);

    let names = parquet_files(&out);
    let pairs = pair_files(&out);
    assert_eq!(names.len(), 4, "{names:?}");
    let total_bytes: u64 = pairs.iter().map(|p| fs::metadata(p).unwrap().len()).sum();
    // Row i has a stack of i % 5 frames, each frame named after its row: every non-empty
    // stack is distinct, the empty one is shared.
    let summary = format!(
        "stacks-pack: 25 rows in 4 file sets ({total_bytes} bytes; 21 distinct stacks) to {}",
        out.display()
    );
    assert_eq!(err.lines().last(), Some(summary.as_str()), "{err}");

    let mut got = Vec::new();
    let mut first_times = Vec::new();
    for (i, path) in names.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let parts: Vec<&str> = name
            .trim_end_matches(".samples.parquet")
            .split('-')
            .collect();
        assert_eq!(parts[0], "stacks", "{name}");
        assert_eq!(parts[1].len(), 16, "{name}");
        assert!(
            parts[1].starts_with("20") && parts[1].ends_with('Z'),
            "{name}"
        );
        assert_eq!(parts.last().unwrap(), &format!("{:06}", i + 1), "{name}");

        let rb = read_parquet(path);
        assert_eq!(rb.rows(), if i < 3 { 7 } else { 4 }, "{name}");
        assert_eq!(
            rb.schema.fields(),
            packed(&schema).fields(),
            "{name}: schema round trip"
        );
        let md = rb.metadata.clone();
        for rg in md.row_groups() {
            assert!(rg.num_rows() <= 7);
            for col in rg.columns() {
                assert!(matches!(col.compression(), Compression::ZSTD(_)), "{name}");
                assert!(col.statistics().is_some(), "{name}: statistics");
            }
        }
        assert!(md.column_index().is_some(), "{name}: page index");

        let kv = rb.kv();
        assert_eq!(kv[meta::STAGE], "symbolized");
        assert_eq!(kv[meta::HOST], "testhost");
        assert_eq!(kv[meta::SCHEMA_VERSION], stacks_stream::SCHEMA_VERSION);
        assert_eq!(
            kv[meta::TOOLS],
            format!(
                "stacks-record 0.1.0,stacks-symbolize 0.1.0,stacks-pack {}",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(kv.contains_key("ARROW:schema"));
        assert_eq!(rb.schema.metadata()[meta::TOOLS], kv[meta::TOOLS]);
        assert_eq!(rb.schema.metadata()[meta::STAGE], "symbolized");

        first_times.push(rb.batches[0].column(0).slice(0, 1));
        got.extend(rb.batches);
    }
    // Names sorted = write order: file i starts with input row 7*i.
    for (i, t) in first_times.iter().enumerate() {
        let want = batch(&schema, 7 * i, 1).column(0).clone();
        assert!(t.as_ref() == want.as_ref(), "file {i} out of order");
    }
    assert_same_rows(&input, &got);
}

#[test]
fn truncated_input_keeps_received_rows_and_fails() {
    let scratch = Scratch::new("trunc");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[5, 5, 5, 5]);
    let (bytes, ends) = stream(&schema, &input, false);
    let cut = ends[2] + (ends[3] - ends[2]) / 2;

    let res = run(
        &[out.to_str().unwrap(), "--max-rows", "10"],
        bytes[..cut].to_vec(),
    );
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    let errors = error_lines(&err);
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].starts_with("stacks-pack: error: stdin: truncated Arrow stream"),
        "{err}"
    );
    assert!(err.contains("15 rows in 2 file sets"), "{err}");
    no_temp_files(&out);

    let names = parquet_files(&out);
    assert_eq!(names.len(), 2);
    let got: Vec<RecordBatch> = names.iter().flat_map(|p| read_parquet(p).batches).collect();
    assert_same_rows(&input[..3], &got);
}

#[test]
fn stream_ending_without_marker_at_batch_boundary_is_truncated() {
    let scratch = Scratch::new("nomarker");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[3, 3]);
    let (bytes, _) = stream(&schema, &input, false);

    let res = run(&[out.to_str().unwrap()], bytes);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    let names = parquet_files(&out);
    assert_eq!(names.len(), 1);
    assert_same_rows(&input, &read_parquet(&names[0]).batches);
}

#[test]
fn single_file_mode_with_input_path() {
    let scratch = Scratch::new("single");
    let schema = symbolized();
    let input = batches(&schema, &[10, 20, 3]);
    let (bytes, _) = stream(&schema, &input, true);
    let in_path = scratch.path().join("in.arrows");
    fs::write(&in_path, bytes).unwrap();
    let out_dir = scratch.path().join("o");
    fs::create_dir(&out_dir).unwrap();
    let file = out_dir.join("one.parquet");

    let res = run(
        &[
            "-o",
            file.to_str().unwrap(),
            "-i",
            in_path.to_str().unwrap(),
            "--zstd-level",
            "9",
        ],
        Vec::new(),
    );
    let err = stderr(&res);
    assert!(res.status.success(), "{err}");
    // `-o one.parquet` writes the set one.samples.parquet + one.stacks.parquet +
    // one.frames.parquet.
    let samples = out_dir.join("one.samples.parquet");
    let pair = vec![
        samples.clone(),
        out_dir.join("one.stacks.parquet"),
        out_dir.join("one.frames.parquet"),
    ];
    assert!(err.contains("33 rows in 1 file set ("), "{err}");
    assert!(
        err.ends_with(&format!(
            " to {} + {} + {}\n",
            pair[0].display(),
            pair[1].display(),
            pair[2].display()
        )),
        "{err}"
    );
    let mut sorted = pair.clone();
    sorted.sort();
    assert_eq!(files(&out_dir), sorted);
    let rb = read_parquet(&samples);
    assert_same_rows(&input, &rb.batches);
    assert_eq!(rb.kv()[meta::STAGE], "symbolized");
    assert_eq!(read_file(&pair[1]).kv()[meta::STAGE], "symbolized");

    // An empty stream replaces it with a valid, empty pair that has the schema.
    let (empty, _) = stream(&schema, &[], true);
    let res = run(&["-o", file.to_str().unwrap()], empty);
    assert!(res.status.success(), "{}", stderr(&res));
    let rb = read_parquet(&samples);
    assert_eq!(rb.rows(), 0);
    assert_eq!(rb.schema.fields(), packed(&schema).fields());
    assert_eq!(read_file(&pair[1]).rows(), 0);
    assert_eq!(files(&out_dir), sorted);

    // A missing input file is named, and the existing output is left alone.
    let missing = scratch.path().join("missing.arrows");
    let res = run(
        &[
            "-o",
            file.to_str().unwrap(),
            "-i",
            missing.to_str().unwrap(),
        ],
        Vec::new(),
    );
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "stacks-pack: error: cannot open {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert_eq!(
        read_parquet(&samples).schema.fields(),
        packed(&schema).fields()
    );
    assert_eq!(files(&out_dir), sorted);
}

/// A stream that is not stacks rows is refused with one line naming what is missing, and
/// nothing is written: a foreign file in a store would break every query on it.
#[test]
fn foreign_streams_and_newer_versions_are_refused() {
    let scratch = Scratch::new("foreign");
    // What a user gets from pyarrow: `{x: [1, 2, 3], name: [a, b, c]}`, no metadata.
    let schema = Arc::new(Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(arrow_array::StringArray::from(vec!["a", "b", "c"])),
        ],
    )
    .unwrap();
    let (bytes, _) = stream(&schema, std::slice::from_ref(&b), true);
    let out = scratch.path().join("plain");
    let res = run(&[out.to_str().unwrap()], bytes);
    assert_eq!(res.status.code(), Some(1), "{}", stderr(&res));
    let err = stderr(&res);
    assert_eq!(error_lines(&err).len(), 1, "{err}");
    assert!(err.contains("not a stacks row stream"), "{err}");
    assert!(err.contains("stacks.schema_version"), "{err}");
    assert!(parquet_files(&out).is_empty());

    // Stacks metadata but a required column missing, or of the wrong type.
    let mut fields = stacks_stream::raw_fields();
    fields.retain(|f| f.name() != "kind");
    let no_kind = Arc::new(Schema::new_with_metadata(fields, stream_metadata()));
    let (bytes, _) = stream(&no_kind, &[], true);
    let res = run(&[out.to_str().unwrap()], bytes);
    assert_eq!(res.status.code(), Some(1));
    assert!(
        stderr(&res).contains("missing column `kind`"),
        "{}",
        stderr(&res)
    );
    let mut fields = stacks_stream::raw_fields();
    fields[7] = Field::new("value", DataType::Utf8, false);
    let text_value = Arc::new(Schema::new_with_metadata(fields, stream_metadata()));
    let (bytes, _) = stream(&text_value, &[], true);
    let res = run(&[out.to_str().unwrap()], bytes);
    assert_eq!(res.status.code(), Some(1));
    assert!(
        stderr(&res).contains("column `value` has type Utf8"),
        "{}",
        stderr(&res)
    );

    // A query result (stage `query`) is not rows to store.
    let mut md = stream_metadata();
    md.insert(meta::STAGE.into(), "query".into());
    let query = Arc::new(stacks_stream::symbolized_schema(md));
    let (bytes, _) = stream(&query, &[], true);
    let res = run(&[out.to_str().unwrap()], bytes);
    assert_eq!(res.status.code(), Some(1));
    assert!(
        stderr(&res).contains("stage is `query`"),
        "{}",
        stderr(&res)
    );
    assert!(parquet_files(&out).is_empty());

    let mut md = stream_metadata();
    md.insert(meta::SCHEMA_VERSION.into(), "99".into());
    let newer = Arc::new(stacks_stream::symbolized_schema(md));
    let (bytes, _) = stream(&newer, &[], true);
    let out = scratch.path().join("newer");
    let res = run(&[out.to_str().unwrap()], bytes);
    assert_eq!(res.status.code(), Some(1));
    assert!(stderr(&res).contains("newer"), "{}", stderr(&res));
    assert!(parquet_files(&out).is_empty());
}

#[test]
fn empty_stream_writes_no_file_in_directory_mode() {
    let scratch = Scratch::new("empty");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let (bytes, _) = stream(&schema, &[], true);
    let res = run(&[out.to_str().unwrap()], bytes);
    let err = stderr(&res);
    assert!(res.status.success(), "{err}");
    assert!(err.contains("no rows") && err.contains("no file"), "{err}");
    assert!(out.is_dir());
    assert!(files(&out).is_empty());
}

#[test]
fn non_creatable_directory_is_one_line_error() {
    let scratch = Scratch::new("nocreate");
    let blocker = scratch.path().join("file");
    fs::write(&blocker, b"x").unwrap();
    let dir = blocker.join("out");
    let schema = symbolized();
    let (bytes, _) = stream(&schema, &batches(&schema, &[3]), true);
    let res = run(&[dir.to_str().unwrap()], bytes);
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "stacks-pack: error: cannot create directory {}",
            dir.display()
        )),
        "{err}"
    );
    assert_eq!(err.matches("os error").count(), 1, "cause repeated: {err}");
}

/// A directory this process cannot create files in: mode 0555, or as root (which ignores
/// modes) a sysfs directory, if one refuses us.
fn read_only_dir(scratch: &Scratch) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch.path().join("ro");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    if fs::write(dir.join("probe"), b"").is_err() {
        return Some(dir);
    }
    let sys = Path::new("/sys");
    (sys.is_dir() && fs::write(sys.join("stacks-pack-probe"), b"").is_err())
        .then(|| sys.to_path_buf())
}

#[test]
fn read_only_directory_is_one_line_error() {
    let scratch = Scratch::new("ro");
    let Some(dir) = read_only_dir(&scratch) else {
        eprintln!("skipped: no directory here refuses writes");
        return;
    };
    let schema = symbolized();
    let (bytes, _) = stream(&schema, &batches(&schema, &[3]), true);
    let res = run(&[dir.to_str().unwrap()], bytes);
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("stacks-pack: error: cannot "), "{err}");
    assert!(lines[0].contains(dir.to_str().unwrap()), "{err}");
}

#[test]
fn disk_error_mid_stream_keeps_earlier_files() {
    let scratch = Scratch::new("midfail");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[10, 4]);
    let (bytes, ends) = stream(&schema, &input, true);

    let mut child = spawn(&[out.to_str().unwrap(), "--max-rows", "5"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..ends[0]]).unwrap();
    stdin.flush().unwrap();
    wait_for("two finished files", || {
        out.is_dir() && parquet_files(&out).len() == 2
    });
    // Let the second file's directory fsync complete, then pull the directory out from under
    // the packer: its next file cannot be created.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let moved = scratch.path().join("moved");
    fs::rename(&out, &moved).unwrap();
    fs::write(&out, b"not a directory").unwrap();
    let _ = stdin.write_all(&bytes[ends[0]..]);
    drop(stdin);
    let res = child.wait_with_output().unwrap();
    let err = stderr(&res);
    assert_eq!(res.status.code(), Some(1), "{err}");
    let errors = error_lines(&err);
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].starts_with(&format!(
            "stacks-pack: error: cannot create {}/.stacks-",
            out.display()
        )),
        "{err}"
    );
    no_temp_files(&moved);
    let got: Vec<RecordBatch> = parquet_files(&moved)
        .iter()
        .flat_map(|p| read_parquet(p).batches)
        .collect();
    assert_same_rows(&input[..1], &got);
}

fn signal(child: &std::process::Child, sig: libc::c_int) {
    // SAFETY: sending a signal to our own child process.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    assert_eq!(rc, 0);
}

#[test]
fn sigterm_finishes_current_file_and_exits_zero() {
    let scratch = Scratch::new("term");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[25]);
    let (bytes, ends) = stream(&schema, &input, false);

    let mut child = spawn(&[out.to_str().unwrap(), "--max-rows", "10"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..ends[0]]).unwrap();
    stdin.flush().unwrap();
    // Two full files mean the whole 25-row batch has been received.
    wait_for("two finished files", || {
        out.is_dir() && parquet_files(&out).len() == 2
    });
    signal(&child, libc::SIGTERM);
    let res = child.wait_with_output().unwrap();
    drop(stdin);
    let err = stderr(&res);
    assert!(res.status.success(), "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(err.contains("25 rows in 3 file sets"), "{err}");
    no_temp_files(&out);
    let got: Vec<RecordBatch> = parquet_files(&out)
        .iter()
        .flat_map(|p| read_parquet(p).batches)
        .collect();
    assert_same_rows(&input, &got);
}

#[test]
fn sigint_is_ignored_until_the_stream_ends() {
    let scratch = Scratch::new("int");
    let out = scratch.path().join("out");
    let schema = symbolized();
    let input = batches(&schema, &[4, 6]);
    let (bytes, ends) = stream(&schema, &input, true);

    let mut child = spawn(&[out.to_str().unwrap(), "--max-rows", "4"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..ends[0]]).unwrap();
    stdin.flush().unwrap();
    wait_for("the first file", || {
        out.is_dir() && parquet_files(&out).len() == 1
    });
    signal(&child, libc::SIGINT);
    stdin.write_all(&bytes[ends[0]..]).unwrap();
    drop(stdin);
    let res = child.wait_with_output().unwrap();
    assert!(res.status.success(), "{}", stderr(&res));
    let got: Vec<RecordBatch> = parquet_files(&out)
        .iter()
        .flat_map(|p| read_parquet(p).batches)
        .collect();
    assert_same_rows(&input, &got);
}

#[test]
#[should_panic(expected = "column time")]
fn row_comparison_detects_a_difference() {
    let schema = symbolized();
    let input = batches(&schema, &[2, 2]);
    assert_same_rows(&input[..1], &input[1..]);
}

#[test]
fn under_sudo_output_belongs_to_the_invoking_user() {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root");
        return;
    }
    let scratch = Scratch::new("sudo");
    let out = scratch.path().join("made/out");
    let schema = symbolized();
    let (bytes, _) = stream(&schema, &batches(&schema, &[3, 3]), true);
    let mut child = std::process::Command::new(BIN)
        .args([out.to_str().unwrap(), "--max-rows", "4"])
        .env("SUDO_UID", "54321")
        .env("SUDO_GID", "54322")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let res = child.wait_with_output().unwrap();
    assert!(res.status.success(), "{}", stderr(&res));
    let owned = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owned(scratch.path()), (0, 0), "existing parents untouched");
    assert_eq!(owned(&scratch.path().join("made")), (54321, 54322));
    assert_eq!(owned(&out), (54321, 54322));
    let names = pair_files(&out);
    assert_eq!(names.len(), 6, "two file sets");
    for p in &names {
        assert_eq!(owned(p), (54321, 54322), "{}", p.display());
    }

    // Partition directories it creates are the user's too.
    let parted = scratch.path().join("parted");
    let (bytes, _) = stream(&schema, &batches(&schema, &[3]), true);
    let mut child = std::process::Command::new(BIN)
        .args([parted.to_str().unwrap(), "--partition", "date"])
        .env("SUDO_UID", "54321")
        .env("SUDO_GID", "54322")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let res = child.wait_with_output().unwrap();
    assert!(res.status.success(), "{}", stderr(&res));
    let day = parted.join("date=2023-11-14");
    assert_eq!(owned(&day), (54321, 54322));
    for p in &pair_files(&day) {
        assert_eq!(owned(p), (54321, 54322), "{}", p.display());
    }
}

/// A raw stream without any stack column (the contract allows it: `kstack` and `ustack` are
/// nullable) is stored too: every `stack_id` null, and an empty stacks file beside it.
#[test]
fn streams_without_stack_columns_get_null_ids_and_empty_stacks_files() {
    let scratch = Scratch::new("nostacks");
    let out = scratch.path().join("out");
    let mut md = stream_metadata();
    md.insert(meta::STAGE.into(), stacks_stream::stage::RAW.into());
    let mut fields = stacks_stream::raw_fields();
    fields.retain(|f| !stacks_stream::dict::is_stack_column(f.name()));
    let schema = Arc::new(Schema::new_with_metadata(fields, md));
    let full = batch(&symbolized(), 0, 12);
    let columns = schema
        .fields()
        .iter()
        .map(|f| full.column_by_name(f.name()).unwrap().clone())
        .collect();
    let b = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let (bytes, _) = stream(&schema, std::slice::from_ref(&b), true);
    let res = run(&[out.to_str().unwrap()], bytes);
    let err = stderr(&res);
    assert!(res.status.success(), "{err}");
    assert!(err.contains("12 rows in 1 file set ("), "{err}");
    assert!(err.contains("; 0 distinct stacks)"), "{err}");
    let pair = pair_files(&out);
    let samples = read_file(&pair[0]);
    assert_eq!(samples.rows(), 12);
    let ids = samples.batches[0]
        .column_by_name(stacks_stream::col::STACK_ID)
        .unwrap();
    assert_eq!(ids.null_count(), 12);
    let stacks = read_file(&pair[1]);
    assert_eq!(stacks.rows(), 0);
    let names: Vec<&str> = stacks
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["stack_id", "folded", "leaf", "depth"]);
}

/// `--lost CAUSE=EVENTS`: one `lost` row per cause in the first set, before the stream's rows;
/// counted in `--stats` as rows of kind `lost`, not again by cause; nothing unfinished at the
/// end. A malformed value is one error line naming the flag.
#[test]
fn lost_events_handed_over_are_lost_rows_of_the_first_set() {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    let scratch = Scratch::new("lost");
    let out = scratch.path().join("out");
    let stats = scratch.path().join("stats.json");
    let schema = symbolized();
    let input = batches(&schema, &[4]);
    let (bytes, _) = stream(&schema, &input, true);
    let res = run(
        &[
            out.to_str().unwrap(),
            "--lost",
            "stage_died:switch=120",
            "--lost",
            "stage_died:wake=3",
            "--stats",
            stats.to_str().unwrap(),
        ],
        bytes,
    );
    assert!(res.status.success(), "{}", stderr(&res));
    let names = parquet_files(&out);
    assert_eq!(names.len(), 1, "{names:?}");
    let rb = read_parquet(&names[0]);
    assert_eq!(rb.rows(), 6);
    let mut lost = Vec::new();
    for b in &rb.batches {
        let kind = b.column_by_name("kind").unwrap().as_string::<i32>();
        let cause = b.column_by_name("cause").unwrap().as_string::<i32>();
        let value = b
            .column_by_name("value")
            .unwrap()
            .as_primitive::<arrow_array::types::Int64Type>();
        for i in 0..b.num_rows() {
            if kind.value(i) == "lost" && !cause.is_null(i) {
                lost.push((cause.value(i).to_string(), value.value(i)));
            }
        }
    }
    lost.sort();
    assert_eq!(
        lost,
        [
            ("stage_died:switch".to_string(), 120),
            ("stage_died:wake".to_string(), 3)
        ]
    );
    let s = stacks_store::PackStats::read(&stats).unwrap();
    assert_eq!(s.rows["lost"], 2, "{s:?}");
    assert_eq!(s.rows["profile"], 4, "{s:?}");
    assert!(
        s.lost.is_empty(),
        "counted by whoever handed them over: {s:?}"
    );
    assert!(
        s.unfinished_rows.is_empty() && s.unfinished_events.is_empty(),
        "{s:?}"
    );
    assert_eq!(s.sets_written, 1);

    for bad in ["stage_died:switch", "=5", "x=0", "x=many"] {
        let res = run(&[out.to_str().unwrap(), "--lost", bad], Vec::new());
        assert_eq!(res.status.code(), Some(2), "{bad}");
        let err = stderr(&res);
        assert!(err.contains("--lost") && err.contains(bad), "{bad}: {err}");
    }
}

/// `--stats` says which rows are in no finished set yet: with sets of 10 rows, 25 rows taken
/// leave 5 unfinished (and their events: the test rows have no `count`, 1 each), which is what
/// a packer killed then had not stored.
#[test]
fn stats_say_what_is_not_stored_yet() {
    let scratch = Scratch::new("unfinished");
    let out = scratch.path().join("out");
    let stats = scratch.path().join("stats.json");
    let schema = symbolized();
    let input = batches(&schema, &[25]);
    let (bytes, ends) = stream(&schema, &input, false);
    let mut child = spawn(&[
        out.to_str().unwrap(),
        "--max-rows",
        "10",
        "--stats",
        stats.to_str().unwrap(),
    ]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&bytes[..ends[0]]).unwrap();
    stdin.flush().unwrap();
    let read = || stacks_store::PackStats::read(&stats).unwrap_or_default();
    wait_for("25 rows taken, two sets finished", || {
        let s = read();
        s.sets_written == 2 && s.rows.values().sum::<u64>() == 25
    });
    let s = read();
    let unfinished: u64 = s.unfinished_rows.values().sum();
    assert_eq!(unfinished, 5, "{s:?}");
    assert_eq!(s.unfinished_events.values().sum::<u64>(), 5, "{s:?}");
    signal(&child, libc::SIGKILL);
    let _ = child.wait_with_output().unwrap();
    drop(stdin);
    let stored: usize = parquet_files(&out)
        .iter()
        .map(|p| read_parquet(p).rows())
        .sum();
    assert_eq!(
        stored, 20,
        "the killed packer's unfinished rows are not in the store"
    );
}
