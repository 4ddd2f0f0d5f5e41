//! stacks-record: BPF programs and their user-space side. Emits a raw Arrow stream of rows with
//! stacks captured at event time and user addresses normalized while processes are alive.

pub mod bpf;
pub mod cgroups;
pub mod cli;
pub mod convert;
pub mod drops;
pub mod event;
pub mod fdnames;
pub mod host;
pub mod kallsyms;
pub mod modules;
pub mod normalize;
pub mod probes;
pub mod record;
pub mod rows;
pub mod spans;
pub mod spec;
pub mod stacks;
pub mod target;
pub mod unwind;

pub use record::run;
