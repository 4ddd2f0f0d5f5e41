//! Output file pair base names: `stacks-<UTC start YYYYMMDDTHHMMSSZ>-<host>-<pid>-<seq>`, to
//! which the samples and stacks files add `.samples.parquet` and `.stacks.parquet`.
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
    pub(crate) fn for_this_process() -> Self {
        Self::new(&stacks_stream::sys::hostname(), std::process::id())
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

    /// The next base name, stamped with `now`. The clock stepping backwards never makes a later
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

/// `stacks-<YYYYMMDDTHHMMSSZ>-<host>-<pid>-<seq:06>` for `secs` since the epoch.
pub fn file_name(secs: u64, host: &str, pid: u32, seq: u64) -> String {
    format!("stacks-{}-{host}-{pid}-{seq:06}", utc_stamp(secs))
}

/// `YYYYMMDDTHHMMSSZ` (basic ISO 8601, UTC) for `secs` since the Unix epoch.
pub(crate) fn utc_stamp(secs: u64) -> String {
    stacks_stream::time::basic_stamp(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// `YYYY-MM-DD` (UTC) of a day count since 1970-01-01 (earlier days count as 1970-01-01).
pub(crate) fn utc_date(days: i64) -> String {
    stacks_stream::time::date(days.max(0))
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
            "stacks-20240229T123456Z-box-4242-000007"
        );
    }

    #[test]
    fn hosts_are_sanitized() {
        assert_eq!(sanitize_host("web-01.example.com"), "web-01.example.com");
        assert_eq!(sanitize_host("my host_é/x"), "my-host---x");
        assert_eq!(sanitize_host(""), "unknown");
        assert_eq!(sanitize_host("..."), "unknown");
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
        assert!(names[0].ends_with("-h-1-000001"));
    }
}
