//! `stacks-query`: run one SQL query over a stacks store (the tables `stacks`, `samples` and
//! `stack_table` of [`stacks_sql::source`]), with typed parameters and stack functions, and
//! write the result as a text table, CSV, JSON, NDJSON, an Arrow IPC stream or Parquet. The
//! command line is here; everything it runs is in the `stacks-sql` library.

#![warn(unreachable_pub)]

pub mod cli;

pub use cli::run;

/// Tool name used in messages and provenance.
pub const TOOL: &str = "stacks-query";
