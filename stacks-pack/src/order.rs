//! Row order inside a row group: rows are sorted by `time` (stable, so equal times keep their
//! arrival order) before they are written, which makes each row group's time statistics a
//! tight range that time-window queries can prune on. Also splits sorted rows into runs of
//! one UTC date, for `--partition date`.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{ArrowError, DataType, Schema, SchemaRef, TimeUnit};
use arrow_select::concat::concat_batches;

use crate::naming::utc_date;

const NANOS_PER_SEC: i64 = 1_000_000_000;
const NANOS_PER_DAY: i64 = 86_400 * NANOS_PER_SEC;
const NANOS_PER_HOUR: i64 = 3_600 * NANOS_PER_SEC;

/// The `time` column of a schema, when it is a nanosecond timestamp (the stacks contract).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeColumn {
    index: usize,
}

/// Find the `time` column of `schema`.
pub(crate) fn time_column(schema: &Schema) -> Option<TimeColumn> {
    let index = schema.index_of(stacks_stream::col::TIME).ok()?;
    match schema.field(index).data_type() {
        DataType::Timestamp(TimeUnit::Nanosecond, _) => Some(TimeColumn { index }),
        _ => None,
    }
}

impl TimeColumn {
    fn values<'a>(
        &self,
        batch: &'a RecordBatch,
    ) -> &'a arrow_array::PrimitiveArray<TimestampNanosecondType> {
        batch
            .column(self.index)
            .as_primitive::<TimestampNanosecondType>()
    }

    /// Seconds since the epoch of the first row (the earliest once sorted); `None` when empty.
    pub(crate) fn first_secs(&self, batch: &RecordBatch) -> Option<u64> {
        let t = self.values(batch);
        (!t.is_empty()).then(|| {
            let ns = if t.is_null(0) { 0 } else { t.value(0) };
            u64::try_from(ns.div_euclid(NANOS_PER_SEC)).unwrap_or(0)
        })
    }

    /// Runs of consecutive rows with the same UTC date: (`YYYY-MM-DD`, start, length).
    /// Null times count as 1970-01-01.
    pub(crate) fn date_runs(&self, batch: &RecordBatch) -> Vec<(String, usize, usize)> {
        self.runs(batch, NANOS_PER_DAY, utc_date)
    }

    /// Runs of consecutive rows in the same UTC hour: (`YYYY-MM-DD`, `HH`) as the partition
    /// path `date=YYYY-MM-DD/hour=HH`, start, length. Null times count as 1970-01-01 00h.
    pub(crate) fn hour_runs(&self, batch: &RecordBatch) -> Vec<(String, usize, usize)> {
        self.runs(batch, NANOS_PER_HOUR, |hour| {
            format!(
                "date={}/hour={:02}",
                utc_date(hour.div_euclid(24)),
                hour.rem_euclid(24)
            )
        })
    }

    /// Runs of consecutive rows in the same period of `period_ns`, each named by `name` of
    /// the period's number since the epoch.
    fn runs(
        &self,
        batch: &RecordBatch,
        period_ns: i64,
        name: impl Fn(i64) -> String,
    ) -> Vec<(String, usize, usize)> {
        let t = self.values(batch);
        let period = |i: usize| {
            if t.is_null(i) {
                0
            } else {
                t.value(i).div_euclid(period_ns)
            }
        };
        let mut runs = Vec::new();
        let mut start = 0;
        for i in 1..=t.len() {
            if i == t.len() || period(i) != period(start) {
                runs.push((name(period(start)), start, i - start));
                start = i;
            }
        }
        runs
    }
}

