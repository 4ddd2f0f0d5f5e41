//! The kernel→user event record (mirror of `struct stacks_event` in bpf/stacks.h) and its
//! decoding from variable-size ring buffer records.

/// Maximum frames per stack (`STACKS_MAX_DEPTH`).
pub const MAX_DEPTH: usize = 127;
/// Stack length meaning "not requested" (`STACKS_NOT_REQUESTED`).
pub const NOT_REQUESTED: i32 = -100_000;

pub const EV_PROFILE: u32 = 1;
pub const EV_EXEC: u32 = 2;
pub const EV_EXIT: u32 = 3;
pub const EV_FORK: u32 = 4;
pub const EV_SWITCH: u32 = 5;
pub const EV_SWITCH_FOLDED: u32 = 6;
pub const EV_RSS: u32 = 7;
pub const EV_BLOCK: u32 = 8;
pub const EV_VFS: u32 = 9;
pub const EV_NET: u32 = 10;

/// Bytes per user frame (`struct bpf_stack_build_id`).
pub const UFRAME_SIZE: usize = 32;

/// A user frame as the kernel normalized it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelUserFrame {
    /// Build id (zero padded) and file offset.
    Resolved { build_id: [u8; 20], offset: u64 },
    /// Only the virtual address: the kernel could not resolve it at capture time.
    Ip(u64),
}

/// Length of `u.str`.
pub const STR_LEN: usize = 128;

/// The fixed part of a record, byte-for-byte the C struct up to `frames`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Header {
    pub ts: u64,
    pub value: u64,
    pub duration: u64,
    pub aux: u64,
    pub kind: u32,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub kstack_len: i32,
    pub ustack_len: i32,
    pub arg0: i32,
    pub arg1: i32,
    pub count: u32,
    pub flags: u32,
    pub comm: [u8; 16],
    pub thread: [u8; 16],
    /// `u.str` or `u.net` (see [`NetAddrs`]).
    pub payload: [u8; STR_LEN],
}

/// `struct stacks_net_addrs`, read from the start of the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetAddrs {
    pub local: [u8; 16],
    pub remote: [u8; 16],
    pub local_port: u16,
    pub remote_port: u16,
}

/// The C header: 104 bytes of fields and 128 of payload; frames follow.
pub const HEADER_SIZE: usize = 232;
const _: () = assert!(std::mem::size_of::<Header>() == HEADER_SIZE);

/// One decoded record: the header and the frames that were sent.
pub struct RawEvent<'a> {
    pub h: Header,
    frames: &'a [u8],
}

/// Why a record could not be decoded (never expected from our own BPF side).
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    Short(usize),
    Frames { want: usize, have: usize },
}

impl<'a> RawEvent<'a> {
    /// Decode one ring buffer record.
    pub fn from_bytes(data: &'a [u8]) -> Result<Self, DecodeError> {
        if data.len() < HEADER_SIZE {
            return Err(DecodeError::Short(data.len()));
        }
        // SAFETY: the length was checked and every bit pattern is a valid Header.
        let h = unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<Header>()) };
        let frames = &data[HEADER_SIZE..];
        let want = frame_count(h.kstack_len) * 8 + frame_count(h.ustack_len) * UFRAME_SIZE;
        if frames.len() < want {
            return Err(DecodeError::Frames {
                want,
                have: frames.len(),
            });
        }
        Ok(RawEvent { h, frames })
    }

    fn frame_at(&self, i: usize) -> u64 {
        let b = &self.frames[i * 8..i * 8 + 8];
        u64::from_ne_bytes(b.try_into().expect("8 bytes"))
    }

    /// The kernel stack's frames, `Err(-errno)`, or `None` when not requested.
    pub fn kstack(&self) -> Option<Result<Vec<u64>, i32>> {
        match self.h.kstack_len {
            NOT_REQUESTED => None,
            n if n < 0 => Some(Err(n)),
            n => Some(Ok((0..frame_count(n)).map(|i| self.frame_at(i)).collect())),
        }
    }

    /// The user stack (stored right after the kernel frames), empty frames skipped.
    pub fn ustack(&self) -> Option<Result<Vec<KernelUserFrame>, i32>> {
        let n = match self.h.ustack_len {
            NOT_REQUESTED => return None,
            n if n < 0 => return Some(Err(n)),
            n => frame_count(n),
        };
        let base = frame_count(self.h.kstack_len) * 8;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let b = &self.frames[base + i * UFRAME_SIZE..base + (i + 1) * UFRAME_SIZE];
            let status = i32::from_ne_bytes(b[0..4].try_into().expect("4 bytes"));
            let value = u64::from_ne_bytes(b[24..32].try_into().expect("8 bytes"));
            match status {
                1 => {
                    let mut build_id = [0u8; 20];
                    build_id.copy_from_slice(&b[4..24]);
                    out.push(KernelUserFrame::Resolved {
                        build_id,
                        offset: value,
                    });
                }
                2 => out.push(KernelUserFrame::Ip(value)),
                _ => {}
            }
        }
        Some(Ok(out))
    }

    /// The payload as a NUL-terminated string.
    pub fn str(&self) -> String {
        cstr(&self.h.payload)
    }

    /// The payload as socket addresses.
    pub fn net(&self) -> NetAddrs {
        let p = &self.h.payload;
        let mut local = [0u8; 16];
        let mut remote = [0u8; 16];
        local.copy_from_slice(&p[0..16]);
        remote.copy_from_slice(&p[16..32]);
        NetAddrs {
            local,
            remote,
            local_port: u16::from_ne_bytes([p[32], p[33]]),
            remote_port: u16::from_ne_bytes([p[34], p[35]]),
        }
    }
}

