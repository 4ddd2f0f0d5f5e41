//! Finding tracing-stacks' thread context (the OpenTelemetry thread-context TLS pointer
//! `otel_thread_ctx_v1`, OTEP 4947, and its canary) and its span USDT probes in an executable.

use std::fs::File;
use std::path::Path;

use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Object, ObjectSymbol, SymbolKind, elf};

/// The thread-context pointer's symbol (OTEP 4947).
pub(crate) const CONTEXT_SYMBOL: &str = "otel_thread_ctx_v1";
/// tracing-stacks' canary, a TLS u64 holding [`CANARY`].
pub(crate) const CANARY_SYMBOL: &str = "stacks_tracing_canary";
/// Offsets of the thread context and the canary from a thread's thread pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TlsOffsets {
    pub context: i64,
    pub canary: i64,
    /// The executable has tracing-stacks' USDT probes `stacks_tracing:enter`/`exit`.
    pub probes: bool,
}

/// USDT provider and probe names of span enter and exit.
pub(super) const PROVIDER: &str = "stacks_tracing";

/// Where the executable at `path` keeps the thread context, from its `.dynsym` (exported) or
/// `.symtab`; `None` when it has none. x86_64 only (TLS variant II: the executable's TLS block
/// ends at the thread pointer, placed as glibc's `_dl_determine_tlsoffset` places it).
pub(crate) fn find(path: &Path) -> Result<Option<TlsOffsets>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    // Mapped, not read through `object::ReadCache`: that reads each symbol's name with a seek
    // and a read of its own, and the scan of a large `.symtab` (a Rust test binary's 100,000
    // symbols) was half the recorder's time on a host building Rust (docs/cost.md, "The
    // recorder on a busy host"). SAFETY: mapped read-only; a running executable cannot be
    // written (ETXTBSY), and one truncated after its process exited could fault, as with any
    // profiler reading mapped binaries (blazesym and the CFI reader map them the same way).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())?;
    if !crate::process::untrusted::elf_tables_bounded(&*map) {
        return Ok(None);
    }
    let Ok(elf) = ElfFile64::<object::Endianness, _>::parse(&*map) else {
        return Ok(None); // not a 64-bit ELF file (a script's interpreter is traced instead)
    };
    if elf.elf_header().e_machine(elf.endian()) != elf::EM_X86_64 {
        return Ok(None);
    }
    let endian = elf.endian();
    let Some(tls) = elf
        .elf_program_headers()
        .iter()
        .find(|p| p.p_type(endian) == elf::PT_TLS)
    else {
        return Ok(None);
    };
    let (memsz, vaddr) = (tls.p_memsz(endian), tls.p_vaddr(endian));
    // The file is the target's to write: a segment that cannot be (an alignment that is not
    // a power of two, sizes that overflow) has no thread context.
    let align = tls.p_align(endian).max(1);
    if !align.is_power_of_two() {
        return Ok(None);
    }
    let firstbyte = vaddr.wrapping_neg() & (align - 1);
    let Some(block) = memsz
        .checked_sub(firstbyte)
        .and_then(|n| n.checked_next_multiple_of(align))
        .and_then(|n| n.checked_add(firstbyte))
    else {
        return Ok(None);
    };
    let lookup = |symbols: &mut dyn Iterator<Item = (String, SymbolKind, u64)>| {
        let (mut context, mut canary) = (None, None);
        for (name, kind, value) in symbols {
            if kind != SymbolKind::Tls {
                continue;
            }
            match name.as_str() {
                CONTEXT_SYMBOL => context = Some(value),
                CANARY_SYMBOL => canary = Some(value),
                _ => continue,
            }
            if let (Some(ctx), Some(can)) = (context, canary) {
                return Some(TlsOffsets {
                    context: (ctx as i64).wrapping_sub(block as i64),
                    canary: (can as i64).wrapping_sub(block as i64),
                    probes: false,
                });
            }
        }
        None
    };
    let named =
        |s: object::read::elf::ElfSymbol<'_, '_, elf::FileHeader64<object::Endianness>, _>| {
            Some((s.name().ok()?.to_string(), s.kind(), s.address()))
        };
    let found = lookup(&mut elf.dynamic_symbols().filter_map(named))
        .or_else(|| lookup(&mut elf.symbols().filter_map(named)));
    Ok(found.map(|o| TlsOffsets {
        probes: crate::process::notes::elf_has_usdt(&elf, PROVIDER, None),
        ..o
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" {
        fn arch_prctl(code: i32, addr: *mut u64) -> i32;
    }

    /// The offsets found in this test binary (which links tracing-stacks, its thread context
    /// in `.symtab` only) lead from this thread's FS base to its canary and context.
    #[test]
    fn offsets_found_in_symtab_reach_this_threads_variables() {
        let o = find(Path::new("/proc/self/exe"))
            .unwrap()
            .expect("thread context");
        let mut fs = 0u64;
        // SAFETY: ARCH_GET_FS writes the FS base into `fs`.
        assert_eq!(unsafe { arch_prctl(0x1003, &mut fs) }, 0);
        let (ctx, canary) = tracing_stacks::current();
        assert_eq!(canary, tracing_stacks::CANARY);
        let at = |off: i64| fs.wrapping_add(off as u64) as *const u64;
        // SAFETY: both are this thread's TLS variables, if the offsets are right.
        assert_eq!(unsafe { *at(o.canary) }, tracing_stacks::CANARY);
        assert_eq!(unsafe { *at(o.context) }, ctx as u64);
    }

    #[test]
    fn no_thread_context_in_a_c_program() {
        assert_eq!(find(Path::new("/bin/sh")).unwrap(), None);
    }
}
