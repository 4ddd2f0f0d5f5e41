//! End to end (BPF, root): a recording of the whole machine at 999 Hz with kernel and user
//! stacks, read back three ways — arrow-rs's `StreamReader`, the contract's input stream with
//! `StackFrames`/`Entries`, and pyarrow — shows dictionary-encoded stack columns whose
//! dictionaries only grow, one key per captured stack in all three columns, each repeated stack
//! sent once, and the same frames whichever reader reads them; and the stream's batches
//! compressed in a file, not in a pipe.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use stacks_stream::dict::Entries;
use stacks_stream::frames::StackFrames;

/// A captured stack as the rows show it: kernel addresses and user (module, offset, address).
/// A user frame as the test tells frames apart: module, offset, address, and an interpreted
/// frame's (function, file) and line.
type UserLogical = (
    Option<String>,
    Option<u64>,
    u64,
    (Option<String>, Option<String>),
    i64,
);
type Logical = (Option<Vec<u64>>, Option<Vec<UserLogical>>);

/// A process that only spins (many samples, stacks repeated), killed when dropped.
struct Spinner(std::process::Child);

impl Spinner {
    fn start() -> Spinner {
        Spinner(
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scratch directory named for `tag`, created.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("stacks-record-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn recording_carries_each_stack_once() {
    if !stacks_testkit::env::bpf_available("recording_carries_each_stack_once") {
        return;
    }
    let _serial = stacks_testkit::env::bpf_serial();
    let dir = scratch("dict-e2e");
    let path = dir.join("raw.arrow");
    let spin = Spinner::start();
    let spin_pid = spin.0.id() as i32;
    let out = Command::new(env!("CARGO_BIN_EXE_stacks-record"))
        .args(["-e", "profile:uk:999", "-a", "-d", "2s", "-o"])
        .arg(&path)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    drop(spin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stacks-record failed: {stderr}");

    // arrow-rs: dictionary columns, dictionaries that only grow, keys shared by the columns.
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(&path).unwrap(), None)
            .unwrap();
    assert_eq!(
        reader.schema().metadata()["stacks.schema_version"],
        stacks_stream::SCHEMA_VERSION
    );
    let mut previous: HashMap<&str, ArrayRef> = HashMap::new();
    let (mut rows, mut stacked) = (0usize, 0usize);
    let mut spin_rows = 0usize;
    let mut spin_keys = HashSet::new();
    let mut key_stacks: HashMap<i32, Logical> = HashMap::new();
    let (mut kframes, mut uframes) = (0usize, 0usize);
    // A busy host can fill the dictionaries within the recording (8 MiB): they then start over
    // shorter, all three at once, and keys are given afresh.
    let mut restarts = 0;
    let mut keys_before: Vec<HashMap<i32, Logical>> = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let kstack = batch.column_by_name("kstack").unwrap();
        if let (Some(old), DataType::Dictionary(..)) = (previous.get("kstack"), kstack.data_type())
            && kstack.as_dictionary::<Int32Type>().values().len() < old.len()
        {
            restarts += 1;
            previous.clear();
            keys_before.push(std::mem::take(&mut key_stacks));
        }
        let mut keys = Vec::new();
        for name in ["kstack", "ustack", "kstack_symbols"] {
            let col = batch.column_by_name(name).unwrap();
            assert!(
                matches!(col.data_type(), DataType::Dictionary(..)),
                "{name}: {}",
                col.data_type()
            );
            let dict = col.as_dictionary::<Int32Type>();
            let values = dict.values();
            if let Some(old) = previous.get(name) {
                assert!(
                    values.len() >= old.len(),
                    "{name}: the dictionary shrank without the others"
                );
                assert_eq!(
                    values.slice(0, old.len()).to_data(),
                    old.to_data(),
                    "{name}: earlier entries changed"
                );
            }
            previous.insert(name, values.clone());
            keys.push(dict.keys().clone());
        }
        let (k, u, s) = (&keys[0], &keys[1], &keys[2]);
        let kvalues = previous["kstack"].as_list::<i32>().clone();
        let svalues = previous["kstack_symbols"].as_list::<i32>().clone();
        let ustack =
            StackFrames::new(batch.column_by_name("ustack").unwrap(), "test", "ustack").unwrap();
        assert!(ustack.is_dictionary());
        let pid = batch
            .column_by_name("pid")
            .unwrap()
            .as_primitive::<Int32Type>()
            .clone();
        let kind = batch
            .column_by_name("kind")
            .unwrap()
            .as_string::<i32>()
            .clone();
        for row in 0..batch.num_rows() {
            rows += 1;
            if kind.value(row) != "profile" {
                assert!(k.is_null(row) && u.is_null(row), "{} row", kind.value(row));
                continue;
            }
            // `-e profile:uk`: both stacks requested, one key for the captured stack.
            assert!(k.is_valid(row) && u.is_valid(row), "profile row {row}");
            let key = k.value(row);
            assert_eq!(u.value(row), key);
            stacked += 1;
            if s.is_valid(row) {
                assert_eq!(s.value(row), key);
                let e = key as usize;
                assert_eq!(kvalues.value(e).len(), svalues.value(e).len());
            }
            let kstack = kvalues.is_valid(key as usize).then(|| {
                let v = kvalues.value(key as usize);
                v.as_primitive::<UInt64Type>().values().to_vec()
            });
            let entry = ustack.entry(row).expect("a user stack");
            let user: Vec<_> = ustack
                .entry_frames(entry)
                .map(|i| {
                    let f = ustack.frame(i).unwrap();
                    // Python frames differ by their function, file and line only.
                    let named = (f.symbol.map(str::to_string), f.file.map(str::to_string));
                    (
                        f.module.map(str::to_string),
                        f.offset,
                        f.addr,
                        named,
                        f.line,
                    )
                })
                .collect();
            kframes += kstack.as_ref().map_or(0, Vec::len);
            uframes += user.len();
            let logical = (kstack, Some(user));
            // A key is one stack for the whole stream.
            assert_eq!(
                key_stacks.entry(key).or_insert_with(|| logical.clone()),
                &logical,
                "key {key}"
            );
            if pid.value(row) == spin_pid {
                spin_rows += 1;
                spin_keys.insert(key);
            }
        }
    }
    let entries = previous["kstack"].len();
    assert!(
        restarts > 0 || stderr.contains(&format!("{entries} distinct stacks;")),
        "the summary counts the dictionary's {entries} entries: {stderr}"
    );
    // Each generation's keys are checked below like the last one's.
    for before in &keys_before {
        let logical: HashSet<&Logical> = before.values().collect();
        assert!(
            before.len() <= logical.len() + logical.len() / 100 + 2,
            "a generation before a restart ({restarts} restarts): {} keys for {} distinct stacks",
            before.len(),
            logical.len()
        );
    }
    // Each distinct stack once: rows with the same frames share a key (but for the few raw
    // kernel stacks that differ only in the tracing frames dropped), and the spinning
    // process's repeated stacks (its leaf frames; dash has no frame pointers, so the frames
    // above vary) share keys.
    let logical: HashSet<&Logical> = key_stacks.values().collect();
    assert!(
        key_stacks.len() <= logical.len() + logical.len() / 100 + 2,
        "{} keys for {} distinct stacks",
        key_stacks.len(),
        logical.len()
    );
    assert!(
        spin_rows >= 50,
        "only {spin_rows} samples of the spinning shell"
    );
    assert!(
        spin_keys.len() < spin_rows,
        "{} keys for {spin_rows} samples of one loop",
        spin_keys.len()
    );

    // The contract's reader accepts the stream, and Entries maps rows as the keys do.
    let mut input = stacks_stream::open_input(Some(&path)).unwrap();
    let mut contract_rows = 0;
    while let Some(b) = input.next_batch().unwrap() {
        let e = Entries::new(b.column_by_name("kstack").unwrap()).unwrap();
        assert!(e.is_dictionary());
        contract_rows += e.rows();
    }
    assert_eq!(contract_rows, rows);

    // pyarrow reads the frames back, as many as arrow-rs did.
    let py = Command::new("python3")
        .args([
            "-c",
            "import sys, pyarrow.ipc as i\n\
             t = i.open_stream(open(sys.argv[1], 'rb')).read_all()\n\
             kind = t.column('kind').to_pylist()\n\
             k = t.column('kstack').to_pylist(); u = t.column('ustack').to_pylist()\n\
             p = [j for j, x in enumerate(kind) if x == 'profile']\n\
             print(t.num_rows, len(p), sum(len(k[j]) for j in p if k[j] is not None),\n\
                   sum(len(u[j]) for j in p if u[j] is not None))",
        ])
        .arg(&path)
        .output()
        .expect("run python3");
    assert!(
        py.status.success(),
        "pyarrow: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        format!("{rows} {stacked} {kframes} {uframes}")
    );
    eprintln!(
        "recording: {rows} rows, {stacked} with stacks, {} keys; spinning shell: {spin_rows} samples, {} keys",
        key_stacks.len(),
        spin_keys.len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Record batch messages of an Arrow IPC stream, and how many of them are compressed.
fn batches_compressed(stream: &[u8]) -> (usize, usize) {
    let (mut at, mut batches, mut compressed) = (0, 0, 0);
    while at + 8 <= stream.len() {
        let word = |i: usize| u32::from_le_bytes(stream[i..i + 4].try_into().unwrap());
        // Each message: the continuation marker, its metadata's length, the metadata, the body.
        assert_eq!(word(at), 0xFFFF_FFFF, "a message at byte {at}");
        let len = word(at + 4) as usize;
        if len == 0 {
            break; // the end of the stream
        }
        let message = arrow_ipc::root_as_message(&stream[at + 8..at + 8 + len]).unwrap();
        if let Some(batch) = message.header_as_record_batch() {
            batches += 1;
            compressed += usize::from(batch.compression().is_some());
        }
        at += 8 + len + message.bodyLength() as usize;
    }
    (batches, compressed)
}

/// The recorder compresses what it writes to a file, and not what it writes into a pipe, whose
/// reader (the next tool) takes the bytes at once and only once (docs/format.md).
#[test]
fn a_file_is_compressed_a_pipe_is_not() {
    if !stacks_testkit::env::bpf_available("a_file_is_compressed_a_pipe_is_not") {
        return;
    }
    let _serial = stacks_testkit::env::bpf_serial();
    let dir = scratch("compress");
    let path = dir.join("raw.arrow");
    // Something to sample on a quiet machine.
    let spin = Spinner::start();
    let record = |output: Option<&std::path::Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_stacks-record"));
        cmd.args(["-e", "profile:uk:99", "-a", "-d", "1s"]);
        if let Some(p) = output {
            cmd.arg("-o").arg(p).stdout(Stdio::null());
        }
        cmd.output().unwrap()
    };
    let to_file = record(Some(&path));
    // Command::output reads stdout through a pipe.
    let piped = record(None);
    drop(spin);
    for out in [&to_file, &piped] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "stacks-record failed: {stderr}");
    }
    let (batches, compressed) = batches_compressed(&std::fs::read(&path).unwrap());
    assert!(
        batches > 0 && compressed == batches,
        "file: {compressed} of {batches}"
    );
    let (batches, compressed) = batches_compressed(&piped.stdout);
    assert!(
        batches > 0 && compressed == 0,
        "pipe: {compressed} of {batches}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
