//! The rows of a stream read batch by batch as what a profile is made of: the kind of each row
//! (rows of kinds not converted are skipped), its stack as interned locations, its labels, its
//! values and its time. What a format does with a row (sum it, keep it as an event) is its own.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema};
use stacks_stream::columns::{cast_column, column, ns_per_unit};
use stacks_stream::dict::EntryCache;
use stacks_stream::frames::{self, NO_STACK_FRAME, SHORT_OFFCPU_FRAME, StackFrames};
use stacks_stream::{col, kind};

use crate::facts::Facts;
use crate::plan::{Numeric, Plan};
use crate::tables::{Line, Tables};
use crate::{Error, Options};

/// The frame between kernel and user frames with `--delimiter` (bcc's `-d`).
pub const DELIMITER_FRAME: &str = "-";
/// Root frame name for a row whose process name is null or empty, with `--process-name`.
const UNKNOWN_PROCESS: &str = "[unknown]";

/// One label of a row: its key and value as string-table indexes, or a numeric value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabelValue {
    Str { key: i64, value: i64 },
    Num { key: i64, value: i64 },
}

impl LabelValue {
    /// The key's index in the string table.
    pub fn key(&self) -> i64 {
        match self {
            LabelValue::Str { key, .. } | LabelValue::Num { key, .. } => *key,
        }
    }
}

/// Reads the rows of one stream: the plan of its columns, the tables its frames are interned
/// into, and the facts of its metadata. Feed it batches with [`Reader::read`], then ask each
/// row of the [`Batch`] for its kind, locations, labels, values and time.
pub struct Reader {
    input: String,
    pub plan: Plan,
    pub facts: Facts,
    pub tables: Tables,
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

/// The columns of one batch the plan reads, cast.
pub struct Batch {
    stack: StackFrames,
    values: Vec<Values>,
    labels: Vec<Labels>,
    /// `kind`, for a row stream.
    kinds: Option<StringArray>,
    /// `duration`, for a row stream that has it.
    durations: Option<Int64Array>,
    /// `comm`, with `--process-name`.
    comms: Option<StringArray>,
    /// `time`, and the ns in one of its units.
    times: Option<(Int64Array, i64)>,
    rows: usize,
}

impl Batch {
    /// Rows in the batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Value `index` (of [`Plan::values`]) of `row`; a null counts 0, or 1 in a count column.
    pub fn value(&self, index: usize, row: usize) -> i64 {
        self.values.get(index).map_or(0, |v| v.at(row))
    }

    /// The time of `row`, ns since the epoch; `None` without a `time` column or where null.
    pub fn time(&self, row: usize) -> Option<i64> {
        let (times, scale) = self.times.as_ref()?;
        times
            .is_valid(row)
            .then(|| times.value(row).saturating_mul(*scale))
    }
}

impl Reader {
    /// Prepare to read batches of `schema`; `input` names the stream in error messages.
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
            time_range: None,
            rows: 0,
            pending: Vec::new(),
            entry_locations: EntryCache::default(),
            process_name: options.process_name,
            delimiter: options.delimiter,
        })
    }

    /// The name of the input, for error messages.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// Rows read so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Distinct stacks of a dictionary-encoded stack column converted so far (each once).
    pub fn entries_converted(&self) -> usize {
        self.entry_locations.len()
    }

    /// Smallest and largest `time` read so far, ns.
    pub fn time_range(&self) -> Option<(i64, i64)> {
        self.time_range
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

    /// The columns of `batch` the plan reads, cast; its times widen the time range.
    pub fn read(&mut self, batch: &RecordBatch) -> Result<Batch, Error> {
        let columns = self.read_columns(batch)?;
        if let Some(entries) = columns.stack.entries() {
            self.entry_locations.prepare(entries);
        }
        if let Some((times, scale)) = &columns.times {
            self.fold_time(times, *scale);
        }
        self.rows += batch.num_rows() as u64;
        Ok(columns)
    }

    fn read_columns(&mut self, batch: &RecordBatch) -> Result<Batch, Error> {
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
        let ints = |i: Option<usize>, name: &str| -> Result<Option<Int64Array>, Error> {
            i.map(|i| {
                let a = self.cast(batch, i, name, &DataType::Int64)?;
                Ok(a.as_primitive::<Int64Type>().clone())
            })
            .transpose()
        };
        let durations = ints(self.plan.duration, col::DURATION)?;
        let times = match self.plan.time {
            Some((i, unit)) => ints(Some(i), col::TIME)?.map(|t| (t, ns_per_unit(unit))),
            None => None,
        };
        Ok(Batch {
            stack,
            values: self.read_values(batch)?,
            labels: self.read_labels(batch)?,
            kinds,
            durations,
            comms,
            times,
            rows: batch.num_rows(),
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

    /// Whether `row` is converted, and its kind: `None` for a row of a kind not converted,
    /// `Some(None)` in a stream without kinds (a query result).
    pub fn row_kind<'b>(&self, c: &'b Batch, row: usize) -> Option<Option<&'b str>> {
        match &c.kinds {
            Some(kinds) => {
                let wanted: &[String] = self.plan.rows_of_kind.as_ref().map_or(&[], |(_, k)| k);
                match kinds.is_valid(row).then(|| kinds.value(row)) {
                    Some(k) if wanted.iter().any(|w| w == k) => Some(Some(k)),
                    _ => None,
                }
            }
            None => Some(None),
        }
    }

    /// Whether value `index` (of [`Plan::values`]) counts rows of `kind`.
    pub fn counts(&self, index: usize, kind: Option<&str>) -> bool {
        self.plan
            .values
            .get(index)
            .is_some_and(|v| v.of_kind.is_none() || v.of_kind.as_deref() == kind)
    }

    /// The locations of `row`'s sample, leaf first: its stack, a marker frame for a row
    /// stream's row without one, and the process name root with `--process-name`.
    pub fn row_locations(&mut self, c: &Batch, row: usize, kind: Option<&str>) -> Vec<u64> {
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

    /// The labels of `row`: its non-null, non-empty label values, in the plan's order.
    pub fn row_labels(&mut self, c: &Batch, row: usize) -> Vec<LabelValue> {
        let mut key_labels = Vec::with_capacity(c.labels.len());
        for l in &c.labels {
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

    fn fold_time(&mut self, times: &Int64Array, scale: i64) {
        for t in times.iter().flatten() {
            let t = t.saturating_mul(scale);
            self.time_range = Some(match self.time_range {
                Some((lo, hi)) => (lo.min(t), hi.max(t)),
                None => (t, t),
            });
        }
    }

    /// The profile's start and duration: from the recording start (when it precedes the first
    /// row) or the first row, to the last row.
    pub fn span(&self) -> (i64, i64) {
        match (self.facts.start_ns, self.time_range) {
            (Some(start), Some((lo, hi))) if start <= lo => (start, hi.saturating_sub(start)),
            (_, Some((lo, hi))) => (lo, hi.saturating_sub(lo)),
            (Some(start), None) => (start, 0),
            (None, None) => (0, 0),
        }
    }

    /// Whether the CPU sampling period describes the rows converted: profile rows are among
    /// them (a query result is assumed to be about them when the recording sampled CPUs).
    pub fn sampled(&self) -> bool {
        self.plan
            .rows_of_kind
            .as_ref()
            .is_none_or(|(_, kinds)| kinds.iter().any(|k| k == kind::PROFILE))
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
            function: tables.function(&f),
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
