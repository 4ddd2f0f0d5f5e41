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

use crate::retention::{Census, Pass};

/// How often the file is rewritten.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// The counters, and where they go.
#[derive(Debug)]
pub(crate) struct Stats {
    path: PathBuf,
    last: Option<Instant>,
    /// Rows taken, by `kind`.
    rows: BTreeMap<String, u64>,
    /// Events the recorder lost (the `value` of `lost` rows), by `cause`.
    lost: BTreeMap<String, u64>,
    /// Events the rows stand for (`count`, 1 where null), by `kind`.
    events: BTreeMap<String, u64>,
    /// Rows whose kernel or user stack could not be captured (`kstack_error`,
    /// `ustack_error`), by `kernel` / `user`.
    stack_errors: BTreeMap<String, u64>,
    /// File sets this packer finished, and their bytes.
    pub sets_written: u64,
    pub bytes_written: u64,
    /// The store's finished sets at the last count.
    pub store: Census,
    /// Sets retention deleted, and their bytes.
    deleted_sets: u64,
    deleted_bytes: u64,
}

impl Stats {
    /// Counters written to `path`.
    pub(crate) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            last: None,
            rows: BTreeMap::new(),
            lost: BTreeMap::new(),
            events: BTreeMap::new(),
            stack_errors: BTreeMap::new(),
            sets_written: 0,
            bytes_written: 0,
            store: Census::default(),
            deleted_sets: 0,
            deleted_bytes: 0,
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
            ("kernel", int32(col::KSTACK_ERROR)),
            ("user", int32(col::USTACK_ERROR)),
        ];
        for i in 0..batch.num_rows() {
            if kinds.is_null(i) {
                continue;
            }
            let kind = kinds.value(i);
            bump(&mut self.rows, kind, 1);
            let events = counts
                .filter(|c| !c.is_null(i))
                .map_or(1, |c| u64::try_from(c.value(i)).unwrap_or(0));
            bump(&mut self.events, kind, events);
            for (stack, column) in &errors {
                if column.is_some_and(|c| !c.is_null(i)) {
                    bump(&mut self.stack_errors, stack, 1);
                }
            }
            if kind == stacks_stream::kind::LOST
                && let (Some(causes), Some(values)) = (causes, values)
                && !causes.is_null(i)
            {
                let n = u64::try_from(values.value(i)).unwrap_or(0);
                bump(&mut self.lost, causes.value(i), n);
            }
        }
    }

    /// Note a retention pass (or a census without one).
    pub(crate) fn note_pass(&mut self, pass: &Pass) {
        self.deleted_sets += pass.deleted_sets;
        self.deleted_bytes += pass.deleted_bytes;
        self.store = pass.left;
    }

    /// Rewrite the file if it is due (or `force`); a failure is a warning, once.
    pub(crate) fn maybe_write(&mut self, force: bool) {
        let due = self.last.is_none_or(|t| t.elapsed() >= EVERY);
        if !(due || force) {
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

    /// The JSON object.
    pub(crate) fn json(&self) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        format!(
            "{{\"time\":{now:.3},\"rows\":{},\"lost\":{},\"events\":{},\"stack_errors\":{},\
             \"sets_written\":{},\"bytes_written\":{},\
             \"store_sets\":{},\"store_bytes\":{},\"deleted_sets\":{},\"deleted_bytes\":{}}}\n",
            object(&self.rows),
            object(&self.lost),
            object(&self.events),
            object(&self.stack_errors),
            self.sets_written,
            self.bytes_written,
            self.store.sets,
            self.store.bytes,
            self.deleted_sets,
            self.deleted_bytes,
        )
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

/// `{"key":n,…}` with the keys escaped as JSON strings.
fn object(map: &BTreeMap<String, u64>) -> String {
    let fields: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{}:{v}", json_string(k)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

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
        assert_eq!(json_string("a\"b\\\n"), r#""a\"b\\\u000a""#);
    }
}
