//! Test support shared by the stacks crates' tests (a dev-dependency only): one fixture model
//! of rows and frames ([`rows`]) with the two shared data sets built on it (the converters'
//! [`events`], the store's [`recording`]), Arrow stream and Parquet files ([`files`]), running a
//! tool with stdin and a timeout ([`tool`]), scratch directories, golden files with
//! `STACKS_BLESS=1` ([`golden`]), the BPF/root availability checks ([`env`]) and the Trace
//! Event checker ([`trace_check`]).

#![warn(unreachable_pub)]

pub mod env;
pub mod events;
pub mod files;
pub mod golden;
pub mod recording;
pub mod rows;
pub mod tool;
pub mod trace_check;

pub use env::{bpf_available, bpf_serial, crate_dir, root_available};
#[cfg(feature = "parquet")]
pub use files::{read_parquet, write_parquet};
pub use files::{read_stream, stream_bytes, stream_with_ends};
pub use rows::{
    Encoder, Frame, Keys, Ksym, Row, UFrame, batch, broken_dictionaries, read_frames, stack_array,
    stack_functions,
};
pub use tool::{
    Scratch, ScratchDir, assert_one_line_error, bin, bin_dir, fuzz_case, fuzz_corpus, run_command,
    run_tool, run_with_closed_stdout, scratch, stderr,
};
