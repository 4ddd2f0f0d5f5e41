//! What to trace: process names (matched at exec, plus a /proc scan), pids, or a command we
//! spawn ourselves and hold at a gate until its pid is in the BPF target map.

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{Context, Result, bail};

/// Pids of the running processes (none when /proc cannot be read).
pub(crate) fn all_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Pids of running processes whose name (comm) is one of `names` (first 15 bytes compared).
pub(crate) fn scan_names(names: &[String]) -> Vec<u32> {
    let keys: Vec<Vec<u8>> = names
        .iter()
        .map(|n| n.as_bytes()[..n.len().min(15)].to_vec())
        .collect();
    all_pids()
        .into_iter()
        .filter(|pid| {
            // The process may be gone already: that is not an error.
            fs::read(format!("/proc/{pid}/comm")).is_ok_and(|comm| {
                let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
                keys.iter().any(|k| k.as_slice() == comm)
            })
        })
        .collect()
}

/// Whether process `pid` still runs: it exists and is not a zombie (an exited child its parent
/// has not reaped yet still has a /proc entry).
pub(crate) fn is_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state letter follows the command name, which is in parentheses and may contain any
    // byte, so look after the last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z') | Some('X') | Some('x'))
}

/// Check that a pid names a live process; return its thread group id.
pub(crate) fn check_pid(pid: u32) -> Result<u32> {
    if !is_alive(pid) {
        bail!("-p {pid}: no such process");
    }
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|_| anyhow::anyhow!("-p {pid}: no such process"))?;
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .with_context(|| format!("-p {pid}: cannot read its thread group from /proc"))?;
    Ok(tgid)
}

/// A command started by us, stopped before exec until [`Child::release`] (and, spawned with
/// `stop_at_exec`, stopped again right after its exec until [`Child::resume`]).
pub(crate) struct Child {
    pub pid: u32,
    gate: Option<OwnedFd>,
    exec_err: OwnedFd,
    program: String,
    /// Traced (PTRACE_TRACEME) until its exec has happened: see [`Child::resume`].
    stopped_at_exec: bool,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid out array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("creating a pipe");
    }
    // SAFETY: pipe2 returned two fresh descriptors that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Child {
    /// Fork; the child waits for the gate, then execs `argv` (PATH search) with its stdout
    /// sent to our stderr, since our stdout carries data. With `stop_at_exec` it is traced
    /// until its exec, to be changed in its new image (USDT semaphores) before it runs.
    /// `env` is set in its environment (over what it inherits).
    pub(crate) fn spawn(
        argv: &[String],
        stop_at_exec: bool,
        env: &[(String, String)],
    ) -> Result<Child> {
        let Some(program) = argv.first() else {
            bail!("`--` must be followed by a command to run");
        };
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("command arguments must not contain NUL bytes")?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let cenv = environment(env)?;
        let mut envp: Vec<*const libc::c_char> = cenv.iter().map(|c| c.as_ptr()).collect();
        envp.push(std::ptr::null());
        let (gate_r, gate_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        // SAFETY: after fork the child only calls async-signal-safe functions (read, execvp,
        // write, _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error()).context("fork");
        }
        if pid == 0 {
            unsafe {
                let mut b = 0u8;
                while libc::read(gate_r.as_raw_fd(), (&raw mut b).cast(), 1) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
                // Our stdout is the Arrow stream: the command's output goes to stderr.
                libc::dup2(2, 1);
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                if stop_at_exec {
                    // A traced process stops with SIGTRAP once exec has replaced its image.
                    libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                }
                libc::execvpe(ptrs[0], ptrs.as_ptr(), envp.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(err_w.as_raw_fd(), (&raw const errno).cast(), 4);
                libc::_exit(127);
            }
        }
        drop(gate_r);
        drop(err_w);
        Ok(Child {
            pid: pid as u32,
            gate: Some(gate_w),
            exec_err: err_r,
            program: program.clone(),
            stopped_at_exec: stop_at_exec,
        })
    }

    /// Let the child exec; report if exec failed.
    pub(crate) fn release(&mut self) -> Result<()> {
        if let Some(gate) = self.gate.take() {
            // SAFETY: writing one byte from a valid buffer to our pipe end.
            unsafe { libc::write(gate.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
        }
        let mut errno = [0u8; 4];
        // SAFETY: reading into a 4-byte buffer; EOF (0) means exec succeeded (CLOEXEC).
        let n = unsafe { libc::read(self.exec_err.as_raw_fd(), errno.as_mut_ptr().cast(), 4) };
        if n == 4 {
            let err = std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno));
            self.stopped_at_exec = false;
            self.wait_blocking();
            bail!("cannot run `{}`: {err}", self.program);
        }
        if self.stopped_at_exec {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid status pointer.
            let r = unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            if r != self.pid as i32 || !libc::WIFSTOPPED(status) {
                self.stopped_at_exec = false;
                bail!("`{}` did not stop after its exec", self.program);
            }
        }
        Ok(())
    }

    /// Let a child held after its exec (see [`Child::spawn`]) run, no longer traced.
    pub(crate) fn resume(&mut self) -> Result<()> {
        if std::mem::take(&mut self.stopped_at_exec) {
            // SAFETY: detaching from our own traced, stopped child; no signal delivered.
            if unsafe { libc::ptrace(libc::PTRACE_DETACH, self.pid as i32, 0, 0) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("letting `{}` run after its exec", self.program));
            }
        }
        Ok(())
    }

    /// Exit status if the child has ended, without blocking. Converted to a shell-style code.
    pub(crate) fn try_wait(&mut self) -> Option<u8> {
        let mut status = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
        (r == self.pid as i32).then(|| exit_code(status))
    }

    fn wait_blocking(&mut self) -> u8 {
        let mut status = 0;
        // SAFETY: as above, blocking.
        unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
        exit_code(status)
    }

    /// Stop the child (we are stopping early) and collect its status.
    pub(crate) fn terminate(&mut self) -> u8 {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        self.wait_blocking()
    }
}

