//! The store layout stacks-pack writes and stacks-query reads: per rotated file, a *samples*
//! file (every column but the stacks, plus `stack_id`) and a *stacks* file (each distinct
//! `stack_id` of those samples once, with its frames and precomputed `folded`, `leaf` and
//! `depth`). The stacks file is made visible first, so every visible samples file has its
//! stacks. Files of the first layout (`NAME.parquet`, stacks inline in every row) are still read.

mod distinct;
mod split;

pub use distinct::DistinctCount;
pub use split::{StackId, StackSplitter, summaries};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::dict::{is_stack_column, value_type};
use crate::schema::{col, stack_id_type};

/// How a samples file's name ends.
pub const SAMPLES_SUFFIX: &str = ".samples.parquet";
/// How a stacks file's name ends.
pub const STACKS_SUFFIX: &str = ".stacks.parquet";
/// How every stored file's name ends (first-layout files end in just this).
pub const PARQUET_SUFFIX: &str = ".parquet";

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
    } else if name.ends_with(PARQUET_SUFFIX) {
        Some(FileKind::Inline)
    } else {
        None
    }
}

/// The stacks file that goes with samples file `samples`.
pub fn stacks_path(samples: &Path) -> PathBuf {
    let name = samples
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let base = name.strip_suffix(SAMPLES_SUFFIX).unwrap_or(name);
    samples.with_file_name(format!("{base}{STACKS_SUFFIX}"))
}

/// The samples file that goes with stacks file `stacks`.
pub fn samples_path(stacks: &Path) -> PathBuf {
    let name = stacks
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let base = name.strip_suffix(STACKS_SUFFIX).unwrap_or(name);
    stacks.with_file_name(format!("{base}{SAMPLES_SUFFIX}"))
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

/// Schema of the stacks file for rows of `stream`: `stack_id`, the stream's stack columns
/// (plain lists, in stream order), then `folded`, `leaf` and `depth`; the stream metadata kept.
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
        assert_eq!(
            file_kind(Path::new("a/stacks-1.parquet")),
            Some(FileKind::Inline)
        );
        assert_eq!(file_kind(Path::new("a/.stacks-1.parquet.tmp")), None);
    }

    #[test]
    fn the_pair_splits_the_stream_columns() {
        let stream = crate::dict::encoded_schema(&crate::symbolized_schema(Default::default()));
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
