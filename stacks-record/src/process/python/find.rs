//! Finding CPython in a process: the interpreter's file among its mappings (`python3.N`, or
//! `libpython3.N.so*` when the executable links it), that file's symbols `_PyRuntime`,
//! `Py_Version` and `_PyEval_EvalFrameDefault` (ELF symbol tables; without symbols, 3.14+'s
//! `_PyRuntime` by its own section, `.PyRuntime`, and the version from the debug offsets it
//! starts with), where it is loaded, the version read from the process and the layout of that
//! version (3.13+'s from the debug offsets at the start of its `_PyRuntime`). Each file is read
//! once ([`Files`]): a process is looked at again until its interpreter is ready, and many run
//! the same one.

use std::collections::HashMap;
use std::ops::Range;
use std::rc::Rc;

use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSymbol};

use super::code::read_mem;
use super::offsets::{self, Layout};
use super::tasks;
use crate::process::maps;

/// Why a process's Python frames are not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FindError {
    #[error("reading {0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: not a 64-bit ELF file this reader knows")]
    NotElf(String),
    #[error("{0}: no symbol {1}")]
    NoSymbol(String, &'static str),
    #[error("{0}: not mapped as expected")]
    NotMapped(String),
    #[error(
        "{file}: CPython {version} is not supported (verified: 3.11.2, 3.11.7, 3.12.1; 3.13, 3.14 and 3.15 from their debug offsets)"
    )]
    Unsupported { file: String, version: String },
    #[error("{file}: CPython {version}: {why}")]
    DebugOffsets {
        file: String,
        version: String,
        why: offsets::DebugOffsetsError,
    },
    #[error("{file}: CPython {version}: _PyRuntime.autoTSSkey is not an initialized pthread key")]
    NoTssKey { file: String, version: String },
    #[error("{file}: CPython {version}: no interpreter started yet")]
    NoInterpreter { file: String, version: String },
    #[error("reading the interpreter's version: {0}")]
    Read(#[from] super::code::ReadError),
    #[error("not read: {0}")]
    Refused(#[from] crate::process::untrusted::Refused),
}

/// Exported functions of the interpreter that call its eval loop.
const ENTRIES: &[&str] = &[
    "PyEval_EvalCode",
    "PyEval_EvalFrame",
    "PyEval_EvalFrameEx",
    "PyObject_Call",
    "PyObject_Vectorcall",
    "_PyFunction_Vectorcall",
    "PyObject_CallObject",
];

/// A CPython interpreter found in a process.
#[derive(Debug, Clone)]
pub(crate) struct Interpreter {
    /// The file holding the interpreter, as the process maps it.
    pub file: String,
    pub layout: Layout,
    /// Address of `_PyRuntime.autoTSSkey` in the process (3.11, 3.12), or of
    /// `_PyRuntime.interpreters.head` (3.13+: the thread states are found in its list).
    pub tstate_at: u64,
    /// The file's build id (lowercase hex), and the file offsets of `_PyEval_EvalFrameDefault`
    /// (empty when the file does not name it: Python frames then go outermost).
    pub build_id: Option<String>,
    pub eval: Range<u64>,
    /// The file offsets of the exported functions that enter the eval loop ([`ENTRIES`]): where
    /// Python frames go when no `_PyEval_EvalFrameDefault` frame is in the native stack (a
    /// build whose eval loop runs in unnamed functions: 3.14+'s tail-calling interpreter, or
    /// a stack walk that skipped it).
    pub entries: Vec<Range<u64>>,
    /// Where asyncio keeps tasks (3.14+, when its `.AsyncioDebug` table was found and checked).
    pub asyncio: Option<tasks::AsyncioLayout>,
}

/// The version (major, minor) of a mapped file named as a CPython executable (`python3.N`,
/// `python2.7`) or library (`libpython3.N.so*`, `libpython3.Nm.so*`); `None` for other files.
fn interpreter_version(path: &str) -> Option<(u32, u32)> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let version = match name.strip_prefix("lib") {
        Some(lib) => lib.strip_prefix("python")?.split_once(".so")?.0,
        None => name.strip_prefix("python")?,
    };
    let (major, minor) = version.split_once('.')?;
    // Builds of 3.7 and older name their library with ABI flags: libpython3.6m.so.
    let minor = minor.strip_suffix('m').unwrap_or(minor);
    match (major.parse().ok()?, minor.parse().ok()?) {
        (m @ (2 | 3), n) => Some((m, n)),
        _ => None,
    }
}

