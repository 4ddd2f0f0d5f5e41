//! Command-line conventions shared by every tool: one error exit printing `tool: error: …`
//! on one line, a closed downstream pipe is success, logs go to stderr only.

use std::io::{self, IsTerminal};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::InputStream;

pub use crate::sys::stdout_is_tty;

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
pub(crate) fn usage_line(tool: &str, message: &str) -> String {
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

/// The accepted size spellings, for `--help` texts and error messages.
pub const SIZE_EXAMPLES: &str = "e.g. 4096, 64M, 1G; K, M, G, T are powers of 1024";

/// The accepted duration spellings, for `--help` texts and error messages.
pub const DURATION_EXAMPLES: &str =
    "e.g. 90 (seconds), 1.5s, 250ms, 10m, 2h, 1d; units ns, us, ms, s, m, h, d";

/// A command-line byte count (`4096`, `64M`, `1G`): an optional binary suffix K, M, G, T
/// (also KiB/KB/k…, all powers of 1024); zero is refused.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a size ({SIZE_EXAMPLES})"))?;
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

/// Nanoseconds in a length of time: an exact decimal number and a unit, ns, us (µs), ms, s,
/// m (min), h or d (`250ms`, `1.5s`, `2h`); a bare number is seconds (`90`). Fractions must
/// come to whole nanoseconds; negative lengths and lengths over `i64::MAX` ns (292 years)
/// are refused, so the result also fits an `i64`.
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("`{text}` is not a duration ({DURATION_EXAMPLES})");
    if t.starts_with('-') {
        return Err(format!("`{text}`: a duration cannot be negative"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: u128 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        other => {
            if num.is_empty() {
                return Err(bad());
            }
            return Err(format!(
                "`{text}`: unknown duration unit `{other}` (use ns, us, ms, s, m, h or d)"
            ));
        }
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || (num.ends_with('.')) {
        return Err(bad());
    }
    let too_long = || format!("`{text}` is too long: durations go up to 292 years");
    let whole: u128 = whole.parse().map_err(|_| too_long())?;
    let mut ns = whole.checked_mul(scale).ok_or_else(too_long)?;
    if !frac.is_empty() {
        let digits = u32::try_from(frac.len()).map_err(|_| bad())?;
        let denom = 10u128.checked_pow(digits).ok_or_else(bad)?;
        let part = frac
            .parse::<u128>()
            .ok()
            .and_then(|f| f.checked_mul(scale))
            .ok_or_else(bad)?;
        if part % denom != 0 {
            return Err(format!("`{text}` is not a whole number of nanoseconds"));
        }
        ns = ns.checked_add(part / denom).ok_or_else(too_long)?;
    }
    if ns > i64::MAX as u128 {
        return Err(too_long());
    }
    Ok(ns as u64)
}

/// A length of time, as [`parse_duration_ns`] reads it (zero allowed).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_ns(text).map(Duration::from_nanos)
}

/// A length of time more than zero, as [`parse_duration_ns`] reads it.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err(format!("`{text}`: the duration must be more than 0")),
        d => Ok(d),
    }
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

/// Whether a path means the standard stream, absent or `-`: stdin for an input, stdout for
/// an output.
pub fn is_std(path: Option<&Path>) -> bool {
    path.is_none_or(|p| p.as_os_str() == "-")
}

/// Open a tool's input stream, `path` or stdin (absent or `-`), refusing to wait for a stream
/// typed at a terminal.
pub fn open_tool_input(tool: &str, path: Option<&Path>) -> anyhow::Result<InputStream> {
    if is_std(path) {
        refuse_tty_stdin(tool)?;
    }
    Ok(crate::io::open_input(path)?)
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

    #[test]
    fn size_spellings() {
        for (text, bytes) in [
            ("4096", 4096),
            ("64M", 64 << 20),
            ("64m", 64 << 20),
            ("1GiB", 1 << 30),
            ("1GB", 1 << 30),
            ("2k", 2048),
            ("3T", 3 << 40),
            (" 7b ", 7),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for (text, err) in [
            ("0", "the size must be more than 0".to_string()),
            ("M", format!("`M` is not a size ({SIZE_EXAMPLES})")),
            ("", format!("`` is not a size ({SIZE_EXAMPLES})")),
            ("-1M", format!("`-1M` is not a size ({SIZE_EXAMPLES})")),
            (
                "1.5G",
                "`1.5G`: unknown size unit `.5G` (use K, M, G or T)".to_string(),
            ),
            (
                "5X",
                "`5X`: unknown size unit `X` (use K, M, G or T)".to_string(),
            ),
            ("99999999999T", "`99999999999T` is too large".to_string()),
        ] {
            assert_eq!(parse_size(text), Err(err), "{text}");
        }
    }

    #[test]
    fn duration_spellings() {
        const S: u64 = 1_000_000_000;
        for (text, ns) in [
            ("0", 0),
            ("0s", 0),
            ("90", 90 * S),
            ("1.5", 1_500_000_000),
            ("1.5s", 1_500_000_000),
            ("250ms", 250_000_000),
            ("1.5ms", 1_500_000),
            ("10us", 10_000),
            ("10µs", 10_000),
            ("1500ns", 1_500),
            ("0.000000001s", 1),
            ("10m", 600 * S),
            ("10min", 600 * S),
            ("2h", 7200 * S),
            ("1d", 86_400 * S),
            (" 30 s ", 30 * S),
            ("9223372036854775807ns", i64::MAX as u64),
        ] {
            assert_eq!(parse_duration_ns(text), Ok(ns), "{text}");
        }
        let not = |t: &str| format!("`{t}` is not a duration ({DURATION_EXAMPLES})");
        let long = |t: &str| format!("`{t}` is too long: durations go up to 292 years");
        for (text, err) in [
            ("", not("")),
            ("s", not("s")),
            (".5s", not(".5s")),
            ("1.s", not("1.s")),
            ("1.2.3s", not("1.2.3s")),
            ("-1s", "`-1s`: a duration cannot be negative".into()),
            (
                "5x",
                "`5x`: unknown duration unit `x` (use ns, us, ms, s, m, h or d)".into(),
            ),
            (
                "1.5ns",
                "`1.5ns` is not a whole number of nanoseconds".into(),
            ),
            (
                "1.0000000001s",
                "`1.0000000001s` is not a whole number of nanoseconds".into(),
            ),
            ("9223372036854775808ns", long("9223372036854775808ns")),
            ("99999999999999999999999", long("99999999999999999999999")),
            (
                "999999999999999999999999999999999999999999",
                long("999999999999999999999999999999999999999999"),
            ),
        ] {
            assert_eq!(parse_duration_ns(text), Err(err), "{text}");
        }
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_positive_duration("0"),
            Err("`0`: the duration must be more than 0".into())
        );
        assert_eq!(
            parse_positive_duration("0s"),
            Err("`0s`: the duration must be more than 0".into())
        );
        assert_eq!(parse_positive_duration("90"), Ok(Duration::from_secs(90)));
    }
}
