//! The unwinding data of the files a process maps: their CFI sections (`.eh_frame` with its
//! `.eh_frame_hdr` index, `.debug_frame`) and loadable segments, read once per file from a
//! memory map of it, shared by every process that maps it; and the executable mappings of a
//! `/proc/PID/maps` text.

use std::collections::HashMap;
use std::fs::File;
use std::ops::{Deref, Range};
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSection};

use crate::process::exit_maps;
use crate::process::maps;

/// Bytes of a file the unwinder reads: mapped, or (the vdso) copied.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// One section of a file, as framehop wants its data.
#[derive(Clone)]
pub(super) struct Section {
    bytes: Arc<Bytes>,
    range: Range<usize>,
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[self.range.clone()]
    }
}

/// A file's unwind sections (addresses are the file's own, SVMAs) and its loadable segments.
pub(super) struct FileCfi {
    bytes: Arc<Bytes>,
    text: Option<(Range<u64>, Range<usize>)>,
    eh_frame: Option<(Range<u64>, Range<usize>)>,
    eh_frame_hdr: Option<(Range<u64>, Range<usize>)>,
    got: Option<Range<u64>>,
    debug_frame: Option<Range<usize>>,
    /// (file offset, address) of each PT_LOAD.
    loads: Vec<(u64, u64, u64)>,
}

impl FileCfi {
    fn parse(bytes: Bytes) -> Option<Self> {
        let bytes = Arc::new(bytes);
        let elf = ElfFile64::<object::Endianness>::parse(&**bytes).ok()?;
        // The file is the target's to write: a range past the file or wrapping around is
        // no section.
        let in_file = |off: u64, size: u64| {
            let end = off.checked_add(size)?;
            (end <= bytes.len() as u64).then_some(off as usize..end as usize)
        };
        let section = |name: &str| {
            let s = elf.section_by_name(name)?;
            let (off, size) = s.file_range()?;
            let svma = s.address()..s.address().checked_add(s.size())?;
            Some((svma, in_file(off, size)?))
        };
        let endian = elf.endian();
        let loads = elf
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
            .map(|p| (p.p_offset(endian), p.p_vaddr(endian), p.p_filesz(endian)))
            .collect();
        // A compressed .debug_frame is not read (its file range holds compressed bytes).
        let debug_frame = elf
            .section_by_name(".debug_frame")
            .filter(|s| {
                s.compressed_file_range()
                    .is_ok_and(|c| c.format == object::CompressionFormat::None)
            })
            .and_then(|s| s.file_range())
            .and_then(|(off, size)| in_file(off, size));
        Some(FileCfi {
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            got: section(".got").map(|(svma, _)| svma),
            debug_frame,
            loads,
            bytes,
        })
    }

    fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// What to add to this file's addresses to get the process's, for a mapping of file
    /// offset `map_offset` at `start`.
    pub(super) fn bias(&self, start: u64, map_offset: u64) -> Option<u64> {
        // The segment this mapping starts (mappings begin at the page holding p_offset), else
        // the one holding its first byte.
        let (p_offset, p_vaddr, _) = self
            .loads
            .iter()
            .find(|(off, _, _)| off & !0xfff == map_offset)
            .or_else(|| {
                self.loads
                    .iter()
                    .find(|(off, _, size)| (*off..off + size).contains(&map_offset))
            })?;
        Some(
            start
                .wrapping_sub(map_offset)
                .wrapping_add(*p_offset)
                .wrapping_sub(*p_vaddr),
        )
    }

    fn section(&self, r: &Range<usize>) -> Option<Section> {
        (r.start <= r.end && r.end <= self.bytes.len()).then(|| Section {
            bytes: Arc::clone(&self.bytes),
            range: r.clone(),
        })
    }

    pub(super) fn module(&self, name: &str, avma: Range<u64>, bias: u64) -> Module<Section> {
        let pick = |s: &Option<(Range<u64>, Range<usize>)>| {
            s.as_ref()
                .and_then(|(svma, r)| Some((svma.clone(), self.section(r)?)))
        };
        let (text_svma, text) = pick(&self.text).unzip();
        let (eh_frame_svma, eh_frame) = pick(&self.eh_frame).unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = pick(&self.eh_frame_hdr).unzip();
        Module::new(
            name.to_string(),
            avma,
            bias,
            ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma,
                text,
                got_svma: self.got.clone(),
                eh_frame_svma,
                eh_frame,
                eh_frame_hdr_svma,
                eh_frame_hdr,
                debug_frame: self.debug_frame.as_ref().and_then(|r| self.section(r)),
                stubs_svma: None,
                stub_helper_svma: None,
                unwind_info: None,
                text_segment_svma: None,
                text_segment: None,
            },
        )
    }
}

/// One executable mapping of a process's memory map.
pub(super) struct Mapping {
    pub range: Range<u64>,
    pub offset: u64,
    /// (device, inode) of a file; `None` for the vdso.
    pub file: Option<(String, u64)>,
    pub path: String,
    /// From an exit snapshot: the process is gone, its file is opened by `path` (and checked).
    pub exited: bool,
}

