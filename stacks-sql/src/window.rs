//! The time window of `--from`/`--to`: which rows a query sees (`time` in [from, to)), and over
//! a store URL which hour prefixes (`date=YYYY-MM-DD/hour=HH/`) are listed at all.

use arrow_schema::DataType;
use datafusion::common::ScalarValue;
use datafusion::prelude::{Expr, col, lit};

use stacks_stream::col as column;

const HOUR_NS: i64 = 3_600_000_000_000;
/// Windows of at most this many hours are turned into their hour prefixes directly; longer
/// ones (or open-ended ones) find the hours the store has by listing `date=`/`hour=` prefixes.
pub(crate) const MAX_LISTED_HOURS: i64 = 7 * 24;

/// Rows with `from <= time < to`, nanoseconds since the epoch; either bound may be open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub from: Option<i64>,
    pub to: Option<i64>,
}

/// An hour partition of a store: `date=DATE/hour=HOUR/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hour {
    /// `YYYY-MM-DD`.
    pub date: String,
    /// `00` to `23`.
    pub hour: String,
}

impl Hour {
    /// The hour that holds `ns`.
    pub fn of(ns: i64) -> Self {
        let t = chrono::DateTime::from_timestamp_nanos(ns);
        Hour {
            date: t.format("%Y-%m-%d").to_string(),
            hour: t.format("%H").to_string(),
        }
    }

    /// The key path of the partition, relative to the store's prefix.
    pub fn path(&self) -> String {
        format!("date={}/hour={}/", self.date, self.hour)
    }

    /// Nanoseconds since the epoch of the hour's start; `None` for a malformed partition.
    pub fn start(&self) -> Option<i64> {
        let text = format!("{}T{}:00:00Z", self.date, self.hour);
        chrono::DateTime::parse_from_rfc3339(&text)
            .ok()?
            .timestamp_nanos_opt()
    }
}

impl Window {
    /// Whether no bound is given.
    pub(crate) fn is_open(&self) -> bool {
        self.from.is_none() && self.to.is_none()
    }

    /// The row filter on `time` of type `time_type`, if any bound is given.
    pub fn filter(&self, time_type: &DataType) -> Option<Expr> {
        let at = |ns: i64| {
            let tz = match time_type {
                DataType::Timestamp(_, tz) => tz.clone(),
                _ => None,
            };
            lit(ScalarValue::TimestampNanosecond(Some(ns), tz))
        };
        let from = self.from.map(|f| col(column::TIME).gt_eq(at(f)));
        let to = self.to.map(|t| col(column::TIME).lt(at(t)));
        match (from, to) {
            (Some(a), Some(b)) => Some(a.and(b)),
            (a, b) => a.or(b),
        }
    }

    /// The hours the window covers, when both bounds are given and it spans at most
    /// [`MAX_LISTED_HOURS`]; an empty window covers none.
    pub fn hours(&self) -> Option<Vec<Hour>> {
        let (from, to) = (self.from?, self.to?);
        if to <= from {
            return Some(Vec::new());
        }
        let first = from.div_euclid(HOUR_NS);
        let last = (to - 1).div_euclid(HOUR_NS);
        if last - first >= MAX_LISTED_HOURS {
            return None;
        }
        Some((first..=last).map(|h| Hour::of(h * HOUR_NS)).collect())
    }

    /// Whether rows of `hour` can be in the window.
    pub fn covers(&self, hour: &Hour) -> bool {
        let Some(start) = hour.start() else {
            return false;
        };
        self.from.is_none_or(|f| start + HOUR_NS > f) && self.to.is_none_or(|t| start < t)
    }

    /// Whether rows of day `date` (`YYYY-MM-DD`) can be in the window.
    pub(crate) fn covers_date(&self, date: &str) -> bool {
        (0..24).any(|h| {
            self.covers(&Hour {
                date: date.to_string(),
                hour: format!("{h:02}"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> i64 {
        stacks_stream::time::parse_time(text).unwrap()
    }

    #[test]
    fn hours_of_a_window() {
        let w = Window {
            from: Some(t("2026-11-23T22:30:00Z")),
            to: Some(t("2026-11-24T01:00:00Z")),
        };
        let paths: Vec<String> = w.hours().unwrap().iter().map(Hour::path).collect();
        assert_eq!(
            paths,
            [
                "date=2026-11-23/hour=22/",
                "date=2026-11-23/hour=23/",
                "date=2026-11-24/hour=00/"
            ]
        );
        assert!(w.covers(&Hour::of(t("2026-11-23T22:00:00Z"))));
        assert!(!w.covers(&Hour::of(t("2026-11-24T01:00:00Z"))));
        assert!(w.covers_date("2026-11-24") && !w.covers_date("2026-11-25"));
        let empty = Window {
            from: w.to,
            to: w.from,
        };
        assert_eq!(empty.hours(), Some(vec![]));
        let long = Window {
            from: Some(t("2026-01-01")),
            to: Some(t("2026-02-01")),
        };
        assert_eq!(long.hours(), None, "a month is listed, not enumerated");
        let open = Window {
            from: Some(t("2026-01-01")),
            to: None,
        };
        assert!(open.hours().is_none() && open.covers_date("2030-01-01"));
        assert!(!open.covers_date("2025-12-31"));
    }

    #[test]
    fn an_hour_knows_its_start() {
        let h = Hour::of(t("2026-11-23T07:59:59.9Z"));
        assert_eq!(h.start(), Some(t("2026-11-23T07:00:00Z")));
        let bad = Hour {
            date: "x".into(),
            hour: "07".into(),
        };
        assert_eq!(bad.start(), None);
    }
}
