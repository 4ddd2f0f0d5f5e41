//! The conversion itself: rows are folded batch by batch into samples keyed by (stack, labels),
//! then the tables, samples and stream facts are assembled into a `Profile` and gzipped.

use std::collections::HashMap;
use std::io::Write;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema, TimeUnit};
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use stacks_stream::columns::{cast_column, column, ns_per_unit};
use stacks_stream::dict::EntryCache;
use stacks_stream::frames::{self, NO_STACK_FRAME, SHORT_OFFCPU_FRAME, StackFrames};
use stacks_stream::{InputStream, check_version, col, kind};

use crate::Error;
use crate::columns::{Numeric, Plan};
use crate::metadata::Facts;
use crate::proto::{self, Line, Profile, ValueType};
use crate::tables::{Finished, Tables};

/// What to convert and how (the command-line options).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The stack column; default `stack`, else the first column holding symbolized stacks.
    pub stack: Option<String>,
    /// Value columns; default every numeric column but `pid`/`tid`/`cpu` and `*_error`, or a
    /// count of rows when there is none.
    pub values: Vec<String>,
    /// Leave out the labels (string columns, `pid`/`tid`/`cpu`).
    pub no_labels: bool,
    /// For row streams (a `kind` and a `value` column, as stacks-record/-symbolize write):
    /// which kinds of rows to convert (each entry may list several, comma-separated); default
    /// `profile`.
    pub kinds: Vec<String>,
    /// Append `_[k]` to kernel function names.
    pub annotate: bool,
    /// Root every stack at a frame named after the process (`comm` column).
    pub process_name: bool,
    /// Put a `-` frame between the kernel and the user frames of a stack.
    pub delimiter: bool,
}

