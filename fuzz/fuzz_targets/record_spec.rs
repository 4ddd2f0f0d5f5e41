//! Fuzz target: stacks-record's event spec (`-e`), duration parsers and whole command line
//! (arguments separated by NUL bytes), up to the checks made before any BPF is loaded.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stacks_fuzz::record_args(data));
