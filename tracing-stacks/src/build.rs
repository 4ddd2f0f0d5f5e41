//! For the application's build script: export the thread context in `.dynsym`, where a reader
//! finds it in a stripped executable.

/// Link arguments exporting `otel_thread_ctx_v1`, `stacks_tracing_canary` and
/// `stacks_tracing_abi` from the executables of the calling package (`cargo:rustc-link-arg-bins`).
/// Call it from `build.rs` (tracing-stacks as a build dependency too):
///
/// ```no_run
/// // build.rs
/// tracing_stacks::build::export();
/// ```
pub fn export() {
    for symbol in EXPORTED {
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol={symbol}");
    }
}

/// The symbols [`export`] puts in `.dynsym`.
pub(crate) const EXPORTED: [&str; 3] = [
    "otel_thread_ctx_v1",
    "stacks_tracing_canary",
    "stacks_tracing_abi",
];
