//! The files under a samples file: which levels a stream's stacks are stored in, with each
//! file's schema and writer properties. A symbolized stream's stacks go to a stacks file of
//! frame ids and a frames file of each distinct frame once (`stacks_store::frames`);
//! a stream without `stack` (raw stacks: addresses) keeps its stacks whole in the stacks file.

use arrow_schema::{Schema, SchemaRef};
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;
use stacks_store::frames;
use stacks_stream::dict::{is_stack_column, value_type};
use stacks_stream::schema::frame;
use stacks_stream::{col, is_stack_type};

use crate::error::{self, PackError};
use crate::{STACKS_GROUP_ROWS, stacks_kv};

/// Row group of a frames file, in frames: a frames file's string dictionaries are built per
/// group (a framed stacks file keeps [`STACKS_GROUP_ROWS`], what the writer buffers).
pub(crate) const FRAMES_GROUP_ROWS: usize = 64 * 1024;

/// One file's schema and writer properties.
pub struct FileFormat {
    pub schema: SchemaRef,
    pub props: WriterProperties,
}

/// The stacks levels of a stream; see the module documentation.
pub enum Levels {
    /// Stacks file of `stack_id` → `frame_ids`, frames file of `frame_id` → frame.
    Framed {
        stacks: FileFormat,
        frames: Box<FileFormat>,
    },
    /// Stacks file of whole stacks (`stacks_store::stacks_schema`).
    Whole { stacks: FileFormat },
}

impl Levels {
    /// The levels for rows of `stream` (stamped), compressed at `zstd_level`.
    pub fn new(stream: &Schema, zstd_level: i32) -> Result<Self, PackError> {
        let level = ZstdLevel::try_new(zstd_level).map_err(|e| PackError::Schema {
            input: "--zstd-level".into(),
            detail: error::parquet_detail(&e),
        })?;
        let base = |schema: &Schema, group_rows: usize| {
            WriterProperties::builder()
                .set_compression(Compression::ZSTD(level))
                .set_dictionary_enabled(true)
                .set_statistics_enabled(EnabledStatistics::Chunk)
                .set_max_row_group_row_count(Some(group_rows))
                .set_key_value_metadata(Some(stacks_kv(schema)))
        };
        let stack = stream
            .field_with_name(col::STACK)
            .ok()
            .map(|f| value_type(f.data_type()))
            .filter(|dt| is_stack_type(dt));
        let metadata = stacks_store::level_metadata(stream.metadata());
        let mut framed_metadata = metadata.clone();
        framed_metadata.insert(stacks_store::LAYOUT_KEY.into(), stacks_store::LAYOUT.into());
        let framed = stack.and_then(|dt| frames::frames_schema(dt, framed_metadata.clone()));
        Ok(match framed {
            Some(frames_schema) => {
                let stacks_schema = frames::framed_stacks_schema(framed_metadata);
                let stacks_props =
                    framed_stacks_props(base(&stacks_schema, STACKS_GROUP_ROWS)).build();
                let frames_props = frames_props(base(&frames_schema, FRAMES_GROUP_ROWS)).build();
                Levels::Framed {
                    stacks: FileFormat {
                        schema: stacks_schema,
                        props: stacks_props,
                    },
                    frames: Box::new(FileFormat {
                        schema: frames_schema,
                        props: frames_props,
                    }),
                }
            }
            None => {
                let whole = stacks_store::stacks_schema(stream);
                let schema = std::sync::Arc::new(whole.as_ref().clone().with_metadata(metadata));
                let props = whole_stacks_props(base(&schema, STACKS_GROUP_ROWS), &schema).build();
                Levels::Whole {
                    stacks: FileFormat { schema, props },
                }
            }
        })
    }
}

/// A framed stacks file: `stack_id` with chunk statistics; `frame_ids` plain (no dictionary:
/// zstd finds the root paths stacks share in the plain values, which bit-packed dictionary
/// indices hide), without statistics.
fn framed_stacks_props(b: WriterPropertiesBuilder) -> WriterPropertiesBuilder {
    let ids = ColumnPath::new(vec![
        frames::FRAME_IDS.to_string(),
        "list".to_string(),
        frames::FRAME_ID.to_string(),
    ]);
    b.set_column_dictionary_enabled(ids.clone(), false)
        .set_column_statistics_enabled(ids, EnabledStatistics::None)
}

/// A frames file: its rows are sorted by module and offset, so the integer columns are
/// delta-encoded (ids count up; offsets, addresses and lines of neighbouring frames are
/// close); strings keep their dictionaries; statistics on `frame_id` only.
fn frames_props(b: WriterPropertiesBuilder) -> WriterPropertiesBuilder {
    let mut b = b.set_statistics_enabled(EnabledStatistics::None);
    for name in [
        frames::FRAME_ID,
        frame::OFFSET,
        frame::ADDR,
        frame::LINE,
        frame::COLUMN,
    ] {
        let path = ColumnPath::from(name);
        b = b
            .set_column_dictionary_enabled(path.clone(), false)
            .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
    }
    b.set_column_statistics_enabled(ColumnPath::from(frames::FRAME_ID), EnabledStatistics::Chunk)
}

/// A whole stacks file: dictionaries for every column (frame names and files repeat across
/// stacks); no statistics on the stack columns' leaves (min/max of frame fields prune
/// nothing), chunk statistics on `stack_id`, `folded`, `leaf` and `depth`.
fn whole_stacks_props(mut b: WriterPropertiesBuilder, schema: &Schema) -> WriterPropertiesBuilder {
    if let Ok(descr) = ArrowSchemaConverter::new().convert(schema) {
        for i in 0..descr.num_columns() {
            let path = descr.column(i).path().clone();
            if path.parts().first().is_some_and(|top| is_stack_column(top)) {
                b = b.set_column_statistics_enabled(path, EnabledStatistics::None);
            }
        }
    }
    b
}
