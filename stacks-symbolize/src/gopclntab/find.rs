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
        self.offset.checked_add(rel).filter(|_| rel < self.filesz)
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
    /// Inline trees read from `file`, with `gofunc` at file offset `gofunc` and its segment
    /// ending at `end`.
    #[cfg(test)]
    pub(super) fn new(file: File, gofunc: u64, end: u64) -> Self {
        InlineTrees { file, gofunc, end }
    }

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

/// Read the Go tables of the ELF file at `path` (a file already opened off FUSE and held,
/// `/proc/self/fd/N`: see `pinned`). `Ok(None)`: the file has a symbol table (`.symtab`; its
/// names come from there) or no Go function table.
pub fn locate(path: &Path) -> Result<Option<Located>, GoError> {
    let file = File::open(path).map_err(GoError::Io)?;
    // The file is checked first (a regular file, its sections inside it, its tables
    // bounded): object reads the symbol tables whole.
    crate::elf::read_file(&file, &path.display().to_string())
        .map_err(|e| GoError::Io(std::io::Error::other(e.to_string())))?;
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
            end: seg.offset.saturating_add(seg.filesz),
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
                return Ok(Some((t, seg.address().wrapping_add(at as u64))));
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
    for seg in obj.segments() {
        let SegmentFlags::Elf { p_flags } = seg.flags() else {
            continue;
        };
        if p_flags & PF_W == 0 {
            continue;
        }
        let data = seg.data().map_err(GoError::Object)?;
        let mapped = |a: u64| segments.iter().any(|s| s.file_offset(a).is_some());
        if let Some(gofunc) = gofunc_in(data, table, pclntab, mapped) {
            return Ok(Some(gofunc));
        }
    }
    Ok(None)
}

/// `gofunc` of the `moduledata` in `data` that points at the table (at address `pclntab`):
/// its text start must be the table's, and `gofunc` at or after `rodata` and `mapped`.
fn gofunc_in(
    data: &[u8],
    table: &Table,
    pclntab: u64,
    mapped: impl Fn(u64) -> bool,
) -> Option<u64> {
    let ps = table.ptr_size();
    // Word indexes of text and gofunc: Go 1.20 added covctrs and ecovctrs between them.
    let (text_word, gofunc_word) = match table.version {
        Version::Go118 => (22, 38),
        Version::Go120 => (22, 40),
    };
    let word = |at: usize| -> Option<u64> {
        let b = data.get(at..at.checked_add(ps)?)?;
        Some(match ps {
            4 => u64::from(u32::from_le_bytes(b.try_into().ok()?)),
            _ => u64::from_le_bytes(b.try_into().ok()?),
        })
    };
    let funcnames = pclntab.wrapping_add(table.funcnames_offset() as u64);
    (0..data.len()).step_by(ps).find_map(|at| {
        if word(at)? != pclntab || word(at + ps)? != funcnames {
            return None;
        }
        let field = |i: usize| word(at + i * ps);
        // minpc..maxpc, text..etext, then the data, bss and noptrbss ranges, in order.
        let ordered = [
            (20, 21),
            (22, 23),
            (24, 25),
            (25, 26),
            (26, 27),
            (27, 28),
            (28, 29),
        ]
        .into_iter()
        .chain([(29, 30), (30, 31)])
        .all(|(a, b)| field(a).zip(field(b)).is_some_and(|(a, b)| a <= b));
        let (text, rodata, gofunc) = (
            field(text_word)?,
            field(gofunc_word - 1)?,
            field(gofunc_word)?,
        );
        (ordered && text == table.text_start && rodata <= gofunc && mapped(gofunc))
            .then_some(gofunc)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal Go 1.18 or 1.20 table header: text at 0x401000, names at offset 0x48.
    fn table(magic: u8) -> Table {
        let mut h = vec![magic, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        for w in [1u64, 1, 0x401000, 0x48, 0x48, 0x48, 0x48, 0x48] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        for w in [0u32, 0, 0x10, 0] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        Table::parse(h, None).unwrap()
    }

    /// A moduledata after 3 words of other data: the pcHeader at 0x4b0000, its names 0x48
    /// after it, increasing addresses from word 19 on, text at word 22, and gofunc (after
    /// rodata) at `gofunc_word`.
    fn moduledata(gofunc_word: usize, text: u64) -> Vec<u8> {
        let mut w: Vec<u64> = (0..3 + 48).map(|i| 0x400000 + i as u64 * 0x1000).collect();
        w[3] = 0x4b0000;
        w[4] = 0x4b0048;
        w[3 + 20] = 0x401000;
        w[3 + 22] = text;
        w[3 + gofunc_word - 1] = 0x480000;
        w[3 + gofunc_word] = 0x49a000;
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn moduledata_of_each_layout() {
        let all = |_: u64| true;
        for (magic, word) in [(0xf0, 38), (0xf1, 40)] {
            let t = table(magic);
            assert_eq!(
                gofunc_in(&moduledata(word, 0x401000), &t, 0x4b0000, all),
                Some(0x49a000)
            );
            // Another text, data ranges out of order, an unmapped gofunc, a truncated one.
            let mut disordered = moduledata(word, 0x401000);
            disordered[(3 + 26) * 8..(3 + 27) * 8].fill(0xff);
            assert_eq!(gofunc_in(&disordered, &t, 0x4b0000, all), None);
            assert_eq!(
                gofunc_in(&moduledata(word, 0x402000), &t, 0x4b0000, all),
                None
            );
            assert_eq!(
                gofunc_in(&moduledata(word, 0x401000), &t, 0x4b0000, |_| false),
                None
            );
            assert_eq!(
                gofunc_in(&moduledata(word, 0x401000)[..100], &t, 0x4b0000, all),
                None
            );
        }
    }
}
