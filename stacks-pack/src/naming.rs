//! Output file names: `stacks-<UTC start YYYYMMDDTHHMMSSZ>-<host>-<pid>-<seq>.parquet`.
//! Names sort by time (the first row's time, never earlier than the packer's previous file),
//! and host, packer pid and sequence number make them unique across packers and machines.

use std::time::{SystemTime, UNIX_EPOCH};

/// Hands out file names for one packer, in increasing (sortable) order.
#[derive(Debug, Clone)]
pub struct Namer {
    host: String,
    pid: u32,
    seq: u64,
    last_secs: u64,
}

impl Namer {
    /// A namer for this machine and process.
    pub fn for_this_process() -> Self {
        Self::new(&hostname(), std::process::id())
    }

    /// A namer for `host` (sanitized) and `pid`.
    pub fn new(host: &str, pid: u32) -> Self {
        Self {
            host: sanitize_host(host),
            pid,
            seq: 0,
            last_secs: 0,
        }
    }

    /// The (sanitized) host name used in names.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The next name, stamped with `now`. The clock stepping backwards never makes a later
    /// file sort before an earlier one of the same packer.
    pub fn next(&mut self, now: SystemTime) -> String {
        let secs = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            .max(self.last_secs);
        self.last_secs = secs;
        self.seq += 1;
        file_name(secs, &self.host, self.pid, self.seq)
    }
}

/// `stacks-<YYYYMMDDTHHMMSSZ>-<host>-<pid>-<seq:06>.parquet` for `secs` since the epoch.
pub fn file_name(secs: u64, host: &str, pid: u32, seq: u64) -> String {
    format!("stacks-{}-{host}-{pid}-{seq:06}.parquet", utc_stamp(secs))
}

/// `YYYYMMDDTHHMMSSZ` (basic ISO 8601, UTC) for `secs` since the Unix epoch.
pub fn utc_stamp(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// `YYYY-MM-DD` (UTC) of a day count since 1970-01-01 (earlier days count as 1970-01-01).
pub fn utc_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(u64::try_from(days).unwrap_or(0));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Keep `[A-Za-z0-9.-]`, replace anything else with `-`; `unknown` if nothing is left.
pub fn sanitize_host(raw: &str) -> String {
    let s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches(|c| c == '.' || c == '-');
    if s.is_empty() {
        "unknown".into()
    } else {
        s.into()
    }
}

/// This machine's host name from `gethostname(2)`, unsanitized; empty if unavailable.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_are_utc_basic_iso() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_709_210_096), "20240229T123456Z");
        assert_eq!(utc_stamp(4_102_444_799), "20991231T235959Z");
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(11_016), "2000-02-29");
        assert_eq!(utc_date(-5), "1970-01-01");
    }

    #[test]
    fn file_name_layout() {
        assert_eq!(
            file_name(1_709_210_096, "box", 4242, 7),
            "stacks-20240229T123456Z-box-4242-000007.parquet"
        );
    }

    #[test]
    fn hosts_are_sanitized() {
        assert_eq!(sanitize_host("web-01.example.com"), "web-01.example.com");
        assert_eq!(sanitize_host("my host_é/x"), "my-host---x");
        assert_eq!(sanitize_host(""), "unknown");
        assert_eq!(sanitize_host("..."), "unknown");
        assert!(!hostname().contains('\0'));
    }

    #[test]
    fn names_sort_in_issue_order_even_if_clock_steps_back() {
        let mut n = Namer::new("h", 1);
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let names = [
            n.next(t0),
            n.next(t0),
            n.next(t0 + Duration::from_secs(5)),
            n.next(t0 - Duration::from_secs(3600)),
            n.next(t0 + Duration::from_secs(6)),
        ];
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        assert!(names.windows(2).all(|w| w[0] != w[1]));
        assert!(names[0].ends_with("-h-1-000001.parquet"));
    }
}
