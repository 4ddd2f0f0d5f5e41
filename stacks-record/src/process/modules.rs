//! Build id → file path index. The kernel normalizes user frames to (build id, file offset) at
//! capture time; this index names the file each build id came from, learned from the memory
//! maps of traced processes (read when they first appear or exec, and again when a frame's
//! build id is not known: a library loaded later, `dlopen`) and of the recorder itself.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::process::{maps, untrusted};
use stacks_stream::hex::encode as hex;

/// What is known about mapped ELF files.
#[derive(Default)]
pub(crate) struct ModuleIndex {
    by_id: HashMap<String, String>,
    /// Paths whose build id was already read (or could not be).
    read: HashSet<String>,
    /// Processes whose map was read since they last exec'd, and when.
    seen: HashMap<u32, Instant, ahash::RandomState>,
}

impl ModuleIndex {
    /// The file a build id (lowercase hex) was seen in.
    pub(crate) fn path(&self, build_id: &str) -> Option<&str> {
        self.by_id.get(build_id).map(String::as_str)
    }

    /// Remember that `path` carries `build_id`.
    pub(crate) fn learn(&mut self, build_id: &str, path: &str) {
        if !self.by_id.contains_key(build_id) {
            self.by_id.insert(build_id.to_string(), path.to_string());
        }
    }

    /// Read the executable file mappings of `pid` once (again after [`Self::forget`]).
    pub(crate) fn learn_process(&mut self, pid: u32) {
        if pid == 0 || self.seen.contains_key(&pid) {
            return;
        }
        self.read_process(pid);
    }

    /// Read the mappings of `pid` again, for a build id it was not seen mapping: a library it
    /// loaded since (at most every [`RELEARN_EVERY`] per process).
    pub(crate) fn learn_again(&mut self, pid: u32) {
        if pid != 0
            && self
                .seen
                .get(&pid)
                .is_none_or(|t| t.elapsed() >= RELEARN_EVERY)
        {
            self.read_process(pid);
        }
    }

    fn read_process(&mut self, pid: u32) {
        self.seen.insert(pid, Instant::now());
        let Ok(maps) = maps::read(pid) else {
            return;
        };
        for path in executable_files(&maps) {
            if !self.read.insert(path.to_string()) {
                continue;
            }
            // The path is the process's view: the file is opened in its root, so a process in
            // another mount namespace names its own file, and only as a regular file (never a
            // FIFO put where a mapped file was). The path itself is only data.
            let Ok((file, _)) = untrusted::open_of(pid, path, u64::MAX) else {
                continue;
            };
            if let Some(id) = build_id_of(&file) {
                self.learn(&id, path);
            }
        }
    }

    /// Learn the build id of a file executed by a process (its exec record's path), for when
    /// the process is gone before its memory map could be read.
    pub(crate) fn learn_file(&mut self, path: &str) {
        if !path.starts_with('/') || !self.read.insert(path.to_string()) {
            return;
        }
        let Ok((file, _)) = untrusted::open_plain(path, u64::MAX) else {
            return;
        };
        if let Some(id) = build_id_of(&file) {
            self.learn(&id, path);
        }
    }

    /// The process exec'd (or exited): read its map again next time.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.seen.remove(&pid);
    }
}

/// Least time between two reads of one process's mappings for unknown build ids.
const RELEARN_EVERY: Duration = Duration::from_millis(100);

/// Paths of file-backed executable mappings in a `/proc/PID/maps` text.
fn executable_files(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for m in maps::parse(text) {
        if m.executable() && m.path.starts_with('/') && !out.contains(&m.path) {
            out.push(m.path);
        }
    }
    out
}

/// The build id of the ELF file at `path` ([`build_id_of`]).
#[cfg(test)]
fn read_build_id(path: &Path) -> Option<String> {
    let (file, _) = untrusted::open_plain(path, u64::MAX).ok()?;
    build_id_of(&file)
}

/// Largest note section or segment read for a build id (a build-id note is 36 bytes; all of
/// PostgreSQL's USDT notes, in the same kind of section, some tens of KiB).
const NOTES_MAX: u64 = 1 << 20;

