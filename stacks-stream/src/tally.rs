//! A stream's rows counted by `kind`: the rows and the events they stand for (`count`, 1 where
//! null), the one way every stage counts them (stacks-pack's `--stats` and its dropped rows,
//! stacks-record's `--stats`); and stacks-record's `--stats` file itself, [`RecordStats`]: what
//! left the recorder, which a supervisor compares with what reached the store (docs/agent.md).

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use serde::{Deserialize, Serialize};

use crate::col;

/// Rows and events by kind.
pub type Tally = BTreeMap<String, (u64, u64)>;

/// Add the rows of `batch` (a stream's, or samples rows of a store) to `into`, by `kind`:
/// (rows, events: `count`, 1 where null). A batch without a `kind` column adds nothing.
pub fn add(batch: &RecordBatch, into: &mut Tally) {
    let Some(kinds) = batch
        .column_by_name(col::KIND)
        .and_then(|c| c.as_string_opt::<i32>())
    else {
        return;
    };
    let counts = batch
        .column_by_name(col::COUNT)
        .and_then(|c| c.as_primitive_opt::<Int64Type>());
    for i in 0..batch.num_rows() {
        if kinds.is_null(i) {
            continue;
        }
        let events = counts
            .filter(|c| !c.is_null(i))
            .map_or(1, |c| u64::try_from(c.value(i)).unwrap_or(0));
        // Looked up first: a row of a kind already counted allocates nothing (the recorder
        // counts every row it produces).
        let kind = kinds.value(i);
        match into.get_mut(kind) {
            Some(e) => {
                e.0 += 1;
                e.1 += events;
            }
            None => {
                into.insert(kind.to_string(), (1, events));
            }
        }
    }
}

/// Add `more` to `into`.
pub fn merge(into: &mut Tally, more: Tally) {
    for (k, (rows, events)) in more {
        let e = into.entry(k).or_default();
        e.0 += rows;
        e.1 += events;
    }
}

/// stacks-record's `--stats` file: the rows it produced since it started, by kind, whether or
/// not its output took them (a row written into a pipe whose reader then died, or refused by a
/// closed pipe, is counted: it left the recorder). One JSON object on one line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordStats {
    /// When it was written, seconds since the Unix epoch (to the millisecond).
    pub time: f64,
    /// Rows produced, by `kind`.
    pub rows: BTreeMap<String, u64>,
    /// Events those rows stand for (`count`, 1 where null), by `kind`.
    pub events: BTreeMap<String, u64>,
    /// Whether the stream was ended (everything the recorder held was produced): absent or
    /// false in a file written while it ran.
    #[serde(default)]
    pub ended: bool,
}

impl RecordStats {
    /// Count the rows of `batch`.
    pub fn count(&mut self, batch: &RecordBatch) {
        let mut t = Tally::new();
        add(batch, &mut t);
        for (kind, (rows, events)) in t {
            *self.rows.entry(kind.clone()).or_default() += rows;
            *self.events.entry(kind).or_default() += events;
        }
    }

    /// The file's text: the object on one line.
    pub fn to_json(&self) -> String {
        json_line(self)
    }

    /// The object of `text`; an error names what is missing or wrong.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The file at `path`, if it is there and whole (it is replaced by a rename).
    pub fn read(path: &Path) -> Option<Self> {
        read_json(path)
    }

    /// Replace the file at `path` atomically (a temporary `.NAME.tmp` beside it, renamed
    /// over it), stamped with the time now.
    pub fn write(&mut self, path: &Path) -> std::io::Result<()> {
        self.time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as f64 / 1000.0)
            .unwrap_or(0.0);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        std::fs::write(&tmp, self.to_json())?;
        std::fs::rename(&tmp, path)
    }
}

/// A stats file's text (the recorder's and the packer's, which supervisors read): `value` as
/// one JSON object on one line.
pub fn json_line<T: Serialize>(value: &T) -> String {
    let mut text = serde_json::to_string(value).expect("maps of strings and numbers");
    text.push('\n');
    text
}

/// The stats file at `path` as a `T`, if it is there and whole (its writer replaces it by a
/// rename).
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new(col::KIND, DataType::Utf8, true),
            Field::new(col::COUNT, DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("switch"),
                    Some("switch"),
                    None,
                    Some("lost"),
                ])),
                Arc::new(Int64Array::from(vec![None, Some(40), Some(3), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn rows_and_events_by_kind() {
        let mut t = Tally::new();
        add(&batch(), &mut t);
        assert_eq!(t["switch"], (2, 41));
        assert_eq!(t["lost"], (1, 1));
        assert_eq!(t.len(), 2, "a row without a kind is not counted");
        let mut more = Tally::new();
        add(&batch(), &mut more);
        merge(&mut t, more);
        assert_eq!(t["switch"], (4, 82));
    }

    #[test]
    fn record_stats_round_trip_through_a_file() {
        let mut s = RecordStats::default();
        s.count(&batch());
        s.count(&batch());
        assert_eq!(s.rows["switch"], 4);
        assert_eq!(s.events["switch"], 82);
        let dir = std::env::temp_dir().join(format!("stacks-tally-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("record-stats.json");
        s.ended = true;
        s.write(&path).unwrap();
        assert!(s.time > 1.0e9);
        let back = RecordStats::read(&path).unwrap();
        assert_eq!(back, s);
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .starts_with("{\"time\":")
        );
        // A file of a recorder still running says so.
        let running = RecordStats::from_json(r#"{"time":1,"rows":{},"events":{}}"#).unwrap();
        assert!(!running.ended);
        assert!(RecordStats::read(&dir.join("absent.json")).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
