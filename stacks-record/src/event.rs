//! The kernel→user event record (mirror of `struct stacks_event` in bpf/stacks.h).

/// Maximum frames per stack (`STACKS_MAX_DEPTH`).
pub const MAX_DEPTH: usize = 127;
/// Stack length meaning "not requested" (`STACKS_NOT_REQUESTED`).
pub const NOT_REQUESTED: i32 = -100_000;

pub const EV_PROFILE: u32 = 1;
pub const EV_EXEC: u32 = 2;
pub const EV_EXIT: u32 = 3;

/// Byte-for-byte the C struct; read with `read_unaligned` from ring buffer records.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawEvent {
    pub ts: u64,
    pub value: u64,
    pub kind: u32,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub kstack_len: i32,
    pub ustack_len: i32,
    pub comm: [u8; 16],
    pub thread: [u8; 16],
    pub kstack: [u64; MAX_DEPTH],
    pub ustack: [u64; MAX_DEPTH],
}

// The C side is 72 bytes of header and two 127-frame arrays.
const _: () = assert!(std::mem::size_of::<RawEvent>() == 72 + 2 * 8 * MAX_DEPTH);

impl RawEvent {
    /// Decode one ring buffer record; `None` if it is too short (never expected).
    pub fn from_bytes(data: &[u8]) -> Option<RawEvent> {
        if data.len() < std::mem::size_of::<RawEvent>() {
            return None;
        }
        // SAFETY: the length was checked and every bit pattern is a valid RawEvent.
        let ev = unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<RawEvent>()) };
        Some(ev)
    }

    /// A stack's frames, or `Err(errno)`, or `None` when not requested.
    pub fn stack(len: i32, frames: &[u64; MAX_DEPTH]) -> Option<Result<&[u64], i32>> {
        match len {
            NOT_REQUESTED => None,
            n if n < 0 => Some(Err(n)),
            n => Some(Ok(&frames[..(n as usize).min(MAX_DEPTH)])),
        }
    }

    pub fn kstack(&self) -> Option<Result<&[u64], i32>> {
        Self::stack(self.kstack_len, &self.kstack)
    }

    pub fn ustack(&self) -> Option<Result<&[u64], i32>> {
        Self::stack(self.ustack_len, &self.ustack)
    }
}

/// A NUL-padded kernel name as text (lossy for non-UTF-8 bytes).
pub fn cstr(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
