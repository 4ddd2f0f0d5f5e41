//! stacks-pack's `--stats` file (docs/agent.md): what the packer has taken and stored, one JSON
//! object. The one list of its fields: stacks-pack writes it with [`PackStats::to_json`], and a
//! supervisor reads it with [`PackStats::read`] (stacks-agent sums it over the packer's runs).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One `--stats` file, in the order its keys are written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PackStats {
    /// When it was written, seconds since the Unix epoch (to the millisecond).
    pub time: f64,
    /// Rows taken, by `kind`.
    pub rows: BTreeMap<String, u64>,
    /// Events the recorder lost (the `value` of `lost` rows), by `cause`.
    pub lost: BTreeMap<String, u64>,
    /// Events the rows stand for (`count`, 1 where null), by `kind`.
    pub events: BTreeMap<String, u64>,
    /// Rows whose kernel or user stack could not be captured (`kstack_error`,
    /// `ustack_error`), by `kernel` / `user`.
    pub stack_errors: BTreeMap<String, u64>,
    /// File sets this packer finished, and their bytes.
    pub sets_written: u64,
    pub bytes_written: u64,
    /// The store's finished sets and their bytes at the last count.
    pub store_sets: u64,
    pub store_bytes: u64,
    /// Sets retention deleted, and their bytes.
    pub deleted_sets: u64,
    pub deleted_bytes: u64,
    /// While the store cannot be written (`stacks-pack --keep-going`): why, `store_full` or
    /// `store_read_only` (absent while it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwritable: Option<String>,
}

impl PackStats {
    /// The file's text: the object on one line.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string(self).expect("maps of strings and numbers");
        text.push('\n');
        text
    }

    /// The object of `text`; an error names what is missing or wrong.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The file at `path`, if it is there and whole (stacks-pack replaces it by a rename).
    pub fn read(path: &Path) -> Option<Self> {
        Self::from_json(&std::fs::read_to_string(path).ok()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_documented_and_read_back() {
        let mut s = PackStats {
            time: 1_700_000_000.125,
            sets_written: 2,
            store_bytes: 99,
            ..Default::default()
        };
        s.rows.insert("profile".into(), 3);
        s.lost.insert("ring \"full\"\n".into(), 7);
        let text = s.to_json();
        assert!(text.starts_with(r#"{"time":1700000000.125,"rows":{"profile":3},"lost":{"ring \"full\"\n":7},"events":{}"#), "{text}");
        assert!(
            text.ends_with("\"deleted_sets\":0,\"deleted_bytes\":0}\n"),
            "{text}"
        );
        assert_eq!(PackStats::from_json(&text).unwrap(), s);
        let e = PackStats::from_json(r#"{"time":1,"rows":{}}"#).unwrap_err();
        assert!(e.to_string().contains("missing field"), "{e}");
    }
}