/// Frames a stack length stands for (0 for errors and "not requested").
pub fn frame_count(len: i32) -> usize {
    if len > 0 {
        (len as usize).min(MAX_DEPTH)
    } else {
        0
    }
}

/// A NUL-padded kernel name as text (lossy for non-UTF-8 bytes).
pub fn cstr(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(klen: i32, ulen: i32, kframes: &[u64], uframes: &[(i32, u64)]) -> Vec<u8> {
        let mut h: Header = unsafe { std::mem::zeroed() };
        h.kind = EV_PROFILE;
        h.kstack_len = klen;
        h.ustack_len = ulen;
        h.comm[..3].copy_from_slice(b"app");
        let mut out = vec![0u8; HEADER_SIZE];
        // SAFETY: out has room for exactly one Header.
        unsafe { std::ptr::write_unaligned(out.as_mut_ptr().cast::<Header>(), h) };
        for f in kframes {
            out.extend_from_slice(&f.to_ne_bytes());
        }
        for (status, v) in uframes {
            out.extend_from_slice(&status.to_ne_bytes());
            out.extend_from_slice(&[7u8; 20]);
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out
    }

    #[test]
    fn kernel_then_user_frames() {
        let data = record(2, 3, &[1, 2], &[(1, 10), (2, 11), (0, 0)]);
        let e = RawEvent::from_bytes(&data).unwrap();
        assert_eq!(e.kstack(), Some(Ok(vec![1, 2])));
        assert_eq!(
            e.ustack(),
            Some(Ok(vec![
                KernelUserFrame::Resolved {
                    build_id: [7; 20],
                    offset: 10
                },
                KernelUserFrame::Ip(11)
            ]))
        );
        assert_eq!(cstr(&e.h.comm), "app");
    }

    #[test]
    fn errors_and_not_requested_take_no_frames() {
        let data = record(-14, 1, &[], &[(2, 7)]);
        let e = RawEvent::from_bytes(&data).unwrap();
        assert_eq!(e.kstack(), Some(Err(-14)));
        assert_eq!(e.ustack(), Some(Ok(vec![KernelUserFrame::Ip(7)])));
        let data = record(NOT_REQUESTED, NOT_REQUESTED, &[], &[]);
        let e = RawEvent::from_bytes(&data).unwrap();
        assert_eq!(e.kstack(), None);
        assert_eq!(e.ustack(), None);
    }

    #[test]
    fn short_records_are_rejected() {
        assert_eq!(
            RawEvent::from_bytes(&[0u8; 10]).err(),
            Some(DecodeError::Short(10))
        );
        let data = record(2, 0, &[1], &[]);
        assert!(matches!(
            RawEvent::from_bytes(&data),
            Err(DecodeError::Frames { want: 16, have: 8 })
        ));
        let data = record(0, 2, &[], &[(1, 1)]);
        assert!(matches!(
            RawEvent::from_bytes(&data),
            Err(DecodeError::Frames { want: 64, have: 32 })
        ));
    }
}
