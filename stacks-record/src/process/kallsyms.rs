//! Kernel symbols of the running kernel (`/proc/kallsyms`), resolved at record time so that a
//! saved stream names its kernel frames even after a reboot or on another machine.
//!
//! Only text symbols (`t`, `T`, `w`, `W`) are kept. Names live in one string buffer and each
//! entry is 16 bytes, so the ~120k text symbols of a distribution kernel take a few MB, and a
//! lookup is one binary search.

use std::collections::HashMap;

/// One text symbol: start address and spans into [`KernelSymbols::names`].
#[derive(Clone, Copy, Debug)]
struct Entry {
    addr: u64,
    name_start: u32,
    name_len: u16,
    /// Index into `modules`, or [`NO_MODULE`] for the core kernel.
    module: u16,
}

const NO_MODULE: u16 = u16::MAX;

/// How far past the last symbol of a module (or of the kernel) an address still counts as
/// inside it: kallsyms has no sizes, so the next symbol is the end, and there is none here.
const MAX_TAIL: u64 = 64 * 1024;

/// A kernel address's symbol as the recorder resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelSymbol {
    pub symbol: String,
    pub offset: u64,
    pub module: Option<String>,
}

/// The text symbols of a kernel, sorted by address.
#[derive(Debug, Default)]
pub(crate) struct KernelSymbols {
    entries: Vec<Entry>,
    names: String,
    /// (start, len) spans of module names in `names`.
    modules: Vec<(u32, u32)>,
}

/// Preference among symbols at the same address: global before weak before local, and names
/// without a leading underscore (aliases such as `_text`, `__pi_…`) last.
fn rank(kind: u8, name: &str) -> u8 {
    let k = match kind {
        b'T' => 0,
        b'W' => 1,
        b'w' => 2,
        _ => 3,
    };
    k + if name.starts_with('_') { 4 } else { 0 }
}

