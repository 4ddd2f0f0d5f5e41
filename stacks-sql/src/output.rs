//! Writing query results to stdout, batch by batch: an aligned text table, CSV, a JSON array,
//! newline-delimited JSON, an Arrow IPC stream or a Parquet file, the binary ones carrying the
//! recording's metadata.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StringArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text table (nested values as text); waits for the whole result.
    Table,
    /// CSV with a header row; nested values as their text.
    Csv,
    /// One JSON array of objects; nested values as JSON.
    Json,
    /// Newline-delimited JSON objects, one per row; nested values as JSON.
    Ndjson,
    /// Arrow IPC stream with the recording's metadata, for stacks-pprof and other tools.
    Arrow,
    /// A Parquet file (zstd) with the recording's metadata.
    Parquet,
}

/// A sink for result batches.
pub enum Writer {
    Table {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    Csv {
        schema: SchemaRef,
        wrote_header: bool,
    },
    Json {
        rows: u64,
    },
    Ndjson,
    /// The stream is opened with the first batch, so an error before any result leaves
    /// stdout empty rather than holding a truncated stream.
    Arrow {
        schema: SchemaRef,
        out: Option<Box<stacks_stream::OutputStream>>,
    },
    Parquet {
        schema: SchemaRef,
        out: Option<Box<ArrowWriter<PipeOut>>>,
        pipe: PipeOut,
    },
}

impl Writer {
    /// Start writing results of `schema` in `format`; `metadata` goes into Arrow output.
    pub fn new(
        format: Format,
        schema: &SchemaRef,
        metadata: HashMap<String, String>,
    ) -> Result<Self> {
        Ok(match format {
            Format::Table => Writer::Table {
                schema: schema.clone(),
                batches: Vec::new(),
            },
            Format::Csv => Writer::Csv {
                schema: schema.clone(),
                wrote_header: false,
            },
            Format::Json => Writer::Json { rows: 0 },
            Format::Ndjson => Writer::Ndjson,
            Format::Arrow | Format::Parquet => {
                let schema = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
                if stacks_stream::cli::stdout_is_tty() {
                    return Err(stacks_stream::ContractError::BinaryToTty.into());
                }
                if format == Format::Arrow {
                    Writer::Arrow { schema, out: None }
                } else {
                    Writer::Parquet {
                        schema,
                        out: None,
                        pipe: PipeOut::default(),
                    }
                }
            }
        })
    }

    /// Write (or, for a table, keep) one batch.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            Writer::Table { batches, .. } => batches.push(batch.clone()),
            Writer::Csv { wrote_header, .. } => {
                let text = nested_as_text(batch)?;
                let mut buf = Vec::new();
                arrow_csv::WriterBuilder::new()
                    .with_header(!*wrote_header)
                    .build(&mut buf)
                    .write(&text)
                    .context("formatting CSV")?;
                *wrote_header = true;
                emit(&buf)?;
            }
            Writer::Ndjson => emit(&ndjson(batch)?)?,
            Writer::Json { rows } => {
                let lines = ndjson(batch)?;
                let mut buf = Vec::with_capacity(lines.len() + 16);
                for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    buf.extend_from_slice(if *rows == 0 { b"[\n" } else { b",\n" });
                    buf.extend_from_slice(line);
                    *rows += 1;
                }
                emit(&buf)?;
            }
            Writer::Parquet { schema, out, pipe } => {
                let batch = with_schema(schema, batch)?;
                let w = match out {
                    Some(w) => w,
                    None => out.insert(Box::new(parquet_writer(schema, pipe)?)),
                };
                let res = w.write(&batch);
                pipe.check(res)?;
            }
            Writer::Arrow { schema, out } => {
                let batch = with_schema(schema, batch)?;
                let out = match out {
                    Some(out) => out,
                    None => out.insert(Box::new(stacks_stream::open_output(None, schema)?)),
                };
                out.write(&batch)?;
            }
        }
        Ok(())
    }

    /// Finish the output: print the table, the CSV header of an empty result, or the Arrow
    /// end-of-stream marker.
    pub fn finish(mut self) -> Result<()> {
        match self {
            Writer::Table { schema, batches } => {
                let table = arrow_cast::pretty::pretty_format_batches_with_schema(schema, &batches)
                    .context("formatting the table")?;
                emit(format!("{table}\n").as_bytes())?;
            }
            Writer::Csv {
                ref schema,
                wrote_header: false,
            } => {
                let empty = RecordBatch::new_empty(schema.clone());
                self.write(&empty)?;
            }
            Writer::Csv { .. } | Writer::Ndjson => {}
            Writer::Json { rows } => emit(if rows == 0 { b"[]\n" } else { b"\n]\n" })?,
            Writer::Parquet { schema, out, pipe } => {
                let w = match out {
                    Some(w) => w,
                    None => Box::new(parquet_writer(&schema, &pipe)?),
                };
                let res = w.close().map(|_| ());
                pipe.check(res)?;
            }
            Writer::Arrow { schema, out } => {
                let out = match out {
                    Some(out) => out,
                    None => Box::new(stacks_stream::open_output(None, &schema)?),
                };
                out.finish()?;
            }
        }
        Ok(())
    }
}

