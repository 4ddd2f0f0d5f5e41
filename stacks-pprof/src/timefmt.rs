//! RFC 3339 timestamps (UTC, nanoseconds since the Unix epoch) written and read without a
//! date library: the civil-calendar conversions of Howard Hinnant's `days_from_civil`.

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `ns` since the epoch as `2023-11-14T22:13:20.123456789Z` (fraction only when nonzero).
pub fn rfc3339(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let frac = ns.rem_euclid(1_000_000_000);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    let (hh, mm, ss) = (s / 3600, s / 60 % 60, s % 60);
    if frac == 0 {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{frac:09}Z")
    }
}

/// Parse an RFC 3339 timestamp (`2023-11-14T22:13:20Z`, a fraction of up to 9 digits, `Z` or a
/// `±hh:mm` offset; `t` and a space are accepted for `T`) into ns since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let s = s.trim();
    let num = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    let (date, rest) = s.split_at_checked(10)?;
    let mut parts = date.split('-');
    let (y, m, d) = (
        num(parts.next()?)?,
        num(parts.next()?)?,
        num(parts.next()?)?,
    );
    if parts.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let (clock, zone) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => rest.split_at(i),
        None => return None,
    };
    let (hms, frac) = match clock.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (clock, None),
    };
    let mut t = hms.split(':');
    let (hh, mm, ss) = (num(t.next()?)?, num(t.next()?)?, num(t.next()?)?);
    if t.next().is_some() || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let frac_ns = match frac {
        Some(f) if f.len() <= 9 => num(f)? * 10i64.pow(9 - f.len() as u32),
        Some(_) => return None,
        None => 0,
    };
    let offset_s = match zone {
        "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (oh, om) = z.get(1..)?.split_once(':')?;
            let (oh, om) = (num(oh)?, num(om)?);
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let secs = days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss - offset_s;
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(
            rfc3339(1_700_000_000_000_000_042),
            "2023-11-14T22:13:20.000000042Z"
        );
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00Z");
        for ns in [
            0,
            1_700_000_000_123_456_789,
            951_782_400_000_000_000,
            4_102_444_800_000_000_000,
        ] {
            assert_eq!(parse_rfc3339(&rfc3339(ns)), Some(ns));
        }
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20.5+01:00"),
            Some(1_700_000_000_500_000_000)
        );
        assert_eq!(
            parse_rfc3339("2023-11-14 22:13:20z"),
            Some(1_700_000_000_000_000_000)
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-13-14T00:00:00Z",
            "2023-11-14T00:00:00",
            "2023-11-14T00:00Z",
            "2023-11-14T00:00:00.1234567891Z",
            "2023-11-14T00:00:00+0100",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