/// The first `n` rows of `pending` as one batch, and the rest.
pub(crate) fn split_front(
    schema: &SchemaRef,
    pending: &[RecordBatch],
    n: usize,
) -> Result<(RecordBatch, Vec<RecordBatch>), ArrowError> {
    let mut front = Vec::new();
    let mut rest = Vec::new();
    let mut need = n;
    for b in pending {
        if need == 0 {
            rest.push(b.clone());
        } else if b.num_rows() <= need {
            need -= b.num_rows();
            front.push(b.clone());
        } else {
            front.push(b.slice(0, need));
            rest.push(b.slice(need, b.num_rows() - need));
            need = 0;
        }
    }
    let group = if front.len() == 1 {
        front
            .pop()
            .unwrap_or_else(|| RecordBatch::new_empty(schema.clone()))
    } else {
        concat_batches(schema, &front)?
    };
    Ok((group, rest))
}

/// `batch` sorted by time, stable; returned as is when already in order (the usual case for a
/// live recording).
pub(crate) fn sort_by_time(
    batch: &RecordBatch,
    time: &TimeColumn,
) -> Result<RecordBatch, ArrowError> {
    let t = time.values(batch);
    let key = |i: usize| if t.is_null(i) { i64::MIN } else { t.value(i) };
    if (1..t.len()).all(|i| key(i - 1) <= key(i)) {
        return Ok(batch.clone());
    }
    let mut idx: Vec<u32> = (0..t.len() as u32).collect();
    idx.sort_by_key(|&i| key(i as usize));
    let indices = UInt32Array::from(idx);
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    RecordBatch::try_new(Arc::clone(&batch.schema()), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, TimestampNanosecondArray};
    use arrow_schema::Field;

    fn batch(times: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("time", stacks_stream::time_type(), false),
            Field::new("n", DataType::Int32, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(TimestampNanosecondArray::from(times.to_vec()).with_timezone("UTC")),
                Arc::new(Int32Array::from_iter_values(0..times.len() as i32)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn sorts_stably_by_time() {
        let b = batch(&[5, 3, 5, 1, 3]);
        let t = time_column(&b.schema()).unwrap();
        let s = sort_by_time(&b, &t).unwrap();
        let n: Vec<i32> = s
            .column(1)
            .as_primitive::<arrow_array::types::Int32Type>()
            .values()
            .to_vec();
        assert_eq!(n, vec![3, 1, 4, 0, 2]);
        assert_eq!(t.first_secs(&s), Some(0));
    }

    #[test]
    fn date_runs_split_at_utc_midnight() {
        let day = NANOS_PER_DAY;
        let base = 19_000 * day; // 2022-01-08
        let b = batch(&[base, base + day - 1, base + day, base + 3 * day]);
        let t = time_column(&b.schema()).unwrap();
        let runs = t.date_runs(&b);
        assert_eq!(
            runs,
            vec![
                ("2022-01-08".to_string(), 0, 2),
                ("2022-01-09".to_string(), 2, 1),
                ("2022-01-11".to_string(), 3, 1)
            ]
        );
    }

    #[test]
    fn hour_runs_split_at_utc_hours() {
        let hour = 3_600 * NANOS_PER_SEC;
        let base = 19_000 * NANOS_PER_DAY + 23 * hour; // 2022-01-08 23:00
        let b = batch(&[base, base + hour - 1, base + hour, base + hour + 5]);
        let t = time_column(&b.schema()).unwrap();
        assert_eq!(
            t.hour_runs(&b),
            vec![
                ("date=2022-01-08/hour=23".to_string(), 0, 2),
                ("date=2022-01-09/hour=00".to_string(), 2, 2)
            ]
        );
    }

    #[test]
    fn split_front_takes_exactly_n_rows() {
        let schema = batch(&[]).schema();
        let parts = vec![batch(&[1, 2, 3]), batch(&[4, 5])];
        let (front, rest) = split_front(&schema, &parts, 4).unwrap();
        assert_eq!(front.num_rows(), 4);
        assert_eq!(rest.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        let (front, rest) = split_front(&schema, &parts, 5).unwrap();
        assert_eq!((front.num_rows(), rest.len()), (5, 0));
    }
}
