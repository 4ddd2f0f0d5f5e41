//! The few facts about an ELF file that finding its debug information needs: GNU build id,
//! loadable segments (file offset → ELF address), whether it holds code and DWARF, and its
//! `.gnu_debuglink`. Reads only the headers and small sections, never the whole file.
//!
//! The files are a traced program's, so a hostile one may have made them: a file is opened
//! without blocking and refused unless it is a regular file, and refused when a section lies
//! past its end or a symbol or string table is larger than [`TABLE_MAX`] (symbolizers read
//! those whole), so nothing read from it afterwards (blazesym, the Go table reader) is asked
//! to read beyond the file or gigabytes of a sparse one (docs/threat-model.md).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Why an ELF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not an ELF file")]
    NotElf { path: String },
    #[error("{path}: unsupported ELF file ({what})")]
    Unsupported { path: String, what: &'static str },
    #[error("{path}: malformed ELF file ({what})")]
    Malformed { path: String, what: &'static str },
    /// On a FUSE file system, or reached through one: not opened (its server, maybe the
    /// traced program, may never answer).
    #[error("{0}")]
    OnFuse(String),
}

/// One `PT_LOAD` program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub exec: bool,
}

/// What an ELF file offers for symbolization.
#[derive(Clone, Debug, Default)]
pub struct ElfInfo {
    /// GNU build id, lowercase hex.
    pub build_id: Option<String>,
    pub loads: Vec<Load>,
    /// `.text` holds bytes (not a separate debug file, whose code sections are `NOBITS`).
    pub has_code: bool,
    /// Has `.debug_info` (DWARF): file, line and inlined functions are available.
    pub has_dwarf: bool,
    /// Has a symbol table (`.symtab` or `.dynsym`).
    pub has_symbols: bool,
    /// File name from `.gnu_debuglink`.
    pub debuglink: Option<String>,
    /// The file's size in bytes when it was read.
    pub size: u64,
}

const SHT_NOBITS: u32 = 8;
const SHT_NOTE: u32 = 7;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;
const NT_GNU_BUILD_ID: u32 = 3;
/// Sections read whole (notes, debuglink, section names) must be smaller than this.
const SMALL: u64 = 16 << 20;
/// Largest symbol or string table of a file symbolized.
pub const TABLE_MAX: u64 = 512 << 20;
const SHT_STRTAB: u32 = 3;

struct Reader<'a> {
    file: &'a File,
    path: &'a str,
}

impl Reader<'_> {
    fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>, ElfError> {
        if len > SMALL {
            return Err(self.malformed("oversized header table or section"));
        }
        let mut buf = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::UnexpectedEof => self.malformed("truncated"),
                _ => ElfError::Io {
                    path: self.path.into(),
                    source,
                },
            })?;
        Ok(buf)
    }

    fn malformed(&self, what: &'static str) -> ElfError {
        ElfError::Malformed {
            path: self.path.into(),
            what,
        }
    }
}

fn u16le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The GNU build id among the notes of one `SHT_NOTE` section.
fn build_id_in_notes(notes: &[u8]) -> Option<String> {
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = u32le(notes, at) as usize;
        let descsz = u32le(notes, at + 4) as usize;
        let kind = u32le(notes, at + 8);
        let name_at = at + 12;
        let desc_at = name_at + namesz.div_ceil(4) * 4;
        let end = desc_at.checked_add(descsz.div_ceil(4) * 4)?;
        if desc_at + descsz > notes.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
            return Some(stacks_stream::hex::encode(
                &notes[desc_at..desc_at + descsz],
            ));
        }
        at = end;
    }
    None
}

/// Read what [`ElfInfo`] describes from the ELF file at `path` (64-bit little-endian).
pub fn read(path: &Path) -> Result<ElfInfo, ElfError> {
    read_file(&open(path)?, &path.display().to_string())
}

/// Open the file at `path` to read, without blocking (never on a FIFO put where the file was),
/// and never on a FUSE file system, nor through one (`stacks_stream::mounts::open_off_fuse`).
pub fn open(path: &Path) -> Result<File, ElfError> {
    use stacks_stream::mounts::{OffFuseError, open_off_fuse};
    open_off_fuse(path).map_err(|e| match e {
        OffFuseError::Io { path, source } => ElfError::Io { path, source },
        fuse @ OffFuseError::Fuse { .. } => ElfError::OnFuse(fuse.to_string()),
    })
}

