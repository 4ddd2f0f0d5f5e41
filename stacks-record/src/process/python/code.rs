//! Reading a live CPython process's memory: its code objects (qualified name, file, first line
//! and location table), with the `str` and `bytes` objects they point to.

use std::rc::Rc;

use super::linetable;
use super::offsets::Layout;

/// Why a code object could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("process memory unreadable at {addr:#x}: {source}")]
    Memory { addr: u64, source: std::io::Error },
    #[error("object at {0:#x} is not a string this reader knows")]
    NotAString(u64),
    #[error("object at {0:#x} is too large ({1} units)")]
    TooLarge(u64, u64),
    #[error("object at {0:#x} freed and replaced before it was read")]
    Replaced(u64),
}

/// Longest name or file read (characters); longest location table (bytes).
const MAX_STR: u64 = 4096;
const MAX_TABLE: u64 = 1 << 20;

/// `len` bytes of process `pid`'s memory at `addr`.
pub(crate) fn read_mem(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, ReadError> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: one local buffer of `len` bytes we own; the remote range is only read by the
    // kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(ReadError::Memory {
            addr,
            source: std::io::Error::last_os_error(),
        });
    }
    if n as usize != len {
        return Err(ReadError::Memory {
            addr,
            source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        });
    }
    Ok(buf)
}

fn u64_at(b: &[u8], at: u64) -> u64 {
    let at = at as usize;
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
}

pub(crate) fn read_u64(pid: u32, addr: u64) -> Result<u64, ReadError> {
    Ok(u64_at(&read_mem(pid, addr, 8)?, 0))
}

/// A code object's name, file, first line and location table.
#[derive(Debug)]
pub(crate) struct Code {
    /// Its `co_qualname` pointer (the kernel side reads it with each frame).
    pub qualname_at: u64,
    pub qualname: Rc<str>,
    pub filename: Rc<str>,
    first_line: i32,
    linetable: Vec<u8>,
    /// Address of the first instruction.
    first_instr: u64,
}

impl Code {
    /// Read the code object at `addr` of process `pid`.
    pub(crate) fn read(pid: u32, addr: u64, l: &Layout) -> Result<Code, ReadError> {
        let head = read_mem(pid, addr, l.co_code as usize)?;
        let at = l.co_firstlineno as usize;
        let first_line = head
            .get(at..at + 4)
            .map_or(0, |s| i32::from_ne_bytes(s.try_into().unwrap_or([0; 4])));
        let table = u64_at(&head, l.co_linetable);
        Ok(Code {
            qualname_at: u64_at(&head, l.co_qualname),
            qualname: read_str(pid, u64_at(&head, l.co_qualname), l)?.into(),
            filename: read_str(pid, u64_at(&head, l.co_filename), l)?.into(),
            first_line,
            linetable: read_bytes(pid, table, l)?,
            first_instr: addr.wrapping_add(l.co_code),
        })
    }

    /// Bytes this object keeps (what [`super::CODE_BYTES_KEPT`] counts).
    pub(crate) fn size(&self) -> usize {
        size_of::<Code>() + self.qualname.len() + self.filename.len() + self.linetable.len()
    }

    /// The line of the instruction a frame last started (`prev_instr`): before the first
    /// instruction (a frame just entered), the function's first line.
    pub(crate) fn line(&self, prev_instr: u64) -> Option<u32> {
        if prev_instr < self.first_instr {
            return u32::try_from(self.first_line).ok();
        }
        let index = u32::try_from((prev_instr - self.first_instr) / 2).ok()?;
        linetable::line_at(&self.linetable, self.first_line, index)
    }
}

/// A compact `str` object's text (what code objects' names and files are).
pub(crate) fn read_str(pid: u32, addr: u64, l: &Layout) -> Result<String, ReadError> {
    let head = read_mem(pid, addr, l.str_state.max(l.str_length) as usize + 8)?;
    let len = u64_at(&head, l.str_length);
    let state = u64_at(&head, l.str_state) as u32;
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
    if compact == 0 || !matches!(kind, 1 | 2 | 4) {
        return Err(ReadError::NotAString(addr));
    }
    if len > MAX_STR {
        return Err(ReadError::TooLarge(addr, len));
    }
    let data = if ascii == 1 {
        l.ascii_data
    } else {
        l.compact_data
    };
    let raw = read_mem(
        pid,
        addr.wrapping_add(data),
        (len * u64::from(kind)) as usize,
    )?;
    let text = match kind {
        1 => raw.iter().map(|&b| char::from(b)).collect(),
        2 => raw
            .chunks_exact(2)
            .map(|c| char::from_u32(u32::from(u16::from_ne_bytes([c[0], c[1]]))))
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
        _ => raw
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect(),
    };
    Ok(text)
}

/// A `bytes` object's contents.
fn read_bytes(pid: u32, addr: u64, l: &Layout) -> Result<Vec<u8>, ReadError> {
    let len = read_u64(pid, addr.wrapping_add(l.bytes_size))?;
    if len > MAX_TABLE {
        return Err(ReadError::TooLarge(addr, len));
    }
    read_mem(pid, addr.wrapping_add(l.bytes_data), len as usize)
}
