//! What the recorder knows of the traced processes and the host, learned while they live:
//! targets ([`target`]), memory maps ([`maps`], the one `/proc/PID/maps` parser), build ids of
//! mapped files ([`modules`]), user-frame normalization ([`normalize`]), `d` stacks unwound
//! with CFI ([`unwind`]) and the exit snapshots of processes gone before their map was read
//! ([`exit_maps`]), file and socket names ([`fdnames`]), cgroup paths ([`cgroups`]),
//! kernel symbols ([`kallsyms`]), `tracing` spans ([`spans`]), the vDSO image ([`vdso`]), JIT
//! code's names from perf maps ([`perfmap`]), CPython's Python frames ([`python`]) and the
//! USDT probes an ELF file declares ([`notes`]); the files a process controls opened only
//! within its own view ([`untrusted`]).

pub(crate) mod cgroups;
pub(crate) mod exit_maps;
pub(crate) mod fdnames;
pub(crate) mod kallsyms;
pub(crate) mod maps;
pub(crate) mod modules;
pub(crate) mod normalize;
pub(crate) mod notes;
pub(crate) mod perfmap;
pub(crate) mod python;
pub(crate) mod spans;
pub(crate) mod target;
pub(crate) mod untrusted;
pub(crate) mod unwind;
pub(crate) mod vdso;
