//! The `--from`/`--to` time window: RFC 3339 timestamps, or offsets from the stream start
//! like `+2s`, `+1.5s`, `+250ms`, `+10us`, `+100ns`, `+1m`.

use stacks_pprof::timefmt::parse_rfc3339;

use crate::Error;

/// One end of the window, before the stream start is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// ns since the Unix epoch.
    At(i64),
    /// ns after the stream start.
    After(i64),
}

impl Bound {
    /// Parse the value of `flag`.
    pub fn parse(flag: &str, value: &str) -> Result<Self, Error> {
        let bad = || Error::Window {
            flag: flag.into(),
            value: value.into(),
        };
        let v = value.trim();
        if let Some(offset) = v.strip_prefix('+') {
            return parse_offset(offset).map(Bound::After).ok_or_else(bad);
        }
        parse_rfc3339(v).map(Bound::At).ok_or_else(bad)
    }

    /// The bound in ns since the epoch, given the stream start.
    pub fn resolve(self, start: i64) -> i64 {
        match self {
            Bound::At(t) => t,
            Bound::After(d) => start.saturating_add(d),
        }
    }
}

/// `1.5s` → 1_500_000_000 ns. Units: ns, us, ms, s, m, h.
fn parse_offset(s: &str) -> Option<i64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let scale: i64 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let mut ns = whole.checked_mul(scale)?;
    if !frac.is_empty() {
        let frac_val: i64 = frac.parse().ok()?;
        let denom = 10i64.pow(frac.len() as u32);
        // Exact for every unit down to ns (scale × digits stays far below i64::MAX).
        ns = ns.checked_add(frac_val.checked_mul(scale)? / denom)?;
    }
    Some(ns)
}

/// The window events must overlap to be written, in ns since the epoch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub from: Option<Bound>,
    pub to: Option<Bound>,
}

/// A window resolved against the stream start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved {
    from: i64,
    to: i64,
}

impl Window {
    pub(crate) fn resolve(&self, start: i64) -> Resolved {
        Resolved {
            from: self.from.map_or(i64::MIN, |b| b.resolve(start)),
            to: self.to.map_or(i64::MAX, |b| b.resolve(start)),
        }
    }
}

impl Resolved {
    /// Whether `[start, start + dur]` overlaps the window (an instant: lies in it).
    pub fn overlaps(&self, start: i64, dur: i64) -> bool {
        start <= self.to && start.saturating_add(dur.max(0)) >= self.from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_timestamps() {
        assert_eq!(parse_offset("2s"), Some(2_000_000_000));
        assert_eq!(parse_offset("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_offset("250ms"), Some(250_000_000));
        assert_eq!(parse_offset("0.000000001s"), Some(1));
        assert_eq!(parse_offset("10us"), Some(10_000));
        assert_eq!(parse_offset("1m"), Some(60_000_000_000));
        for bad in ["", "s", "2", "2x", "-1s", "1.2.3s", ".5s", "1.0000000001s"] {
            assert_eq!(parse_offset(bad), None, "{bad}");
        }
        assert_eq!(
            Bound::parse("--from", "+2s").unwrap(),
            Bound::After(2_000_000_000)
        );
        assert_eq!(
            Bound::parse("--to", "2023-11-14T22:13:20Z").unwrap(),
            Bound::At(1_700_000_000_000_000_000)
        );
        let err = Bound::parse("--to", "soon").unwrap_err().to_string();
        assert!(err.contains("--to") && err.contains("`soon`"), "{err}");
        let w = Window {
            from: Some(Bound::After(10)),
            to: Some(Bound::At(1_000)),
        }
        .resolve(100);
        assert!(w.overlaps(110, 0));
        assert!(w.overlaps(50, 60), "a slice reaching into the window");
        assert!(!w.overlaps(50, 59));
        assert!(!w.overlaps(1_001, 0));
    }
}