/// [`read`] of an opened file, named `name` in errors: only a regular file.
pub fn read_file(file: &File, name: &str) -> Result<ElfInfo, ElfError> {
    let name = name.to_string();
    let meta = file.metadata().map_err(|source| ElfError::Io {
        path: name.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(ElfError::NotElf { path: name });
    }
    let file_len = meta.len();
    let r = Reader { file, path: &name };
    let mut ident = [0u8; 64];
    let n = r
        .file
        .read_at(&mut ident, 0)
        .map_err(|source| ElfError::Io {
            path: name.clone(),
            source,
        })?;
    if n < 16 || &ident[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf { path: name });
    }
    if ident[4] != 2 || ident[5] != 1 {
        return Err(ElfError::Unsupported {
            path: name,
            what: "only 64-bit little-endian ELF is supported",
        });
    }
    if n < 64 {
        return Err(r.malformed("short ELF header"));
    }
    let h = &ident;
    let (phoff, shoff) = (u64le(h, 32), u64le(h, 40));
    let (phentsize, phnum) = (u16le(h, 54) as u64, u16le(h, 56) as u64);
    let (shentsize, shnum, shstrndx) = (u16le(h, 58) as u64, u16le(h, 60) as u64, u16le(h, 62));
    let mut info = ElfInfo {
        size: file_len,
        ..ElfInfo::default()
    };

    if phnum > 0 {
        if phentsize < 56 {
            return Err(r.malformed("program header size"));
        }
        let ph = r.read(phoff, phentsize * phnum)?;
        for i in 0..phnum as usize {
            let p = &ph[i * phentsize as usize..];
            if u32le(p, 0) == PT_LOAD {
                info.loads.push(Load {
                    exec: u32le(p, 4) & PF_X != 0,
                    offset: u64le(p, 8),
                    vaddr: u64le(p, 16),
                    filesz: u64le(p, 32),
                    memsz: u64le(p, 40),
                });
            }
        }
    }

    if shnum > 0 && shoff != 0 {
        if shentsize < 64 {
            return Err(r.malformed("section header size"));
        }
        let sh = r.read(shoff, shentsize * shnum)?;
        let section = |i: usize| &sh[i * shentsize as usize..(i + 1) * shentsize as usize];
        let names = if (shstrndx as u64) < shnum {
            let s = section(shstrndx as usize);
            r.read(u64le(s, 24), u64le(s, 32))?
        } else {
            Vec::new()
        };
        let name_of = |at: u32| -> &[u8] {
            let rest = names.get(at as usize..).unwrap_or(&[]);
            &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
        };
        for i in 0..shnum as usize {
            let s = section(i);
            let (sname, stype) = (name_of(u32le(s, 0)), u32le(s, 4));
            let (off, size) = (u64le(s, 24), u64le(s, 32));
            if stype != SHT_NOBITS && size > 0 && off.checked_add(size).is_none_or(|e| e > file_len)
            {
                return Err(r.malformed("a section past the end of the file"));
            }
            if matches!(stype, SHT_SYMTAB | SHT_DYNSYM | SHT_STRTAB) && size > TABLE_MAX {
                return Err(r.malformed("a symbol or string table over 512 MiB"));
            }
            match (sname, stype) {
                (_, SHT_SYMTAB | SHT_DYNSYM) => info.has_symbols |= size > 0,
                (b".text", t) => info.has_code = t != SHT_NOBITS && size > 0,
                (b".debug_info" | b".zdebug_info", t) => {
                    info.has_dwarf = t != SHT_NOBITS && size > 0
                }
                (b".gnu_debuglink", t) if t != SHT_NOBITS && size < 4096 => {
                    let data = r.read(off, size)?;
                    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                    if end > 0 {
                        info.debuglink = Some(String::from_utf8_lossy(&data[..end]).into_owned());
                    }
                }
                (_, SHT_NOTE) if info.build_id.is_none() && size < SMALL => {
                    info.build_id = build_id_in_notes(&r.read(off, size)?);
                }
                _ => {}
            }
        }
    }
    Ok(info)
}

