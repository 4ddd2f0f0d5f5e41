//! Fuzz target: Arrow IPC stream bytes into stacks-trace's library, as its binary reads stdin.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stacks_fuzz::trace(data));
