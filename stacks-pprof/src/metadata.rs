//! What the stream metadata contributes to the profile: the sampling period (from the
//! `profile` event of `stacks.events`), the start time and descriptive comments.

use std::collections::HashMap;

use stacks_stream::meta;

/// Sampling frequency assumed when the `profile` event names none.
const DEFAULT_HZ: u64 = 99;

/// Profile-level facts taken from the stream metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// CPU sampling period in nanoseconds, when the recording sampled CPUs.
    pub period_ns: Option<i64>,
    /// Recording start, ns since the Unix epoch.
    pub start_ns: Option<i64>,
    /// `key=value` comments.
    pub comments: Vec<String>,
}

impl Facts {
    pub fn from_metadata(metadata: &HashMap<String, String>) -> Self {
        let period_ns = metadata
            .get(meta::EVENTS)
            .and_then(|e| profile_period_ns(e));
        let start_ns = metadata
            .get(meta::START_NS)
            .and_then(|s| s.trim().parse::<i64>().ok());
        let comments = [
            ("host", meta::HOST),
            ("kernel", meta::KERNEL_RELEASE),
            ("events", meta::EVENTS),
            ("tools", meta::TOOLS),
        ]
        .iter()
        .filter_map(|(name, key)| metadata.get(*key).map(|v| format!("{name}={v}")))
        .collect();
        Self {
            period_ns,
            start_ns,
            comments,
        }
    }
}

/// The period of the `profile` entry of an event spec like `profile:u:99,switch:uk`: 1e9/HZ,
/// HZ being the entry's last numeric field (99 when it has none). `None` without such entry.
fn profile_period_ns(events: &str) -> Option<i64> {
    let entry = events
        .split(',')
        .map(str::trim)
        .find(|e| e.split(':').next() == Some("profile"))?;
    let hz = entry
        .split(':')
        .skip(1)
        .filter_map(|f| f.trim().parse::<u64>().ok())
        .last()
        .filter(|hz| *hz > 0)
        .unwrap_or(DEFAULT_HZ);
    i64::try_from(1_000_000_000 / hz).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_from_events() {
        assert_eq!(
            profile_period_ns("profile:u:99,switch:uk"),
            Some(10_101_010)
        );
        assert_eq!(
            profile_period_ns("switch:uk, profile:1000"),
            Some(1_000_000)
        );
        assert_eq!(profile_period_ns("profile"), Some(10_101_010));
        assert_eq!(profile_period_ns("profile:uk"), Some(10_101_010));
        assert_eq!(profile_period_ns("profile:0"), Some(10_101_010));
        assert_eq!(profile_period_ns("switch:uk"), None);
        assert_eq!(profile_period_ns("profiler:5"), None);
    }

    #[test]
    fn facts_from_metadata() {
        let m: HashMap<String, String> = [
            (meta::HOST, "box"),
            (meta::EVENTS, "profile:49"),
            (meta::START_NS, "1700000000000000000"),
            (meta::TOOLS, "stacks-record 0.1.0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let f = Facts::from_metadata(&m);
        assert_eq!(f.period_ns, Some(1_000_000_000 / 49));
        assert_eq!(f.start_ns, Some(1_700_000_000_000_000_000));
        assert_eq!(
            f.comments,
            ["host=box", "events=profile:49", "tools=stacks-record 0.1.0"]
        );
        assert_eq!(Facts::from_metadata(&HashMap::new()), Facts::default());
    }
}
