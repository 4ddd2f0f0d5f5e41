//! The stream contract shared by every stacks tool: schemas, column names, metadata keys,
//! Arrow IPC reading/writing helpers and the common command-line conventions.
//!
//! Every tool reads and writes Arrow IPC *streams*. A stream carries the schema version and
//! recording facts (host, kernel, boot id, events, clock) as schema metadata, so any stage can
//! tell what it is looking at. `docs/format.md` documents every column.

#![warn(unreachable_pub)]

pub mod cli;
pub mod columns;
pub mod dict;
pub mod events;
pub mod frames;
pub mod hex;
pub mod io;
pub mod kinds;
pub mod lost;
pub mod mounts;
pub mod schema;
pub mod stack_key;
pub mod sys;
pub mod table;
pub mod tally;
pub mod time;

pub use frames::Unresolved;
pub use io::{InputStream, OutputStream, open_input, open_output, open_output_with};
/// Row kinds (the `kind` column): the name of each kind of the registry, [`kinds`], which says
/// for each what its rows hold and how every tool reads them.
pub use kinds::names as kind;
pub use schema::*;

/// Errors of the stream contract. Every message names the thing that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("{input}: empty input: expected an Arrow IPC stream")]
    Empty { input: String },
    #[error(
        "{input}: not an Arrow IPC stream (it starts with {start}); stacks tools exchange Arrow IPC streams"
    )]
    NotArrow { input: String, start: String },
    #[error(
        "{input}: truncated Arrow stream: it ended without an end-of-stream marker (did the tool before it fail?)"
    )]
    Truncated { input: String },
    #[error("{input}: invalid Arrow stream: {detail}")]
    Invalid { input: String, detail: String },
    #[error("{input}: missing column `{column}` (required: {why})")]
    MissingColumn {
        input: String,
        column: String,
        why: String,
    },
    #[error("{input}: column `{column}` has type {found}, expected {expected}")]
    WrongType {
        input: String,
        column: String,
        found: String,
        expected: String,
    },
    #[error(
        "{input}: stream schema version {found} is newer than this tool understands ({supported}); upgrade stacks"
    )]
    NewerVersion {
        input: String,
        found: String,
        supported: String,
    },
    /// A column (or `column.field`) that cannot be read as the type a tool reads it as.
    #[error("{input}: reading column `{column}`: {detail}")]
    Column {
        input: String,
        column: String,
        detail: String,
    },
    #[error("{input}: not a stacks row stream: {detail}")]
    NotStacks { input: String, detail: String },
    #[error(
        "refusing to write binary Arrow data to a terminal: pipe it into another stacks tool or redirect it to a file"
    )]
    BinaryToTty,
    /// The cause is shown by the error chain (`tool: error: PATH: cause`), not repeated here.
    #[error("{path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}
