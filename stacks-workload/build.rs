//! Build script: exports tracing-stacks' thread context from the workload binary (`.dynsym`),
//! so a stripped copy of it still has its spans read.

fn main() {
    tracing_stacks::build::export();
}
