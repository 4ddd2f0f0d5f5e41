//! The conversion: rows (read by `stacks_profile`, as stacks-pprof reads them) are kept as
//! events of samples keyed by (resource, stack, attributes, link), each event its time and its
//! values; then one `Profile` per resource and sample type (kind and unit) is assembled, with
//! the dictionary every profile of the request shares.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource;
use stacks_profile::tables::Finished;
use stacks_profile::{LabelValue, Options, Reader};
use stacks_stream::{InputStream, check_version, kind, meta};

use crate::Error;
use crate::semconv::{self, Role};

/// An attribute's value before the string table is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Value {
    Str(i64),
    Int(i64),
}

/// The resource of a row: its resource labels (host, pid, process name) and container.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct ResourceKey {
    labels: Vec<LabelValue>,
    /// String index of the container id.
    container: Option<i64>,
}

/// What makes two events one sample (the spec's sample identity).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SampleId {
    stack: i32,
    /// Sorted, so the same set is the same key.
    attributes: Vec<i32>,
    link: i32,
}

/// The events of one sample: their times and, event by event, one value per column of the
/// group.
#[derive(Debug, Default)]
struct Events {
    times: Vec<u64>,
    values: Vec<i64>,
}

/// The samples of one resource for one group of value columns.
#[derive(Debug, Default)]
struct Series {
    samples: HashMap<SampleId, Events>,
    /// An event had no time: the series' profiles carry one summed value per sample.
    untimed: bool,
}

/// Value columns filled by the same rows: those of one kind in a stream of several kinds, else
/// all of them.
#[derive(Debug)]
struct Group {
    kind: Option<String>,
    columns: Vec<usize>,
}

/// What the labels of one row become.
struct RowAttributes {
    resource: ResourceKey,
    attributes: Vec<i32>,
    link: i32,
}

/// Folds record batches into an OTLP export request. Feed it with [`Converter::push`], end
/// with [`Converter::finish`].
pub struct Converter {
    reader: Reader,
    groups: Vec<Group>,
    /// The stream's host (`stacks.host`), for rows without a `host` column.
    host: Option<String>,
    resources: HashMap<ResourceKey, Vec<Series>>,
    /// Role of each label key (string index).
    roles: HashMap<i64, (Role, i64)>,
    interned: Interned,
    containers: HashMap<i64, Option<i64>>,
    events: u64,
}

/// The dictionary's tables that are OTLP's own (the others are `stacks_profile`'s): stacks,
/// attributes and links, each interned, each with its zero element at index 0.
struct Interned {
    stacks: HashMap<Vec<u64>, i32>,
    stack_table: Vec<Vec<u64>>,
    attributes: HashMap<(i64, Value), i32>,
    attribute_table: Vec<(i64, Value)>,
    links: HashMap<([u8; 16], u64), i32>,
    link_table: Vec<([u8; 16], u64)>,
}

impl Interned {
    fn new() -> Self {
        Self {
            stacks: HashMap::new(),
            stack_table: vec![Vec::new()],
            attributes: HashMap::new(),
            attribute_table: vec![(0, Value::Int(0))],
            links: HashMap::new(),
            link_table: vec![([0; 16], 0)],
        }
    }

    /// Index of the stack of `locations` in the stack table (0, the empty stack, for none).
    fn stack(&mut self, locations: Vec<u64>) -> i32 {
        if locations.is_empty() {
            return 0;
        }
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.stack_table.len() as i32;
        self.stack_table.push(locations.clone());
        self.stacks.insert(locations, i);
        i
    }

    /// Index of attribute (`key`, `value`) in the attribute table.
    fn attribute(&mut self, key: i64, value: Value) -> i32 {
        if let Some(&i) = self.attributes.get(&(key, value)) {
            return i;
        }
        let i = self.attribute_table.len() as i32;
        self.attribute_table.push((key, value));
        self.attributes.insert((key, value), i);
        i
    }

    /// Index of the link to span `span` of trace `trace` in the link table.
    fn link(&mut self, trace: [u8; 16], span: u64) -> i32 {
        if let Some(&i) = self.links.get(&(trace, span)) {
            return i;
        }
        let i = self.link_table.len() as i32;
        self.link_table.push((trace, span));
        self.links.insert((trace, span), i);
        i
    }
}

