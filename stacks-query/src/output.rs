//! Writing query results to stdout, batch by batch: an aligned text table, CSV, newline-delimited
//! JSON or an Arrow IPC stream carrying the recording's metadata.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StringArray};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text table (nested values as text); waits for the whole result.
    Table,
    /// CSV with a header row; nested values as their text.
    Csv,
    /// Newline-delimited JSON objects; nested values as JSON.
    Json,
    /// Arrow IPC stream with the recording's metadata, for stacks-pprof and other tools.
    Arrow,
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
    Json,
    /// The stream is opened with the first batch, so an error before any result leaves
    /// stdout empty rather than holding a truncated stream.
    Arrow {
        schema: SchemaRef,
        out: Option<Box<stacks_stream::OutputStream>>,
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
            Format::Json => Writer::Json,
            Format::Arrow => {
                let schema = Arc::new(Schema::new_with_metadata(schema.fields().clone(), metadata));
                if stacks_stream::cli::stdout_is_tty() {
                    return Err(stacks_stream::ContractError::BinaryToTty.into());
                }
                Writer::Arrow { schema, out: None }
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
            Writer::Json => {
                let mut buf = Vec::new();
                let mut w = arrow_json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow_json::writer::LineDelimited>(&mut buf);
                w.write(batch).context("formatting JSON")?;
                w.finish().context("formatting JSON")?;
                emit(&buf)?;
            }
            Writer::Arrow { schema, out } => {
                let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
                let batch = RecordBatch::try_new_with_options(
                    schema.clone(),
                    batch.columns().to_vec(),
                    &options,
                )
                .context("result batch does not match the result schema")?;
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
            Writer::Csv { .. } | Writer::Json => {}
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
