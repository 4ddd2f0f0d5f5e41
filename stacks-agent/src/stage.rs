//! One stage of the pipeline as a child process: which tool, found next to the agent's own
//! executable or on PATH; started in a process group of its own (a terminal's ^C reaches the
//! agent only, which stops the stages in order; the agent's death sends them SIGTERM); reaped with `wait4` for its CPU time; its
//! resident memory and CPU time read from `/proc` while it runs.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The stages, upstream first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Record,
    Symbolize,
    Pack,
}

impl Which {
    pub(crate) const ALL: [Which; 3] = [Which::Record, Which::Symbolize, Which::Pack];

    /// The `stage` label of the metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Which::Record => "record",
            Which::Symbolize => "symbolize",
            Which::Pack => "pack",
        }
    }

    /// The tool's executable name.
    pub(crate) fn tool(self) -> &'static str {
        match self {
            Which::Record => "stacks-record",
            Which::Symbolize => "stacks-symbolize",
            Which::Pack => "stacks-pack",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The executable of `tool`: next to this executable if it is there, else found on PATH.
pub(crate) fn find_tool(tool: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(tool)))
        .filter(|p| is_executable(p));
    beside.or_else(|| {
        std::env::var_os("PATH")?
            .to_string_lossy()
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join(tool))
            .find(|p| is_executable(p))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A running stage.
#[derive(Debug)]
pub(crate) struct Running {
    pub which: Which,
    pub pid: i32,
}

/// Start `exe` with `args`, its stdin and stdout as given, stderr shared with the agent.
pub(crate) fn spawn(
    which: Which,
    exe: &Path,
    args: &[String],
    stdin: Stdio,
    stdout: Stdio,
) -> io::Result<(Running, std::process::Child)> {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // An agent killed outright (SIGKILL) stops its stages too: a system-wide recorder
            // left without its supervisor would record forever.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
    Ok((Running { which, pid }, child))
}

/// How a stage ended, and what it cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exit {
    /// Exit status, or 128 + the signal that killed it.
    pub code: i32,
    pub signal: Option<i32>,
    /// User + system CPU seconds of its whole life.
    pub cpu_seconds: f64,
}

/// Why a stage ended when it should not have: the `cause` label of
/// `stacks_agent_stage_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Killed by the kernel's OOM killer (SIGKILL while its memory cgroup counted a kill).
    OomKill,
    /// Killed by another signal (or a SIGKILL not from the OOM killer).
    Signal,
    /// Exited with a failure status.
    ExitStatus,
    /// Exited with status 0 while the pipeline ran.
    Exited,
    /// Could not be started.
    Spawn,
}

impl Cause {
    pub(crate) const ALL: [Cause; 5] = [
        Cause::OomKill,
        Cause::Signal,
        Cause::ExitStatus,
        Cause::Exited,
        Cause::Spawn,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Cause::OomKill => "oom_kill",
            Cause::Signal => "signal",
            Cause::ExitStatus => "exit_status",
            Cause::Exited => "exited",
            Cause::Spawn => "spawn",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl Exit {
    pub(crate) fn describe(&self, cause: Cause) -> String {
        match (self.signal, cause) {
            (Some(s), Cause::OomKill) => {
                format!("killed by signal {s} (out of memory: its memory cgroup's OOM killer)")
            }
            (Some(s), _) => format!("killed by signal {s}"),
            (None, _) => format!("exited with status {}", self.code),
        }
    }

    /// Why it ended; `oom`: its memory cgroup counted an OOM kill since it was last looked at.
    pub(crate) fn cause(&self, oom: bool) -> Cause {
        match self.signal {
            Some(libc::SIGKILL) if oom => Cause::OomKill,
            Some(_) => Cause::Signal,
            None if self.code != 0 => Cause::ExitStatus,
            None => Cause::Exited,
        }
    }
}

/// The memory cgroup directory of running `pid`: its cgroup v1 `memory` hierarchy's
/// (`/sys/fs/cgroup/memory/…`) where that is mounted, else its cgroup v2 one (the `0::` line
/// of `/proc/PID/cgroup`, under `/sys/fs/cgroup`).
pub(crate) fn cgroup_dir(pid: i32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v1 = text.lines().find_map(|l| {
        let (controllers, path) = l.split_once(':')?.1.split_once(':')?;
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    match v1 {
        Some(path) => Some(Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'))),
        None => {
            let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')))
        }
    }
}

/// The OOM kills the memory cgroup `dir` has counted: the `oom_kill` line of its
/// `memory.events` (v2, its descendants included) or `memory.oom_control` (v1).
pub(crate) fn oom_kills(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("memory.events"))
        .or_else(|_| std::fs::read_to_string(dir.join("memory.oom_control")))
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))?
        .trim()
        .parse()
        .ok()
}

/// Reap `pid` if it has ended (without blocking).
pub(crate) fn try_reap(pid: i32) -> Option<Exit> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into both out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall on our own child with valid pointers.
    let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    if rc != pid {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let (code, signal) = if libc::WIFSIGNALED(status) {
        let s = libc::WTERMSIG(status);
        (128 + s, Some(s))
    } else {
        (libc::WEXITSTATUS(status), None)
    };
    Some(Exit {
        code,
        signal,
        cpu_seconds: secs(usage.ru_utime) + secs(usage.ru_stime),
    })
}

/// Whether `pid` has ended (a zombie not reaped yet, or gone).
pub(crate) fn has_ended(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_none_or(|state| state == "Z" || state == "X")
}

/// Send `signal` to `pid` (gone already is fine).
pub(crate) fn signal(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Resident bytes and CPU seconds of running `pid`, from `/proc`.
pub(crate) fn usage(pid: i32) -> Option<(u64, f64)> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses): state is 3rd.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let (page, hz) = unsafe {
        (
            libc::sysconf(libc::_SC_PAGESIZE),
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    let page = u64::try_from(page).unwrap_or(4096);
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Some((resident * page, ticks as f64 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_of_this_process() {
        let (rss, cpu) = usage(std::process::id() as i32).unwrap();
        assert!(rss > 1 << 20, "{rss}");
        assert!(cpu >= 0.0);
        assert!(usage(i32::MAX).is_none());
    }

    #[test]
    fn a_killed_child_is_reaped_with_its_signal() {
        let (run, _child) = spawn(
            Which::Symbolize,
            Path::new("/bin/sleep"),
            &["30".into()],
            Stdio::null(),
            Stdio::null(),
        )
        .unwrap();
        assert!(try_reap(run.pid).is_none());
        signal(run.pid, libc::SIGKILL);
        let exit = loop {
            if let Some(e) = try_reap(run.pid) {
                break e;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(exit.signal, Some(libc::SIGKILL));
        assert_eq!(exit.cause(false), Cause::Signal);
        assert_eq!(exit.describe(Cause::Signal), "killed by signal 9");
        assert_eq!(exit.cause(true), Cause::OomKill);
        // This process's memory cgroup (v1 or v2), and its OOM kills, are found.
        let own = cgroup_dir(std::process::id() as i32).unwrap();
        assert!(own.is_dir(), "{}", own.display());
    }
}
