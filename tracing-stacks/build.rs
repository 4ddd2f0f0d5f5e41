//! Build script: compiles the thread-context shim (src/thread_ctx.c), which defines the ELF
//! TLS variables stable Rust cannot name (`#[thread_local]` with an unmangled name is unstable).

fn main() {
    cc::Build::new()
        .file("src/thread_ctx.c")
        // One section per kind: the canary and the ABI marker are kept because the function the
        // layer calls shares their object's sections (cc's default per-symbol sections would
        // let the linker drop them as unreferenced).
        .flag("-fno-function-sections")
        .flag("-fno-data-sections")
        .compile("tracing_stacks_thread_ctx");
    println!("cargo:rerun-if-changed=src/thread_ctx.c");
}
