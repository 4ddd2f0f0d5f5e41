//! Finding CPython in a process: the interpreter's file among its mappings (`python3.11`, or
//! `libpython3.11.so*` when the executable links it), that file's symbols `_PyRuntime`,
//! `Py_Version` and `_PyEval_EvalFrameDefault` (ELF symbol tables), where it is loaded, and the
//! version read from the process.

use std::ops::Range;

use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSymbol};

use super::code::read_mem;
use super::offsets::{self, Layout};
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
    #[error("{file}: CPython {version} is not supported (verified: 3.11.2, 3.11.7)")]
    Unsupported { file: String, version: String },
    #[error("reading the interpreter's version: {0}")]
    Read(#[from] super::code::ReadError),
}

/// A CPython interpreter found in a process.
#[derive(Debug, Clone)]
pub(crate) struct Interpreter {
    /// The file holding the interpreter, as the process maps it.
    pub file: String,
    pub layout: &'static Layout,
    /// Address of `_PyRuntime.gilstate.tstate_current` in the process.
    pub tstate_current: u64,
    /// The file's build id (lowercase hex), and the file offsets of `_PyEval_EvalFrameDefault`.
    pub build_id: Option<String>,
    pub eval: Range<u64>,
}

/// Whether a mapped file's name is CPython 3.11's executable or library.
fn is_interpreter(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "python3.11" || name.starts_with("libpython3.11.so")
}

/// The CPython interpreter in process `pid`, `Ok(None)` when it runs none.
pub(crate) fn find(pid: u32) -> Result<Option<Interpreter>, FindError> {
    let text = maps::read(pid).map_err(|e| FindError::Io(format!("/proc/{pid}/maps"), e))?;
    let all: Vec<maps::Mapping<'_>> = maps::parse(&text).collect();
    // The library when there is one: the executable then only calls into it.
    let file = all
        .iter()
        .filter(|m| is_interpreter(m.path))
        .max_by_key(|m| m.path.contains("libpython"))
        .map(|m| m.path.to_string());
    let Some(file) = file else {
        return Ok(None);
    };
    let Some(base) = all.iter().find(|m| m.path == file && m.offset == 0) else {
        return Err(FindError::NotMapped(file));
    };
    let bytes = std::fs::read(format!("/proc/{pid}/root{file}"))
        .map_err(|e| FindError::Io(file.clone(), e))?;
    let elf = ElfFile64::<object::Endianness>::parse(&*bytes)
        .map_err(|_| FindError::NotElf(file.clone()))?;
    let endian = elf.endian();
    let loads: Vec<_> = elf
        .elf_program_headers()
        .iter()
        .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
        .map(|p| (p.p_vaddr(endian), p.p_offset(endian), p.p_filesz(endian)))
        .collect();
    // The segment mapped from the file's start gives the load bias.
    let Some(&(first_vaddr, _, _)) = loads.iter().find(|(_, off, _)| *off == 0) else {
        return Err(FindError::NotMapped(file));
    };
    let bias = base.range.start.wrapping_sub(first_vaddr);
    let symbol = |name: &'static str| -> Result<(u64, u64), FindError> {
        elf.dynamic_symbols()
            .chain(elf.symbols())
            .find(|s| s.name() == Ok(name))
            .map(|s| (s.address(), s.size()))
            .ok_or_else(|| FindError::NoSymbol(file.clone(), name))
    };
    let (version_at, _) = symbol("Py_Version")?;
    let raw = read_mem(pid, bias.wrapping_add(version_at), 4)?;
    let version = u32::from_ne_bytes(raw[..4].try_into().unwrap_or([0; 4]));
    let Some(layout) = offsets::layout(version) else {
        return Err(FindError::Unsupported {
            file,
            version: offsets::version_name(version),
        });
    };
    let (runtime, _) = symbol("_PyRuntime")?;
    let (eval, eval_size) = symbol("_PyEval_EvalFrameDefault")?;
    let eval_off = loads
        .iter()
        .find(|(vaddr, _, filesz)| (*vaddr..vaddr + filesz).contains(&eval))
        .map(|(vaddr, off, _)| eval - vaddr + off)
        .ok_or_else(|| FindError::NotMapped(file.clone()))?;
    let build_id = elf
        .build_id()
        .ok()
        .flatten()
        .map(stacks_stream::hex::encode);
    Ok(Some(Interpreter {
        file,
        layout,
        tstate_current: bias.wrapping_add(runtime) + layout.tstate_current,
        build_id,
        eval: eval_off..eval_off + eval_size.max(1),
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
        assert!(!is_interpreter("/usr/bin/python3.12"));
        assert!(!is_interpreter("/usr/lib/libpython3.1.so"));
        assert!(!is_interpreter(""));
    }

    #[test]
    fn no_interpreter_in_this_process() {
        assert!(matches!(find(std::process::id()), Ok(None)));
    }
}
