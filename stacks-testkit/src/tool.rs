//! Running the built tools: where the binaries are, running one with bytes on its stdin and a
//! timeout (a hang fails the test, never a slow pass), scratch directories, the fuzz corpus.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Directory holding the workspace's built binaries (target/debug, the parent of the `deps/`
/// directory the test executable runs from).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Path of a workspace binary; fails with a hint when it was not built. Tests of a crate with
/// the binary use `env!("CARGO_BIN_EXE_<name>")` instead.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace binaries first (cargo build --workspace, as scripts/test does)",
        p.display()
    );
    p
}

/// Run `bin args…` with `stdin` piped in and its output captured (see [`run_command`]).
pub fn run_tool(bin: impl AsRef<Path>, args: &[&str], stdin: &[u8], timeout: Duration) -> Output {
    let mut cmd = Command::new(bin.as_ref());
    cmd.args(args);
    run_command(cmd, stdin, timeout)
}

/// Run `cmd` with `input` on its stdin and its output captured; kill it and fail the test if
/// it has not exited after `timeout`. The tool may exit before reading all its input (bad
/// input): that is not a failure here.
pub fn run_command(mut cmd: Command, input: &[u8], timeout: Duration) -> Output {
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
    let start = Instant::now();
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
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = writer.join();
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// A run's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh scratch directory `stacks-test-{name}-{pid}` under the system temp dir: removed
/// when the test passes, kept (to look at) when it panics, so CI runs do not fill the disk.
pub fn scratch(name: &str) -> ScratchDir {
    let dir = std::env::temp_dir().join(format!("stacks-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    ScratchDir(dir)
}

/// What [`scratch`] returns: used as a path, removed on drop unless the thread is panicking.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for ScratchDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept scratch directory {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A scratch directory removed on drop (permissions restored first, so tests may make parts of
/// it read-only).
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new empty directory, unique to this process, `tag` and instant.
    pub fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let p =
            std::env::temp_dir().join(format!("stacks-test-{}-{tag}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("create scratch dir");
        Scratch(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        for p in walk(&self.0) {
            let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `dir` and every directory below it.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for p in entries.flatten().map(|e| e.path()) {
            if p.is_dir() {
                out.extend(walk(&p));
            }
        }
    }
    out
}

/// The inputs the fuzzers found (`stacks-testkit/corpus/fuzz/`, named after the target that
/// found them): every test that reads streams can replay them.
pub fn fuzz_corpus() -> PathBuf {
    // Every crate is at the workspace root, so from the crate under test too.
    crate::env::crate_dir(env!("CARGO_MANIFEST_DIR")).join("../stacks-testkit/corpus/fuzz")
}

/// Run `bin args…` with its stdout closed before it writes anything and `input` on stdin (the
/// `| head` case); the output, and how feeding stdin went (a tool may stop reading early).
pub fn run_with_closed_stdout(
    bin: impl AsRef<Path>,
    args: &[&str],
    input: &[u8],
) -> (Output, std::io::Result<()>) {
    let mut child = Command::new(bin.as_ref())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let mut stdin = child.stdin.take().expect("stdin");
    let fed = stdin.write_all(input);
    drop(stdin);
    (child.wait_with_output().expect("wait"), fed)
}

/// The bytes of the fuzz finding `name` in [`fuzz_corpus`].
pub fn fuzz_case(name: &str) -> Vec<u8> {
    let path = fuzz_corpus().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Assert `out` is a clean one-line refusal by `tool`: exit status `code`, nothing on stdout,
/// no panic, exactly one stderr line, `tool: error: …` containing `needle`; returns the line.
pub fn assert_one_line_error(out: &Output, tool: &str, code: i32, needle: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "no data on stdout after an error");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(
        stderr.starts_with(&format!("{tool}: error: ")),
        "{stderr:?}"
    );
    assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
    stderr
}