impl Converter {
    /// Prepare to convert batches of `schema`; `input` names the stream in error messages.
    pub fn new(schema: &Schema, input: &str, options: &Options) -> Result<Self, Error> {
        let reader = Reader::new(schema, input, options)?;
        let mut groups: Vec<Group> = Vec::new();
        for (i, v) in reader.plan.values.iter().enumerate() {
            match groups.iter_mut().find(|g| g.kind == v.of_kind) {
                Some(g) => g.columns.push(i),
                None => groups.push(Group {
                    kind: v.of_kind.clone(),
                    columns: vec![i],
                }),
            }
        }
        Ok(Self {
            reader,
            groups,
            host: schema.metadata().get(meta::HOST).cloned(),
            resources: HashMap::new(),
            roles: HashMap::new(),
            interned: Interned::new(),
            containers: HashMap::new(),
            events: 0,
        })
    }

    /// Rows read so far.
    pub fn rows(&self) -> u64 {
        self.reader.rows()
    }

    /// Events kept so far (rows of the kinds converted).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Keep the converted rows of one batch as events.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        let columns = self.reader.read(batch)?;
        for row in 0..columns.rows() {
            let Some(kind) = self.reader.row_kind(&columns, row) else {
                continue;
            };
            let Some(group) = self
                .groups
                .iter()
                .position(|g| g.kind.is_none() || g.kind.as_deref() == kind)
            else {
                continue;
            };
            let locations = self.reader.row_locations(&columns, row, kind);
            let labels = self.reader.row_labels(&columns, row);
            let RowAttributes {
                resource,
                attributes,
                link,
            } = self.row_attributes(&labels);
            let id = SampleId {
                stack: self.interned.stack(locations),
                attributes,
                link,
            };
            let n_groups = self.groups.len();
            let series = self
                .resources
                .entry(resource)
                .or_insert_with(|| (0..n_groups).map(|_| Series::default()).collect());
            let Some(series) = series.get_mut(group) else {
                continue;
            };
            let events = series.samples.entry(id).or_default();
            match columns.time(row) {
                Some(t) => events.times.push(u64::try_from(t).unwrap_or(0)),
                None => {
                    events.times.push(0);
                    series.untimed = true;
                }
            }
            for &c in &self.groups[group].columns {
                events.values.push(columns.value(c, row));
            }
            self.events += 1;
        }
        Ok(())
    }

    /// The role of label key `key` and the string index of the attribute key it becomes.
    fn role(&mut self, key: i64) -> (Role, i64) {
        if let Some(&r) = self.roles.get(&key) {
            return r;
        }
        let tables = &mut self.reader.tables;
        let name = tables.str(key).to_string();
        let role = semconv::role(&name);
        let attribute_key = match role {
            Role::Resource(k) | Role::Sample(Some(k)) => tables.string(k),
            Role::Cgroup => tables.string(semconv::CGROUP),
            _ => key,
        };
        self.roles.insert(key, (role, attribute_key));
        (role, attribute_key)
    }

    /// The resource, sample attributes and link of a row's labels.
    fn row_attributes(&mut self, labels: &[LabelValue]) -> RowAttributes {
        let mut resource = ResourceKey {
            labels: Vec::new(),
            container: None,
        };
        let mut attributes = Vec::with_capacity(labels.len());
        let (mut trace, mut span) = (None, None);
        for &l in labels {
            let (role, key) = self.role(l.key());
            let value = match l {
                LabelValue::Str { value, .. } => Value::Str(value),
                LabelValue::Num { value, .. } => Value::Int(value),
            };
            match (role, value) {
                (Role::Resource(_), _) => resource.labels.push(l),
                (Role::Sample(_), _) => attributes.push(self.interned.attribute(key, value)),
                (Role::Cgroup, Value::Str(path)) => {
                    resource.container = self.container(path);
                    attributes.push(self.interned.attribute(key, value));
                }
                (Role::TraceId, Value::Str(hex)) => trace = Some(hex),
                (Role::SpanId, Value::Int(id)) => span = Some(id),
                _ => {}
            }
        }
        let link = match (trace, span) {
            (Some(hex), Some(span)) if span != 0 => {
                match semconv::trace_id(self.reader.tables.str(hex)) {
                    Some(trace) => self.interned.link(trace, span as u64),
                    None => 0,
                }
            }
            _ => 0,
        };
        attributes.sort_unstable();
        attributes.dedup();
        RowAttributes {
            resource,
            attributes,
            link,
        }
    }

    /// String index of the container id cgroup `path` (a string index) names.
    fn container(&mut self, path: i64) -> Option<i64> {
        if let Some(&c) = self.containers.get(&path) {
            return c;
        }
        let tables = &mut self.reader.tables;
        let id = semconv::container_id(tables.str(path)).map(str::to_string);
        let c = id.map(|id| tables.string(&id));
        self.containers.insert(path, c);
        c
    }

    /// Assemble the request: one `ResourceProfiles` per resource, one `Profile` per sample type
    /// with samples there, and the dictionary.
    pub fn finish(mut self) -> ExportProfilesServiceRequest {
        let (start, duration) = self.reader.span();
        let timed = self.reader.time_range().is_some();
        let period_ns = self.reader.facts.period_ns;
        let sampled = self.reader.sampled();
        // Every string the request refers to is interned before the table is final.
        let t = &mut self.reader.tables;
        let sample_types: Vec<otlp::ValueType> = self
            .reader
            .plan
            .values
            .iter()
            .map(|v| otlp::ValueType {
                type_strindex: t.string(&v.kind.name) as i32,
                unit_strindex: t.string(v.kind.unit) as i32,
            })
            .collect();
        let period_type = otlp::ValueType {
            type_strindex: t.string("cpu") as i32,
            unit_strindex: t.string("nanoseconds") as i32,
        };
        let frame_type_key = t.string(semconv::FRAME_TYPE);
        let build_id_key = t.string(semconv::BUILD_ID_GNU);
        let frame_types: Vec<(&str, i64)> = ["kernel", "cpython", "jit", "go", "native"]
            .into_iter()
            .map(|name| (name, t.string(name)))
            .collect();
        let resource_keys: HashMap<i64, &'static str> = self
            .roles
            .iter()
            .filter_map(|(&k, &(role, _))| match role {
                Role::Resource(name) => Some((k, name)),
                _ => None,
            })
            .collect();

        let Converter {
            reader,
            groups,
            host,
            resources,
            mut interned,
            ..
        } = self;
        let Finished {
            strings,
            functions,
            mappings,
            locations,
        } = reader.tables.finish();
        let s = |i: i64| strings.get(i as usize).map_or("", String::as_str);

        // Mappings, with their build ids.
        let mut mapping_table = vec![otlp::Mapping::default()];
        for m in &mappings {
            let attribute_indices = if m.build_id != 0 {
                vec![interned.attribute(build_id_key, Value::Str(m.build_id))]
            } else {
                Vec::new()
            };
            mapping_table.push(otlp::Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: 0,
                filename_strindex: m.filename as i32,
                attribute_indices,
            });
        }
        let function_table: Vec<otlp::Function> = std::iter::once(otlp::Function::default())
            .chain(functions.iter().map(|f| otlp::Function {
                name_strindex: f.name as i32,
                system_name_strindex: f.system_name as i32,
                filename_strindex: f.filename as i32,
                start_line: 0,
            }))
            .collect();
        // Locations, each with its frame type (locations the profile adds have none).
        let mut location_table = vec![otlp::Location::default()];
        for l in &locations {
            let mapping = (l.mapping > 0)
                .then(|| mappings.get(l.mapping as usize - 1))
                .flatten();
            let attribute_indices = match mapping {
                Some(m) => {
                    let file = l
                        .lines
                        .last()
                        .and_then(|line| functions.get((line.function as usize).wrapping_sub(1)))
                        .map_or("", |f| s(f.filename));
                    let name = semconv::frame_type(m.kernel, s(m.filename), file);
                    let value = frame_types
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map_or(0, |(_, i)| *i);
                    vec![interned.attribute(frame_type_key, Value::Str(value))]
                }
                None => Vec::new(),
            };
            location_table.push(otlp::Location {
                mapping_index: l.mapping as i32,
                address: l.address,
                lines: l
                    .lines
                    .iter()
                    .map(|line| otlp::Line {
                        function_index: line.function as i32,
                        line: line.line,
                        column: line.column,
                    })
                    .collect(),
                attribute_indices,
            });
        }

        // Profiles: per resource, per group, per column of the group.
        let window = if timed {
            duration.saturating_add(1)
        } else {
            duration
        };
        let scope = InstrumentationScope {
            name: "stacks-otlp".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        };
        let mut resources: Vec<(ResourceKey, Vec<Series>)> = resources.into_iter().collect();
        resources.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut resource_profiles = Vec::with_capacity(resources.len());
        for (key, series) in resources {
            let mut profiles = Vec::new();
            for (group, series) in groups.iter().zip(series) {
                if series.samples.is_empty() {
                    continue;
                }
                let mut samples: Vec<(SampleId, Events)> = series.samples.into_iter().collect();
                samples.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                let width = group.columns.len();
                let cpu = group
                    .kind
                    .as_deref()
                    .map_or(sampled, |k| k == kind::PROFILE);
                for (at, &column) in group.columns.iter().enumerate() {
                    let samples = samples
                        .iter()
                        .map(|(id, events)| {
                            let values = events.values.iter().skip(at).step_by(width).copied();
                            let (values, timestamps_unix_nano) = if series.untimed {
                                (vec![values.fold(0i64, i64::saturating_add)], Vec::new())
                            } else {
                                (values.collect(), events.times.clone())
                            };
                            otlp::Sample {
                                stack_index: id.stack,
                                attribute_indices: id.attributes.clone(),
                                link_index: id.link,
                                values,
                                timestamps_unix_nano,
                            }
                        })
                        .collect();
                    let period = period_ns.filter(|_| cpu);
                    profiles.push(otlp::Profile {
                        sample_type: sample_types.get(column).copied(),
                        samples,
                        time_unix_nano: u64::try_from(start).unwrap_or(0),
                        duration_nano: u64::try_from(window).unwrap_or(0),
                        period_type: period.map(|_| period_type),
                        period: period.unwrap_or(0),
                        ..Default::default()
                    });
                }
            }
            resource_profiles.push(otlp::ResourceProfiles {
                resource: Some(resource(&key, &resource_keys, host.as_deref(), &strings)),
                scope_profiles: vec![otlp::ScopeProfiles {
                    scope: Some(scope.clone()),
                    profiles,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }

        let attribute_table = interned
            .attribute_table
            .iter()
            .enumerate()
            .map(|(i, &(key, value))| {
                if i == 0 {
                    return otlp::KeyValueAndUnit::default();
                }
                otlp::KeyValueAndUnit {
                    key_strindex: key as i32,
                    value: Some(match value {
                        Value::Str(v) => string_value(s(v)),
                        Value::Int(v) => AnyValue {
                            value: Some(any_value::Value::IntValue(v)),
                        },
                    }),
                    unit_strindex: 0,
                }
            })
            .collect();
        let link_table = interned
            .link_table
            .iter()
            .map(|(trace, span)| otlp::Link {
                trace_id: trace.to_vec(),
                span_id: span.to_be_bytes().to_vec(),
            })
            .collect();
        let stack_table = interned
            .stack_table
            .into_iter()
            .map(|locations| otlp::Stack {
                location_indices: locations.into_iter().map(|l| l as i32).collect(),
            })
            .collect();
        ExportProfilesServiceRequest {
            resource_profiles,
            dictionary: Some(otlp::ProfilesDictionary {
                mapping_table,
                location_table,
                function_table,
                link_table,
                string_table: strings,
                attribute_table,
                stack_table,
            }),
        }
    }
}

fn string_value(s: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s.to_string())),
    }
}

