//! `--stats FILE`: what the packer has taken and stored, as one small JSON object rewritten
//! atomically (temporary file, rename) about once a second and at the end, for a supervisor
//! such as stacks-agent to export. The keys are documented in docs/agent.md.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use stacks_stream::col;

use stacks_store::PackStats;
use stacks_store::packstats::stack;

use crate::retention::Pass;

/// How often the file is rewritten.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// The counters, and where they go.
#[derive(Debug)]
pub(crate) struct Stats {
    path: PathBuf,
    last: Option<Instant>,
    /// The counters, as the file holds them (`time` set when written).
    counts: PackStats,
}

impl Stats {
    /// Counters written to `path`.
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            last: None,
            counts: PackStats::default(),
        }
    }

    /// Count a batch of samples rows by kind, and the events its `lost` rows report by cause.
    pub(crate) fn count(&mut self, batch: &RecordBatch) {
        let column = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_string_opt::<i32>())
        };
        let Some(kinds) = column(col::KIND) else {
            return;
        };
        let causes = column(col::CAUSE);
        let int64 = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int64Type>())
        };
        let int32 = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_primitive_opt::<arrow_array::types::Int32Type>())
        };
        let values = int64(col::VALUE);
        let counts = int64(col::COUNT);
        let errors = [
            (stack::KERNEL, int32(col::KSTACK_ERROR)),
            (stack::USER, int32(col::USTACK_ERROR)),
        ];
        for i in 0..batch.num_rows() {
            if kinds.is_null(i) {
                continue;
            }
            let kind = kinds.value(i);
            bump(&mut self.counts.rows, kind, 1);
            let events = counts
                .filter(|c| !c.is_null(i))
                .map_or(1, |c| u64::try_from(c.value(i)).unwrap_or(0));
            bump(&mut self.counts.events, kind, events);
            for (stack, column) in &errors {
                if column.is_some_and(|c| !c.is_null(i)) {
                    bump(&mut self.counts.stack_errors, stack, 1);
                }
            }
            if kind == stacks_stream::kind::LOST
                && let (Some(causes), Some(values)) = (causes, values)
                && !causes.is_null(i)
            {
                let n = u64::try_from(values.value(i)).unwrap_or(0);
                bump(&mut self.counts.lost, causes.value(i), n);
            }
        }
    }

    /// Rows taken and then dropped (the store could not be written): no longer counted as
    /// rows, their events counted as lost, cause `WHY:KIND`.
    pub(crate) fn dropped(&mut self, why: &str, tally: &crate::outage::Tally) {
        for (kind, (rows, events)) in tally {
            if let Some(r) = self.counts.rows.get_mut(kind) {
                *r = r.saturating_sub(*rows);
            }
            if let Some(e) = self.counts.events.get_mut(kind) {
                *e = e.saturating_sub(*events);
            }
            // A set given up was unfinished: it is no longer, whenever the file says so next.
            if let Some(r) = self.counts.unfinished_rows.get_mut(kind) {
                *r = r.saturating_sub(*rows);
            }
            if let Some(e) = self.counts.unfinished_events.get_mut(kind) {
                *e = e.saturating_sub(*events);
            }
            bump(&mut self.counts.lost, &format!("{why}:{kind}"), *events);
        }
    }

    /// `n` `lost` rows written for rows dropped earlier (their events counted then).
    pub(crate) fn wrote_lost_rows(&mut self, n: u64) {
        bump(&mut self.counts.rows, stacks_stream::kind::LOST, n);
        bump(&mut self.counts.events, stacks_stream::kind::LOST, n);
    }

    /// What is taken but in no finished set yet (the set being written, the rows waiting for
    /// it), by kind.
    pub(crate) fn unfinished(&mut self, tally: &crate::outage::Tally) {
        self.counts.unfinished_rows = tally.iter().map(|(k, v)| (k.clone(), v.0)).collect();
        self.counts.unfinished_events = tally.iter().map(|(k, v)| (k.clone(), v.1)).collect();
    }

    /// Whether the file is due to be rewritten (or `force`).
    pub(crate) fn due(&self, force: bool) -> bool {
        force || self.last.is_none_or(|t| t.elapsed() >= EVERY)
    }

    /// The file sets this packer has finished, and their bytes.
    pub(crate) fn written(&mut self, sets: u64, bytes: u64) {
        self.counts.sets_written = sets;
        self.counts.bytes_written = bytes;
    }

    /// The store can (`None`) or cannot be written, and why.
    pub(crate) fn unwritable(&mut self, why: Option<&str>) {
        self.counts.unwritable = why.map(str::to_string);
    }

    /// Note a retention pass (or a census without one).
    pub(crate) fn note_pass(&mut self, pass: &Pass) {
        self.counts.deleted_sets += pass.deleted_sets;
        self.counts.deleted_bytes += pass.deleted_bytes;
        self.counts.store_sets = pass.left.sets;
        self.counts.store_bytes = pass.left.bytes;
    }

    /// Rewrite the file if it is due (or `force`); a failure is a warning, once.
    pub(crate) fn maybe_write(&mut self, force: bool) {
        if !self.due(force) {
            return;
        }
        let first = self.last.is_none();
        self.last = Some(Instant::now());
        match self.write() {
            Err(e) if first => eprintln!(
                "{}: warning: cannot write --stats {}: {e}",
                crate::TOOL,
                self.path.display()
            ),
            _ => {}
        }
    }

    fn write(&self) -> io::Result<()> {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self.path.with_file_name(format!(".{name}.tmp"));
        fs::write(&tmp, self.json())?;
        fs::rename(&tmp, &self.path)
    }

    /// The JSON object ([`PackStats`]), stamped with the time now.
    pub(crate) fn json(&self) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as f64 / 1000.0)
            .unwrap_or(0.0);
        PackStats {
            time: now,
            ..self.counts.clone()
        }
        .to_json()
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str, n: u64) {
    match map.get_mut(key) {
        Some(v) => *v += n,
        None => {
            map.insert(key.to_string(), n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retention::Census;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    /// Rows dropped while the store was down: out of `rows` and `events`, into `lost` by
    /// cause; the `lost` rows written for them later count as rows of kind `lost` only.
    #[test]
    fn dropped_rows_are_counted_as_lost_once() {
        let schema = Arc::new(stacks_stream::raw_schema(Default::default()));
        let rows = crate::outage::lost_rows(&schema, 1, &[("x:profile".into(), 4)]).unwrap();
        let mut stats = Stats::new(Path::new("unused"));
        let mut t = crate::outage::Tally::default();
        t.insert("vfs".into(), (3, 12));
        stats.counts.rows.insert("vfs".into(), 5);
        stats.counts.events.insert("vfs".into(), 20);
        stats.dropped("store_full", &t);
        stats.wrote_lost_rows(rows.num_rows() as u64);
        let json = stats.json();
        assert!(
            json.contains(r#""rows":{"lost":1,"vfs":2},"lost":{"store_full:vfs":12},"events":{"lost":1,"vfs":8}"#),
            "{json}"
        );
    }

    #[test]
    fn rows_by_kind_and_lost_events_by_cause() {
        let schema = Arc::new(Schema::new(vec![
            Field::new(col::KIND, DataType::Utf8, false),
            Field::new(col::VALUE, DataType::Int64, false),
            Field::new(col::CAUSE, DataType::Utf8, true),
            Field::new(col::COUNT, DataType::Int64, true),
            Field::new(col::USTACK_ERROR, DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    "profile", "lost", "profile", "lost",
                ])),
                Arc::new(Int64Array::from(vec![1, 7, 1, 5])),
                Arc::new(StringArray::from(vec![
                    None,
                    Some("ring_full:io"),
                    None,
                    Some("ring_full:io"),
                ])),
                Arc::new(Int64Array::from(vec![None, None, Some(3), None])),
                Arc::new(Int32Array::from(vec![Some(-14), None, None, None])),
            ],
        )
        .unwrap();
        let mut stats = Stats::new(Path::new("unused"));
        stats.count(&batch);
        stats.note_pass(&Pass {
            deleted_sets: 2,
            deleted_bytes: 10,
            left: Census { sets: 3, bytes: 99 },
        });
        let json = stats.json();
        assert!(
            json.contains(
                r#""rows":{"lost":2,"profile":2},"lost":{"ring_full:io":12},"events":{"lost":2,"profile":4},"stack_errors":{"user":1}"#
            ),
            "{json}"
        );
        assert!(
            json.contains(
                r#""store_sets":3,"store_bytes":99,"deleted_sets":2,"deleted_bytes":10}"#
            ),
            "{json}"
        );
    }
}