/// Whether a mapped file is a CPython this reader may read: 3.11 or later (which began
/// exporting `Py_Version`); older ones are refused by name.
fn is_interpreter(path: &str) -> bool {
    interpreter_version(path).is_some_and(|v| v >= (3, 11))
}

/// What stacks-record needs of an interpreter file: read once per file ([`Files`]), then
/// each process mapping it is only looked at in memory.
#[derive(Debug)]
pub(crate) struct FileInfo {
    /// The vaddr of the segment mapped from the file's start (gives the load bias).
    first_vaddr: u64,
    /// `Py_Version`, `_PyRuntime`: their vaddrs, when the file has them (the executable of a
    /// `libpython` has neither); `_PyRuntime` by its section `.PyRuntime` (3.14+) when no
    /// symbol names it.
    version_at: Option<u64>,
    runtime: Option<u64>,
    /// `_PyEval_EvalFrameDefault`: file offset and size.
    eval: Option<(u64, u64)>,
    /// File offsets of the exported functions that call into the eval loop ([`ENTRIES`]).
    entries: Vec<Range<u64>>,
    build_id: Option<String>,
    /// The file's `.AsyncioDebug` section (3.15 builds asyncio in).
    asyncio: Option<Vec<u8>>,
}

/// Interpreter files read, by device, inode and path (a file replaced at the same path is
/// another inode). Kept small: a host runs few interpreters.
#[derive(Default)]
pub(crate) struct Files(HashMap<(String, u64, String), Rc<FileInfo>>);

const FILES_KEPT: usize = 64;

impl Files {
    fn get(&mut self, pid: u32, m: &maps::Mapping<'_>) -> Result<Rc<FileInfo>, FindError> {
        let key = (m.dev.to_string(), m.inode, m.path.to_string());
        if let Some(f) = self.0.get(&key) {
            return Ok(Rc::clone(f));
        }
        let f = Rc::new(read_file(pid, m.path)?);
        if self.0.len() >= FILES_KEPT {
            self.0.clear();
        }
        self.0.insert(key, Rc::clone(&f));
        Ok(f)
    }
}

/// Largest interpreter file read (a libpython with its symbols is tens of MiB).
const FILE_MAX: u64 = 256 << 20;

