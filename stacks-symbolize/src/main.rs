//! `stacks-symbolize`: adds function, file, line and inlined frames to a raw stacks stream.

use std::process::ExitCode;

/// mimalloc, not glibc's malloc: a symbolizer running for days frees what it resolved in waves
/// (frames age every 2 minutes, dictionaries start over), among what it keeps; glibc's arenas
/// kept those holes (28 MiB of free chunks at minute 38 of a churn soak, its live heap level
/// since minute 10), mimalloc's pages of one size class each are reused and given back whole.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    stacks_stream::cli::main_with("stacks-symbolize", stacks_symbolize::run)
}
