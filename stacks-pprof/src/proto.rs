//! The pprof `profile.proto` messages (github.com/google/pprof/proto/profile.proto), written by
//! hand as prost structs. Field numbers match the upstream schema exactly, so any pprof reader
//! (`go tool pprof`, speedscope, Grafana…) understands what these encode to.
//!
//! String fields of the profile are indexes into [`Profile::string_table`], whose first entry is
//! always the empty string.

/// A whole profile: sample types, the samples, and the tables they refer to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each value of a sample measures, e.g. `samples/count`, `cpu/nanoseconds`.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// One entry per unique (stack, labels).
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Binaries the locations belong to.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Program addresses, each with its (possibly inlined) source lines.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions referenced by location lines.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string of the profile; index 0 is `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regexp (string index) of frames to drop from stacks.
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regexp (string index) of frames to keep despite `drop_frames`.
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// When the profile was collected, ns since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// How long the profile covers, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period measures.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period, in `period_type` units.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indexes).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// String index of the sample type shown by default.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// A (type, unit) pair, both string indexes.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// One stack with its values and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A string (`str`) or numeric (`num`) label of a sample.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A binary (executable, library or the kernel) the locations belong to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the file name.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build id (hex).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// One program address and the source lines it stands for.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Innermost inlined function first, the containing function last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A source line within a function.
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function; names and file are string indexes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
