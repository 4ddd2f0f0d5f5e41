//! Which USDT probes an ELF file declares: its `.note.stapsdt` notes (SystemTap SDT), each
//! naming a provider and a probe.

use std::path::Path;

use object::read::elf::{ElfFile64, SectionHeader};
use object::{Object, ReadCache};

/// Whether `elf` declares a USDT probe of `provider` (named `name`, or any with `None`).
pub(crate) fn elf_has_usdt<'d, R: object::ReadRef<'d>>(
    elf: &ElfFile64<'d, object::Endianness, R>,
    provider: &str,
    name: Option<&str>,
) -> bool {
    let Some(notes) = elf.section_by_name(".note.stapsdt") else {
        return false;
    };
    let Ok(Some(mut it)) = notes.elf_section_header().notes(elf.endian(), elf.data()) else {
        return false;
    };
    // Each note's descriptor: three addresses, then "provider\0name\0args\0".
    while let Ok(Some(note)) = it.next() {
        let desc = note.desc();
        let Some(mut strings) = desc.get(24..).map(|s| s.split(|&b| b == 0)) else {
            continue;
        };
        if strings.next() == Some(provider.as_bytes())
            && name.is_none_or(|n| strings.next() == Some(n.as_bytes()))
        {
            return true;
        }
    }
    false
}

/// [`elf_has_usdt`] of the file at `path`; false for anything not a 64-bit ELF file.
pub(crate) fn file_has_usdt(path: &Path, provider: &str, name: Option<&str>) -> bool {
    // Never blocking on a FIFO put where the file was.
    let Ok((file, _)) = crate::process::untrusted::open_plain(path, u64::MAX) else {
        return false;
    };
    let cache = ReadCache::new(file);
    if !crate::process::untrusted::elf_tables_bounded(&cache) {
        return false;
    }
    match ElfFile64::<object::Endianness, _>::parse(&cache) {
        Ok(elf) => elf_has_usdt(&elf, provider, name),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe declared here is found in this test binary by provider and name.
    #[test]
    fn the_probes_of_this_binary_are_found_by_provider_and_name() {
        if std::hint::black_box(false) {
            probe::probe!(stacks_notes_test, here, 1isize);
        }
        let me = Path::new("/proc/self/exe");
        assert!(file_has_usdt(me, "stacks_notes_test", None));
        assert!(file_has_usdt(me, "stacks_notes_test", Some("here")));
        assert!(!file_has_usdt(me, "stacks_notes_test", Some("nope")));
        assert!(!file_has_usdt(me, "no_such_provider", None));
        assert!(!file_has_usdt(Path::new("/nonexistent"), "stacks", None));
    }
}
