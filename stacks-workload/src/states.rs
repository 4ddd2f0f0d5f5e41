//! The `states` workload: five named threads, each in one known state for SECONDS — `spinner`
//! on CPU (no system call), `sleeper` in nanosleep (std::thread::sleep), `reader` blocked in
//! `read` on an empty pipe, `fsyncer` writing and fsyncing a file (uninterruptible IO),
//! `receiver` blocked in `recvfrom` on a loopback TCP connection nobody writes to. Each
//! reports its tid and its life in wall-clock time (from its first to its last instruction),
//! the time a thread-state sampler should account to it; the report also names the file
//! (`file`), the pipe (`pipe`, as /proc names it) and the receiver's socket ends (`local`,
//! `remote`) those threads wait on. `--idle N` adds N threads blocked on the pipe all along.

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::contention::{pipe, spin};
use crate::sys;

#[derive(clap::Args)]
pub(crate) struct StatesArgs {
    /// How long every thread stays in its state.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Directory for the fsyncer's file.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Also N threads named `idle`, blocked in `read` on the reader's pipe all along (not in
    /// the report): many threads whose state never changes, for measuring a sampler's cost
    /// per thread.
    #[arg(long, value_name = "N", default_value_t = 0)]
    idle: usize,
}

/// Runs `work` in thread `name` and reports its tid and wall-clock life.
fn life(
    name: &'static str,
    work: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<std::thread::JoinHandle<Result<Value>>> {
    sys::spawn_named(name, move || {
        let (start_ns, t0) = (sys::realtime_ns(), Instant::now());
        let tid = sys::tid();
        work()?;
        let wall_ns = t0.elapsed().as_nanos() as u64;
        Ok(json!({
            "thread": name,
            "tid": tid,
            "start_ns": start_ns,
            "end_ns": sys::realtime_ns(),
            "wall_ns": wall_ns,
        }))
    })
}

/// Sleeps until `until` in 100 ms nanosleeps.
#[inline(never)]
fn sleep_until(until: Instant) {
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// Blocks in `recvfrom` on socket `fd` until the peer closes.
#[inline(never)]
fn recv_until_eof(fd: libc::c_int) -> Result<()> {
    let mut b = [0u8; 1];
    while sys::recv(fd, &mut b, 0)? != 0 {}
    Ok(())
}

/// Blocks in `read` on `fd` until the pipe's write end closes.
#[inline(never)]
fn read_until_eof(fd: libc::c_int) -> Result<()> {
    let mut b = [0u8; 1];
    while sys::read(fd, &mut b)? != 0 {}
    Ok(())
}

pub(crate) fn run(a: &StatesArgs) -> Result<Value> {
    if !(a.seconds > 0.0 && a.seconds < 3600.0) {
        bail!("--seconds must be between 0 and 3600");
    }
    let dir = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("stacks-workload-states-{}", std::process::id()));
    let file = sys::open(
        &sys::cpath(&path)?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
        0o600,
    )?;
    let (rx, tx) = pipe()?;
    let pipe_ino = std::fs::metadata(format!("/proc/self/fd/{rx}"))
        .context("stat of the pipe")?
        .ino();
    let listener = TcpListener::bind("127.0.0.1:0").context("listening on loopback")?;
    let client = TcpStream::connect(listener.local_addr()?).context("connecting on loopback")?;
    let (server, _) = listener.accept().context("accepting on loopback")?;
    let (local, remote) = (server.local_addr()?, server.peer_addr()?);
    let until = Instant::now() + Duration::from_secs_f64(a.seconds);
    if a.idle > 100_000 {
        bail!("--idle must be at most 100000");
    }
    let idle = (0..a.idle)
        .map(|_| sys::spawn_named("idle", move || read_until_eof(rx)))
        .collect::<Result<Vec<_>>>()?;
    let threads = vec![
        (
            "spinner",
            life("spinner", move || {
                while Instant::now() < until {
                    spin()?;
                }
                Ok(())
            })?,
        ),
        (
            "sleeper",
            life("sleeper", move || {
                sleep_until(until);
                Ok(())
            })?,
        ),
        ("reader", life("reader", move || read_until_eof(rx))?),
        (
            "receiver",
            life("receiver", move || recv_until_eof(server.as_raw_fd()))?,
        ),
        (
            "fsyncer",
            life("fsyncer", move || {
                let buf = vec![0x5au8; 64 * 1024];
                // The file is rewritten from its start every 64 MiB, so a run killed before
                // it removes the file leaves at most that much behind.
                for n in 1u64.. {
                    if Instant::now() >= until {
                        break;
                    }
                    sys::write(file, &buf)?;
                    sys::fsync(file)?;
                    if n.is_multiple_of(1024) {
                        sys::rewind(file)?;
                    }
                }
                Ok(())
            })?,
        ),
    ];
    sleep_until(until);
    sys::close(tx)?;
    drop(client);
    for t in idle {
        sys::join_named("idle", t)?;
    }
    let mut reports = Vec::new();
    for (name, t) in threads {
        reports.push(sys::join_named(name, t)?);
    }
    for fd in [rx, file] {
        let _ = sys::close(fd);
    }
    let _ = std::fs::remove_file(&path);
    Ok(json!({
        "workload": "states",
        "threads": reports,
        "file": path.to_string_lossy(),
        "pipe": format!("pipe:[{pipe_ino}]"),
        "local": local.to_string(),
        "remote": remote.to_string(),
    }))
}
