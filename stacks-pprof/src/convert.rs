//! The conversion itself: rows are folded batch by batch into samples keyed by (stack, labels),
//! then the tables, samples and stream facts are assembled into a `Profile` and gzipped.

use std::collections::HashMap;
use std::io::Write;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_cast::cast;
use arrow_schema::{DataType, Schema, TimeUnit};
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use stacks_stream::{InputStream, check_version};

use crate::Error;
use crate::columns::{Numeric, Plan};
use crate::frames::{self, StackFrames};
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

/// Root frame of `switch` rows folding off-CPU intervals shorter than the recorder's MIN:
/// they have no stack, and must count for the totals to be exact (the name the bundled
/// `offcpu` query gives them too).
pub const SHORT_OFFCPU_FRAME: &str = "[folded short off-CPU intervals]";
/// Frame of a row of a row stream whose stack was not recorded (as the bundled queries name
/// it), and of a sample without locations in folded stacks.
pub const NO_STACK_FRAME: &str = "[no stack]";
/// The frame between kernel and user frames with `--delimiter` (bcc's `-d`).
pub const DELIMITER_FRAME: &str = "-";
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
                column: stacks_stream::col::COMM.into(),
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
            process_name: options.process_name,
            delimiter: options.delimiter,
        })
    }

    /// Rows folded in so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Distinct (stack, labels) pairs so far: the number of samples the profile will have.
    pub fn unique_samples(&self) -> usize {
        self.samples.len()
    }

    /// Column `index` (called `name`) of a batch, which must have the stream's columns.
    fn column(&self, batch: &RecordBatch, index: usize, name: &str) -> Result<ArrayRef, Error> {
        batch
            .columns()
            .get(index)
            .cloned()
            .ok_or_else(|| Error::Column {
                input: self.input.clone(),
                column: name.into(),
                detail: format!(
                    "a batch has only {} columns, not the stream schema's",
                    batch.num_columns()
                ),
            })
    }

    fn cast_column(
        &self,
        batch: &RecordBatch,
        index: usize,
        name: &str,
        to: &DataType,
    ) -> Result<ArrayRef, Error> {
        cast(&self.column(batch, index, name)?, to).map_err(|e| Error::Column {
            input: self.input.clone(),
            column: name.into(),
            detail: e.to_string(),
        })
    }

    /// Fold one batch in.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let stack = StackFrames::new(
            &self.column(batch, self.plan.stack, &self.plan.stack_name)?,
            &self.input,
            &self.plan.stack_name,
        )?;
        let mut values = Vec::with_capacity(self.plan.values.len());
        for v in &self.plan.values {
            values.push(match (v.index, v.numeric) {
                (None, _) => Values::Ones,
                (Some(i), Numeric::Int) if v.null_is_one => {
                    let a = self.cast_column(batch, i, &v.name, &DataType::Int64)?;
                    Values::IntOrOne(a.as_primitive::<Int64Type>().clone())
                }
                (Some(i), Numeric::Int) => {
                    let a = self.cast_column(batch, i, &v.name, &DataType::Int64)?;
                    Values::Int(a.as_primitive::<Int64Type>().clone())
                }
                (Some(i), Numeric::Float) => {
                    let a = self.cast_column(batch, i, &v.name, &DataType::Float64)?;
                    Values::Float(a.as_primitive::<Float64Type>().clone())
                }
            });
        }
        let mut labels = Vec::with_capacity(self.plan.labels.len());
        for l in &self.plan.labels {
            let key = self.tables.string(&l.name);
            labels.push(if l.numeric {
                let a = self.cast_column(batch, l.index, &l.name, &DataType::Int64)?;
                Labels::Num(key, a.as_primitive::<Int64Type>().clone())
            } else {
                let a = self.cast_column(batch, l.index, &l.name, &DataType::Utf8)?;
                Labels::Str(key, a.as_string::<i32>().clone())
            });
        }
        if let Some((i, unit)) = self.plan.time {
            let a = self.cast_column(batch, i, stacks_stream::col::TIME, &DataType::Int64)?;
            self.fold_time(a.as_primitive::<Int64Type>(), unit);
        }
        let kinds = match &self.plan.rows_of_kind {
            Some((i, _)) => {
                let a = self.cast_column(batch, *i, stacks_stream::col::KIND, &DataType::Utf8)?;
                Some(a.as_string::<i32>().clone())
            }
            None => None,
        };
        let durations = match self.plan.duration {
            Some(i) => {
                let a =
                    self.cast_column(batch, i, stacks_stream::col::DURATION, &DataType::Int64)?;
                Some(a.as_primitive::<Int64Type>().clone())
            }
            None => None,
        };
        let comms = match (self.process_name, self.plan.comm) {
            (true, Some(i)) => {
                let a = self.cast_column(batch, i, stacks_stream::col::COMM, &DataType::Utf8)?;
                Some(a.as_string::<i32>().clone())
            }
            _ => None,
        };
        let wanted: &[String] = match &self.plan.rows_of_kind {
            Some((_, k)) => k,
            None => &[],
        };

        for row in 0..batch.num_rows() {
            let kind = match &kinds {
                Some(kinds) => match kinds.is_valid(row).then(|| kinds.value(row)) {
                    Some(k) if wanted.iter().any(|w| w == k) => Some(k),
                    _ => continue,
                },
                None => None,
            };
            let mut locations = stack_locations(
                &mut self.tables,
                &stack,
                row,
                &mut self.pending,
                self.delimiter,
            );
            // Rows whose stack was not recorded; folded short off-CPU intervals have no
            // duration of their own either.
            if kind.is_some() && stack.is_null(row) {
                let folded = kind == Some(stacks_stream::kind::SWITCH)
                    && durations.as_ref().is_none_or(|d| d.is_null(row));
                let name = if folded {
                    SHORT_OFFCPU_FRAME
                } else {
                    NO_STACK_FRAME
                };
                locations.push(self.tables.synthetic(name));
            }
            if let Some(comms) = &comms {
                let name = Some(comms)
                    .filter(|c| c.is_valid(row))
                    .map(|c| c.value(row))
                    .filter(|c| !c.is_empty())
                    .unwrap_or(UNKNOWN_PROCESS);
                locations.push(self.tables.synthetic(name));
            }
            let mut key_labels = Vec::with_capacity(labels.len());
            for l in &labels {
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
            let key = SampleKey {
                locations,
                labels: key_labels,
            };
            let sums = self
                .samples
                .entry(key)
                .or_insert_with(|| vec![0; values.len()]);
            for ((sum, v), column) in sums.iter_mut().zip(&values).zip(&self.plan.values) {
                if column.of_kind.is_none() || column.of_kind.as_deref() == kind {
                    *sum = sum.saturating_add(v.at(row));
                }
            }
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    fn fold_time(&mut self, times: &Int64Array, unit: TimeUnit) {
        let scale = match unit {
            TimeUnit::Second => 1_000_000_000,
            TimeUnit::Millisecond => 1_000_000,
            TimeUnit::Microsecond => 1_000,
            TimeUnit::Nanosecond => 1,
        };
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
            .is_none_or(|(_, kinds)| kinds.iter().any(|k| k == stacks_stream::kind::PROFILE));
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

/// The location ids of `row`'s stack, leaf first. Consecutive inlined frames and the frame of
/// their containing function (same address) make one location whose lines list them in that
/// order, which is pprof's order too.
/// With `delimiter`, a [`DELIMITER_FRAME`] location separates the kernel frames from the user
/// frames when the stack has both.
fn stack_locations(
    tables: &mut Tables,
    stack: &StackFrames,
    row: usize,
    pending: &mut Vec<Line>,
    delimiter: bool,
) -> Vec<u64> {
    let range = stack.row(row);
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
pub fn write_profile(profile: &Profile, out: impl Write, name: &str) -> Result<(), Error> {
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