/// The frame between kernel and user frames with `--delimiter` (bcc's `-d`).
pub(crate) const DELIMITER_FRAME: &str = "-";
/// Root frame name for a row whose process name is null or empty, with `--process-name`.
const UNKNOWN_PROCESS: &str = "[unknown]";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum LabelValue {
    Str { key: i64, value: i64 },
    Num { key: i64, value: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SampleKey {
    locations: Vec<u64>,
    labels: Vec<LabelValue>,
}

/// Folds record batches into a profile. Feed it with [`Converter::push`], end with
/// [`Converter::finish`].
pub struct Converter {
    input: String,
    plan: Plan,
    facts: Facts,
    tables: Tables,
    samples: HashMap<SampleKey, Vec<i64>>,
    /// Smallest and largest `time`, ns.
    time_range: Option<(i64, i64)>,
    rows: u64,
    /// Lines of the location being assembled (reused between rows).
    pending: Vec<Line>,
    /// The location ids of each stack of a dictionary-encoded stack column, converted once
    /// per stream.
    entry_locations: EntryCache<Vec<u64>>,
    process_name: bool,
    delimiter: bool,
}

/// One batch's values of a value column.
enum Values {
    Ones,
    Int(Int64Array),
    /// A count column: null stands for 1.
    IntOrOne(Int64Array),
    Float(Float64Array),
}

impl Values {
    fn at(&self, row: usize) -> i64 {
        match self {
            Values::Ones => 1,
            Values::Int(a) if a.is_valid(row) => a.value(row),
            Values::IntOrOne(a) if a.is_valid(row) => a.value(row),
            Values::IntOrOne(_) => 1,
            Values::Float(a) if a.is_valid(row) => {
                let v = a.value(row).round();
                // `as` saturates and maps NaN to 0.
                v as i64
            }
            _ => 0,
        }
    }
}

/// One batch's values of a label column.
enum Labels {
    Str(i64, StringArray),
    Num(i64, Int64Array),
}

/// The columns of one batch the conversion reads, cast.
struct BatchColumns {
    stack: StackFrames,
    values: Vec<Values>,
    labels: Vec<Labels>,
    /// `kind`, for a row stream.
    kinds: Option<StringArray>,
    /// `duration`, for a row stream that has it.
    durations: Option<Int64Array>,
    /// `comm`, with `--process-name`.
    comms: Option<StringArray>,
}

impl Converter {
    /// Prepare to convert batches of `schema`; `input` names the stream in error messages.
    pub fn new(schema: &Schema, input: &str, options: &Options) -> Result<Self, Error> {
        let plan = Plan::new(
            schema,
            input,
            options.stack.as_deref(),
            &options.values,
            !options.no_labels,
            &options.kinds,
        )?;
        if options.process_name && plan.comm.is_none() {
            return Err(stacks_stream::ContractError::MissingColumn {
                input: input.into(),
                column: col::COMM.into(),
                why: "--process-name roots stacks at the process name".into(),
            }
            .into());
        }
        frames::check_type(
            schema.field(plan.stack).data_type(),
            input,
            &plan.stack_name,
        )?;
        Ok(Self {
            input: input.into(),
            facts: Facts::from_metadata(schema.metadata()),
            plan,
            tables: Tables::with_kernel_suffix(options.annotate),
            samples: HashMap::new(),
            time_range: None,
            rows: 0,
            pending: Vec::new(),
            entry_locations: EntryCache::default(),
            process_name: options.process_name,
            delimiter: options.delimiter,
        })
    }

    /// Rows folded in so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Column `index` (called `name`) of a batch, cast to `to`.
    fn cast(
        &self,
        batch: &RecordBatch,
        index: usize,
        name: &str,
        to: &DataType,
    ) -> Result<ArrayRef, Error> {
        Ok(cast_column(batch, index, name, to, &self.input)?)
    }

    /// Fold one batch in.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let columns = self.read(batch)?;
        if let Some(entries) = columns.stack.entries() {
            self.entry_locations.prepare(entries);
        }
        if let Some((i, unit)) = self.plan.time {
            let a = self.cast(batch, i, col::TIME, &DataType::Int64)?;
            self.fold_time(a.as_primitive::<Int64Type>(), unit);
        }
        for row in 0..batch.num_rows() {
            self.push_row(&columns, row);
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// The columns of `batch` the plan reads, cast.
    fn read(&mut self, batch: &RecordBatch) -> Result<BatchColumns, Error> {
        let stack_name = &self.plan.stack_name;
        let stack = column(batch, self.plan.stack, stack_name, &self.input)?;
        let stack = StackFrames::new(stack, &self.input, stack_name)?;
        let strings = |i: Option<usize>, name: &str| -> Result<Option<StringArray>, Error> {
            i.map(|i| {
                let a = self.cast(batch, i, name, &DataType::Utf8)?;
                Ok(a.as_string::<i32>().clone())
            })
            .transpose()
        };
        let kinds = strings(self.plan.rows_of_kind.as_ref().map(|(i, _)| *i), col::KIND)?;
        let comms = strings(self.plan.comm.filter(|_| self.process_name), col::COMM)?;
        let durations = match self.plan.duration {
            Some(i) => {
                let a = self.cast(batch, i, col::DURATION, &DataType::Int64)?;
                Some(a.as_primitive::<Int64Type>().clone())
            }
            None => None,
        };
        Ok(BatchColumns {
            stack,
            values: self.read_values(batch)?,
            labels: self.read_labels(batch)?,
            kinds,
            durations,
            comms,
        })
    }

    /// The value columns of `batch`, in the plan's order.
    fn read_values(&self, batch: &RecordBatch) -> Result<Vec<Values>, Error> {
        let mut values = Vec::with_capacity(self.plan.values.len());
        for v in &self.plan.values {
            let ints = |i| -> Result<Int64Array, Error> {
                let a = self.cast(batch, i, &v.name, &DataType::Int64)?;
                Ok(a.as_primitive::<Int64Type>().clone())
            };
            values.push(match (v.index, v.numeric) {
                (None, _) => Values::Ones,
                (Some(i), Numeric::Int) if v.null_is_one => Values::IntOrOne(ints(i)?),
                (Some(i), Numeric::Int) => Values::Int(ints(i)?),
                (Some(i), Numeric::Float) => {
                    let a = self.cast(batch, i, &v.name, &DataType::Float64)?;
                    Values::Float(a.as_primitive::<Float64Type>().clone())
                }
            });
        }
        Ok(values)
    }

    /// The label columns of `batch`, in the plan's order, with their keys interned.
    fn read_labels(&mut self, batch: &RecordBatch) -> Result<Vec<Labels>, Error> {
        let mut labels = Vec::with_capacity(self.plan.labels.len());
        for l in &self.plan.labels {
            let key = self.tables.string(&l.name);
            labels.push(if l.numeric {
                let a = cast_column(batch, l.index, &l.name, &DataType::Int64, &self.input)?;
                Labels::Num(key, a.as_primitive::<Int64Type>().clone())
            } else {
                let a = cast_column(batch, l.index, &l.name, &DataType::Utf8, &self.input)?;
                Labels::Str(key, a.as_string::<i32>().clone())
            });
        }
        Ok(labels)
    }

    /// Fold row `row` of a batch in: skipped when it is of a kind not converted.
    fn push_row(&mut self, c: &BatchColumns, row: usize) {
        let kind = match &c.kinds {
            Some(kinds) => {
                let wanted: &[String] = self.plan.rows_of_kind.as_ref().map_or(&[], |(_, k)| k);
                match kinds.is_valid(row).then(|| kinds.value(row)) {
                    Some(k) if wanted.iter().any(|w| w == k) => Some(k),
                    _ => return,
                }
            }
            None => None,
        };
        let key = SampleKey {
            locations: self.row_locations(c, row, kind),
            labels: self.row_labels(&c.labels, row),
        };
        let values = &c.values;
        let sums = self
            .samples
            .entry(key)
            .or_insert_with(|| vec![0; values.len()]);
        for ((sum, v), column) in sums.iter_mut().zip(values).zip(&self.plan.values) {
            if column.of_kind.is_none() || column.of_kind.as_deref() == kind {
                *sum = sum.saturating_add(v.at(row));
            }
        }
    }

    /// The locations of `row`'s sample: its stack, a marker frame for a row stream's row
    /// without one, and the process name root with `--process-name`.
    fn row_locations(&mut self, c: &BatchColumns, row: usize, kind: Option<&str>) -> Vec<u64> {
        let (tables, pending, delimiter) = (&mut self.tables, &mut self.pending, self.delimiter);
        let mut locations = match c.stack.entry(row) {
            // Each distinct stack of a dictionary converted once per stream.
            Some(entry) if c.stack.is_dictionary() => self
                .entry_locations
                .get_or_insert_with(entry, || {
                    let frames = c.stack.entry_frames(entry);
                    stack_locations(tables, &c.stack, frames, pending, delimiter)
                })
                .clone(),
            _ => stack_locations(tables, &c.stack, c.stack.row(row), pending, delimiter),
        };
        // Rows whose stack was not recorded; folded short off-CPU intervals have no
        // duration of their own either.
        if kind.is_some() && c.stack.is_null(row) {
            let folded =
                kind == Some(kind::SWITCH) && c.durations.as_ref().is_none_or(|d| d.is_null(row));
            let name = if folded {
                SHORT_OFFCPU_FRAME
            } else {
                NO_STACK_FRAME
            };
            locations.push(self.tables.synthetic(name));
        }
        if let Some(comms) = &c.comms {
            let name = Some(comms)
                .filter(|c| c.is_valid(row))
                .map(|c| c.value(row))
                .filter(|c| !c.is_empty())
                .unwrap_or(UNKNOWN_PROCESS);
            locations.push(self.tables.synthetic(name));
        }
        locations
    }

    /// The labels of `row`: its non-null, non-empty label values.
    fn row_labels(&mut self, labels: &[Labels], row: usize) -> Vec<LabelValue> {
        let mut key_labels = Vec::with_capacity(labels.len());
        for l in labels {
            match l {
                Labels::Str(key, a) if a.is_valid(row) && !a.value(row).is_empty() => {
                    let value = self.tables.string(a.value(row));
                    key_labels.push(LabelValue::Str { key: *key, value });
                }
                Labels::Num(key, a) if a.is_valid(row) => {
                    key_labels.push(LabelValue::Num {
                        key: *key,
                        value: a.value(row),
                    });
                }
                _ => {}
            }
        }
        key_labels
    }

    fn fold_time(&mut self, times: &Int64Array, unit: TimeUnit) {
        let scale = ns_per_unit(unit);
        for t in times.iter().flatten() {
            let t = t.saturating_mul(scale);
            self.time_range = Some(match self.time_range {
                Some((lo, hi)) => (lo.min(t), hi.max(t)),
                None => (t, t),
            });
        }
    }

    /// Assemble the profile.
    pub fn finish(mut self) -> Profile {
        let t = &mut self.tables;
        let sample_type: Vec<ValueType> = self
            .plan
            .values
            .iter()
            .map(|v| ValueType {
                r#type: t.string(&v.kind.name),
                unit: t.string(v.kind.unit),
            })
            .collect();
        let default_sample_type = sample_type
            .get(self.plan.default_value)
            .map_or(0, |v| v.r#type);
        // The CPU sampling period describes profile rows only (a query result is assumed to
        // be about them when the recording sampled CPUs).
        let sampled = self
            .plan
            .rows_of_kind
            .as_ref()
            .is_none_or(|(_, kinds)| kinds.iter().any(|k| k == kind::PROFILE));
        let period_ns = self.facts.period_ns.filter(|_| sampled);
        let period_type = period_ns.map(|_| ValueType {
            r#type: t.string("cpu"),
            unit: t.string("nanoseconds"),
        });
        let comment = self.facts.comments.iter().map(|c| t.string(c)).collect();
        let (time_nanos, duration_nanos) = span(self.facts.start_ns, self.time_range);

        let mut samples: Vec<(SampleKey, Vec<i64>)> = self.samples.into_iter().collect();
        samples.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let sample = samples
            .into_iter()
            .map(|(key, value)| proto::Sample {
                location_id: key.locations,
                value,
                label: key.labels.into_iter().map(label).collect(),
            })
            .collect();

        let Finished {
            strings,
            functions,
            mappings,
            locations,
        } = self.tables.finish();
        Profile {
            sample_type,
            sample,
            mapping: mappings,
            location: locations,
            function: functions,
            string_table: strings,
            drop_frames: 0,
            keep_frames: 0,
            time_nanos,
            duration_nanos,
            period_type,
            period: period_ns.unwrap_or(0),
            comment,
            default_sample_type,
        }
    }
}

/// The profile's start and duration: from the recording start (when it precedes the first
/// row) or the first row, to the last row.
fn span(start_ns: Option<i64>, rows: Option<(i64, i64)>) -> (i64, i64) {
    match (start_ns, rows) {
        (Some(start), Some((lo, hi))) if start <= lo => (start, hi.saturating_sub(start)),
        (_, Some((lo, hi))) => (lo, hi.saturating_sub(lo)),
        (Some(start), None) => (start, 0),
        (None, None) => (0, 0),
    }
}

fn label(l: LabelValue) -> proto::Label {
    match l {
        LabelValue::Str { key, value } => proto::Label {
            key,
            str: value,
            ..Default::default()
        },
        LabelValue::Num { key, value } => proto::Label {
            key,
            num: value,
            ..Default::default()
        },
    }
}

/// The location ids of a stack (`frames`, a row's or an entry's), leaf first. Consecutive inlined frames and the frame of
/// their containing function (same address) make one location whose lines list them in that
/// order, which is pprof's order too.
/// With `delimiter`, a [`DELIMITER_FRAME`] location separates the kernel frames from the user
/// frames when the stack has both.
fn stack_locations(
    tables: &mut Tables,
    stack: &StackFrames,
    range: std::ops::Range<usize>,
    pending: &mut Vec<Line>,
    delimiter: bool,
) -> Vec<u64> {
    let mut locations = Vec::with_capacity(range.len() + 1);
    pending.clear();
    // Index of the last inlined frame waiting for its containing frame.
    let mut open: Option<usize> = None;
    let mut last_kernel = false;
    let mut close = |tables: &mut Tables, pending: &mut Vec<Line>, at: usize| {
        if let Some(f) = stack.frame(at) {
            if delimiter && last_kernel && !f.kernel {
                locations.push(tables.synthetic(DELIMITER_FRAME));
            }
            last_kernel = f.kernel;
            let (mapping, address) = tables.mapping(&f);
            locations.push(tables.location(mapping, address, pending));
        }
        pending.clear();
    };
    for i in range {
        let Some(f) = stack.frame(i) else { continue };
        // Inlined frames at another address than this one were left without their
        // containing frame: give them a location of their own.
        if let Some(at) = open
            && let Some(prev) = stack.frame(at)
            && (prev.kernel, prev.addr) != (f.kernel, f.addr)
        {
            close(tables, pending, at);
        }
        pending.push(Line {
            function_id: tables.function(&f),
            line: f.line,
            column: f.column,
        });
        if f.inlined {
            open = Some(i);
        } else {
            close(tables, pending, i);
            open = None;
        }
    }
    if let Some(at) = open {
        close(tables, pending, at);
    }
    locations
}

/// Read the whole stream and convert it.
pub fn convert(input: &mut InputStream, options: &Options) -> Result<Profile, Error> {
    let schema = input.schema();
    check_version(&schema, input.name())?;
    let mut converter = Converter::new(&schema, input.name(), options)?;
    while let Some(batch) = input.next_batch()? {
        converter.push(&batch)?;
    }
    Ok(converter.finish())
}

/// Serialize and gzip `profile` into `out`; `name` names the destination in errors.
pub(crate) fn write_profile(profile: &Profile, out: impl Write, name: &str) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: name.into(),
        source,
    };
    let mut gz = GzEncoder::new(out, Compression::default());
    gz.write_all(&profile.encode_to_vec()).map_err(err)?;
    let mut out = gz.finish().map_err(err)?;
    out.flush().map_err(err)
}

/// The gzipped serialized profile, as `go tool pprof` reads it.
pub fn encode(profile: &Profile) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    write_profile(profile, &mut buf, "memory")?;
    Ok(buf)
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
