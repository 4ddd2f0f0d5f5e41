//! Finding a Go binary's tables in its ELF file: the `.gopclntab` section (kept by
//! `-ldflags='-s -w'`; `.data.rel.ro.gopclntab` in PIE builds), or without section headers the
//! `pcHeader` found by its magic in a segment without code; then the runtime's `moduledata` (in
//! a writable segment, found by its pointer to the `pcHeader`), whose `gofunc` locates the
//! inline trees (`go:func.*`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSegment, ReadCache, SegmentFlags};

use super::GoError;
use super::table::{Table, Version};

/// An ELF file read through a cache of the parts asked for.
type Elf<'a> = object::File<'a, &'a ReadCache<File>>;

const PF_X: u32 = 1;
const PF_W: u32 = 2;

/// One loadable segment: its file range and address.
#[derive(Clone, Copy, Debug)]
struct Segment {
    vaddr: u64,
    offset: u64,
    filesz: u64,
    flags: u32,
}

impl Segment {
    /// File offset of address `vaddr` if the segment holds its bytes.
    fn file_offset(&self, vaddr: u64) -> Option<u64> {
        let rel = vaddr.checked_sub(self.vaddr)?;
        (rel < self.filesz).then_some(self.offset + rel)
    }
}

/// Where a function's inline tree entries are read: the file, and the file offset of
/// `moduledata.gofunc` with the end of the segment holding it.
pub struct InlineTrees {
    file: File,
    gofunc: u64,
    end: u64,
}

impl InlineTrees {
    /// `len` bytes at `off` from `gofunc` (within its segment).
    pub fn read(&self, off: u64, len: usize) -> Result<Vec<u8>, GoError> {
        let at = self
            .gofunc
            .checked_add(off)
            .filter(|a| a.saturating_add(len as u64) <= self.end)
            .ok_or(GoError::Malformed(
                "an inline tree entry outside its segment",
            ))?;
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, at).map_err(GoError::Io)?;
        Ok(buf)
    }
}

/// A Go binary's function table and, when `moduledata` was found, its inline trees.
pub struct Located {
    pub table: Table,
    pub inline: Option<InlineTrees>,
}

/// Read the Go tables of the ELF file at `path`. `Ok(None)`: the file has a symbol table
/// (`.symtab`; its names come from there) or no Go function table.
pub fn locate(path: &Path) -> Result<Option<Located>, GoError> {
    let file = File::open(path).map_err(GoError::Io)?;
    let cache = ReadCache::new(file.try_clone().map_err(GoError::Io)?);
    let obj = object::File::parse(&cache).map_err(GoError::Object)?;
    if obj.section_by_name(".symtab").is_some_and(|s| s.size() > 0) {
        return Ok(None);
    }
    let segments: Vec<Segment> = obj
        .segments()
        .filter_map(|s| {
            let (offset, filesz) = s.file_range();
            let SegmentFlags::Elf { p_flags } = s.flags() else {
                return None;
            };
            Some(Segment {
                vaddr: s.address(),
                offset,
                filesz,
                flags: p_flags,
            })
        })
        .collect();
    let text = obj.section_by_name(".text").map(|s| s.address());
    // PIE builds name it `.data.rel.ro.gopclntab`.
    let section = obj
        .section_by_name(".gopclntab")
        .or_else(|| obj.section_by_name(".data.rel.ro.gopclntab"));
    let (table, vaddr) = match section {
        Some(s) => {
            let data = s.data().map_err(GoError::Object)?.to_vec();
            (Table::parse(data, text)?, s.address())
        }
        None => match scan_for_header(&obj, &segments, text)? {
            Some(found) => found,
            None => return Ok(None),
        },
    };
    let inline = find_gofunc(&obj, &segments, &table, vaddr)?.and_then(|gofunc| {
        let seg = segments.iter().find(|s| s.file_offset(gofunc).is_some())?;
        Some(InlineTrees {
            file,
            gofunc: seg.file_offset(gofunc)?,
            end: seg.offset + seg.filesz,
        })
    });
    Ok(Some(Located { table, inline }))
}

/// Without section headers: a `pcHeader` in a segment without code (read-only, or RELRO in
/// PIE builds), found by its magic and checked by parsing it, with its address.
fn scan_for_header(
    obj: &Elf<'_>,
    segments: &[Segment],
    text: Option<u64>,
) -> Result<Option<(Table, u64)>, GoError> {
    let text = text.or_else(|| {
        segments
            .iter()
            .find(|s| s.flags & PF_X != 0)
            .map(|s| s.vaddr)
    });
    for seg in obj.segments() {
        let SegmentFlags::Elf { p_flags } = seg.flags() else {
            continue;
        };
        if p_flags & PF_X != 0 {
            continue;
        }
        let data = seg.data().map_err(GoError::Object)?;
        for at in (0..data.len().saturating_sub(8)).step_by(8) {
            let head = &data[at..at + 8];
            if head[1..4] != [0xff; 3] || !matches!(head[0], 0xf0 | 0xf1) || head[4..6] != [0, 0] {
                continue;
            }
            if let Ok(t) = Table::parse(data[at..].to_vec(), text)
                && t.find(t.text_start).is_ok_and(|f| f.is_some())
            {
                return Ok(Some((t, seg.address() + at as u64)));
            }
        }
    }
    Ok(None)
}

/// `moduledata.gofunc`: the address of `go:func.*`. The `moduledata` is found in a writable
/// segment by its first words, the address of the `pcHeader` and of the function name table.
fn find_gofunc(
    obj: &Elf<'_>,
    segments: &[Segment],
    table: &Table,
    pclntab: u64,
) -> Result<Option<u64>, GoError> {
    let ps = table.ptr_size();
    // Word index of gofunc: Go 1.20 added covctrs and ecovctrs before it.
    let (gofunc_word, text_word) = match table.version {
        Version::Go118 => (38, 22),
        Version::Go120 => (40, 22),
    };
    let word = |d: &[u8], at: usize| -> Option<u64> {
        let b = d.get(at..at + ps)?;
        Some(match ps {
            4 => u64::from(u32::from_le_bytes(b.try_into().ok()?)),
            _ => u64::from_le_bytes(b.try_into().ok()?),
        })
    };
    let funcnames = pclntab + table.funcnames_offset() as u64;
    for seg in obj.segments() {
        let SegmentFlags::Elf { p_flags } = seg.flags() else {
            continue;
        };
        if p_flags & PF_W == 0 {
            continue;
        }
        let data = seg.data().map_err(GoError::Object)?;
        for at in (0..data.len()).step_by(ps) {
            if word(data, at) != Some(pclntab) || word(data, at + ps) != Some(funcnames) {
                continue;
            }
            let field = |i: usize| word(data, at + i * ps);
            let (Some(text), Some(rodata), Some(gofunc)) =
                (field(text_word), field(gofunc_word - 1), field(gofunc_word))
            else {
                continue;
            };
            let mapped = segments.iter().any(|s| s.file_offset(gofunc).is_some());
            if text == table.text_start && rodata <= gofunc && mapped {
                return Ok(Some(gofunc));
            }
        }
    }
    Ok(None)
}
