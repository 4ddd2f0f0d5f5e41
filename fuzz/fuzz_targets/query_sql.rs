//! Fuzz target: stacks-query SQL text and `--param` values (see `stacks_fuzz::query`) over a
//! one-file table of symbolized rows.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stacks_fuzz::query::run(data));
