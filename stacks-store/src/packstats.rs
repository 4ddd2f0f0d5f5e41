//! stacks-pack's `--stats` file (docs/agent.md): what the packer has taken and stored, one JSON
//! object. The one list of its fields: stacks-pack writes it with [`PackStats::to_json`], a
//! supervisor reads it with [`PackStats::read`], sums a packer's runs with
//! [`PackStats::add_run`] and exports each field it sees in [`PackStats::fields`] (stacks-agent's
//! `/metrics`). A field added to [`PackStats`] does not compile until those two take it, and a
//! test fails until docs/agent.md documents its key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The keys of [`PackStats::stack_errors`]: the stacks whose capture can fail.
pub mod stack {
    /// Rows with a `kstack_error`.
    pub const KERNEL: &str = "kernel";
    /// Rows with a `ustack_error`.
    pub const USER: &str = "user";
    /// Both, in the order they are shown.
    pub const ALL: [&str; 2] = [KERNEL, USER];
}

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
    /// `ustack_error`), by [`stack`].
    pub stack_errors: BTreeMap<String, u64>,
    /// Rows taken (in `rows`) that are in no finished set yet: the set being written and the
    /// rows waiting for it, by `kind`. 0 once the packer has ended well; what a killed packer
    /// had here was never stored. (Absent from an older packer's file: none.)
    #[serde(default)]
    pub unfinished_rows: BTreeMap<String, u64>,
    /// Events those rows stand for, by `kind`.
    #[serde(default)]
    pub unfinished_events: BTreeMap<String, u64>,
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

