//! A directory store that cannot be written for a while: its file system full (`ENOSPC`, or a
//! quota: `EDQUOT`) or read-only (`EROFS`). The packer does not end for it: the set being
//! written is given up (its temporary files removed), and from then on the rows that arrive
//! are counted and dropped, by kind, until a check once a second finds the directory writable
//! with room for a set; then the packer writes again, and the first set after holds one `lost`
//! row per kind, cause `store_full:KIND` or `store_read_only:KIND`, whose `value` is the events
//! dropped (the `count` of the rows, 1 where null). So every row that reached the packer is
//! either in a finished set or counted in one, and the pipeline upstream never stalls on it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt32Array, UInt64Array, new_null_array,
};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use stacks_stream::col;

use crate::error::PackError;
use crate::fsutil;

/// How often an unwritable store is looked at again.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Free space a full store needs before the packer writes again, at least (and at least twice
/// the largest set written so far).
const ROOM_AT_LEAST: u64 = 1 << 20;

/// Why the store cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// No space left (or over a quota).
    Full,
    /// The file system is read-only.
    ReadOnly,
}

impl Why {
    /// The `WHY` of the `lost` rows' cause.
    pub(crate) fn cause(self) -> &'static str {
        match self {
            Why::Full => stacks_stream::lost::STORE_FULL,
            Why::ReadOnly => stacks_stream::lost::STORE_READ_ONLY,
        }
    }

    /// What the log says.
    fn words(self) -> &'static str {
        match self {
            Why::Full => "is full",
            Why::ReadOnly => "is read-only",
        }
    }

    /// Whether `err` means the store cannot be written for a while (not a fault of the input
    /// or of the packer), and why.
    pub(crate) fn of(err: &PackError) -> Option<Why> {
        match err.errno()? {
            libc::ENOSPC | libc::EDQUOT => Some(Why::Full),
            libc::EROFS => Some(Why::ReadOnly),
            _ => None,
        }
    }
}

/// Rows and events by kind, counted as every stage counts them.
pub(crate) use stacks_stream::tally::{Tally, add as tally, merge};

/// The store's outage in progress.
#[derive(Debug)]
pub(crate) struct Outage {
    pub(crate) why: Why,
    dir: PathBuf,
    /// When it began (the `lost` rows' `time`).
    began: SystemTime,
    since: Instant,
    last_check: Instant,
    /// What was dropped: the set given up and the rows since.
    pub(crate) dropped: Tally,
    /// Free bytes it waits for (a full store).
    need: u64,
}

impl Outage {
    /// The store `dir` could not be written (`err`, for `why`); `given_up` is what the set
    /// being written held; `largest_set` the largest set written so far.
    pub(crate) fn begin(
        dir: &Path,
        why: Why,
        err: &PackError,
        given_up: Tally,
        largest_set: u64,
    ) -> Self {
        let rows: u64 = given_up.values().map(|v| v.0).sum();
        eprintln!(
            "{}: the store {} {} ({err}): dropped the set being written ({rows} rows); rows are counted and dropped (lost, cause {}:KIND) until it can be written, checked every {}s",
            crate::TOOL,
            dir.display(),
            why.words(),
            why.cause(),
            CHECK_EVERY.as_secs()
        );
        Outage {
            why,
            dir: dir.to_path_buf(),
            began: SystemTime::now(),
            since: Instant::now(),
            last_check: Instant::now(),
            dropped: given_up,
            need: ROOM_AT_LEAST.max(largest_set.saturating_mul(2)),
        }
    }

    /// Drop `batch`, counted.
    pub(crate) fn drop_rows(&mut self, batch: &RecordBatch) {
        tally(batch, &mut self.dropped);
    }

    /// Whether the store can be written again (looked at once every [`CHECK_EVERY`]).
    pub(crate) fn over(&mut self) -> bool {
        if self.last_check.elapsed() < CHECK_EVERY {
            return false;
        }
        self.last_check = Instant::now();
        fsutil::check_writable(&self.dir).is_ok()
            && free_bytes(&self.dir).is_none_or(|free| free >= self.need)
    }

