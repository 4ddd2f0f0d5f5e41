//! Fuzz target: Arrow IPC stream bytes into stacks-pack's packer (Parquet files on tmpfs).
#![no_main]

use std::sync::OnceLock;

static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = DIR.get_or_init(|| stacks_fuzz::scratch("pack"));
    stacks_fuzz::pack(data, &dir.join("out"));
});