/// `batch` with the output schema (which carries the recording's metadata).
fn with_schema(schema: &SchemaRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options)
        .context("result batch does not match the result schema")
}

/// Rows as newline-delimited JSON objects, nulls written out.
fn ndjson(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut w = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow_json::writer::LineDelimited>(&mut buf);
    w.write(batch).context("formatting JSON")?;
    w.finish().context("formatting JSON")?;
    drop(w);
    Ok(buf)
}

fn parquet_writer(schema: &SchemaRef, pipe: &PipeOut) -> Result<ArrowWriter<PipeOut>> {
    let kv = schema
        .metadata()
        .iter()
        .filter(|(k, _)| stacks_stream::meta::is_stacks_key(k))
        .map(|(k, v)| parquet::file::metadata::KeyValue::new(k.clone(), v.clone()))
        .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(kv))
        .build();
    ArrowWriter::try_new(pipe.clone(), schema.clone(), Some(props))
        .context("starting Parquet output")
}

/// stdout for the Parquet writer, remembering an I/O error (a closed pipe) that the Parquet
/// error would otherwise hide.
#[derive(Clone, Default)]
pub struct PipeOut {
    failed: Arc<std::sync::Mutex<Option<io::ErrorKind>>>,
}

impl PipeOut {
    /// The writer's result, with a remembered I/O error surfacing as that error.
    fn check<T>(&self, res: parquet::errors::Result<T>) -> Result<()> {
        match res {
            Ok(_) => Ok(()),
            Err(e) => match *self.failed.lock().unwrap_or_else(|p| p.into_inner()) {
                Some(kind) => Err(io::Error::from(kind).into()),
                None => Err(anyhow::anyhow!("writing Parquet output: {e}")),
            },
        }
    }

    fn note<T>(&self, res: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &res {
            *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.kind());
        }
        res
    }
}

impl Write for PipeOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.note(io::stdout().lock().write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.note(io::stdout().lock().flush())
    }
}

/// Write bytes to stdout and flush, keeping the io::Error (a closed pipe) in the error chain.
fn emit(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// Replace every nested column (list, struct, map) with its display text, for CSV.
pub fn nested_as_text(batch: &RecordBatch) -> Result<RecordBatch> {
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| f.data_type().is_nested()) {
        return Ok(batch.clone());
    }
    let options = FormatOptions::default();
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if !field.data_type().is_nested() {
            fields.push(field.as_ref().clone());
            columns.push(column.clone());
            continue;
        }
        let formatter = ArrayFormatter::try_new(column.as_ref(), &options)
            .with_context(|| format!("formatting column `{}` as text", field.name()))?;
        let text: StringArray = (0..column.len())
            .map(|i| (!column.is_null(i)).then(|| formatter.value(i).to_string()))
            .collect();
        fields.push(Field::new(
            field.name(),
            DataType::Utf8,
            field.is_nullable(),
        ));
        columns.push(Arc::new(text));
    }
    let schema = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        schema, columns, &options,
    )?)
}
