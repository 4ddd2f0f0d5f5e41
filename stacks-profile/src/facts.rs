//! What the stream metadata contributes to the profile: the sampling period (from the
//! `profile` event of `stacks.events`), the start time and descriptive comments.

use std::collections::HashMap;

use stacks_stream::events::profile_period_ns;
use stacks_stream::meta;

/// Profile-level facts taken from the stream metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
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
        let comments = meta::SHOWN
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

#[cfg(test)]
mod tests {
    use super::*;

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
