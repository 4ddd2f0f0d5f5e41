//! What every profile format made of a stacks stream shares (stacks-pprof, stacks-otlp): which
//! columns are the stack, the values and the labels, and the sample type (name and unit) of each
//! value ([`plan`]); the stream's facts (sampling period, start, comments: [`facts`]); frames,
//! functions, mappings and locations interned into tables ([`tables`]); and the rows read batch
//! by batch as a stack of locations, labels, values and a time ([`rows`]). The formats differ
//! only in what they do with a row: pprof sums it into its sample, OTLP keeps it as an event.

#![warn(unreachable_pub)]

pub mod facts;
pub mod plan;
pub mod rows;
pub mod tables;

pub use rows::{Batch, LabelValue, Reader};

/// What to convert and how (the command-line options the formats share).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The stack column; default `stack`, else the first column holding symbolized stacks.
    pub stack: Option<String>,
    /// Value columns; default every numeric column but `pid`/`tid`/`cpu` and `*_error`, or a
    /// count of rows when there is none.
    pub values: Vec<String>,
    /// Leave out the labels (string columns, `pid`/`tid`/`cpu`).
    pub no_labels: bool,
    /// For row streams (a `kind` and a `value` column, as stacks-record/-symbolize write):
    /// which kinds of rows to convert (each entry may list several, comma-separated); default
    /// `profile`.
    pub kinds: Vec<String>,
    /// Append `_[k]` to kernel function names.
    pub annotate: bool,
    /// Root every stack at a frame named after the process (`comm` column).
    pub process_name: bool,
    /// Put a `-` frame between the kernel and the user frames of a stack.
    pub delimiter: bool,
}

/// Errors of reading a stream as a profile. Every message names the input and the column at
/// fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Contract(#[from] stacks_stream::ContractError),
    #[error(
        "{input}: value column `{column}` has type {found}, expected an integer or float column"
    )]
    NotNumeric {
        input: String,
        column: String,
        found: String,
    },
    #[error(
        "{input}: unknown --kind `{kind}` (known: {known})",
        known = stacks_stream::kinds::names().collect::<Vec<_>>().join(", ")
    )]
    UnknownKind { input: String, kind: String },
}
