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
/// file: a large browser's are about 20 MiB, libLLVM-15's 5.7 MiB.
const FILE_CFI_MAX: u64 = 32 << 20;
/// Most bytes of CFI held over all files, within the recorder's stated peak (about 55 MiB idle,
/// under 200 MiB whatever a target does: docs/threat-model.md). A file's CFI that does not fit
/// first makes room by dropping the CFI of files no process's unwinder holds any more, least
/// recently used first; if it still does not fit, it is not read (its stacks are unwound by
/// frame pointers), so that files claiming large sections cannot grow the recorder.
const CFI_BUDGET: u64 = 64 << 20;

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
    /// Its CFI sections (this many bytes) are over [`FILE_CFI_MAX`] or the budget left.
    TooLarge(u64),
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
        read: impl Fn(u64, u64) -> Option<Arc<[u8]>>,
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
            return Err(Unread::TooLarge(total));
        }
        let copy = |(off, size): (u64, u64)| read(off, size).map(Section);
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
                // Read in place: a section is held once, never copied from a buffer.
                let zeroed = Arc::<[u8]>::new_zeroed_slice(usize::try_from(size).ok()?);
                // SAFETY: zero bytes are valid `u8`s.
                let mut bytes = unsafe { zeroed.assume_init() };
                file.read_exact_at(Arc::get_mut(&mut bytes)?, off).ok()?;
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
                        .into(),
                )
            },
            FILE_CFI_MAX,
        )
    }

    fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// Whether a process's unwinder holds these sections (a module made of them).
    fn in_use(&self) -> bool {
        [&self.eh_frame, &self.eh_frame_hdr]
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, b)| b))
            .chain(self.debug_frame.as_ref())
            .any(|b| Arc::strong_count(&b.0) > 1)
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

/// One file's entry: its CFI (`None`: the file has none, or could not be read) and when it was
/// last asked for.
struct Entry {
    cfi: Option<Arc<FileCfi>>,
    used: u64,
}

/// Every file's CFI read so far, by device and inode, and the vdso's.
pub(super) struct FileCache {
    files: HashMap<(String, u64), Entry, ahash::RandomState>,
    vdso: Option<Option<Arc<FileCfi>>>,
    /// Files of exit snapshots not read: deleted or replaced since, or their path unknown.
    pub gone: u64,
    /// Bytes of CFI held (at most `budget`).
    bytes: u64,
    /// [`CFI_BUDGET`] (tests lower it).
    budget: u64,
    /// Asks so far: the clock of [`Entry::used`].
    clock: u64,
    /// Files whose CFI was not read: over [`FILE_CFI_MAX`], or past the budget.
    pub over_budget: u64,
    /// Files whose CFI was dropped to make room (read again when a process maps them again).
    pub evicted: u64,
}

impl Default for FileCache {
    fn default() -> Self {
        Self {
            files: HashMap::default(),
            vdso: None,
            gone: 0,
            bytes: 0,
            budget: CFI_BUDGET,
            clock: 0,
            over_budget: 0,
            evicted: 0,
        }
    }
}

