//! stacks-record: BPF programs and their user-space side. Emits a raw Arrow stream of rows with
//! stacks captured at event time and user addresses normalized while processes are alive.
//!
//! Layers, each using only the ones before it (checked by `tests/architecture.rs`): [`spec`]
//! (the `-e` grammar) → `kernel` (the generated skeleton, records, loading) → [`cli`] (the
//! command line) → `process` (what is known of the traced processes: maps, modules,
//! unwinding, files, kernel symbols, spans, ELF notes) → `host` (the host's facts) → `output`
//! (rows and the stack dictionary) → `probes` → `kinds` (one module per event kind:
//! programs, tunables, decoding) → `convert` (records → rows) → `record` (the recording
//! loop). One use runs back: `probes` implements `kinds::Run` for the probes of `-e`.

#![warn(unreachable_pub)]

pub mod cli;
mod convert;
mod host;
mod kernel;
mod kinds;
mod output;
mod probes;
mod process;
mod record;
pub mod spec;

pub use record::run;
