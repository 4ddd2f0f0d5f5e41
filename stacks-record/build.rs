//! Build script: compiles bpf/stacks.bpf.c (which includes the other files of bpf/) with
//! clang and generates its libbpf-rs skeleton into OUT_DIR.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("bpf");
    let src = root.join("stacks.bpf.c");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("stacks.skel.rs");
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    if let Err(e) = SkeletonBuilder::new()
        .source(&src)
        .clang(&clang)
        .clang_args([
            "-I".into(),
            root.clone().into_os_string(),
            "-Wall".into(),
            "-O2".into(),
            "-g".into(),
        ])
        .build_and_generate(&out)
    {
        panic!(
            "building {} failed: {e:#}\n(needs clang, libelf-dev, zlib1g-dev, pkg-config: scripts/test installs them)",
            src.display()
        );
    }
    // The whole directory (stacks.bpf.c, common.bpf.h, kinds/*.bpf.h, …): cargo rescans it.
    println!("cargo:rerun-if-changed={}", root.display());
    println!("cargo:rerun-if-env-changed=CLANG");
}