impl FileCache {
    /// The CFI of a mapping's file, read once per file.
    pub(super) fn get(&mut self, pid: u32, m: &Mapping) -> Option<Arc<FileCfi>> {
        let Some(key) = &m.file else {
            return self.vdso.get_or_insert_with(own_vdso).clone();
        };
        self.clock += 1;
        if let Some(known) = self.files.get_mut(key) {
            known.used = self.clock;
            return known.cfi.clone();
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
                self.files.insert(
                    key.clone(),
                    Entry {
                        cfi: None,
                        used: self.clock,
                    },
                );
                return None;
            }
            File::open(&by_map).ok().or_else(|| {
                crate::process::untrusted::open_of(pid, &m.path, u64::MAX)
                    .ok()
                    .map(|(f, _)| f)
            })
        };
        self.admit(key.clone(), |budget| match &file {
            Some(f) => FileCfi::read_file(f, budget),
            None => Err(Unread::NotElf),
        })
    }

    /// Read a file's CFI with `read` (given the bytes it may copy) and keep it under `key`;
    /// when it is within [`FILE_CFI_MAX`] but over what is left of the budget, room is made
    /// first ([`Self::make_room`]) and it is read again.
    fn admit(
        &mut self,
        key: (String, u64),
        mut read: impl FnMut(u64) -> Result<FileCfi, Unread>,
    ) -> Option<Arc<FileCfi>> {
        let mut read_now = read(self.budget - self.bytes);
        if let Err(Unread::TooLarge(need)) = read_now
            && need <= FILE_CFI_MAX.min(self.budget)
        {
            self.make_room(need);
            read_now = read(self.budget - self.bytes);
        }
        let cfi = match read_now {
            Ok(cfi) => Some(cfi),
            Err(Unread::TooLarge(_)) => {
                self.over_budget += 1;
                None
            }
            Err(Unread::NotElf) => None,
        };
        let cfi = cfi.filter(FileCfi::has_cfi).map(Arc::new);
        self.bytes += cfi.as_ref().map_or(0, |c| c.size());
        self.files.insert(
            key,
            Entry {
                cfi: cfi.clone(),
                used: self.clock,
            },
        );
        cfi
    }

    /// Drop the CFI of files no process's unwinder holds, least recently used first, until
    /// `want` bytes of the budget are free (or none is left to drop). Their entries go too:
    /// a process mapping one later reads it again.
    fn make_room(&mut self, want: u64) {
        let mut idle: Vec<(u64, (String, u64), u64)> = self
            .files
            .iter()
            .filter_map(|(k, e)| {
                let cfi = e.cfi.as_ref()?;
                (!cfi.in_use()).then(|| (e.used, k.clone(), cfi.size()))
            })
            .collect();
        idle.sort_unstable_by_key(|(used, _, _)| *used);
        for (_, key, size) in idle {
            if self.budget - self.bytes >= want {
                break;
            }
            self.files.remove(&key);
            self.bytes -= size;
            self.evicted += 1;
        }
    }

    /// Files read with CFI.
    #[cfg(test)]
    pub(super) fn with_cfi(&self) -> usize {
        self.files.values().filter(|e| e.cfi.is_some()).count()
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

    /// Past the budget, the CFI of files no unwinder holds makes room, least recently used
    /// first; files held stay, and a file that still does not fit is refused and counted.
    #[test]
    fn cfi_over_the_budget_evicts_idle_files_or_is_refused() {
        let image = std::fs::read("/proc/self/exe").unwrap();
        let size = FileCfi::read_image(&image).unwrap().size();
        assert!(size > 0 && 4 * size < FILE_CFI_MAX, "{size}");
        let mut cache = FileCache {
            budget: 3 * size + size / 2,
            ..FileCache::default()
        };
        let key = |i: u64| ("00:00".to_string(), i);
        let admit = |c: &mut FileCache, i: u64| {
            c.clock += 1;
            let read = |off: u64, len: u64| Some(image[off as usize..(off + len) as usize].into());
            c.admit(key(i), |budget| FileCfi::parse(&*image, read, budget))
                .is_some()
        };
        // What an unwinder holds of a file: its module's sections.
        let hold = |c: &FileCache, i: u64| c.files[&key(i)].cfi.as_ref().unwrap().eh_frame.clone();
        assert!((0..3).all(|i| admit(&mut cache, i)));
        assert_eq!(cache.bytes, 3 * size);
        let held2 = hold(&cache, 2);
        // 1 used since 0: 0 is the least recently used idle file.
        cache.clock += 1;
        cache.files.get_mut(&key(1)).unwrap().used = cache.clock;
        assert!(admit(&mut cache, 100));
        assert!(!cache.files.contains_key(&key(0)) && cache.files.contains_key(&key(1)));
        let held100 = hold(&cache, 100);
        assert!(admit(&mut cache, 101));
        assert!(!cache.files.contains_key(&key(1)));
        let held101 = hold(&cache, 101);
        assert_eq!((cache.evicted, cache.over_budget), (2, 0));
        // Everything held: refused, counted.
        assert!(!admit(&mut cache, 102));
        assert_eq!((cache.evicted, cache.over_budget), (2, 1));
        drop(held2);
        assert!(admit(&mut cache, 103));
        assert_eq!(cache.evicted, 3);
        assert!(cache.bytes <= cache.budget && cache.bytes == 3 * size);
        drop((held100, held101));
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