    /// The outage is over: logged; the `lost` rows of what was dropped, in the stream's
    /// `schema`.
    pub(crate) fn end(self, schema: &SchemaRef) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let rows: u64 = self.dropped.values().map(|v| v.0).sum();
        let events: u64 = self.dropped.values().map(|v| v.1).sum();
        eprintln!(
            "{}: the store {} can be written again after {:.0?}: {rows} rows ({events} events) were dropped, written as lost rows (cause {}:KIND)",
            crate::TOOL,
            self.dir.display(),
            self.since.elapsed(),
            self.why.cause()
        );
        let at = self
            .began
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let lost: Vec<(String, i64)> = self
            .dropped
            .iter()
            .filter(|(_, v)| v.1 > 0)
            .map(|(k, v)| {
                (
                    format!("{}:{k}", self.why.cause()),
                    i64::try_from(v.1).unwrap_or(i64::MAX),
                )
            })
            .collect();
        lost_rows(schema, at, &lost)
    }
}

/// Free bytes for an unprivileged writer on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is valid; `c` is NUL-terminated and outlives the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above, `st` is a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// `lost` rows (one per `(cause, events)`) at `time_ns`, in a stream's `schema`: `kind`
/// `lost`, `cause`, `value` = events, the ids 0, names empty, every nullable column null.
pub(crate) fn lost_rows(
    schema: &SchemaRef,
    time_ns: i64,
    lost: &[(String, i64)],
) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let n = lost.len();
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> Result<ArrayRef, arrow_schema::ArrowError> {
            let name = f.name().as_str();
            Ok(match (name, f.data_type()) {
                (col::KIND, DataType::Utf8) => {
                    Arc::new(StringArray::from(vec![stacks_stream::kind::LOST; n]))
                }
                (col::CAUSE, DataType::Utf8) => Arc::new(StringArray::from_iter_values(
                    lost.iter().map(|(c, _)| c.as_str()),
                )),
                (col::VALUE, DataType::Int64) => {
                    Arc::new(Int64Array::from_iter_values(lost.iter().map(|(_, v)| *v)))
                }
                (col::TIME, DataType::Timestamp(TimeUnit::Nanosecond, tz)) => Arc::new(
                    TimestampNanosecondArray::from(vec![time_ns; n]).with_timezone_opt(tz.clone()),
                ),
                _ if f.is_nullable() => new_null_array(f.data_type(), n),
                (_, DataType::Utf8) => Arc::new(StringArray::from(vec![""; n])),
                (_, DataType::Int32) => Arc::new(Int32Array::from(vec![0; n])),
                (_, DataType::Int64) => Arc::new(Int64Array::from(vec![0; n])),
                (_, DataType::UInt32) => Arc::new(UInt32Array::from(vec![0; n])),
                (_, DataType::UInt64) => Arc::new(UInt64Array::from(vec![0; n])),
                (_, DataType::Boolean) => Arc::new(BooleanArray::from(vec![false; n])),
                (_, other) => {
                    return Err(arrow_schema::ArrowError::SchemaError(format!(
                        "no value for column `{name}` ({other}) of a lost row"
                    )));
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(Arc::clone(schema), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    #[test]
    fn lost_rows_fit_the_stream_schemas_and_count_as_lost() {
        for schema in [
            stacks_stream::raw_schema(Default::default()),
            stacks_stream::symbolized_schema(Default::default()),
        ] {
            let schema = Arc::new(schema);
            let b = lost_rows(
                &schema,
                7,
                &[
                    ("store_full:vfs".into(), 12),
                    ("store_full:profile".into(), 3),
                ],
            )
            .unwrap();
            assert_eq!(b.num_rows(), 2);
            let mut t = Tally::default();
            tally(&b, &mut t);
            assert_eq!(t["lost"], (2, 2));
            let cause = b.column_by_name(col::CAUSE).unwrap().as_string::<i32>();
            assert_eq!(cause.value(1), "store_full:profile");
            let value = b
                .column_by_name(col::VALUE)
                .unwrap()
                .as_primitive::<Int64Type>();
            assert_eq!(value.values().to_vec(), [12, 3]);
        }
    }

    #[test]
    fn full_and_read_only_are_told_apart_from_other_errors() {
        let io = |code| PackError::Write {
            path: "x".into(),
            detail: std::io::Error::from_raw_os_error(code).to_string(),
        };
        assert_eq!(Why::of(&io(libc::ENOSPC)), Some(Why::Full));
        assert_eq!(Why::of(&io(libc::EDQUOT)), Some(Why::Full));
        assert_eq!(
            Why::of(&PackError::Rename {
                from: "a".into(),
                to: "b".into(),
                err: std::io::Error::from_raw_os_error(libc::EROFS)
            }),
            Some(Why::ReadOnly)
        );
        assert_eq!(Why::of(&io(libc::EIO)), None);
        assert_eq!(Why::of(&PackError::NoFreeName { path: "x".into() }), None);
    }
}