/// Read interpreter file `file` of process `pid` (in its root, a regular file of at most
/// [`FILE_MAX`] bytes).
fn read_file(pid: u32, file: &str) -> Result<FileInfo, FindError> {
    use crate::process::untrusted::{self, Refused};
    let bytes = untrusted::read_of(pid, file, FILE_MAX).map_err(|e| match e {
        Refused::Io(f, e) => FindError::Io(f, e),
        other => FindError::Refused(other),
    })?;
    let elf = ElfFile64::<object::Endianness>::parse(&*bytes)
        .map_err(|_| FindError::NotElf(file.to_string()))?;
    let endian = elf.endian();
    let loads: Vec<_> = elf
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| (p.p_vaddr(endian), p.p_offset(endian), p.p_filesz(endian)))
        .collect();
    let Some(&(first_vaddr, _, _)) = loads.iter().find(|(_, off, _)| *off == 0) else {
        return Err(FindError::NotMapped(file.to_string()));
    };
    // One pass over the symbols (dynamic first: all are exported).
    let (mut version_at, mut runtime, mut eval) = (None, None, None);
    let mut entries = Vec::new();
    for sym in elf.dynamic_symbols().chain(elf.symbols()) {
        match sym.name() {
            Ok("Py_Version") => version_at = version_at.or(Some(sym.address())),
            Ok("_PyRuntime") => runtime = runtime.or(Some(sym.address())),
            Ok("_PyEval_EvalFrameDefault") if eval.is_none() => {
                eval = Some((sym.address(), sym.size()));
            }
            Ok(name) if ENTRIES.contains(&name) => entries.push((sym.address(), sym.size())),
            _ => continue,
        }
    }
    if runtime.is_none() {
        runtime = elf
            .section_by_name(".PyRuntime")
            .map(|s| object::ObjectSection::address(&s));
    }
    let in_file = |(vaddr, size): (u64, u64)| {
        loads
            .iter()
            .find(|(v, _, filesz)| (*v..v + filesz).contains(&vaddr))
            .map(|(v, off, _)| (vaddr - v + off, size.max(1)))
    };
    let eval = eval.and_then(in_file);
    let mut entries: Vec<Range<u64>> = entries
        .into_iter()
        .filter_map(in_file)
        .map(|(at, size)| at..at + size)
        .collect();
    entries.sort_by_key(|r| r.start);
    entries.dedup();
    let build_id = elf
        .build_id()
        .ok()
        .flatten()
        .map(stacks_stream::hex::encode);
    Ok(FileInfo {
        first_vaddr,
        version_at,
        runtime,
        eval,
        entries,
        build_id,
        asyncio: tasks::section(&bytes),
    })
}