/// The GNU build id (lowercase hex) of an opened ELF file: its `NT_GNU_BUILD_ID` note whose
/// name is "GNU" (from its note sections, else, without section headers, its note segments).
/// blazesym's reader takes the first note of type 3 whatever its name, and a USDT probe's
/// note (`stapsdt`, type 3 too) is one: in a file whose `.note.stapsdt` comes before
/// `.note.gnu.build-id` (PostgreSQL after patchelf moved its build-id note) it read a probe's
/// bytes as the build id, and no frame of the file could be named. Read with `pread` through
/// `object`'s read cache, never mapped: the file is the target's, which may truncate it while
/// it is read (a mapping would then fault); a note table over [`NOTES_MAX`] is not read.
pub(crate) fn build_id_of(file: &std::fs::File) -> Option<String> {
    use object::elf::{FileHeader64, NT_GNU_BUILD_ID};
    use object::read::elf::{FileHeader, NoteIterator, ProgramHeader, SectionHeader};
    let data = &object::ReadCache::new(file);
    let header = FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let gnu_build_id = |notes: Option<NoteIterator<'_, FileHeader64<object::Endianness>>>| {
        let mut notes = notes?;
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"GNU" && note.n_type(endian) == NT_GNU_BUILD_ID {
                return Some(hex(note.desc()));
            }
        }
        None
    };
    let sections = header.section_headers(endian, data).ok()?;
    if !sections.is_empty() {
        return sections
            .iter()
            .filter(|s| s.sh_size(endian) <= NOTES_MAX)
            .find_map(|s| gnu_build_id(s.notes(endian, data).ok()?));
    }
    header
        .program_headers(endian, data)
        .ok()?
        .iter()
        .filter(|p| p.p_filesz(endian) <= NOTES_MAX)
        .find_map(|p| gnu_build_id(p.notes(endian, data).ok()?))
}

thread_local! {
    /// Build ids by file (device, inode, modification time): each file is read once.
    static BUILD_IDS: RefCell<HashMap<(u64, u64, i64), Option<String>>> = RefCell::default();
}

/// The build id of `path` as process `pid` sees it (through its root), read once per file.
pub(crate) fn process_file_build_id(pid: u32, path: &Path) -> Option<String> {
    let (file, _) = untrusted::open_of(pid, path.to_str()?, u64::MAX).ok()?;
    let meta = file.metadata().ok()?;
    let key = (meta.dev(), meta.ino(), meta.mtime());
    BUILD_IDS.with(|ids| {
        ids.borrow_mut()
            .entry(key)
            .or_insert_with(|| build_id_of(&file))
            .clone()
    })
}

