//! The kernel↔user ABI: the libbpf-rs skeleton generated from bpf/stacks.bpf.c by build.rs
//! (programs, maps, rodata and the types of bpf/stacks.h). A leaf: every other module reads
//! the kernel side through it.

#![allow(
    clippy::all,
    missing_docs,
    non_camel_case_types,
    unused,
    unreachable_pub
)]
include!(concat!(env!("OUT_DIR"), "/stacks.skel.rs"));