/// A field of [`PackStats`] with its value ([`PackStats::fields`]), for a supervisor to take
/// each one: a field added to the type is a variant every `match` on this must take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Field<'a> {
    /// `time`: when the file was written.
    Time(f64),
    /// `rows`: a counter by kind.
    Rows(&'a BTreeMap<String, u64>),
    /// `lost`: a counter by cause.
    Lost(&'a BTreeMap<String, u64>),
    /// `events`: a counter by kind.
    Events(&'a BTreeMap<String, u64>),
    /// `stack_errors`: a counter by [`stack`].
    StackErrors(&'a BTreeMap<String, u64>),
    /// `unfinished_rows`: rows by kind not stored yet, now.
    UnfinishedRows(&'a BTreeMap<String, u64>),
    /// `unfinished_events`: their events by kind, now.
    UnfinishedEvents(&'a BTreeMap<String, u64>),
    /// `sets_written`: a counter.
    SetsWritten(u64),
    /// `bytes_written`: a counter.
    BytesWritten(u64),
    /// `store_sets`: the store at the last count.
    StoreSets(u64),
    /// `store_bytes`: the store at the last count.
    StoreBytes(u64),
    /// `deleted_sets`: a counter.
    DeletedSets(u64),
    /// `deleted_bytes`: a counter.
    DeletedBytes(u64),
    /// `unwritable`: why the store cannot be written, while it cannot.
    Unwritable(Option<&'a str>),
}

impl Field<'_> {
    /// Its key in the file (a test holds these to the keys serde writes).
    pub fn key(&self) -> &'static str {
        match self {
            Field::Time(_) => "time",
            Field::Rows(_) => "rows",
            Field::Lost(_) => "lost",
            Field::Events(_) => "events",
            Field::StackErrors(_) => "stack_errors",
            Field::UnfinishedRows(_) => "unfinished_rows",
            Field::UnfinishedEvents(_) => "unfinished_events",
            Field::SetsWritten(_) => "sets_written",
            Field::BytesWritten(_) => "bytes_written",
            Field::StoreSets(_) => "store_sets",
            Field::StoreBytes(_) => "store_bytes",
            Field::DeletedSets(_) => "deleted_sets",
            Field::DeletedBytes(_) => "deleted_bytes",
            Field::Unwritable(_) => "unwritable",
        }
    }
}

impl PackStats {
    /// The file's text: the object on one line.
    pub fn to_json(&self) -> String {
        stacks_stream::tally::json_line(self)
    }

    /// The object of `text`; an error names what is missing or wrong.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The file at `path`, if it is there and whole (stacks-pack replaces it by a rename).
    pub fn read(path: &Path) -> Option<Self> {
        stacks_stream::tally::read_json(path)
    }

    /// Every field with its value, in the file's order.
    pub fn fields(&self) -> [Field<'_>; 14] {
        // Named one by one (no `..`): a new field does not compile until it is a variant.
        let PackStats {
            time,
            rows,
            lost,
            events,
            stack_errors,
            unfinished_rows,
            unfinished_events,
            sets_written,
            bytes_written,
            store_sets,
            store_bytes,
            deleted_sets,
            deleted_bytes,
            unwritable,
        } = self;
        [
            Field::Time(*time),
            Field::Rows(rows),
            Field::Lost(lost),
            Field::Events(events),
            Field::StackErrors(stack_errors),
            Field::UnfinishedRows(unfinished_rows),
            Field::UnfinishedEvents(unfinished_events),
            Field::SetsWritten(*sets_written),
            Field::BytesWritten(*bytes_written),
            Field::StoreSets(*store_sets),
            Field::StoreBytes(*store_bytes),
            Field::DeletedSets(*deleted_sets),
            Field::DeletedBytes(*deleted_bytes),
            Field::Unwritable(unwritable.as_deref()),
        ]
    }

    /// `later`, what a next run of the packer counted (its counters start from 0 with each
    /// run), added to these counters; the store's census, `unwritable`, what is unfinished and
    /// `time` are `later`'s.
    pub fn add_run(&mut self, later: &PackStats) {
        // Named one by one (no `..`): a new field does not compile until it is summed or taken.
        let PackStats {
            time,
            rows,
            lost,
            events,
            stack_errors,
            unfinished_rows,
            unfinished_events,
            sets_written,
            bytes_written,
            store_sets,
            store_bytes,
            deleted_sets,
            deleted_bytes,
            unwritable,
        } = later;
        for (sum, run) in [
            (&mut self.rows, rows),
            (&mut self.lost, lost),
            (&mut self.events, events),
            (&mut self.stack_errors, stack_errors),
        ] {
            for (k, v) in run {
                *sum.entry(k.clone()).or_default() += v;
            }
        }
        self.sets_written += sets_written;
        self.bytes_written += bytes_written;
        self.deleted_sets += deleted_sets;
        self.deleted_bytes += deleted_bytes;
        self.store_sets = *store_sets;
        self.store_bytes = *store_bytes;
        self.unwritable.clone_from(unwritable);
        self.unfinished_rows.clone_from(unfinished_rows);
        self.unfinished_events.clone_from(unfinished_events);
        self.time = *time;
    }

    /// A packer that ended: what it had not finished was never stored, so it leaves `rows`
    /// and `events` (0 for one that ended well).
    pub fn drop_unfinished(&mut self) {
        for (sum, gone) in [
            (&mut self.rows, std::mem::take(&mut self.unfinished_rows)),
            (
                &mut self.events,
                std::mem::take(&mut self.unfinished_events),
            ),
        ] {
            for (k, n) in gone {
                if let Some(v) = sum.get_mut(&k) {
                    *v = v.saturating_sub(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_field_set() -> PackStats {
        let mut s = PackStats {
            time: 1_700_000_000.125,
            sets_written: 2,
            bytes_written: 3,
            store_sets: 4,
            store_bytes: 5,
            deleted_sets: 6,
            deleted_bytes: 7,
            unwritable: Some("store_full".into()),
            ..Default::default()
        };
        s.rows.insert("profile".into(), 8);
        s.lost.insert("ring_buffer_full:io".into(), 9);
        s.events.insert("profile".into(), 10);
        s.stack_errors.insert(stack::USER.into(), 11);
        s.unfinished_rows.insert("profile".into(), 3);
        s.unfinished_events.insert("profile".into(), 4);
        s
    }

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
        let every = every_field_set();
        assert_eq!(PackStats::from_json(&every.to_json()).unwrap(), every);
        assert!(
            every
                .to_json()
                .ends_with("\"unwritable\":\"store_full\"}\n")
        );
        let e = PackStats::from_json(r#"{"time":1,"rows":{}}"#).unwrap_err();
        assert!(e.to_string().contains("missing field"), "{e}");
    }

    /// [`Field::key`] is the key serde writes, each field once, in the file's order.
    #[test]
    fn fields_are_the_keys_written() {
        let s = every_field_set();
        let text = s.to_json();
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = s.fields().iter().map(Field::key).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let mut written: Vec<&str> = object.keys().map(String::as_str).collect();
        written.sort_unstable();
        assert_eq!(
            sorted, written,
            "PackStats::fields and the keys serde writes"
        );
        let at: Vec<usize> = keys
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(at.is_sorted(), "fields() in the file's order: {keys:?}");
        // And each variant carries its own field's value.
        for f in s.fields() {
            let v = &object[f.key()];
            let same = match f {
                Field::Time(t) => v.as_f64() == Some(t),
                Field::Rows(m)
                | Field::Lost(m)
                | Field::Events(m)
                | Field::StackErrors(m)
                | Field::UnfinishedRows(m)
                | Field::UnfinishedEvents(m) => *v == serde_json::to_value(m).unwrap(),
                Field::SetsWritten(n)
                | Field::BytesWritten(n)
                | Field::StoreSets(n)
                | Field::StoreBytes(n)
                | Field::DeletedSets(n)
                | Field::DeletedBytes(n) => v.as_u64() == Some(n),
                Field::Unwritable(w) => v.as_str() == w,
            };
            assert!(same, "{}: {f:?} against {v}", f.key());
        }
    }

    #[test]
    fn runs_add_up() {
        let first = every_field_set();
        let mut later = PackStats {
            time: 2.0,
            sets_written: 1,
            store_sets: 1,
            ..Default::default()
        };
        later.rows.insert("profile".into(), 1);
        later.rows.insert("state".into(), 2);
        let mut sum = first.clone();
        sum.add_run(&later);
        assert_eq!(sum.rows["profile"], 9);
        assert_eq!(sum.rows["state"], 2);
        assert_eq!(sum.lost, first.lost);
        assert_eq!((sum.sets_written, sum.bytes_written), (3, 3));
        assert_eq!((sum.deleted_sets, sum.deleted_bytes), (6, 7));
        assert_eq!((sum.store_sets, sum.store_bytes), (1, 0));
        assert_eq!((sum.time, sum.unwritable), (2.0, None));
        assert!(
            sum.unfinished_rows.is_empty(),
            "what is unfinished is the later run's"
        );
    }

    #[test]
    fn what_a_packer_left_unfinished_is_not_stored() {
        let mut s = every_field_set();
        s.drop_unfinished();
        assert_eq!(s.rows["profile"], 5);
        assert_eq!(s.events["profile"], 6);
        assert!(s.unfinished_rows.is_empty() && s.unfinished_events.is_empty());
    }

    /// A file of the workspace, from the crate's directory at run time when cargo says it.
    fn workspace_file(rel: &str) -> String {
        let dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        std::fs::read_to_string(dir.join("..").join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// docs/agent.md's section on the file documents every key and no other, and its example
    /// is a file that reads.
    #[test]
    fn documented_in_agent_md() {
        let doc = workspace_file("docs/agent.md");
        let section = doc
            .split("\n### stacks-pack `--stats FILE`")
            .nth(1)
            .expect("docs/agent.md: no `### stacks-pack `--stats FILE``");
        let section = section.split("\n#").next().unwrap_or(section);
        let example = section
            .split("```json\n")
            .nth(1)
            .and_then(|s| s.split("```").next())
            .expect("docs/agent.md: no ```json example of --stats");
        PackStats::from_json(example)
            .unwrap_or_else(|e| panic!("docs/agent.md's --stats example: {e}"));
        let mut documented: Vec<&str> = section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| {
                let first = l.split('|').nth(1).unwrap_or("");
                first.split('`').skip(1).step_by(2)
            })
            .collect();
        documented.sort_unstable();
        let mut keys: Vec<&str> = PackStats::default()
            .fields()
            .iter()
            .map(Field::key)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            documented, keys,
            "docs/agent.md's table of --stats keys and PackStats"
        );
    }
}
