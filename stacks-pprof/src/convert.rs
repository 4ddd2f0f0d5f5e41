//! The conversion itself: rows (read by `stacks_profile`) are folded batch by batch into samples
//! keyed by (stack, labels), then the tables, samples and stream facts are assembled into a
//! `Profile` and gzipped.

use foldhash::HashMap;
use std::io::Write;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use stacks_profile::tables::Finished;
use stacks_profile::{LabelValue, Reader};
use stacks_stream::{InputStream, check_version};

use crate::Error;
use crate::proto::{self, Profile, ValueType};

pub use stacks_profile::Options;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SampleKey {
    locations: Vec<u64>,
    labels: Vec<LabelValue>,
}

/// Folds record batches into a profile. Feed it with [`Converter::push`], end with
/// [`Converter::finish`].
pub struct Converter {
    reader: Reader,
    samples: HashMap<SampleKey, Vec<i64>>,
}

impl Converter {
    /// Prepare to convert batches of `schema`; `input` names the stream in error messages.
    pub fn new(schema: &Schema, input: &str, options: &Options) -> Result<Self, Error> {
        Ok(Self {
            reader: Reader::new(schema, input, options)?,
            samples: HashMap::default(),
        })
    }

    /// Rows folded in so far.
    pub fn rows(&self) -> u64 {
        self.reader.rows()
    }

    /// Fold one batch in: each converted row's values summed into the sample of its
    /// (stack, labels).
    pub fn push(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let r = &mut self.reader;
        let columns = r.read(batch)?;
        let n_values = r.plan.values.len();
        for row in 0..columns.rows() {
            let Some(kind) = r.row_kind(&columns, row) else {
                continue;
            };
            let key = SampleKey {
                locations: r.row_locations(&columns, row, kind),
                labels: r.row_labels(&columns, row),
            };
            let sums = self.samples.entry(key).or_insert_with(|| vec![0; n_values]);
            for (i, sum) in sums.iter_mut().enumerate() {
                if r.counts(i, kind) {
                    *sum = sum.saturating_add(columns.value(i, row));
                }
            }
        }
        Ok(())
    }

    /// Assemble the profile.
    pub fn finish(self) -> Profile {
        let mut reader = self.reader;
        let sampled = reader.sampled();
        let (start, duration) = reader.span();
        let t = &mut reader.tables;
        let sample_type: Vec<ValueType> = reader
            .plan
            .values
            .iter()
            .map(|v| ValueType {
                r#type: t.string(&v.kind.name),
                unit: t.string(v.kind.unit),
            })
            .collect();
        let default_sample_type = sample_type
            .get(reader.plan.default_value)
            .map_or(0, |v| v.r#type);
        let period_ns = reader.facts.period_ns.filter(|_| sampled);
        let period_type = period_ns.map(|_| ValueType {
            r#type: t.string("cpu"),
            unit: t.string("nanoseconds"),
        });
        let comment = reader.facts.comments.iter().map(|c| t.string(c)).collect();

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
        } = reader.tables.finish();
        Profile {
            sample_type,
            sample,
            mapping: mappings.into_iter().enumerate().map(mapping).collect(),
            location: locations.into_iter().enumerate().map(location).collect(),
            function: functions.into_iter().enumerate().map(function).collect(),
            string_table: strings,
            drop_frames: 0,
            keep_frames: 0,
            time_nanos: start,
            duration_nanos: duration,
            period_type,
            period: period_ns.unwrap_or(0),
            comment,
            default_sample_type,
        }
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

/// The pprof mapping of the table's `i`th (id `i + 1`).
fn mapping((i, m): (usize, stacks_profile::tables::Mapping)) -> proto::Mapping {
    proto::Mapping {
        id: i as u64 + 1,
        memory_start: m.memory_start,
        memory_limit: m.memory_limit,
        file_offset: 0,
        filename: m.filename,
        build_id: m.build_id,
        has_functions: true,
        has_filenames: true,
        has_line_numbers: true,
        has_inline_frames: true,
    }
}

/// The pprof location of the table's `i`th (id `i + 1`).
fn location((i, l): (usize, stacks_profile::tables::Location)) -> proto::Location {
    proto::Location {
        id: i as u64 + 1,
        mapping_id: l.mapping,
        address: l.address,
        line: l
            .lines
            .into_iter()
            .map(|l| proto::Line {
                function_id: l.function,
                line: l.line,
                column: l.column,
            })
            .collect(),
        is_folded: false,
    }
}

/// The pprof function of the table's `i`th (id `i + 1`).
fn function((i, f): (usize, stacks_profile::tables::Function)) -> proto::Function {
    proto::Function {
        id: i as u64 + 1,
        name: f.name,
        system_name: f.system_name,
        filename: f.filename,
        start_line: 0,
    }
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
