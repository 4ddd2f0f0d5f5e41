//! Row order inside a row group: rows are sorted by `time` (stable, so equal times keep their
//! arrival order) before they are written, which makes each row group's time statistics a
//! tight range that time-window queries can prune on. Also splits sorted rows into runs of
//! one UTC date, for `--partition date`.

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Schema, TimeUnit};
use arrow_select::interleave::interleave;

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

/// Rows of a sorted group given to the writer at a time: the group is not copied whole
/// (its rows already wait in memory; a sorted copy of them all would double that), only this
/// many rows at a time are gathered in time order.
pub(crate) const SORTED_CHUNK_ROWS: usize = 8192;

/// The first `n` rows of `pending`, and the rest; slices, nothing is copied.
pub(crate) fn split_front(
    pending: &[RecordBatch],
    n: usize,
) -> (Vec<RecordBatch>, Vec<RecordBatch>) {
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
    (front, rest)
}

/// The rows of `parts` (in this order, one after another) in time order, stable, as (part,
/// row) pairs; `None` when they are in order already (the usual case for a live recording).
pub(crate) fn time_order(parts: &[RecordBatch], time: &TimeColumn) -> Option<Vec<(usize, usize)>> {
    let key = |t: &arrow_array::PrimitiveArray<TimestampNanosecondType>, i: usize| {
        if t.is_null(i) { i64::MIN } else { t.value(i) }
    };
    let mut keyed = Vec::with_capacity(parts.iter().map(RecordBatch::num_rows).sum());
    for (p, batch) in parts.iter().enumerate() {
        let t = time.values(batch);
        keyed.extend((0..t.len()).map(|i| (key(t, i), p, i)));
    }
    if keyed.windows(2).all(|w| w[0].0 <= w[1].0) {
        return None;
    }
    keyed.sort_by_key(|&(k, _, _)| k);
    Some(keyed.into_iter().map(|(_, p, i)| (p, i)).collect())
}

/// The rows of `parts` in `order` (from [`time_order`]; `None`: as they are), as batches of at
/// most [`SORTED_CHUNK_ROWS`] gathered rows (parts in order are given as they are).
pub(crate) fn in_order<'a>(
    parts: &'a [RecordBatch],
    order: Option<&'a [(usize, usize)]>,
) -> impl Iterator<Item = Result<RecordBatch, ArrowError>> + 'a {
    let chunks: Vec<Chunk<'a>> = match order {
        None => parts.iter().map(Chunk::Whole).collect(),
        Some(order) => order.chunks(SORTED_CHUNK_ROWS).map(Chunk::Gather).collect(),
    };
    chunks.into_iter().map(move |c| match c {
        Chunk::Whole(b) => Ok(b.clone()),
        Chunk::Gather(rows) => gather(parts, rows),
    })
}

enum Chunk<'a> {
    Whole(&'a RecordBatch),
    Gather(&'a [(usize, usize)]),
}

/// The rows (part, row) of `parts`, in that order, as one batch.
fn gather(parts: &[RecordBatch], rows: &[(usize, usize)]) -> Result<RecordBatch, ArrowError> {
    let schema = parts[0].schema();
    let columns = (0..schema.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn Array> = parts.iter().map(|b| b.column(c).as_ref()).collect();
            interleave(&arrays, rows)
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    RecordBatch::try_new(schema, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, TimestampNanosecondArray};
    use arrow_schema::Field;
    use std::sync::Arc;

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

    fn numbers(batches: &[RecordBatch]) -> Vec<i32> {
        batches
            .iter()
            .flat_map(|b| {
                let n = b.column(1).as_primitive::<arrow_array::types::Int32Type>();
                n.values().to_vec()
            })
            .collect()
    }

    #[test]
    fn rows_of_several_parts_come_out_stably_by_time() {
        // Rows numbered 0.. in each part; times out of order within and across the parts.
        let parts = [batch(&[5, 3, 5]), batch(&[1, 3]), batch(&[0])];
        let t = time_column(&parts[0].schema()).unwrap();
        let order = time_order(&parts, &t).expect("out of order");
        assert_eq!(order, vec![(2, 0), (1, 0), (0, 1), (1, 1), (0, 0), (0, 2)]);
        let out: Vec<RecordBatch> = in_order(&parts, Some(&order)).map(Result::unwrap).collect();
        assert_eq!(numbers(&out), vec![0, 0, 1, 1, 0, 2]);
        assert_eq!(t.first_secs(&out[0]), Some(0));
    }

    #[test]
    fn a_large_group_is_gathered_a_chunk_at_a_time() {
        let n = 2 * SORTED_CHUNK_ROWS + 5;
        let times: Vec<i64> = (0..n as i64).rev().collect();
        let parts = [batch(&times)];
        let t = time_column(&parts[0].schema()).unwrap();
        let order = time_order(&parts, &t).unwrap();
        let out: Vec<RecordBatch> = in_order(&parts, Some(&order)).map(Result::unwrap).collect();
        let sizes: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(sizes, vec![SORTED_CHUNK_ROWS, SORTED_CHUNK_ROWS, 5]);
        let expected: Vec<i32> = (0..n as i32).rev().collect();
        assert_eq!(numbers(&out), expected);
    }

    #[test]
    fn parts_in_order_are_given_as_they_are() {
        let parts = [batch(&[1, 2]), batch(&[2, 7])];
        let t = time_column(&parts[0].schema()).unwrap();
        assert!(time_order(&parts, &t).is_none());
        let out: Vec<RecordBatch> = in_order(&parts, None).map(Result::unwrap).collect();
        assert_eq!(out, parts.to_vec());
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
        let rows = |b: &[RecordBatch]| b.iter().map(RecordBatch::num_rows).sum::<usize>();
        let parts = vec![batch(&[1, 2, 3]), batch(&[4, 5])];
        let (front, rest) = split_front(&parts, 4);
        assert_eq!((rows(&front), rows(&rest)), (4, 1));
        let (front, rest) = split_front(&parts, 5);
        assert_eq!((rows(&front), rest.len()), (5, 0));
    }
}