/// The CPython interpreter in process `pid`, `Ok(None)` when it runs none.
pub(crate) fn find(pid: u32, files: &mut Files) -> Result<Option<Interpreter>, FindError> {
    let text = maps::read(pid).map_err(|e| FindError::Io(format!("/proc/{pid}/maps"), e))?;
    let all: Vec<maps::Mapping<'_>> = maps::parse(&text).collect();
    // The library when there is one: the executable then only calls into it.
    let file = all
        .iter()
        .filter(|m| interpreter_version(m.path).is_some())
        .max_by_key(|m| m.path.contains("libpython"))
        .map(|m| m.path.to_string());
    let Some(file) = file else {
        return Ok(None);
    };
    if !is_interpreter(&file) {
        let (major, minor) = interpreter_version(&file).unwrap_or_default();
        return Err(FindError::Unsupported {
            file,
            version: format!("{major}.{minor}"),
        });
    }
    let Some(base) = all.iter().find(|m| m.path == file && m.offset == 0) else {
        return Err(FindError::NotMapped(file));
    };
    let info = files.get(pid, base)?;
    let bias = base.range.start.wrapping_sub(info.first_vaddr);
    let no = |name| FindError::NoSymbol(file.clone(), name);
    let runtime = bias.wrapping_add(info.runtime.ok_or_else(|| no("_PyRuntime"))?);
    let version = match info.version_at {
        Some(at) => {
            let raw = read_mem(pid, bias.wrapping_add(at), 4)?;
            u32::from_ne_bytes(raw[..4].try_into().unwrap_or([0; 4]))
        }
        // No `Py_Version` (a fully stripped file): the version the debug offsets carry, which
        // they are then checked against (a file without either is refused).
        None => {
            let raw = read_mem(pid, runtime, 16)?;
            if raw.get(..8) != Some(b"xdebugpy".as_slice()) {
                return Err(no("Py_Version"));
            }
            u32::try_from(u64::from_ne_bytes(raw[8..16].try_into().unwrap_or([0; 8])))
                .map_err(|_| no("Py_Version"))?
        }
    };
    let layout = if offsets::has_debug_offsets(version) {
        // The table may be shorter than the largest known one: read what the mapping has.
        let want = offsets::debug_offsets_size();
        let raw = read_mem(pid, runtime, want).or_else(|_| {
            let end = all
                .iter()
                .find(|m| m.range.contains(&runtime))
                .map_or(runtime, |m| m.range.end);
            read_mem(
                pid,
                runtime,
                (end.saturating_sub(runtime) as usize).min(want),
            )
        })?;
        offsets::from_debug_offsets(&raw, version).map_err(|why| FindError::DebugOffsets {
            file: file.clone(),
            version: offsets::version_name(version),
            why,
        })?
    } else {
        offsets::layout(version).ok_or_else(|| FindError::Unsupported {
            file: file.clone(),
            version: offsets::version_name(version),
        })?
    };
    let eval = info.eval.map_or(0..0, |(at, size)| at..at + size);
    let tstate_at = match layout.tstate {
        offsets::Tstate::Key(at) => {
            // The key of each thread's state: a Py_tss_t {int initialized; unsigned key}, set
            // up when the interpreter starts (so looked at again shortly when not yet).
            let key = read_mem(pid, runtime.wrapping_add(at), 8)?;
            let initialized = u32::from_ne_bytes(key[..4].try_into().unwrap_or([0; 4]));
            let value = u32::from_ne_bytes(key[4..].try_into().unwrap_or([0; 4]));
            if initialized != 1 || value >= 1024 {
                return Err(FindError::NoTssKey {
                    file,
                    version: offsets::version_name(version),
                });
            }
            runtime.wrapping_add(at)
        }
        offsets::Tstate::List {
            interpreters_head, ..
        } => {
            // The main interpreter, made when the interpreter starts (looked at again shortly
            // when not yet).
            let head = read_mem(pid, runtime.wrapping_add(interpreters_head), 8)?;
            if head.iter().all(|b| *b == 0) {
                return Err(FindError::NoInterpreter {
                    file,
                    version: offsets::version_name(version),
                });
            }
            runtime.wrapping_add(interpreters_head)
        }
    };
    // asyncio's table: the interpreter's own, or its `_asyncio` module's (read from the file,
    // whether or not the process imported it yet).
    let asyncio = if version >> 16 >= 0x030e {
        info.asyncio
            .clone()
            .or_else(|| {
                tasks::extension_module(pid, &file, (version >> 16) & 0xff)
                    .and_then(|b| tasks::section(&b))
            })
            .and_then(|raw| tasks::parse(&raw))
    } else {
        None
    };
    Ok(Some(Interpreter {
        file,
        layout,
        tstate_at,
        build_id: info.build_id.clone(),
        eval,
        entries: info.entries.clone(),
        asyncio,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreter_files_are_recognized() {
        assert!(is_interpreter("/usr/bin/python3.11"));
        assert!(is_interpreter(
            "/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0"
        ));
        assert!(is_interpreter("/usr/bin/python3.12"));
        assert!(is_interpreter(
            "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0"
        ));
        assert!(!is_interpreter("/usr/lib/libpython3.1.so"));
        assert!(!is_interpreter("/usr/bin/python3.10"));
        // Older ones are known by name (refused with a warning), others are not interpreters.
        assert_eq!(interpreter_version("/usr/bin/python3.10"), Some((3, 10)));
        assert_eq!(
            interpreter_version("/root/.pyenv/versions/3.6.15/lib/libpython3.6m.so.1.0"),
            Some((3, 6))
        );
        assert_eq!(interpreter_version("/usr/bin/python2.7"), Some((2, 7)));
        for other in [
            "/usr/bin/python3",
            "/usr/bin/python3.11-config",
            "/usr/lib/libpython3.so",
            "/usr/bin/python",
            "/usr/lib/libpythonista.so",
            "/usr/bin/python4.1",
            "",
        ] {
            assert_eq!(interpreter_version(other), None, "{other}");
            assert!(!is_interpreter(other));
        }
    }

    #[test]
    fn no_interpreter_in_this_process() {
        assert!(matches!(
            find(std::process::id(), &mut Files::default()),
            Ok(None)
        ));
    }
}