/// This process's environment with `set` over it, as `NAME=value` strings for exec.
fn environment(set: &[(String, String)]) -> Result<Vec<CString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for (k, v) in std::env::vars_os() {
        if set.iter().any(|(name, _)| k.as_bytes() == name.as_bytes()) {
            continue;
        }
        let mut line = k.as_bytes().to_vec();
        line.push(b'=');
        line.extend_from_slice(v.as_bytes());
        // A variable holding a NUL byte cannot be passed on: left out.
        out.extend(CString::new(line).ok());
    }
    for (k, v) in set {
        out.push(
            CString::new(format!("{k}={v}")).with_context(|| {
                format!("the command's environment variable {k} holds a NUL byte")
            })?,
        );
    }
    Ok(out)
}

fn exit_code(status: i32) -> u8 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else if libc::WIFSIGNALED(status) {
        128u8.wrapping_add(libc::WTERMSIG(status) as u8)
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_ourselves_by_name() {
        let comm = fs::read_to_string("/proc/self/comm").unwrap();
        let found = scan_names(&[comm.trim().to_string()]);
        assert!(found.contains(&std::process::id()));
    }

    #[test]
    fn zombies_are_not_alive() {
        assert!(is_alive(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        // Not reaped yet: a zombie with a /proc entry.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!is_alive(c.id()));
        c.wait().unwrap();
        assert!(!is_alive(c.id()));
    }

    #[test]
    fn pid_checks() {
        assert_eq!(check_pid(std::process::id()).unwrap(), std::process::id());
        let e = check_pid(u32::MAX - 1).unwrap_err();
        assert!(e.to_string().contains("no such process"), "{e}");
    }

    #[test]
    fn spawned_child_runs_after_release_and_reports_status() {
        let mut c = Child::spawn(&["sh".into(), "-c".into(), "exit 7".into()], false, &[]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(c.try_wait(), None, "child must wait at the gate");
        c.release().unwrap();
        assert_eq!(c.wait_blocking(), 7);
    }

    #[test]
    fn a_child_held_at_its_exec_runs_once_resumed() {
        let mut c = Child::spawn(&["sh".into(), "-c".into(), "exit 5".into()], true, &[]).unwrap();
        c.release().unwrap();
        let exe = fs::read_link(format!("/proc/{}/exe", c.pid)).unwrap();
        assert!(exe.to_string_lossy().contains("sh"), "{exe:?}: exec'ed");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(c.try_wait(), None, "held after its exec");
        c.resume().unwrap();
        assert_eq!(c.wait_blocking(), 5);
    }

    #[test]
    fn the_command_gets_the_environment_asked_for() {
        let argv = [
            "sh".into(),
            "-c".into(),
            "exit $((STACKS_T_A + ${PATH:+1}))".into(),
        ];
        let env = [("STACKS_T_A".to_string(), "41".to_string())];
        let mut c = Child::spawn(&argv, false, &env).unwrap();
        c.release().unwrap();
        // PATH inherited, STACKS_T_A set: 41 + 1.
        assert_eq!(c.wait_blocking(), 42);
    }

    #[test]
    fn exec_failure_is_reported() {
        let mut c = Child::spawn(&["/nonexistent/program".into()], true, &[]).unwrap();
        let e = c.release().unwrap_err();
        assert!(e.to_string().contains("/nonexistent/program"), "{e}");
    }
}