/// The resource of `key`: host (the stream's when the rows have none), process and container.
fn resource(
    key: &ResourceKey,
    names: &HashMap<i64, &'static str>,
    host: Option<&str>,
    strings: &[String],
) -> Resource {
    let s = |i: i64| strings.get(i as usize).map_or("", String::as_str);
    let mut attributes = Vec::new();
    let mut attribute = |key: &str, value: AnyValue| {
        attributes.push(KeyValue {
            key: key.to_string(),
            value: Some(value),
            ..Default::default()
        })
    };
    let has_host = key
        .labels
        .iter()
        .any(|l| names.get(&l.key()) == Some(&semconv::HOST_NAME));
    if !has_host && let Some(host) = host {
        attribute(semconv::HOST_NAME, string_value(host));
    }
    for l in &key.labels {
        let Some(name) = names.get(&l.key()) else {
            continue;
        };
        let value = match *l {
            LabelValue::Str { value, .. } => string_value(s(value)),
            LabelValue::Num { value, .. } => AnyValue {
                value: Some(any_value::Value::IntValue(value)),
            },
        };
        attribute(name, value);
    }
    if let Some(c) = key.container {
        attribute(semconv::CONTAINER_ID, string_value(s(c)));
    }
    Resource {
        attributes,
        ..Default::default()
    }
}

/// Read the whole stream and convert it.
pub fn convert(
    input: &mut InputStream,
    options: &Options,
) -> Result<ExportProfilesServiceRequest, Error> {
    let schema = input.schema();
    check_version(&schema, input.name())?;
    let mut converter = Converter::new(&schema, input.name(), options)?;
    while let Some(batch) = input.next_batch()? {
        converter.push(&batch)?;
    }
    Ok(converter.finish())
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
