//! Arrow IPC streams and Parquet files of fixture batches, written and read back.

use std::path::Path;

use arrow_array::RecordBatch;
use arrow_ipc::writer::{DictionaryHandling, IpcWriteOptions, StreamWriter};
use arrow_schema::Schema;
#[cfg(feature = "parquet")]
pub use parquet_files::{ReadBack, read_parquet, write_parquet};

/// The IPC stream bytes of `batches` (dictionaries sent as deltas); without `finish` the
/// end-of-stream marker is missing.
pub fn stream_bytes(schema: &Schema, batches: &[RecordBatch], finish: bool) -> Vec<u8> {
    stream_with_ends(schema, batches, finish).0
}

/// The IPC stream bytes and, for each batch, the stream length once it was written.
pub fn stream_with_ends(
    schema: &Schema,
    batches: &[RecordBatch],
    finish: bool,
) -> (Vec<u8>, Vec<usize>) {
    // As every stacks tool writes: dictionaries as deltas (only new entries travel).
    let options = IpcWriteOptions::default().with_dictionary_handling(DictionaryHandling::Delta);
    let mut w =
        StreamWriter::try_new_with_options(Vec::new(), schema, options).expect("stream writer");
    let mut ends = Vec::new();
    for b in batches {
        w.write(b).expect("write batch");
        ends.push(w.get_ref().len());
    }
    if finish {
        w.finish().expect("finish stream");
    }
    // Not `into_inner`: it would add the end-of-stream marker.
    (w.get_ref().clone(), ends)
}

/// Read a whole Arrow stream file into batches.
pub fn read_stream(path: &Path) -> Vec<RecordBatch> {
    let input = stacks_stream::open_input(Some(path)).expect("open stream");
    input.collect::<Result<Vec<_>, _>>().expect("read stream")
}

/// Parquet files of fixture batches (feature `parquet`).
#[cfg(feature = "parquet")]
mod parquet_files {
    use std::collections::HashMap;
    use std::fs::File;
    use std::path::Path;
    use std::sync::Arc;

    use arrow_array::RecordBatch;
    use arrow_schema::SchemaRef;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
    use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};

    /// Write `batches` (all of one schema) as one Parquet file with default properties.
    pub fn write_parquet(path: &Path, batches: &[RecordBatch]) {
        let schema = batches.first().expect("at least one batch").schema();
        let file = File::create(path).expect("create parquet file");
        let mut w = ArrowWriter::try_new(file, schema, None).expect("parquet writer");
        for b in batches {
            w.write(b).expect("write parquet batch");
        }
        w.close().expect("close parquet file");
    }

    /// One Parquet file read back: its footer, Arrow schema and batches.
    pub struct ReadBack {
        pub metadata: Arc<ParquetMetaData>,
        pub schema: SchemaRef,
        pub batches: Vec<RecordBatch>,
    }

    impl ReadBack {
        pub fn rows(&self) -> usize {
            self.batches.iter().map(|b| b.num_rows()).sum()
        }

        /// Parquet key-value metadata as a map.
        pub fn kv(&self) -> HashMap<String, String> {
            self.metadata
                .file_metadata()
                .key_value_metadata()
                .into_iter()
                .flatten()
                .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
                .collect()
        }
    }

    /// Read a Parquet file (page index required) with its footer.
    pub fn read_parquet(path: &Path) -> ReadBack {
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
        let file = File::open(path).expect("open parquet file");
        let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(file, options)
            .expect("parquet footer");
        let metadata = builder.metadata().clone();
        let schema = builder.schema().clone();
        let batches = builder
            .build()
            .expect("parquet reader")
            .collect::<Result<Vec<_>, _>>()
            .expect("read parquet");
        ReadBack {
            metadata,
            schema,
            batches,
        }
    }
}