impl ElfInfo {
    /// The ELF address of file offset `offset`, through the loadable segments that hold bytes
    /// of the file.
    pub(crate) fn file_offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| l.offset <= offset && offset < l.offset + l.filesz)
            .map(|l| offset - l.offset + l.vaddr)
    }

    /// For a separate debug file, whose segments no longer say where their bytes were in the
    /// original file: the original layout as the GNU and LLVM linkers make it for code, each
    /// executable segment at the same distance from the file start as from the image base.
    pub(crate) fn debug_file_offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        let base = self.loads.first()?.vaddr;
        self.loads
            .iter()
            .filter(|l| l.exec)
            .find(|l| {
                let start = l.vaddr - base;
                start <= offset && offset < start + l.memsz
            })
            .map(|_| offset + base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_executable() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let info = read(&exe).unwrap();
        let want = blazesym::helper::read_elf_build_id(&exe)
            .unwrap()
            .map(|b| stacks_stream::hex::encode(&b));
        assert_eq!(info.build_id, want);
        assert!(info.has_code && info.has_symbols);
        assert!(info.loads.iter().any(|l| l.exec));
        // The start of the executable segment maps to its address.
        let x = info.loads.iter().find(|l| l.exec).unwrap();
        assert_eq!(info.file_offset_to_vaddr(x.offset + 1), Some(x.vaddr + 1));
        assert_eq!(info.file_offset_to_vaddr(u64::MAX / 2), None);
    }

    #[test]
    fn rejects_non_elf_and_truncated() {
        let dir = std::env::temp_dir().join(format!("stacks-elf-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("text");
        std::fs::write(&p, b"hello, not an ELF file at all").unwrap();
        assert!(matches!(read(&p), Err(ElfError::NotElf { .. })));
        let exe = std::fs::read(std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
        std::fs::write(&p, &exe[..40]).unwrap();
        assert!(matches!(read(&p), Err(ElfError::Malformed { .. })));
        let mut bad = exe[..4096].to_vec();
        bad[40..48].copy_from_slice(&u64::MAX.to_le_bytes()); // e_shoff far away
        std::fs::write(&p, &bad).unwrap();
        assert!(read(&p).is_err());
        assert!(matches!(
            read(&dir.join("missing")),
            Err(ElfError::Io { .. })
        ));
        // A FIFO (nobody writes it) is refused at once, not waited on.
        let fifo = dir.join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        assert!(matches!(read(&fifo), Err(ElfError::NotElf { .. })));
        // The last section moved past the end of the file, or grown to 1 TiB: refused.
        let shoff = u64le(&exe, 40) as usize;
        let (size, n) = (u16le(&exe, 58) as usize, u16le(&exe, 60) as usize);
        let last = shoff + (n - 1) * size;
        for (at, v) in [(24, exe.len() as u64), (32, 1u64 << 40)] {
            let mut bad = exe.clone();
            bad[last + 4..last + 8].copy_from_slice(&SHT_SYMTAB.to_le_bytes());
            bad[last + at..last + at + 8].copy_from_slice(&v.to_le_bytes());
            std::fs::write(&p, &bad).unwrap();
            assert!(
                matches!(read(&p), Err(ElfError::Malformed { .. })),
                "{at}: {v}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn notes_parse_build_id() {
        let mut n = Vec::new();
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&3u32.to_le_bytes());
        n.extend_from_slice(&NT_GNU_BUILD_ID.to_le_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(&[0xab, 0xcd, 0xef, 0]);
        assert_eq!(build_id_in_notes(&n).as_deref(), Some("abcdef"));
        assert_eq!(build_id_in_notes(&n[..14]), None);
    }

    #[test]
    fn debug_file_layout_guess() {
        let info = ElfInfo {
            loads: vec![
                Load {
                    offset: 0,
                    vaddr: 0x400000,
                    filesz: 0,
                    memsz: 0x600,
                    exec: false,
                },
                Load {
                    offset: 0,
                    vaddr: 0x401000,
                    filesz: 0,
                    memsz: 0x200,
                    exec: true,
                },
            ],
            ..Default::default()
        };
        assert_eq!(info.debug_file_offset_to_vaddr(0x1010), Some(0x401010));
        assert_eq!(info.debug_file_offset_to_vaddr(0x10), None);
        assert_eq!(info.file_offset_to_vaddr(0x1010), None);
    }
}
