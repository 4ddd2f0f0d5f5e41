//! Finding tracing-stacks' thread context (the OpenTelemetry thread-context TLS pointer
//! `otel_thread_ctx_v1`, OTEP 4947, and its canary) and its span USDT probes in an executable.

use std::fs::File;
use std::path::Path;

use object::elf;
use object::read::elf::SectionHeader;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};

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
    // Headers read with `pread` through `object`'s read cache, never mapped: a process may
    // truncate its executable once it no longer runs it (or a file it execs another way), and
    // a mapping of it would then fault (docs/threat-model.md).
    let data = &object::ReadCache::new(&file);
    if !crate::process::untrusted::elf_tables_bounded(data) {
        return Ok(None);
    }
    let Ok(elf) = ElfFile64::<object::Endianness, _>::parse(data) else {
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
    let sections = elf.elf_section_table();
    let found = [elf::SHT_DYNSYM, elf::SHT_SYMTAB]
        .into_iter()
        .find_map(|kind| {
            let table = sections.iter().find(|s| s.sh_type(endian) == kind)?;
            let strings = sections.section(table.link(endian)).ok()?;
            let range = |s: &elf::SectionHeader64<object::Endianness>| {
                Some((s.sh_offset(endian), s.sh_size(endian)))
            };
            let (context, canary) = tls_values(&file, range(table)?, range(strings)?, endian);
            Some(TlsOffsets {
                context: (context? as i64).wrapping_sub(block as i64),
                canary: (canary? as i64).wrapping_sub(block as i64),
                probes: false,
            })
        });
    Ok(found.map(|o| TlsOffsets {
        probes: crate::process::notes::elf_has_usdt(&elf, PROVIDER, None),
        ..o
    }))
}

/// The values of the thread context's and the canary's TLS symbols in the symbol table at
/// `symbols` (file offset, size) whose names are in the string table at `strings`. The table
/// is read in pieces and a name only of a TLS symbol: the scan of a large `.symtab` (a Rust
/// test binary's 100,000 symbols) through `object`'s read cache, a seek and a read per name,
/// was half the recorder's time on a host building Rust (docs/cost.md, "The recorder on a
/// busy host"). A table cut short (the file truncated meanwhile) ends the scan.
fn tls_values(
    file: &File,
    symbols: (u64, u64),
    strings: (u64, u64),
    endian: object::Endianness,
) -> (Option<u64>, Option<u64>) {
    use object::read::elf::Sym;
    use std::os::unix::fs::FileExt;
    const SYMBOL: u64 = size_of::<elf::Sym64<object::Endianness>>() as u64;
    let longest = CONTEXT_SYMBOL.len().max(CANARY_SYMBOL.len()) + 1;
    let (mut context, mut canary) = (None, None);
    let mut piece = vec![0u8; 4096 * SYMBOL as usize];
    let mut at = 0;
    while at + SYMBOL <= symbols.1 {
        let n = (piece.len() as u64).min((symbols.1 - at) / SYMBOL * SYMBOL) as usize;
        let Some(offset) = symbols.0.checked_add(at) else {
            break;
        };
        if file.read_exact_at(&mut piece[..n], offset).is_err() {
            break;
        }
        at += n as u64;
        let Ok(table) = object::pod::slice_from_all_bytes::<elf::Sym64<_>>(&piece[..n]) else {
            break;
        };
        for sym in table.iter().filter(|s| s.st_type() == elf::STT_TLS) {
            let name_at = u64::from(sym.st_name(endian));
            let len = (longest as u64).min(strings.1.saturating_sub(name_at)) as usize;
            let mut name = [0u8; 64];
            let Some(offset) = strings.0.checked_add(name_at) else {
                continue;
            };
            if len == 0 || file.read_exact_at(&mut name[..len], offset).is_err() {
                continue;
            }
            let is =
                |wanted: &str| name[..len].split(|b| *b == 0).next() == Some(wanted.as_bytes());
            if is(CONTEXT_SYMBOL) {
                context = Some(sym.st_value(endian));
            } else if is(CANARY_SYMBOL) {
                canary = Some(sym.st_value(endian));
            }
        }
    }
    (context, canary)
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
