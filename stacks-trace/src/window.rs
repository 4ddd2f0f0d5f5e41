//! The `--from`/`--to` time window: times in the shared grammar (`2023-11-14T22:13:20Z`,
//! `2023-11-14`, …), or `+` and a duration after the stream start (`+2s`, `+1.5s`, `+250ms`).

use stacks_stream::time::parse_time;

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
        parse_time(v).map(Bound::At).map_err(|_| bad())
    }

    /// The bound in ns since the epoch, given the stream start.
    pub fn resolve(self, start: i64) -> i64 {
        match self {
            Bound::At(t) => t,
            Bound::After(d) => start.saturating_add(d),
        }
    }
}

/// `1.5s` → 1_500_000_000 ns, in the shared duration grammar.
fn parse_offset(s: &str) -> Option<i64> {
    let ns = stacks_stream::cli::parse_duration_ns(s).ok()?;
    i64::try_from(ns).ok()
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
    pub(crate) fn overlaps(&self, start: i64, dur: i64) -> bool {
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
        assert_eq!(
            parse_offset("2"),
            Some(2_000_000_000),
            "a bare number is seconds"
        );
        for bad in ["", "s", "2x", "-1s", "1.2.3s", ".5s", "1.0000000001s"] {
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
        assert_eq!(
            Bound::parse("--from", "2023-11-14").unwrap(),
            Bound::At(1_699_920_000_000_000_000)
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
