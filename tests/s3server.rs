//! A local S3 server for the fleet tests (s3s-fs on loopback, over a directory, stopped and
//! started again by a test), and what the tests check of a bucket's keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{ScratchDir, free_port};

/// Every file under `dir`, relative, sorted.
pub fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// The pairs' keys: each samples file has its stacks file, under date=/hour=/host=.
pub fn check_layout(bucket: &Path, prefix: &str) -> BTreeMap<String, usize> {
    let mut per_hour = BTreeMap::new();
    let all = files(bucket);
    for f in &all {
        let parts: Vec<&str> = f.split('/').collect();
        assert_eq!(
            parts.len(),
            prefix.trim_end_matches('/').split('/').count() + 4,
            "key {f}"
        );
        assert!(f.starts_with(prefix), "{f} under {prefix}");
        let n = parts.len();
        assert!(parts[n - 4].starts_with("date=2026-11-23"), "{f}");
        assert!(parts[n - 3].starts_with("hour="), "{f}");
        assert!(parts[n - 2].starts_with("host="), "{f}");
        if let Some(base) = f.strip_suffix(".samples.parquet") {
            assert!(
                all.contains(&format!("{base}.stacks.parquet")),
                "{f} has its stacks file"
            );
            *per_hour.entry(parts[n - 3].to_string()).or_default() += 1;
        }
    }
    per_hour
}

/// An S3 server on loopback (s3s-fs) over a directory, stopped and started again by the test.
pub struct S3 {
    pub root: PathBuf,
    pub port: u16,
    child: Option<Child>,
}

pub const KEY: &str = "stackstest";

pub const SECRET: &str = "stackstestsecret";

impl S3 {
    pub fn start(root: &Path) -> Option<S3> {
        let exe = which("s3s-fs")?;
        let port = free_port();
        std::fs::create_dir_all(root.join("bucket")).unwrap();
        let mut s = S3 {
            root: root.to_path_buf(),
            port,
            child: None,
        };
        s.child = Some(s.spawn(&exe));
        s.wait_ready();
        Some(s)
    }

    pub fn spawn(&self, exe: &Path) -> Child {
        Command::new(exe)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", KEY, "--secret-key", SECRET])
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs")
    }

    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.child = Some(self.spawn(&which("s3s-fs").unwrap()));
        self.wait_ready();
    }

    /// Environment for a client of this server.
    pub fn env(&self) -> String {
        format!(
            "AWS_ACCESS_KEY_ID={KEY} AWS_SECRET_ACCESS_KEY={SECRET} AWS_REGION=us-east-1 \
             AWS_ENDPOINT=http://127.0.0.1:{} AWS_ALLOW_HTTP=true",
            self.port
        )
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(dirs_home().map(|h| h.join(".cargo/bin")))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub fn dirs_home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// The S3 server, or why the test cannot run (a missing server is a failure under
/// STACKS_REQUIRE_BPF, as CI sets it: scripts/setup installs it).
pub fn s3(dir: &ScratchDir, test: &str) -> Option<S3> {
    let s = S3::start(&dir.join("s3"));
    if s.is_none() {
        assert!(
            std::env::var_os("STACKS_REQUIRE_BPF").is_none(),
            "{test}: s3s-fs is missing (scripts/setup installs it)"
        );
        eprintln!("SKIPPED {test}: s3s-fs not installed (scripts/setup installs it)");
    }
    s
}