impl KernelSymbols {
    /// Read and parse `/proc/kallsyms`. Fails when the file cannot be read, has no text
    /// symbols, or shows every address as 0 (kptr_restrict hides them from this user).
    pub(crate) fn load() -> std::io::Result<Self> {
        let text = std::fs::read_to_string("/proc/kallsyms")?;
        let syms = Self::parse(&text);
        if syms.entries.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "/proc/kallsyms has no text symbols",
            ));
        }
        if syms.entries.iter().all(|e| e.addr == 0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "/proc/kallsyms shows every address as 0 (kernel.kptr_restrict hides them; run as root)",
            ));
        }
        Ok(syms)
    }

    /// Parse kallsyms text: `ADDR TYPE NAME [MODULE]` per line. Lines that do not parse and
    /// non-text symbols are skipped.
    pub(crate) fn parse(text: &str) -> Self {
        let mut raw: Vec<(u64, u8, Entry)> = Vec::new();
        let mut names = String::new();
        let mut modules: Vec<(u32, u32)> = Vec::new();
        let mut module_ids: HashMap<&str, u16> = HashMap::new();
        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let kind = match kind.as_bytes() {
                [k @ (b't' | b'T' | b'w' | b'W')] => *k,
                _ => continue,
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if name.len() > u16::MAX as usize || names.len() + name.len() > u32::MAX as usize {
                continue;
            }
            let module = match parts.next() {
                Some(m) if m.len() > 2 && m.starts_with('[') && m.ends_with(']') => {
                    let m = &m[1..m.len() - 1];
                    match module_ids.get(m) {
                        Some(&id) => id,
                        None if modules.len() < NO_MODULE as usize => {
                            let id = modules.len() as u16;
                            modules.push((names.len() as u32, m.len() as u32));
                            names.push_str(m);
                            module_ids.insert(m, id);
                            id
                        }
                        None => continue,
                    }
                }
                _ => NO_MODULE,
            };
            let entry = Entry {
                addr,
                name_start: names.len() as u32,
                name_len: name.len() as u16,
                module,
            };
            names.push_str(name);
            raw.push((addr, rank(kind, name), entry));
        }
        // Sort by address, best-ranked first (stable: file order breaks ties), keep one per address.
        raw.sort_by_key(|&(addr, rank, _)| (addr, rank));
        raw.dedup_by_key(|&mut (addr, _, _)| addr);
        let entries = raw.into_iter().map(|(_, _, e)| e).collect();
        KernelSymbols {
            entries,
            names,
            modules,
        }
    }

    /// Number of text symbols kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no text symbol was found.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn name(&self, e: &Entry) -> &str {
        let start = e.name_start as usize;
        &self.names[start..start + e.name_len as usize]
    }

    fn module(&self, e: &Entry) -> Option<&str> {
        let &(start, len) = self.modules.get(e.module as usize)?;
        Some(&self.names[start as usize..(start + len) as usize])
    }

    /// The symbol containing `addr`: (name, `addr` − symbol start, kernel module or `None` for
    /// the core kernel). `None` below the first symbol, or beyond the last symbol of a module
    /// or of the kernel by more than 64 KiB (kallsyms has no sizes).
    pub(crate) fn resolve(&self, addr: u64) -> Option<(&str, u64, Option<&str>)> {
        let i = self
            .entries
            .partition_point(|e| e.addr <= addr)
            .checked_sub(1)?;
        let e = &self.entries[i];
        let offset = addr - e.addr;
        let bounded = self
            .entries
            .get(i + 1)
            .is_some_and(|next| next.module == e.module);
        if !bounded && offset >= MAX_TAIL {
            return None;
        }
        Some((self.name(e), offset, self.module(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _text
ffffffff81000000 T startup_64
ffffffff81000100 t secondary_startup_64
ffffffff81000200 D some_data
ffffffff81000300 W weak_fn
ffffffff81001000 T _etext
ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]
ffffffffc0400000 t e1000_probe\t[e1000]
ffffffffc0400400 T e1000_xmit\t[e1000]
ffffffffc0500000 t ext4_lookup\t[ext4]
not a line
";

    #[test]
    fn resolves_symbol_offset_and_module() {
        let k = KernelSymbols::parse(SAMPLE);
        assert_eq!(
            k.resolve(0xffffffff81000010),
            Some(("startup_64", 0x10, None))
        );
        assert_eq!(
            k.resolve(0xffffffff81000150),
            Some(("secondary_startup_64", 0x50, None))
        );
        // Data symbols are not text: the address stays in the previous function.
        assert_eq!(
            k.resolve(0xffffffff81000250),
            Some(("secondary_startup_64", 0x150, None))
        );
        assert_eq!(k.resolve(0xffffffff81000300), Some(("weak_fn", 0, None)));
        assert_eq!(
            k.resolve(0xffffffffc0400410),
            Some(("e1000_xmit", 0x10, Some("e1000")))
        );
        assert_eq!(
            k.resolve(0xffffffffc0500020),
            Some(("ext4_lookup", 0x20, Some("ext4")))
        );
        assert_eq!(
            k.resolve(0xffffffffc0201004),
            Some(("ftrace_trampoline", 4, Some("__builtin__ftrace")))
        );
    }

    #[test]
    fn outside_every_symbol_is_none() {
        let k = KernelSymbols::parse(SAMPLE);
        assert_eq!(k.resolve(0x1000), None);
        assert_eq!(k.resolve(0xffffffff80ffffff), None);
        // Far past the last symbol of the kernel image, of a module and of the table.
        assert_eq!(k.resolve(0xffffffff81000000 + 0x1000 + MAX_TAIL), None);
        assert_eq!(k.resolve(0xffffffffc0400400 + MAX_TAIL), None);
        assert_eq!(k.resolve(u64::MAX), None);
        assert!(k.resolve(0xffffffffc0400400 + MAX_TAIL - 1).is_some());
    }

    #[test]
    fn aliases_prefer_global_names_without_underscore() {
        let k = KernelSymbols::parse(SAMPLE);
        assert_eq!(k.resolve(0xffffffff81000000).unwrap().0, "startup_64");
        let k = KernelSymbols::parse("0000000000001000 t local_one\n0000000000001000 W weak_one\n");
        assert_eq!(k.resolve(0x1000).unwrap().0, "weak_one");
        assert_eq!(k.len(), 1);
    }

    #[test]
    fn hidden_addresses_parse_to_zeros() {
        let k = KernelSymbols::parse("0000000000000000 T a\n0000000000000000 T b\n");
        assert!(k.entries.iter().all(|e| e.addr == 0));
        assert!(KernelSymbols::parse("").is_empty());
    }

    #[test]
    fn loads_the_running_kernel_when_readable() {
        match KernelSymbols::load() {
            Ok(k) => {
                assert!(k.len() > 1000, "only {} text symbols", k.len());
                // Every kept symbol resolves to itself at offset 0.
                let e = k.entries[k.len() / 2];
                let (name, off, _) = k.resolve(e.addr).unwrap();
                assert_eq!((name, off), (k.name(&e), 0));
            }
            Err(e) => {
                // Only acceptable reason: addresses hidden from this user.
                assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
            }
        }
    }
}
