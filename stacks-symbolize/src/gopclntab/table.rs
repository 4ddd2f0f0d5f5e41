//! The Go 1.18+ runtime's function table (`pcHeader`, `functab`, `_func`, the pc-value tables,
//! file and function name tables) read from the bytes of a `.gopclntab`: which function holds
//! an address, its name, the file and line of an address, and the inline tree index there.
//! Every read is bounds-checked: a malformed table is an error, never a panic.

use super::GoError;

/// The table layouts read here, by their header magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Go 1.18 and 1.19 (`0xfffffff0`).
    Go118,
    /// Go 1.20 and later (`0xfffffff1`): `_func` gains `startLine`, `inlinedCall` shrinks.
    Go120,
}

const MAGIC_118: u32 = 0xffff_fff0;
const MAGIC_120: u32 = 0xffff_fff1;
/// Go 1.2–1.15 and 1.16–1.17: recognised to say why they are not read.
const MAGIC_OLD: [u32; 2] = [0xffff_fffb, 0xffff_fffa];
/// `_PCDATA_InlTreeIndex`, `_FUNCDATA_InlTree` (runtime/symtab.go).
pub(super) const PCDATA_INL_TREE_INDEX: u32 = 2;
pub(crate) const FUNCDATA_INL_TREE: u32 = 3;
/// `_func` fields read, as byte offsets.
const FUNC_ENTRY: usize = 0;
const FUNC_NAME: usize = 4;
const FUNC_PCFILE: usize = 20;
const FUNC_PCLN: usize = 24;
const FUNC_NPCDATA: usize = 28;
const FUNC_CU: usize = 32;

/// A function of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Func {
    /// Its entry address (ELF address).
    pub entry: u64,
    /// Its end address (the next function's entry).
    pub end: u64,
    /// Offset of its `_func` in the table.
    off: usize,
}

/// A parsed `.gopclntab`: the header's values and the table's bytes.
pub struct Table {
    data: Vec<u8>,
    pub version: Version,
    quantum: u64,
    ptr_size: usize,
    /// ELF address of the first function entry offset's base (`moduledata.text`).
    pub text_start: u64,
    nfunc: usize,
    funcnames: usize,
    cutab: usize,
    filetab: usize,
    pctab: usize,
    functab: usize,
}

fn bytes<const N: usize>(data: &[u8], at: usize) -> Result<[u8; N], GoError> {
    at.checked_add(N)
        .and_then(|end| data.get(at..end))
        .map(|b| b.try_into().expect("N bytes"))
        .ok_or(GoError::Malformed("a read past the end of .gopclntab"))
}

pub(super) fn u32_at(data: &[u8], at: usize) -> Result<u32, GoError> {
    bytes::<4>(data, at).map(u32::from_le_bytes)
}

fn uptr_at(data: &[u8], at: usize, ptr_size: usize) -> Result<u64, GoError> {
    match ptr_size {
        4 => u32_at(data, at).map(u64::from),
        _ => bytes::<8>(data, at).map(u64::from_le_bytes),
    }
}

