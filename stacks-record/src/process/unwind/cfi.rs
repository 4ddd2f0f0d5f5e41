//! The unwinding data of the files a process maps: their CFI sections (`.eh_frame` with its
//! `.eh_frame_hdr` index, `.debug_frame`) copied into memory with `pread` (never mapped: a
//! process may truncate a file it owns while the recorder reads it, and a mapping of it would
//! then fault) and their loadable segments, read once per file and shared by every process
//! that maps it; and the executable mappings of a `/proc/PID/maps` text.

use std::collections::HashMap;
use std::fs::File;
use std::ops::{Deref, Range};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module};
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSection, ReadRef};

use crate::process::exit_maps;
use crate::process::maps;

/// Most bytes of CFI (`.eh_frame`, `.eh_frame_hdr` and `.debug_frame` together) copied of one
/// file: a large browser's are about 20 MiB.
const FILE_CFI_MAX: u64 = 64 << 20;
/// Most bytes of CFI kept over all files: past it, a file's CFI is not read (its stacks are
/// unwound by frame pointers), so that files claiming large sections cannot grow the recorder.
const CFI_BUDGET: u64 = 256 << 20;

/// One CFI section's bytes, as framehop wants them.
#[derive(Clone)]
pub(super) struct Section(Arc<[u8]>);

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Why a file's CFI was not read.
#[derive(Debug)]
enum Unread {
    /// Not a 64-bit ELF file.
    NotElf,
    /// Its CFI sections are over [`FILE_CFI_MAX`] or the budget left.
    TooLarge,
}

/// A file's unwind sections (addresses are the file's own, SVMAs) and its loadable segments.
pub(super) struct FileCfi {
    /// `.text`'s addresses: framehop's base for `.eh_frame`'s text-relative pointers (ELF
    /// unwinding reads no instruction bytes, so they are not copied).
    text: Option<Range<u64>>,
    eh_frame: Option<(Range<u64>, Section)>,
    eh_frame_hdr: Option<(Range<u64>, Section)>,
    got: Option<Range<u64>>,
    debug_frame: Option<Section>,
    /// (file offset, address) of each PT_LOAD.
    loads: Vec<(u64, u64, u64)>,
}

impl FileCfi {
    /// The CFI of the ELF file whose headers `data` reads, its sections copied by `read`
    /// (offset, size), when they are together at most `budget` bytes.
    fn parse<'d, R: ReadRef<'d>>(
        data: R,
        read: impl Fn(u64, u64) -> Option<Vec<u8>>,
        budget: u64,
    ) -> Result<Self, Unread> {
        let elf = ElfFile64::<object::Endianness, R>::parse(data).map_err(|_| Unread::NotElf)?;
        let len = data.len().map_err(|_| Unread::NotElf)?;
        // The file is the target's to write: a range past the file or wrapping around is
        // no section.
        let in_file = |(off, size): (u64, u64)| {
            let end = off.checked_add(size)?;
            (end <= len).then_some((off, size))
        };
        let located = |name: &str| {
            let s = elf.section_by_name(name)?;
            let svma = s.address()..s.address().checked_add(s.size())?;
            Some((svma, in_file(s.file_range()?)?))
        };
        let eh_frame = located(".eh_frame");
        let eh_frame_hdr = located(".eh_frame_hdr");
        // A compressed .debug_frame is not read (its file range holds compressed bytes).
        let debug_frame = elf
            .section_by_name(".debug_frame")
            .filter(|s| {
                s.compressed_file_range()
                    .is_ok_and(|c| c.format == object::CompressionFormat::None)
            })
            .and_then(|s| s.file_range())
            .and_then(in_file);
        let total = [&eh_frame, &eh_frame_hdr]
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, (_, size))| *size))
            .chain(debug_frame.map(|(_, size)| size))
            .fold(0u64, u64::saturating_add);
        if total > budget.min(FILE_CFI_MAX) {
            return Err(Unread::TooLarge);
        }
        let copy = |(off, size): (u64, u64)| read(off, size).map(|b| Section(b.into()));
        let copy_located =
            |s: Option<(Range<u64>, (u64, u64))>| s.and_then(|(svma, r)| Some((svma, copy(r)?)));
        let endian = elf.endian();
        let loads = elf
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
            .map(|p| (p.p_offset(endian), p.p_vaddr(endian), p.p_filesz(endian)))
            .collect();
        let svma = |name: &str| {
            let s = elf.section_by_name(name)?;
            Some(s.address()..s.address().checked_add(s.size())?)
        };
        Ok(FileCfi {
            text: svma(".text"),
            got: svma(".got"),
            eh_frame: copy_located(eh_frame),
            eh_frame_hdr: copy_located(eh_frame_hdr),
            debug_frame: debug_frame.and_then(copy),
            loads,
        })
    }

    /// The CFI of an opened file: its headers read through `object`'s read cache, its
    /// sections with `pread` (a file truncated meanwhile reads short: no section).
    fn read_file(file: &File, budget: u64) -> Result<Self, Unread> {
        let cache = object::ReadCache::new(file);
        Self::parse(
            &cache,
            |off, size| {
                let mut bytes = vec![0; usize::try_from(size).ok()?];
                file.read_exact_at(&mut bytes, off).ok()?;
                Some(bytes)
            },
            budget,
        )
    }

    /// The CFI of an ELF image in memory (the vdso's).
    fn read_image(image: &[u8]) -> Result<Self, Unread> {
        Self::parse(
            image,
            |off, size| {
                let start = usize::try_from(off).ok()?;
                Some(
                    image
                        .get(start..start.checked_add(usize::try_from(size).ok()?)?)?
                        .to_vec(),
                )
            },
            FILE_CFI_MAX,
        )
    }

    fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// Bytes of CFI copied.
    fn size(&self) -> u64 {
        [&self.eh_frame, &self.eh_frame_hdr]
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, b)| b.len() as u64))
            .chain(self.debug_frame.as_ref().map(|b| b.len() as u64))
            .sum()
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

    pub(super) fn module(&self, name: &str, avma: Range<u64>, bias: u64) -> Module<Section> {
        let (eh_frame_svma, eh_frame) = self.eh_frame.clone().unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = self.eh_frame_hdr.clone().unzip();
        Module::new(
            name.to_string(),
            avma,
            bias,
            ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: self.text.clone(),
                text: None,
                got_svma: self.got.clone(),
                eh_frame_svma,
                eh_frame,
                eh_frame_hdr_svma,
                eh_frame_hdr,
                debug_frame: self.debug_frame.clone(),
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
    /// Bytes of CFI copied so far (at most [`CFI_BUDGET`]).
    bytes: u64,
    /// Files whose CFI was not read: over [`FILE_CFI_MAX`], or past [`CFI_BUDGET`].
    pub over_budget: u64,
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
        let budget = CFI_BUDGET - self.bytes;
        let cfi = file.and_then(|f| match FileCfi::read_file(&f, budget) {
            Ok(cfi) => Some(cfi),
            Err(Unread::TooLarge) => {
                self.over_budget += 1;
                None
            }
            Err(Unread::NotElf) => None,
        });
        let cfi = cfi.filter(FileCfi::has_cfi).map(Arc::new);
        self.bytes += cfi.as_ref().map_or(0, |c| c.size());
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
    let image = crate::process::vdso::own_image()?;
    FileCfi::read_image(&image)
        .ok()
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
        let cfi = FileCfi::read_image(&bytes).expect("still an ELF file");
        assert!(cfi.eh_frame.is_none());
    }
}
