//! The stacks store: the Parquet layout stacks-pack writes and stacks-query, stacks-top and
//! the cluster read, the engine that splits a stream into it, and the object stores it lives
//! in (`objstore`, with the `object-store` feature). The stream contract it stores (schemas,
//! columns, metadata) is stacks-stream's.
//!
//! The layout: per rotated file, a *file set* of three levels: a *samples* file (every column
//! but the stacks, plus `stack_id`), a *stacks* file (each distinct `stack_id` of those samples
//! once, as the ids of its frames: `frame_ids`) and a *frames* file (each distinct frame of
//! those stacks once: `frame_id` and the frame's fields; [`frames`]). The frames file is made
//! visible first, then the stacks file, then the samples file, so every visible samples file
//! has its stacks and frames.
//!
//! Earlier layouts are still read: a stacks file without `frame_ids` holds each stack's
//! frames in full with `folded`, `leaf` and `depth` (and no frames file: the pair layout, and
//! stores of raw streams, whose stacks are addresses); a `NAME.parquet` holds its stacks
//! inline in every row (the first layout).

#![warn(unreachable_pub)]

mod distinct;
pub mod frames;
#[cfg(feature = "object-store")]
pub mod objstore;
pub mod packstats;
mod split;

pub use distinct::DistinctCount;
pub use packstats::PackStats;
pub use split::{StackId, StackSplitter, summaries};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use stacks_stream::dict::{is_stack_column, value_type};
use stacks_stream::schema::{col, meta, stack_id_type};

/// How a samples file's name ends.
pub const SAMPLES_SUFFIX: &str = ".samples.parquet";
/// How a stacks file's name ends.
pub const STACKS_SUFFIX: &str = ".stacks.parquet";
/// How a frames file's name ends.
pub const FRAMES_SUFFIX: &str = ".frames.parquet";
/// How every stored file's name ends (first-layout files end in just this).
pub const PARQUET_SUFFIX: &str = ".parquet";

/// Metadata key of the stacks and frames files of a file set in frames layout: [`LAYOUT`].
/// Files without it are of an earlier layout (the pair layout, or the first one), or hold
/// raw stacks.
pub const LAYOUT_KEY: &str = "stacks.store_layout";
/// The layout stacks-pack writes: samples → stacks (`frame_ids`) → frames.
pub const LAYOUT: &str = "frames";

/// The metadata of a stacks or frames file for a stream with `metadata`: the keys that say
/// what the rows are (schema version, stage, host). The recording's other keys
/// (the vDSO image, events, clock…) are in the samples file only: in each of the three files
/// they were about a tenth of a small file set.
pub fn level_metadata(metadata: &HashMap<String, String>) -> HashMap<String, String> {
    metadata
        .iter()
        .filter(|(k, _)| [meta::SCHEMA_VERSION, meta::STAGE, meta::HOST].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Columns of a stacks file besides `stack_id` and the stack columns.
pub mod stack_col {
    /// The frames' names, root first, joined by `;` (a folded stack, as flame graph tools
    /// read it); null when the stream had no symbolized `stack`.
    pub const FOLDED: &str = "folded";
    /// The name of the innermost frame (the leaf); null for an empty or absent stack.
    pub const LEAF: &str = "leaf";
    /// Number of frames in `stack` (inlined ones included).
    pub const DEPTH: &str = "depth";
}

/// What kind of stored file a path is, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `NAME.samples.parquet`.
    Samples,
    /// `NAME.stacks.parquet`.
    Stacks,
    /// `NAME.frames.parquet`.
    Frames,
    /// Any other `NAME.parquet`: first layout, stacks inline.
    Inline,
}

/// The kind of stored file `path` names; `None` for a name not ending in `.parquet`.
pub fn file_kind(path: &Path) -> Option<FileKind> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with(SAMPLES_SUFFIX) {
        Some(FileKind::Samples)
    } else if name.ends_with(STACKS_SUFFIX) {
        Some(FileKind::Stacks)
    } else if name.ends_with(FRAMES_SUFFIX) {
        Some(FileKind::Frames)
    } else if name.ends_with(PARQUET_SUFFIX) {
        Some(FileKind::Inline)
    } else {
        None
    }
}

