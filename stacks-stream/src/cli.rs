//! Command-line conventions shared by every tool: one error exit printing `tool: error: …`
//! on one line, a closed downstream pipe is success, logs go to stderr only.

use std::io::{self, IsTerminal};
use std::process::ExitCode;

/// Whether stdout is a terminal (binary output is refused there).
pub fn stdout_is_tty() -> bool {
    io::stdout().is_terminal()
}

/// Whether stdin is a terminal (a tool waiting for a stream there says so).
pub fn stdin_is_tty() -> bool {
    io::stdin().is_terminal()
}

/// Whether an error was caused by the reader of our output going away (EPIPE).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Run a tool's `run()` and turn its result into an exit code: errors print one line,
/// `tool: error: cause: cause…`, on stderr and exit 1; a broken pipe exits 0 quietly.
pub fn main_with(tool: &str, run: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let msg = format!("{err:#}").replace('\n', " ");
            eprintln!("{tool}: error: {msg}");
            ExitCode::from(1)
        }
    }
}

/// A command-line usage error (as clap renders it: `error: …`, tips, usage) condensed to the
/// one line every tool prints, `tool: error: … (see --help)`.
pub fn usage_line(tool: &str, message: &str) -> String {
    let first = message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid command line");
    let first = first.strip_prefix("error:").unwrap_or(first).trim();
    format!("{tool}: error: {first} (see {tool} --help)")
}

/// Print [`usage_line`] on stderr and exit with status 2, the usage-error status. With clap:
/// `Args::try_parse().unwrap_or_else(|e| if e.use_stderr() { usage_error(TOOL, &e.to_string()) } else { e.exit() })`
/// (help and version are not errors and keep clap's own output).
pub fn usage_error(tool: &str, message: &str) -> ! {
    eprintln!("{}", usage_line(tool, message));
    std::process::exit(2)
}

/// Parse the command line with clap, turning usage errors into [`usage_error`]'s one line and
/// exit status 2; `--help` and `--version` keep clap's own output.
pub fn parse_args<T: clap::Parser>(tool: &str) -> T {
    T::try_parse().unwrap_or_else(|e| {
        if e.use_stderr() {
            usage_error(tool, &e.to_string())
        } else {
            e.exit()
        }
    })
}

/// A command-line byte count (`4096`, `64M`, `1G`): an optional binary suffix K, M, G, T
/// (also KiB/KB/k…, all powers of 1024); zero is refused.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. 4096, 64M, 1G)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "`{text}`: unknown size unit `{unit}` (use K, M, G or T)"
            ));
        }
    };
    let bytes = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if bytes == 0 {
        return Err("the size must be more than 0".into());
    }
    Ok(bytes)
}

/// Refuse to sit silently waiting for a stream typed at a terminal.
pub fn refuse_tty_stdin(tool: &str) -> anyhow::Result<()> {
    if stdin_is_tty() {
        anyhow::bail!(
            "stdin is a terminal: {tool} reads an Arrow stream; pipe one in (e.g. stacks-record … | {tool}) or give a file"
        );
    }
    Ok(())
}

/// Keep running through a terminal ^C: in `stacks-record … | stacks-symbolize | stacks-pack`
/// the whole pipeline gets SIGINT, and downstream tools must outlive it to take the recorder's
/// final rows. They stop when their input ends instead.
pub fn ignore_sigint() {
    // SAFETY: setting a signal disposition to SIG_IGN has no preconditions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_pipe_detected_through_context() {
        let e = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&e));
        let e = anyhow::anyhow!("other");
        assert!(!is_broken_pipe(&e));
    }

    #[test]
    fn usage_errors_become_one_line() {
        let clap = "error: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: t [OPTIONS]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_line("t", clap),
            "t: error: unexpected argument '--bogus' found (see t --help)"
        );
        assert_eq!(
            usage_line("t", "\n"),
            "t: error: invalid command line (see t --help)"
        );
    }

    #[test]
    fn broken_pipe_inside_contract_error() {
        let e = anyhow::Error::new(crate::ContractError::Io {
            path: "stdout".into(),
            source: io::Error::from(io::ErrorKind::BrokenPipe),
        });
        assert!(is_broken_pipe(&e));
    }
}
