//! The grouped table of one screen: the rows of a table query (see [`crate::view`]) with
//! each group cell as shown and as the literal a drill-down compares with, the weights, and
//! the latency histogram; and the same table as Arrow columns for text mode.

use std::sync::Arc;

use anyhow::Result;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, Schema};

use crate::catalog::quote_text;
use crate::fmt;
use crate::view::{BUCKETS, BYTES, LAT_N, PERCENTILES, SAMPLES, Span, THREAD_NS, Value};

/// Shown for a null group cell.
pub const NULL: &str = "∅";

/// Latency of one row: how many rows had one, percentiles, log2 histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Latency {
    pub n: i64,
    pub p: [Option<i64>; 3],
    pub hist: [i64; BUCKETS],
}

/// One group.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub values: Vec<Value>,
    pub samples: i64,
    pub thread_ns: Option<i64>,
    pub bytes: Option<i64>,
    pub latency: Option<Latency>,
}

impl Row {
    /// Average active threads over a window observing `window_ns` (docs/top.md, "Average
    /// active threads"; [`Table::observed_ns`]).
    pub fn avg_thr(&self, window_ns: i64) -> Option<f64> {
        self.thread_ns.map(|t| t as f64 / window_ns.max(1) as f64)
    }

    /// Whether any group cell contains `needle` (lowercase), ignoring case.
    pub fn matches(&self, needle: &str) -> bool {
        self.values
            .iter()
            .any(|v| v.shown.to_lowercase().contains(needle))
    }
}

/// The table of a view.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub group: Vec<String>,
    pub rows: Vec<Row>,
    /// The group columns as returned, for text mode.
    columns: Vec<(Field, Vec<ArrayRef>)>,
    pub window: Span,
    /// The time the window observed, when it is not its length: for `state` rows, the periods
    /// of the sampling passes that ran in it (a pass the recorder could not run on time
    /// observed nothing; see [`crate::view::Planner::observed`]).
    pub observed_ns: Option<i64>,
    pub latency: bool,
}

impl Table {
    /// The table of query result `batches` over `window`, grouped by `group`.
    pub fn new(
        group: &[String],
        batches: &[RecordBatch],
        window: Span,
        latency: bool,
    ) -> Result<Self> {
        let g = group.len();
        let mut rows = Vec::new();
        let mut columns: Vec<(Field, Vec<ArrayRef>)> = Vec::new();
        let options = FormatOptions::default().with_null(NULL);
        for batch in batches {
            let schema = batch.schema();
            if columns.is_empty() {
                columns = (0..g)
                    .map(|i| (schema.field(i).clone(), Vec::new()))
                    .collect();
            }
            for (i, c) in columns.iter_mut().enumerate() {
                c.1.push(Arc::clone(batch.column(i)));
            }
            let shown: Vec<ArrayFormatter> = (0..g)
                .map(|i| ArrayFormatter::try_new(batch.column(i).as_ref(), &options))
                .collect::<Result<_, _>>()?;
            let int = |name: &str| -> Result<Option<Int64Array>> {
                Ok(match batch.column_by_name(name) {
                    Some(a) => Some(
                        arrow_cast::cast(a, &DataType::Int64)?
                            .as_primitive::<Int64Type>()
                            .clone(),
                    ),
                    None => None,
                })
            };
            let samples = int(SAMPLES)?.ok_or_else(|| anyhow::anyhow!("no {SAMPLES} column"))?;
            let thread_ns = int(THREAD_NS)?;
            let bytes = int(BYTES)?;
            let lat_n = int(LAT_N)?;
            let pcts: Vec<Option<Int64Array>> = PERCENTILES
                .iter()
                .map(|(n, _)| int(n))
                .collect::<Result<_>>()?;
            let hists: Vec<Option<Int64Array>> = (0..BUCKETS)
                .map(|k| int(&format!("h{k}")))
                .collect::<Result<_>>()?;
            let opt = |a: &Option<Int64Array>, r: usize| {
                a.as_ref().and_then(|a| a.is_valid(r).then(|| a.value(r)))
            };
            for r in 0..batch.num_rows() {
                let values = (0..g)
                    .map(|i| Value {
                        sql: literal(batch.column(i).as_ref(), r),
                        shown: shown[i].value(r).to_string(),
                    })
                    .collect();
                let latency = lat_n.as_ref().map(|n| {
                    let mut hist = [0i64; BUCKETS];
                    for (k, h) in hists.iter().enumerate() {
                        hist[k] = opt(h, r).unwrap_or(0);
                    }
                    Latency {
                        n: n.value(r),
                        p: [opt(&pcts[0], r), opt(&pcts[1], r), opt(&pcts[2], r)],
                        hist,
                    }
                });
                rows.push(Row {
                    values,
                    samples: samples.value(r),
                    thread_ns: opt(&thread_ns, r),
                    bytes: opt(&bytes, r),
                    latency,
                });
            }
        }
        if columns.is_empty() {
            columns = group
                .iter()
                .map(|n| (Field::new(n, DataType::Utf8, true), Vec::new()))
                .collect();
        }
        Ok(Table {
            group: group.to_vec(),
            rows,
            columns,
            window,
            observed_ns: None,
            latency,
        })
    }