/// A kernel-reported build id (20 bytes, zero padded) as lowercase hex: a 16-byte id (md5,
/// uuid) leaves four zero bytes at the end, which are not part of it.
pub(crate) fn build_id_hex(raw: &[u8; 20]) -> String {
    if raw[16..] == [0, 0, 0, 0] {
        hex(&raw[..16])
    } else {
        hex(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_mappings_only() {
        let maps = "\
55d0-55e0 r--p 00000000 fe:00 123 /usr/bin/app
55e0-55f0 r-xp 00001000 fe:00 123 /usr/bin/app
7f00-7f10 r-xp 00000000 fe:00 456 /usr/lib/libc.so.6
7f20-7f30 rw-p 00000000 00:00 0 
7ff0-7fff r-xp 00000000 00:00 0 [vdso]
7f40-7f50 r-xp 00000000 fe:00 789 /tmp/with space.so
";
        assert_eq!(
            executable_files(maps),
            ["/usr/bin/app", "/usr/lib/libc.so.6", "/tmp/with space.so"]
        );
    }

    #[test]
    fn learns_own_libraries() {
        let mut idx = ModuleIndex::default();
        idx.learn_process(std::process::id());
        assert!(
            !idx.by_id.is_empty(),
            "the test binary itself has a build id"
        );
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let id = read_build_id(&exe).unwrap();
        assert_eq!(idx.path(&id), Some(exe.to_str().unwrap()));
    }

    /// A 64-bit ELF file of note sections only: a USDT probe's note (`stapsdt`, type 3) in a
    /// section before the GNU build-id note (type 3 too), as patchelf leaves PostgreSQL.
    fn probe_note_first(build_id: &[u8; 20]) -> Vec<u8> {
        fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
            let mut n = Vec::new();
            n.extend_from_slice(&(name.len() as u32).to_le_bytes());
            n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            n.extend_from_slice(&kind.to_le_bytes());
            n.extend_from_slice(name);
            n.resize(n.len().div_ceil(4) * 4, 0);
            n.extend_from_slice(desc);
            n.resize(n.len().div_ceil(4) * 4, 0);
            n
        }
        let probe = note(b"stapsdt\0", 3, b"probe's pc, base, semaphore, names..");
        let gnu = note(b"GNU\0", 3, build_id);
        let names = b"\0.note.stapsdt\0.note.gnu.build-id\0.shstrtab\0";
        let mut f = vec![0u8; 64];
        let probe_at = f.len();
        f.extend_from_slice(&probe);
        let gnu_at = f.len();
        f.extend_from_slice(&gnu);
        let names_at = f.len();
        f.extend_from_slice(names);
        f.resize(f.len().div_ceil(8) * 8, 0);
        let sh_at = f.len();
        // Section headers: null, the probe's notes, the build id, the names.
        let section = |name: u32, kind: u32, at: usize, size: usize, align: u64| {
            let mut h = Vec::new();
            h.extend_from_slice(&name.to_le_bytes());
            h.extend_from_slice(&kind.to_le_bytes());
            h.extend_from_slice(&0u64.to_le_bytes()); // flags
            h.extend_from_slice(&0u64.to_le_bytes()); // address
            h.extend_from_slice(&(at as u64).to_le_bytes());
            h.extend_from_slice(&(size as u64).to_le_bytes());
            h.extend_from_slice(&0u32.to_le_bytes()); // link
            h.extend_from_slice(&0u32.to_le_bytes()); // info
            h.extend_from_slice(&align.to_le_bytes());
            h.extend_from_slice(&0u64.to_le_bytes()); // entry size
            h
        };
        f.extend(section(0, 0, 0, 0, 0));
        f.extend(section(1, 7, probe_at, probe.len(), 4));
        f.extend(section(15, 7, gnu_at, gnu.len(), 4));
        f.extend(section(34, 3, names_at, names.len(), 1));
        f[..4].copy_from_slice(b"\x7fELF");
        f[4..8].copy_from_slice(&[2, 1, 1, 0]); // 64-bit, little-endian, version 1
        f[16..18].copy_from_slice(&3u16.to_le_bytes()); // shared object
        f[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
        f[20..24].copy_from_slice(&1u32.to_le_bytes());
        f[40..48].copy_from_slice(&(sh_at as u64).to_le_bytes());
        f[52..54].copy_from_slice(&64u16.to_le_bytes()); // header size
        f[54..56].copy_from_slice(&56u16.to_le_bytes()); // program header size
        f[58..60].copy_from_slice(&64u16.to_le_bytes()); // section header size
        f[60..62].copy_from_slice(&4u16.to_le_bytes()); // sections
        f[62..64].copy_from_slice(&3u16.to_le_bytes()); // the names' section
        f
    }

    #[test]
    fn the_build_id_is_the_gnu_note_not_a_probe_note_before_it() {
        let id = [0xab; 20];
        let path = std::env::temp_dir().join(format!("stacks-notes-{}.so", std::process::id()));
        std::fs::write(&path, probe_note_first(&id)).unwrap();
        let got = read_build_id(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(got, Some(hex(&id)));
    }

    #[test]
    fn short_build_ids_are_trimmed() {
        let mut raw = [0u8; 20];
        raw[..16].copy_from_slice(&[0xab; 16]);
        assert_eq!(build_id_hex(&raw).len(), 32);
        raw[19] = 1;
        assert_eq!(build_id_hex(&raw).len(), 40);
    }
}
