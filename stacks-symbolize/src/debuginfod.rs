//! debuginfod client: fetches `$URL/buildid/<id>/debuginfo` (or `/executable`) for the servers
//! in `DEBUGINFOD_URLS` into an on-disk cache, with `curl` as the HTTP client (plain HTTP and
//! HTTPS, connect and total timeouts). A fetch never blocks for longer than its deadline: curl
//! is killed if it overstays, and servers that failed are not asked again in this run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What to fetch for a build id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artifact {
    DebugInfo,
    Executable,
}

impl Artifact {
    fn name(self) -> &'static str {
        match self {
            Artifact::DebugInfo => "debuginfo",
            Artifact::Executable => "executable",
        }
    }
}

/// A debuginfod client configured from the environment.
#[derive(Debug)]
pub struct Debuginfod {
    urls: Vec<String>,
    cache: PathBuf,
    connect_timeout: Duration,
    /// Deadline of one download.
    timeout: Duration,
    /// Time all downloads of this run may take together.
    budget: Duration,
    spent: Duration,
    dead: Vec<bool>,
}

impl Debuginfod {
    /// From `DEBUGINFOD_URLS` (space-separated server URLs); `None` when unset or empty.
    /// `DEBUGINFOD_TIMEOUT` (seconds, default 30) bounds each download, `DEBUGINFOD_CACHE_PATH`
    /// overrides the cache directory (default `$XDG_CACHE_HOME/stacks/debuginfod`, or
    /// `~/.cache/stacks/debuginfod`).
    pub fn from_env() -> Option<Self> {
        let urls: Vec<String> = std::env::var("DEBUGINFOD_URLS")
            .ok()?
            .split_ascii_whitespace()
            .map(|u| u.trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return None;
        }
        let cache = match std::env::var_os("DEBUGINFOD_CACHE_PATH") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => cache_home().join("stacks").join("debuginfod"),
        };
        let timeout = std::env::var("DEBUGINFOD_TIMEOUT")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .unwrap_or(30);
        Some(Debuginfod {
            dead: vec![false; urls.len()],
            urls,
            cache,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(timeout),
            budget: Duration::from_secs(timeout * 4),
            spent: Duration::ZERO,
        })
    }

    /// The servers asked.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    fn cached(&self, build_id: &str, what: Artifact) -> PathBuf {
        self.cache.join(build_id).join(what.name())
    }

    /// The cached or downloaded file, or why there is none.
    pub fn fetch(&mut self, build_id: &str, what: Artifact) -> Result<PathBuf, String> {
        if build_id.is_empty() || !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("not a build id: {build_id}"));
        }
        let dest = self.cached(build_id, what);
        if dest.is_file() {
            return Ok(dest);
        }
        let dir = dest.parent().expect("cache path has a parent");
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("debuginfod cache {}: {e}", dir.display()))?;
        let mut whys = Vec::new();
        for i in 0..self.urls.len() {
            if self.dead[i] {
                continue;
            }
            if self.spent >= self.budget {
                whys.push(format!(
                    "debuginfod time budget of {} s used up",
                    self.budget.as_secs()
                ));
                break;
            }
            let url = format!("{}/buildid/{build_id}/{}", self.urls[i], what.name());
            let tmp = dir.join(format!(".{}.{}.part", what.name(), std::process::id()));
            let started = Instant::now();
            let r = self.download(&url, &tmp);
            self.spent += started.elapsed();
            match r {
                Ok(()) => {
                    std::fs::rename(&tmp, &dest)
                        .map_err(|e| format!("debuginfod cache {}: {e}", dest.display()))?;
                    return Ok(dest);
                }
                Err(Failure::NotFound) => whys.push(format!("{url}: not found")),
                Err(Failure::Server(why)) => {
                    // Unreachable or too slow: do not wait for this server again.
                    self.dead[i] = true;
                    whys.push(format!("{url}: {why}"));
                }
            }
            let _ = std::fs::remove_file(&tmp);
        }
        Err(format!("debuginfod: {}", whys.join("; ")))
    }

    fn download(&self, url: &str, dest: &Path) -> Result<(), Failure> {
        let mut child = Command::new("curl")
            .args(["--silent", "--show-error", "--location", "--fail"])
            .arg("--connect-timeout")
            .arg(format!("{}", self.connect_timeout.as_secs().max(1)))
            .arg("--max-time")
            .arg(format!("{}", self.timeout.as_secs().max(1)))
            .arg("--output")
            .arg(dest)
            .arg("--write-out")
            .arg("%{http_code}")
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::Server(format!("cannot run curl: {e}")))?;
        // curl honours --max-time; this is the backstop should it not.
        let deadline = Instant::now() + self.timeout + Duration::from_secs(5);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Failure::Server("timed out".into()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Failure::Server(format!("waiting for curl: {e}"))),
            }
        }
        let out = child
            .wait_with_output()
            .map_err(|e| Failure::Server(format!("curl: {e}")))?;
        let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() {
            return Ok(());
        }
        if code == "404" {
            return Err(Failure::NotFound);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.lines().next().unwrap_or("").trim();
        Err(Failure::Server(if code.is_empty() || code == "000" {
            err.to_string()
        } else {
            format!("HTTP {code}")
        }))
    }
}

enum Failure {
    NotFound,
    Server(String),
}

fn cache_home() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
            .join(".cache"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    fn client(urls: Vec<String>, cache: PathBuf, timeout: u64) -> Debuginfod {
        Debuginfod {
            dead: vec![false; urls.len()],
            urls,
            cache,
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(timeout),
            budget: Duration::from_secs(timeout * 4),
            spent: Duration::ZERO,
        }
    }

    /// Serves `body` for paths ending in /debuginfo, 404 otherwise; `hang` never answers.
    fn server(body: &'static [u8], hang: bool) -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                let mut line = String::new();
                let _ = BufReader::new(&s).read_line(&mut line);
                if hang {
                    std::thread::sleep(Duration::from_secs(30));
                    continue;
                }
                let resp = if line.contains("/debuginfo ") {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(body);
                    r
                } else {
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_vec()
                };
                let _ = s.write_all(&resp);
            }
        });
        format!("http://{addr}")
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("stacks-dbgd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn fetches_caches_and_reports_missing() {
        let cache = scratch("fetch");
        let mut c = client(vec![server(b"DEBUGDATA", false)], cache.clone(), 5);
        let p = c.fetch("abcdef01", Artifact::DebugInfo).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"DEBUGDATA");
        assert!(p.starts_with(&cache));
        // Served from the cache now, even with the server gone.
        c.urls = vec!["http://127.0.0.1:9".into()];
        assert_eq!(c.fetch("abcdef01", Artifact::DebugInfo).unwrap(), p);
        let mut c = client(vec![server(b"X", false)], cache.clone(), 5);
        let e = c.fetch("abcdef01", Artifact::Executable).unwrap_err();
        assert!(e.contains("not found"), "{e}");
        assert!(c.fetch("../etc", Artifact::DebugInfo).is_err());
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn a_hanging_server_times_out_and_is_not_asked_again() {
        let cache = scratch("hang");
        let mut c = client(vec![server(b"", true)], cache.clone(), 1);
        let t = Instant::now();
        let e = c.fetch("abcdef02", Artifact::DebugInfo).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
        assert!(c.dead[0], "{e}");
        let t = Instant::now();
        assert!(c.fetch("abcdef03", Artifact::DebugInfo).is_err());
        assert!(t.elapsed() < Duration::from_millis(500));
        let _ = std::fs::remove_dir_all(&cache);
    }
}