/// The base name of a stored file (its name without the samples, stacks, frames or
/// `.parquet` suffix).
pub fn base_name(path: &Path) -> &str {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    [SAMPLES_SUFFIX, STACKS_SUFFIX, FRAMES_SUFFIX, PARQUET_SUFFIX]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

/// The stacks file of the file set of `file` (a samples or frames file).
pub fn stacks_path(file: &Path) -> PathBuf {
    file.with_file_name(format!("{}{STACKS_SUFFIX}", base_name(file)))
}

/// The frames file of the file set of `file` (a samples or stacks file).
pub fn frames_path(file: &Path) -> PathBuf {
    file.with_file_name(format!("{}{FRAMES_SUFFIX}", base_name(file)))
}

/// The samples file of the file set of `file` (a stacks or frames file).
pub fn samples_path(file: &Path) -> PathBuf {
    file.with_file_name(format!("{}{SAMPLES_SUFFIX}", base_name(file)))
}

/// Schema of the samples file for rows of `stream`: every column but the stack columns, in
/// order, then `stack_id`; the stream metadata kept.
pub fn samples_schema(stream: &Schema) -> SchemaRef {
    let mut fields: Vec<Field> = stream
        .fields()
        .iter()
        .filter(|f| !is_stack_column(f.name()) && f.name() != col::STACK_ID)
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(col::STACK_ID, stack_id_type(), true));
    Arc::new(Schema::new_with_metadata(fields, stream.metadata().clone()))
}

/// Schema of the whole stacks of rows of `stream`, as the pair layout's stacks files hold them
/// and [`StackSplitter::stacks`] returns them: `stack_id`, the stream's stack columns (plain
/// lists, in stream order), then `folded`, `leaf` and `depth`; the stream metadata kept. A
/// store of a raw stream (no `stack`) writes its stacks files so.
pub fn stacks_schema(stream: &Schema) -> SchemaRef {
    let mut fields = vec![Field::new(col::STACK_ID, stack_id_type(), false)];
    for f in stream.fields() {
        if is_stack_column(f.name()) {
            fields.push(Field::new(
                f.name(),
                value_type(f.data_type()).clone(),
                true,
            ));
        }
    }
    fields.push(Field::new(stack_col::FOLDED, DataType::Utf8, true));
    fields.push(Field::new(stack_col::LEAF, DataType::Utf8, true));
    fields.push(Field::new(stack_col::DEPTH, DataType::Int32, true));
    Arc::new(Schema::new_with_metadata(fields, stream.metadata().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pair_up() {
        let s = Path::new("out/date=2026-11-23/stacks-x-000001.samples.parquet");
        assert_eq!(file_kind(s), Some(FileKind::Samples));
        let k = stacks_path(s);
        assert_eq!(
            k,
            Path::new("out/date=2026-11-23/stacks-x-000001.stacks.parquet")
        );
        assert_eq!(file_kind(&k), Some(FileKind::Stacks));
        assert_eq!(samples_path(&k), s);
        let f = frames_path(s);
        assert_eq!(
            f,
            Path::new("out/date=2026-11-23/stacks-x-000001.frames.parquet")
        );
        assert_eq!(file_kind(&f), Some(FileKind::Frames));
        assert_eq!(samples_path(&f), s);
        assert_eq!(stacks_path(&f), k);
        assert_eq!(frames_path(&k), f);
        assert_eq!(
            file_kind(Path::new("a/stacks-1.parquet")),
            Some(FileKind::Inline)
        );
        assert_eq!(file_kind(Path::new("a/.stacks-1.parquet.tmp")), None);
    }

    #[test]
    fn the_pair_splits_the_stream_columns() {
        let stream = stacks_stream::dict::encoded_schema(&stacks_stream::symbolized_schema(
            Default::default(),
        ));
        let samples = samples_schema(&stream);
        let stacks = stacks_schema(&stream);
        assert!(samples.fields().iter().all(|f| !is_stack_column(f.name())));
        assert_eq!(samples.fields().last().unwrap().name(), col::STACK_ID);
        let names: Vec<&str> = stacks.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                col::STACK_ID,
                col::KSTACK,
                col::USTACK,
                col::KSTACK_SYMBOLS,
                col::STACK,
                stack_col::FOLDED,
                stack_col::LEAF,
                stack_col::DEPTH
            ]
        );
        assert!(
            stacks
                .fields()
                .iter()
                .all(|f| !matches!(f.data_type(), DataType::Dictionary(..)))
        );
        assert_eq!(samples.fields().len() + 4, stream.fields().len() + 1);
    }
}