/// A varint of the pc-value tables (at most 32 bits) at `*at`, which moves past it.
fn varint(data: &[u8], at: &mut usize) -> Result<u32, GoError> {
    let mut v: u32 = 0;
    for shift in (0..35).step_by(7) {
        let b = *data
            .get(*at)
            .ok_or(GoError::Malformed("a pc-value table runs past the end"))?;
        *at += 1;
        v |= u32::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(GoError::Malformed("a pc-value varint longer than 5 bytes"))
}

/// The NUL-terminated string at `at` of `data`.
fn cstr(data: &[u8], at: usize) -> Result<String, GoError> {
    let rest = data
        .get(at..)
        .ok_or(GoError::Malformed("a name offset past the end"))?;
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or(GoError::Malformed("an unterminated name"))?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

impl Table {
    /// Read the header of the table in `data`; `text_fallback` is the start of `.text`, used
    /// when the header's text start is 0 (left to a dynamic relocation in some PIE builds).
    pub fn parse(data: Vec<u8>, text_fallback: Option<u64>) -> Result<Table, GoError> {
        let magic = u32_at(&data, 0)?;
        let version = match magic {
            MAGIC_118 => Version::Go118,
            MAGIC_120 => Version::Go120,
            m if MAGIC_OLD.contains(&m) => return Err(GoError::Unsupported { magic }),
            _ => return Err(GoError::Malformed("not a Go 1.18+ pclntab header")),
        };
        let [pad1, pad2, quantum, ptr_size] = bytes::<4>(&data, 4)?;
        if pad1 != 0 || pad2 != 0 || !matches!(quantum, 1 | 2 | 4) || !matches!(ptr_size, 4 | 8) {
            return Err(GoError::Malformed("pclntab header fields"));
        }
        let ps = ptr_size as usize;
        let word = |i: usize| uptr_at(&data, 8 + i * ps, ps);
        let offset = |i: usize| -> Result<usize, GoError> {
            usize::try_from(word(i)?)
                .ok()
                .filter(|&o| o < data.len())
                .ok_or(GoError::Malformed("a pclntab header offset past the end"))
        };
        let nfunc = usize::try_from(word(0)?)
            .ok()
            .filter(|&n| n > 0 && n < data.len() / 8)
            .ok_or(GoError::Malformed("function count"))?;
        let mut text_start = word(2)?;
        if text_start == 0 {
            text_start = text_fallback.unwrap_or(0);
        }
        let t = Table {
            version,
            quantum: u64::from(quantum),
            ptr_size: ps,
            text_start,
            nfunc,
            funcnames: offset(3)?,
            cutab: offset(4)?,
            filetab: offset(5)?,
            pctab: offset(6)?,
            functab: offset(7)?,
            data,
        };
        // The function table holds nfunc entries and the end.
        u32_at(&t.data, t.functab + nfunc * 8 + 4)?;
        Ok(t)
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.nfunc
    }

    /// Whether the table has no functions (never true for a parsed table).
    pub fn is_empty(&self) -> bool {
        self.nfunc == 0
    }

    /// Entry offset (from the text start) of function `i`, or the end for `i == nfunc`.
    fn entry_off(&self, i: usize) -> Result<u32, GoError> {
        u32_at(&self.data, self.functab + i * 8)
    }

    /// Function `i` (below [`Table::len`]).
    pub fn func(&self, i: usize) -> Result<Func, GoError> {
        let start = self.entry_off(i)?;
        let end = self.entry_off(i + 1)?;
        let off = self.functab + u32_at(&self.data, self.functab + i * 8 + 4)? as usize;
        if u32_at(&self.data, off + FUNC_ENTRY)? != start || end < start {
            return Err(GoError::Malformed(
                "a function's entry disagrees with its table",
            ));
        }
        let at = |o: u32| {
            self.text_start
                .checked_add(u64::from(o))
                .ok_or(GoError::Malformed(
                    "a function past the end of the address space",
                ))
        };
        Ok(Func {
            entry: at(start)?,
            end: at(end)?,
            off,
        })
    }

    /// The function whose code holds `addr`, if any.
    pub fn find(&self, addr: u64) -> Result<Option<Func>, GoError> {
        let Some(rel) = addr.checked_sub(self.text_start) else {
            return Ok(None);
        };
        let Ok(rel) = u32::try_from(rel) else {
            return Ok(None);
        };
        if rel >= self.entry_off(self.nfunc)? || rel < self.entry_off(0)? {
            return Ok(None);
        }
        // The last function whose entry is at or below `rel`.
        let (mut lo, mut hi) = (0usize, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry_off(mid)? <= rel {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.func(lo).map(Some)
    }

    /// The function's name.
    pub fn name(&self, f: &Func) -> Result<String, GoError> {
        let off = u32_at(&self.data, f.off + FUNC_NAME)?;
        self.name_at(off)
    }

    /// The name at `off` of the function name table (`_func.nameoff`, `inlinedCall` names).
    pub(crate) fn name_at(&self, off: u32) -> Result<String, GoError> {
        cstr(&self.data, self.funcnames + off as usize)
    }

    /// The value of the pc-value table at `table` (an offset into pctab, 0 for none) for
    /// `addr` in `f`; `None` where the table has no value (the runtime's -1).
    fn pcvalue(&self, f: &Func, table: u32, addr: u64) -> Result<Option<i32>, GoError> {
        if table == 0 {
            return Ok(None);
        }
        let mut at = self.pctab + table as usize;
        let (mut pc, mut val) = (f.entry, -1i32);
        loop {
            let uv = varint(&self.data, &mut at)?;
            if uv == 0 && pc != f.entry {
                return Ok(None); // the table ended before `addr`
            }
            let delta = if uv & 1 != 0 {
                !(uv >> 1) as i32
            } else {
                (uv >> 1) as i32
            };
            val = val.wrapping_add(delta);
            let step = u64::from(varint(&self.data, &mut at)?) * self.quantum;
            pc = pc.saturating_add(step);
            if addr < pc {
                return Ok((val >= 0).then_some(val));
            }
            if pc >= f.end {
                return Ok(None);
            }
        }
    }

    /// The source file and line of `addr` in `f` (the innermost inlined call's position).
    pub(crate) fn file_line(
        &self,
        f: &Func,
        addr: u64,
    ) -> Result<(Option<String>, Option<u32>), GoError> {
        let pcfile = u32_at(&self.data, f.off + FUNC_PCFILE)?;
        let pcln = u32_at(&self.data, f.off + FUNC_PCLN)?;
        let line = self.pcvalue(f, pcln, addr)?.map(|l| l as u32);
        let file = match self.pcvalue(f, pcfile, addr)? {
            Some(fileno) => {
                let cu = u32_at(&self.data, f.off + FUNC_CU)?;
                let index = cu as usize + fileno as usize;
                match u32_at(&self.data, self.cutab + index * 4)? {
                    u32::MAX => None,
                    off => Some(cstr(&self.data, self.filetab + off as usize)?),
                }
            }
            None => None,
        };
        Ok((file, line))
    }

    /// Offset of the `_func` field after `npcdata`: its `pcdata` array follows.
    fn pcdata_start(&self) -> usize {
        match self.version {
            Version::Go118 => 40,
            Version::Go120 => 44,
        }
    }

    /// The function's `pcdata` table `i` (0 when it has none).
    fn pcdata(&self, f: &Func, i: u32) -> Result<u32, GoError> {
        let n = u32_at(&self.data, f.off + FUNC_NPCDATA)?;
        if i >= n {
            return Ok(0);
        }
        u32_at(&self.data, f.off + self.pcdata_start() + i as usize * 4)
    }

    /// The function's `funcdata` `i`: an offset from `moduledata.gofunc`, if it has one.
    pub(crate) fn funcdata(&self, f: &Func, i: u32) -> Result<Option<u32>, GoError> {
        let npcdata = u32_at(&self.data, f.off + FUNC_NPCDATA)? as usize;
        let nfuncdata = *self
            .data
            .get(f.off + self.pcdata_start() - 1)
            .ok_or(GoError::Malformed("a function record past the end"))?;
        if i >= u32::from(nfuncdata) {
            return Ok(None);
        }
        let at = f.off + self.pcdata_start() + (npcdata + i as usize) * 4;
        Ok(Some(u32_at(&self.data, at)?).filter(|&o| o != u32::MAX))
    }

    /// The inline tree index at `addr` in `f`: which inlined call's code it is, if any.
    pub fn inline_index(&self, f: &Func, addr: u64) -> Result<Option<u32>, GoError> {
        let table = self.pcdata(f, PCDATA_INL_TREE_INDEX)?;
        Ok(self.pcvalue(f, table, addr)?.map(|i| i as u32))
    }

    /// Size of one `inlinedCall` and the offsets of its name and parent pc fields.
    pub(crate) fn inlined_call_layout(&self) -> (usize, usize, usize) {
        match self.version {
            Version::Go118 => (20, 12, 16),
            Version::Go120 => (16, 4, 8),
        }
    }

    /// The pointer size the table was written for.
    pub(crate) fn ptr_size(&self) -> usize {
        self.ptr_size
    }

    /// Offset (from the table start) of the function name table.
    pub(crate) fn funcnames_offset(&self) -> usize {
        self.funcnames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_bounds() {
        let mut at = 0;
        assert_eq!(varint(&[0x96, 0x01], &mut at).unwrap(), 150);
        assert_eq!(at, 2);
        let mut at = 0;
        assert!(varint(&[0x80, 0x80], &mut at).is_err());
        let mut at = 0;
        assert!(varint(&[0xff; 8], &mut at).is_err());
        assert!(cstr(b"abc", 0).is_err());
        assert_eq!(cstr(b"ab\0c", 0).unwrap(), "ab");
        assert!(u32_at(&[1, 2, 3], 0).is_err());
        assert!(u32_at(&[1, 2, 3, 4], usize::MAX).is_err());
    }

    #[test]
    fn headers_rejected_cleanly() {
        assert!(matches!(
            Table::parse(vec![0xfb, 0xff, 0xff, 0xff, 0, 0, 1, 8], None),
            Err(GoError::Unsupported { .. })
        ));
        assert!(matches!(
            Table::parse(b"\x7fELF".to_vec(), None),
            Err(GoError::Malformed(_))
        ));
        // A Go 1.20 header whose offsets point past its end.
        let mut h = vec![0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        for w in [1u64, 1, 0x401000, 0x100, 0x100, 0x100, 0x100, 0x100] {
            h.extend_from_slice(&w.to_le_bytes());
        }
        h.resize(0x90, 0);
        assert!(matches!(Table::parse(h, None), Err(GoError::Malformed(_))));
    }
}
