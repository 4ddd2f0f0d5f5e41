//! Build script: compiles bpf/stacks.bpf.c with clang and generates its libbpf-rs skeleton
//! into OUT_DIR.

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
    for f in [
        "stacks.bpf.c",
        "stacks.h",
        "state.bpf.h",
        "probe.bpf.h",
        "dwarf.bpf.h",
        "offcpu.bpf.h",
        "vmlinux.h",
        "asm/errno.h",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    println!("cargo:rerun-if-env-changed=CLANG");
}