    /// The nanoseconds average active threads divide by: the time the window observed.
    pub(crate) fn thread_window(&self) -> i64 {
        self.observed_ns.unwrap_or(self.window.len())
    }

    /// Whether any row has a thread-time weight.
    pub(crate) fn has_threads(&self) -> bool {
        self.rows.iter().any(|r| r.thread_ns.is_some())
    }

    /// Whether any row has bytes.
    pub(crate) fn has_bytes(&self) -> bool {
        self.rows.iter().any(|r| r.bytes.is_some())
    }

    /// The table as one batch: the group columns by name, `samples`, `avg_thr`, then
    /// `bytes` and `bytes_per_s` when any row has bytes, then with latency `latency` (the
    /// histogram, `<1µs` to `≥1s`), `p50_ns`, `p95_ns`, `p99_ns`. `avg_thr` is rounded to
    /// two decimals when `rounded` (text tables).
    pub fn batch(&self, rounded: bool) -> Result<RecordBatch> {
        let mut fields = Vec::new();
        let mut arrays: Vec<ArrayRef> = Vec::new();
        for (field, parts) in &self.columns {
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            let array = if refs.is_empty() {
                arrow_array::new_empty_array(field.data_type())
            } else {
                arrow_select::concat::concat(&refs)?
            };
            fields.push(Field::new(field.name(), field.data_type().clone(), true));
            arrays.push(array);
        }
        let window_ns = self.window.len();
        let secs = window_ns as f64 / 1e9;
        fields.push(Field::new(SAMPLES, DataType::Int64, false));
        arrays.push(Arc::new(Int64Array::from_iter_values(
            self.rows.iter().map(|r| r.samples),
        )));
        fields.push(Field::new("avg_thr", DataType::Float64, true));
        arrays.push(Arc::new(Float64Array::from_iter(self.rows.iter().map(
            |r| {
                r.avg_thr(self.thread_window()).map(|v| {
                    if rounded {
                        (v * 100.0).round() / 100.0
                    } else {
                        v
                    }
                })
            },
        ))));
        if self.has_bytes() {
            fields.push(Field::new(BYTES, DataType::Int64, true));
            arrays.push(Arc::new(Int64Array::from_iter(
                self.rows.iter().map(|r| r.bytes),
            )));
            fields.push(Field::new("bytes_per_s", DataType::Float64, true));
            arrays.push(Arc::new(Float64Array::from_iter(self.rows.iter().map(
                |r| {
                    r.bytes.map(|b| {
                        let v = b as f64 / secs;
                        if rounded { v.round() } else { v }
                    })
                },
            ))));
        }
        if self.latency {
            fields.push(Field::new("latency", DataType::Utf8, true));
            arrays.push(Arc::new(StringArray::from_iter(self.rows.iter().map(
                |r| {
                    r.latency
                        .as_ref()
                        .filter(|l| l.n > 0)
                        .map(|l| fmt::histogram(&l.hist))
                },
            ))));
            for (i, (name, _)) in PERCENTILES.iter().enumerate() {
                fields.push(Field::new(*name, DataType::Int64, true));
                arrays.push(Arc::new(Int64Array::from_iter(
                    self.rows
                        .iter()
                        .map(|r| r.latency.as_ref().and_then(|l| l.p[i])),
                )));
            }
        }
        Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
    }
}

/// Row `r` of `array` as an SQL literal of its type; `None` when null.
fn literal(array: &dyn Array, r: usize) -> Option<String> {
    if array.is_null(r) {
        return None;
    }
    let text = arrow_cast::display::ArrayFormatter::try_new(array, &FormatOptions::default())
        .ok()?
        .value(r)
        .to_string();
    let t = array.data_type();
    Some(if t.is_integer() || *t == DataType::Boolean {
        text
    } else {
        quote_text(&text)
    })
}
