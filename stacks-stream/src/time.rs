//! Times on the command line and in output: one grammar for every time flag and parameter
//! (`stacks-trace --from`, stacks-query `timestamp` parameters), and the UTC formats the
//! tools write, on chrono's calendar (already in the tree through arrow).

use chrono::{DateTime, Utc};

/// The accepted time spellings, for `--help` texts and error messages.
pub const TIME_EXAMPLES: &str = "e.g. 2025-01-02T03:04:05Z, 2025-01-02T04:04:05.5+01:00, 2025-01-02 03:04:05 (UTC), 2025-01-02 (midnight UTC)";

/// Nanoseconds since the Unix epoch of `text`: RFC 3339 with or without a fraction and an
/// offset (`T`, `t` or a space between date and time; no offset is UTC), a date alone
/// (`2025-01-02`, midnight UTC), or a plain integer taken as nanoseconds since the epoch.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let t = text.trim();
    if let Ok(ns) = t.parse::<i64>() {
        return Ok(ns);
    }
    let bad = || format!("`{text}` is not a time ({TIME_EXAMPLES})");
    // Require a date shape, so that other text is not taken for a time by inference.
    let b = t.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    // A fraction finer than nanoseconds would be cut off silently.
    if let Some((_, frac)) = t.split_once('.')
        && frac.bytes().take_while(u8::is_ascii_digit).count() > 9
    {
        return Err(bad());
    }
    arrow_cast::parse::string_to_timestamp_nanos(&t.to_ascii_uppercase()).map_err(|_| bad())
}

/// The spellings [`parse_time_ago`] adds to [`TIME_EXAMPLES`].
pub const AGO_EXAMPLES: &str = "now, -1h, -30m (before now)";

/// [`parse_time`], or a time relative to `now` (ns since the epoch): `now`, or `-DURATION`
/// before it (`-1h`, `-90s`, `-2.5d`… in the duration grammar of `cli::parse_duration_ns`).
pub fn parse_time_ago(text: &str, now: i64) -> Result<i64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Some(ago) = t.strip_prefix('-')
        && ago.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && ago.ends_with(|c: char| c.is_ascii_alphabetic())
    {
        let ns = crate::cli::parse_duration_ns(ago).map_err(|e| format!("`{text}`: {e}"))?;
        let ns = i64::try_from(ns).map_err(|_| format!("`{text}` is too far back"))?;
        return now
            .checked_sub(ns)
            .ok_or_else(|| format!("`{text}` is too far back"));
    }
    parse_time(text)
        .map_err(|_| format!("`{text}` is not a time ({TIME_EXAMPLES}; or {AGO_EXAMPLES})"))
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// `ns` since the epoch as a chrono UTC time (every `i64` fits).
fn utc(ns: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_nanos(ns)
}

/// `ns` since the epoch as RFC 3339 in UTC, `2023-11-14T22:13:20.123456789Z`, with the
/// fraction (9 digits) only when it is nonzero.
pub fn rfc3339(ns: i64) -> String {
    let t = utc(ns);
    let frac = ns.rem_euclid(1_000_000_000);
    if frac == 0 {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        format!("{}.{frac:09}Z", t.format("%Y-%m-%dT%H:%M:%S"))
    }
}

/// `YYYYMMDDTHHMMSSZ` (basic ISO 8601, UTC) for `secs` since the Unix epoch.
pub fn basic_stamp(secs: i64) -> String {
    utc(secs.saturating_mul(1_000_000_000))
        .format("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// `YYYY-MM-DD` (UTC) of a day count since 1970-01-01.
pub fn date(days: i64) -> String {
    utc(days.saturating_mul(86_400_000_000_000))
        .format("%Y-%m-%d")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_now() {
        let now = 1_700_000_000_000_000_000;
        assert_eq!(parse_time_ago("now", now), Ok(now));
        assert_eq!(parse_time_ago("-1h", now), Ok(now - 3_600_000_000_000));
        assert_eq!(parse_time_ago("-90s", now), Ok(now - 90_000_000_000));
        assert_eq!(
            parse_time_ago("2023-11-14T22:13:20Z", now),
            Ok(1_700_000_000_000_000_000)
        );
        // A plain integer stays nanoseconds since the epoch, negative ones too.
        assert_eq!(parse_time_ago("-5", now), Ok(-5));
        let e = parse_time_ago("-1x", now).unwrap_err();
        assert!(e.starts_with("`-1x`:"), "{e}");
        let e = parse_time_ago("yesterday", now).unwrap_err();
        assert!(e.contains("-1h"), "{e}");
    }

    #[test]
    fn formats() {
        for (ns, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (1_700_000_000_000_000_000, "2023-11-14T22:13:20Z"),
            (1_700_000_000_000_000_042, "2023-11-14T22:13:20.000000042Z"),
            (951_782_400_000_000_000, "2000-02-29T00:00:00Z"),
            (-1, "1969-12-31T23:59:59.999999999Z"),
        ] {
            assert_eq!(rfc3339(ns), text, "{ns}");
        }
        assert_eq!(basic_stamp(0), "19700101T000000Z");
        assert_eq!(basic_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(basic_stamp(1_709_210_096), "20240229T123456Z");
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(19_782), "2024-02-29");
    }

    #[test]
    fn accepted_spellings() {
        const T: i64 = 1_700_000_000_000_000_000; // 2023-11-14T22:13:20Z
        const DAY: i64 = 1_699_920_000_000_000_000; // 2023-11-14T00:00:00Z
        for (text, ns) in [
            ("2023-11-14T22:13:20Z", T),
            ("2023-11-14t22:13:20z", T),
            ("2023-11-14 22:13:20z", T),
            ("2023-11-14 22:13:20", T),
            ("2023-11-14T22:13:20", T),
            ("2023-11-14T23:13:20.5+01:00", T + 500_000_000),
            ("2023-11-14T22:13:20.000000042Z", T + 42),
            ("2023-11-14T21:13:20-01:00", T),
            ("2023-11-14", DAY),
            ("2023-11-14T00:00:00+0100", DAY - 3_600_000_000_000),
            ("  2023-11-14  ", DAY),
            ("1700000000000000000", T),
            ("0", 0),
        ] {
            assert_eq!(parse_time(text), Ok(ns), "{text}");
        }
        for ns in [
            0,
            1_700_000_000_123_456_789,
            951_782_400_000_000_000,
            4_102_444_800_000_000_000,
        ] {
            assert_eq!(parse_time(&rfc3339(ns)), Ok(ns));
        }
    }

    #[test]
    fn rejected_spellings() {
        for bad in [
            "",
            "yesterday",
            "2023-13-14T00:00:00Z",
            "2023-11-32",
            "2023-11-14T25:00:00Z",
            "2023-11-14T00:00:00.1234567891Z",
            "2023-11-14T00:00Z",
            "2023/11/14",
            "14-11-2023",
            "+2s",
        ] {
            let err = parse_time(bad).unwrap_err();
            assert_eq!(
                err,
                format!("`{bad}` is not a time ({TIME_EXAMPLES})"),
                "{bad}"
            );
        }
    }
}