/// The executable mappings of a `/proc/PID/maps` text: files, and the vdso.
pub(super) fn parse_maps(text: &str) -> Vec<Mapping> {
    maps::parse(text)
        .filter(|m| m.executable())
        .filter_map(|m| {
            let file = match (m.inode, m.path) {
                (0, "[vdso]") => None,
                (0, _) => return None,
                _ => Some((m.dev.to_string(), m.inode)),
            };
            Some(Mapping {
                range: m.range,
                offset: m.offset,
                file,
                path: m.path.to_string(),
                exited: false,
            })
        })
        .collect()
}

/// Every file's CFI read so far (`None`: the file has none, or could not be read), by device
/// and inode, and the vdso's.
#[derive(Default)]
pub(super) struct FileCache {
    files: HashMap<(String, u64), Option<Arc<FileCfi>>, ahash::RandomState>,
    vdso: Option<Option<Arc<FileCfi>>>,
    /// Files of exit snapshots not read: deleted or replaced since, or their path unknown.
    pub gone: u64,
}

impl FileCache {
    /// The CFI of a mapping's file, read once per file.
    pub(super) fn get(&mut self, pid: u32, m: &Mapping) -> Option<Arc<FileCfi>> {
        let Some(key) = &m.file else {
            return self.vdso.get_or_insert_with(own_vdso).clone();
        };
        if let Some(known) = self.files.get(key) {
            return known.clone();
        }
        let file = if m.exited {
            // The process is gone: its file by the path the kernel walked, if it is the same.
            match exit_maps::open_file(&m.path, &key.0, key.1) {
                Ok(f) => Some(f),
                Err(_) => {
                    // Not remembered: a live process mapping it reads it through /proc.
                    self.gone += 1;
                    return None;
                }
            }
        } else {
            // The mapped file itself, even when replaced or deleted since; else by its path
            // in the process's mount namespace.
            let by_map = format!(
                "/proc/{pid}/map_files/{:x}-{:x}",
                m.range.start, m.range.end
            );
            // Not on FUSE: opening it there waits for its server (maybe the process).
            if crate::process::untrusted::on_fuse(pid, &m.path) {
                self.files.insert(key.clone(), None);
                return None;
            }
            File::open(&by_map).ok().or_else(|| {
                crate::process::untrusted::open_of(pid, &m.path, u64::MAX)
                    .ok()
                    .map(|(f, _)| f)
            })
        };
        // SAFETY: the file is mapped read-only; a file truncated under us could fault, as
        // with any profiler reading mapped binaries (blazesym maps them the same way).
        let cfi = file
            .and_then(|f| unsafe { memmap2::Mmap::map(&f) }.ok())
            .and_then(|map| FileCfi::parse(Bytes::Mapped(map)))
            .filter(FileCfi::has_cfi)
            .map(Arc::new);
        self.files.insert(key.clone(), cfi.clone());
        cfi
    }

    /// Files read with CFI.
    #[cfg(test)]
    pub(super) fn with_cfi(&self) -> usize {
        self.files.values().filter(|c| c.is_some()).count()
    }
}

/// The recorder's own vdso (the kernel's, the same in every process), copied.
fn own_vdso() -> Option<Arc<FileCfi>> {
    let bytes = crate::process::vdso::own_image()?;
    FileCfi::parse(Bytes::Owned(bytes))
        .filter(FileCfi::has_cfi)
        .map(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_keep_executable_file_and_vdso_mappings() {
        let maps = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 1234 /usr/bin/app
55d0c0001000-55d0c0005000 r-xp 00001000 08:01 1234 /usr/bin/app
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 [heap]
7f1000000000-7f1000002000 r-xp 00000000 00:00 0 [vdso]
7f2000000000-7f2000001000 r-xp 00000000 00:00 0
7f3000000000-7f3000100000 r-xp 00028000 08:01 99 /lib/x86_64-linux-gnu/libc.so.6 (deleted)
";
        let m = parse_maps(maps);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].range, 0x55d0c0001000..0x55d0c0005000);
        assert_eq!(m[0].offset, 0x1000);
        assert_eq!(m[0].file, Some(("08:01".into(), 1234)));
        assert!(m[1].file.is_none() && m[1].path == "[vdso]");
        assert_eq!(m[2].path, "/lib/x86_64-linux-gnu/libc.so.6 (deleted)");
    }

    #[test]
    fn the_vdso_has_cfi() {
        assert!(own_vdso().is_some(), "the vdso has .eh_frame");
    }

    /// A file whose `.eh_frame` offset and size wrap around (a hostile process's own file,
    /// docs/threat-model.md) has no `.eh_frame`, rather than a panic.
    #[test]
    fn a_section_range_that_wraps_is_no_section() {
        let mut bytes = std::fs::read("/proc/self/exe").unwrap();
        let index = {
            let elf = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
            elf.section_by_name(".eh_frame").unwrap().index().0
        };
        let u16_at = |b: &[u8], at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
        let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
        let header = shoff + index * u16_at(&bytes, 0x3a);
        bytes[header + 0x18..header + 0x20].copy_from_slice(&(u64::MAX - 0xfff).to_le_bytes());
        bytes[header + 0x20..header + 0x28].copy_from_slice(&0x10_0000u64.to_le_bytes());
        let cfi = FileCfi::parse(Bytes::Owned(bytes)).expect("still an ELF file");
        assert!(cfi.eh_frame.is_none());
    }
}
