//! The kernel→user event record and its decoding from variable-size ring buffer records,
//! through the types libbpf-cargo generates from `struct stacks_event` in bpf/stacks.h (the
//! skeleton's `types` module): the sizes and offsets used here are checked against them.

use std::mem::{offset_of, size_of};

use libbpf_rs::libbpf_sys::{BPF_STACK_BUILD_ID_IP, BPF_STACK_BUILD_ID_VALID, bpf_stack_build_id};

use crate::kernel::abi::types::{self, stacks_event, stacks_info};

pub(crate) use crate::kernel::abi::types::{
    stacks_block_op as BlockOp, stacks_event_kind as Kind, stacks_file_type as FileType,
    stacks_header as Header, stacks_net_direction as NetDirection, stacks_net_family as NetFamily,
    stacks_net_protocol as NetProtocol, stacks_rss_counter as RssCounter, stacks_state as State,
    stacks_vfs_call as VfsCall,
};

/// Maximum frames per stack (`STACKS_MAX_DEPTH`; checked below against the frames area).
pub(crate) const MAX_DEPTH: usize = 127;
/// Stack length meaning "not requested" (`STACKS_NOT_REQUESTED` of `enum stacks_stack_len`,
/// whose values the skeleton holds as `u32`s: cast back to the header's `i32`).
pub(crate) const NOT_REQUESTED: i32 = types::stacks_stack_len::STACKS_NOT_REQUESTED.0 as i32;
/// Stack length of a `state` record meaning "its thread's previous stacks"
/// (`STACKS_SAME_STACKS`).
pub(crate) const SAME_STACKS: i32 = types::stacks_stack_len::STACKS_SAME_STACKS.0 as i32;
/// User stack length of a `block` record whose `d` stack was sent apart
/// (`STACKS_USTACK_APART`), in a `STACKS_EV_UWINDOW` record.
pub(crate) const USTACK_APART: i32 = types::stacks_stack_len::STACKS_USTACK_APART.0 as i32;
// Below every -errno (the casts keep the sign).
const _: () = assert!(NOT_REQUESTED < -4096 && SAME_STACKS < -4096 && USTACK_APART < -4096);

/// Bytes per user frame (`struct bpf_stack_build_id`).
pub(crate) const UFRAME_SIZE: usize = size_of::<bpf_stack_build_id>();

/// Most bytes of user stack a `d` record carries (`STACKS_UWINDOW_MAX`).
pub(crate) const UWINDOW_MAX: usize = 24 * 1024;
const UREGS_SIZE: usize = size_of::<types::stacks_uregs>();
const _: () = assert!(
    size_of::<types::stacks_event_room>() == size_of::<stacks_event>() + UREGS_SIZE + UWINDOW_MAX
);

/// Bytes of a record before its frames: the header and the per-kind union.
pub(crate) const HEADER_SIZE: usize = offset_of!(stacks_event, frames);
/// Where the per-kind union starts.
pub(crate) const INFO_OFFSET: usize = offset_of!(stacks_event, info);

const _: () = assert!(offset_of!(stacks_event, hdr) == 0);
const _: () = assert!(INFO_OFFSET + size_of::<stacks_info>() <= HEADER_SIZE);
// The frames area has room for both stacks, MAX_DEPTH frames each.
const _: () = assert!(size_of::<stacks_event>() - HEADER_SIZE == MAX_DEPTH * (8 + UFRAME_SIZE));

/// A user frame as the kernel normalized it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelUserFrame {
    /// Build id (zero padded) and file offset.
    Resolved { build_id: [u8; 20], offset: u64 },
    /// Only the virtual address: the kernel could not resolve it at capture time.
    Ip(u64),
}

/// What the kernel side appended to a CPU sample's user frames for a Python process (bpf/stacks.h
/// `struct stacks_pyframe`, of statuses no kernel frame has): a frame, innermost first, or why
/// none or not all were read (`enum stacks_py_fail`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PyPart {
    /// The frame's code object, its last instruction started, and whether a C-level
    /// `_PyEval_EvalFrameDefault` call began with it.
    Frame {
        code: u64,
        /// The code object's `co_qualname` pointer at the sample.
        qualname: u64,
        prev_instr: u64,
        entry: bool,
    },
    Fail(u32),
    /// The asyncio task the thread runs (3.14+), and its `task_name` pointer at the event.
    Task {
        task: u64,
        name: u64,
    },
}

/// `STACKS_UFRAME_PYTHON`, `STACKS_UFRAME_PYTHON_FAIL`, `STACKS_PYFRAME_ENTRY`,
/// `STACKS_PYFRAME_TASK`.
const UFRAME_PYTHON: i32 = 0x7079;
const UFRAME_PYTHON_FAIL: i32 = 0x7066;
const PYFRAME_ENTRY: u32 = 1;
const PYFRAME_TASK: u32 = 2;

/// The per-kind structs of `union stacks_info`, each read by [`RawEvent::info`].
///
/// # Safety
/// Implemented only for the generated `#[repr(C)]` members of `union stacks_info`: integers,
/// integer arrays and u32-backed enum newtypes, for which every bit pattern is a valid value.
pub(crate) unsafe trait InfoMember: Copy {}

/// Declares `union stacks_info` members: `info_members!(stacks_profile)`, in the module of
/// the kind that reads them.
macro_rules! info_members {
    ($($t:ident),*) => {
        // SAFETY: members of `union stacks_info`, made of plain integers (see InfoMember).
        $(unsafe impl $crate::kernel::event::InfoMember for $crate::kernel::abi::types::$t {})*
    };
}
pub(crate) use info_members;

/// One decoded record: the header, the per-kind union and the frames that were sent.
pub(crate) struct RawEvent<'a> {
    pub h: Header,
    info: stacks_info,
    frames: &'a [u8],
}

/// Why a record could not be decoded (never expected from our own BPF side).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    Short(usize),
    Frames { want: usize, have: usize },
}

impl<'a> RawEvent<'a> {
    /// Decode one ring buffer record.
    pub(crate) fn from_bytes(data: &'a [u8]) -> Result<Self, DecodeError> {
        if data.len() < HEADER_SIZE {
            return Err(DecodeError::Short(data.len()));
        }
        // SAFETY: the length was checked; the header is at offset 0 and, like the union at
        // INFO_OFFSET, made of plain integers: every bit pattern is a valid value.
        let (h, info) = unsafe {
            (
                std::ptr::read_unaligned(data.as_ptr().cast::<Header>()),
                std::ptr::read_unaligned(data.as_ptr().add(INFO_OFFSET).cast::<stacks_info>()),
            )
        };
        let frames = &data[HEADER_SIZE..];
        let uframe = if h.uwindow > 0 { 8 } else { UFRAME_SIZE };
        let want = frame_count(h.kstack_len) * 8 + frame_count(h.ustack_len) * uframe;
        let want = want + h.uwindow as usize;
        if h.uwindow > 0 && (h.uwindow as usize) < UREGS_SIZE {
            return Err(DecodeError::Frames {
                want: want - h.uwindow as usize + UREGS_SIZE,
                have: frames.len(),
            });
        }
        if frames.len() < want {
            return Err(DecodeError::Frames {
                want,
                have: frames.len(),
            });
        }
        Ok(RawEvent { h, info, frames })
    }

    /// The per-kind fields as `T`, the member of `union stacks_info` for this record's kind.
    pub(crate) fn info<T: InfoMember>(&self) -> T {
        const { assert!(size_of::<T>() <= size_of::<stacks_info>()) };
        // SAFETY: T is a member of the union (InfoMember), no larger than it, and valid for
        // every bit pattern.
        unsafe { std::ptr::read_unaligned((&raw const self.info).cast::<T>()) }
    }

    /// The bytes after the header: the frames, or what a record without stacks carries there
    /// (an exit record's exit snapshot).
    pub(crate) fn after_header(&self) -> &'a [u8] {
        self.frames
    }

    fn frame_at(&self, i: usize) -> u64 {
        let b = &self.frames[i * 8..i * 8 + 8];
        u64::from_ne_bytes(b.try_into().expect("8 bytes"))
    }

    /// The kernel stack's frames, `Err(-errno)`, or `None` when not requested.
    pub(crate) fn kstack(&self) -> Option<Result<Vec<u64>, i32>> {
        match self.h.kstack_len {
            NOT_REQUESTED => None,
            n if n < 0 => Some(Err(n)),
            n => Some(Ok((0..frame_count(n)).map(|i| self.frame_at(i)).collect())),
        }
    }

    /// The user stack's frames as captured (`ustack_len` frames of `bpf_stack_build_id`), when
    /// it was requested and captured: two records with the same bytes have the same user stack.
    /// `None` for a `d` stack (its frames depend on the process's memory map).
    pub(crate) fn ustack_bytes(&self) -> Option<&'a [u8]> {
        if self.h.ustack_len <= 0 || self.h.uwindow > 0 {
            return None;
        }
        let base = frame_count(self.h.kstack_len) * 8;
        Some(&self.frames[base..base + frame_count(self.h.ustack_len) * UFRAME_SIZE])
    }

    /// The Python frames the kernel side appended: among the user frames, or, for a `d` stack,
    /// after its stack copy (none for another process).
    pub(crate) fn python(&self) -> Vec<PyPart> {
        if self.h.ustack_len < 0 || (self.h.ustack_len == 0 && self.h.uwindow == 0) {
            return Vec::new();
        }
        let base = frame_count(self.h.kstack_len) * 8;
        let (at, n) = if self.h.uwindow > 0 {
            let regs_at = base + frame_count(self.h.ustack_len) * 8;
            let Some(regs) = self.uregs(regs_at) else {
                return Vec::new();
            };
            // from_bytes checked that uwindow bytes follow the frames: the Python frames are
            // what is left of them after the registers and the copy.
            let end = regs_at + self.h.uwindow as usize;
            let at = regs_at + UREGS_SIZE + regs.copied as usize;
            let fit = end.saturating_sub(at) / UFRAME_SIZE;
            (at, (regs.py_frames as usize).min(fit))
        } else {
            (base, frame_count(self.h.ustack_len))
        };
        let word = |at: usize| {
            self.frames
                .get(at..at + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
        };
        let mut out = Vec::new();
        for i in 0..n {
            let at = at + i * UFRAME_SIZE;
            let Some(head) = self.frames.get(at..at + UFRAME_SIZE) else {
                break;
            };
            let status = i32::from_ne_bytes(head[..4].try_into().unwrap_or([0; 4]));
            let flags = u32::from_ne_bytes(head[4..8].try_into().unwrap_or([0; 4]));
            match status {
                UFRAME_PYTHON if flags & PYFRAME_TASK != 0 => out.push(PyPart::Task {
                    task: word(at + 8),
                    name: word(at + 16),
                }),
                UFRAME_PYTHON => out.push(PyPart::Frame {
                    code: word(at + 8),
                    qualname: word(at + 16),
                    prev_instr: word(at + 24),
                    entry: flags & PYFRAME_ENTRY != 0,
                }),
                UFRAME_PYTHON_FAIL => out.push(PyPart::Fail(flags)),
                _ => {}
            }
        }
        out
    }

    /// The `d` stack's registers at byte `at` of the frames, when they are there.
    fn uregs(&self, at: usize) -> Option<types::stacks_uregs> {
        let b = self.frames.get(at..at + UREGS_SIZE)?;
        // SAFETY: UREGS_SIZE bytes; stacks_uregs is plain integers.
        Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<types::stacks_uregs>()) })
    }

    /// A `d` stack's registers, stack copy and frame-pointer walk, when the record has one.
    pub(crate) fn dwarf(&self) -> Option<DwarfStack<'a>> {
        if self.h.uwindow == 0 {
            return None;
        }
        let base = frame_count(self.h.kstack_len) * 8;
        let n = frame_count(self.h.ustack_len);
        let fp = (0..n).map(|i| self.frame_at(base / 8 + i)).collect();
        let at = base + n * 8;
        // SAFETY: from_bytes checked that uwindow (≥ UREGS_SIZE) bytes follow the frames;
        // stacks_uregs is plain integers.
        let regs = unsafe {
            std::ptr::read_unaligned(self.frames[at..].as_ptr().cast::<types::stacks_uregs>())
        };
        let end = at + self.h.uwindow as usize;
        let stack_at = at + UREGS_SIZE;
        let copied = (regs.copied as usize).min(end - stack_at);
        Some(DwarfStack {
            ip: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
            fp,
            stack: &self.frames[stack_at..stack_at + copied],
        })
    }

    /// Whether the kernel resolved any of the user frames to a build id and file offset (it
    /// does for a process not in `maps_read`).
    pub(crate) fn ustack_resolved(&self) -> bool {
        if self.h.uwindow > 0 || self.h.ustack_len <= 0 {
            return false;
        }
        let base = frame_count(self.h.kstack_len) * 8;
        (0..frame_count(self.h.ustack_len)).any(|i| {
            let at = base + i * UFRAME_SIZE;
            self.frames.get(at..at + 4).is_some_and(|b| {
                u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) == BPF_STACK_BUILD_ID_VALID
            })
        })
    }

    /// The user stack (stored right after the kernel frames), empty frames skipped. For a `d`
    /// record, see [`Self::dwarf`] (its frames here are plain addresses).
    pub(crate) fn ustack(&self) -> Option<Result<Vec<KernelUserFrame>, i32>> {
        if self.h.uwindow > 0 && self.h.ustack_len >= 0 {
            let n = frame_count(self.h.ustack_len);
            let base = frame_count(self.h.kstack_len);
            return Some(Ok((0..n)
                .map(|i| KernelUserFrame::Ip(self.frame_at(base + i)))
                .collect()));
        }
        let n = match self.h.ustack_len {
            NOT_REQUESTED => return None,
            n if n < 0 => return Some(Err(n)),
            n => frame_count(n),
        };
        let base = frame_count(self.h.kstack_len) * 8;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let b = &self.frames[base + i * UFRAME_SIZE..base + (i + 1) * UFRAME_SIZE];
            // SAFETY: from_bytes checked that the frames hold ustack_len user frames, so `b`
            // has UFRAME_SIZE bytes; bpf_stack_build_id is plain integers.
            let f = unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<bpf_stack_build_id>()) };
            // SAFETY: both members of the union are the same u64.
            let value = unsafe { f.__bindgen_anon_1.offset };
            match u32::try_from(f.status) {
                Ok(BPF_STACK_BUILD_ID_VALID) => out.push(KernelUserFrame::Resolved {
                    build_id: f.build_id,
                    offset: value,
                }),
                Ok(BPF_STACK_BUILD_ID_IP) => out.push(KernelUserFrame::Ip(value)),
                _ => {}
            }
        }
        Some(Ok(out))
    }
}

/// What a `d` record carries to unwind its user stack.
#[derive(Debug)]
pub(crate) struct DwarfStack<'a> {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The frame-pointer walk, innermost first (its first entry is `ip`).
    pub fp: Vec<u64>,
    /// The stack's bytes from `sp` up.
    pub stack: &'a [u8],
}

/// Frames a stack length stands for (0 for errors and "not requested").
pub(crate) fn frame_count(len: i32) -> usize {
    if len > 0 {
        (len as usize).min(MAX_DEPTH)
    } else {
        0
    }
}

/// The bytes of a kernel `char` array (C's `char` is signed on the BPF target).
pub(crate) fn c_bytes<const N: usize>(chars: &[i8; N]) -> [u8; N] {
    chars.map(|c| c as u8)
}

/// A NUL-padded kernel name as text (lossy for non-UTF-8 bytes), borrowed when it is UTF-8.
pub(crate) fn cstr(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(klen: i32, ulen: i32, kframes: &[u64], uframes: &[(i32, u64)]) -> Vec<u8> {
        let mut h = Header {
            kind: Kind::STACKS_EV_PROFILE,
            kstack_len: klen,
            ustack_len: ulen,
            ..Header::default()
        };
        h.comm[..3].copy_from_slice(&[b'a' as i8, b'p' as i8, b'p' as i8]);
        let mut out = vec![0u8; HEADER_SIZE];
        // SAFETY: out has room for one Header (it starts the record).
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
        assert_eq!(cstr(&c_bytes(&e.h.comm)), "app");
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

    /// A `d` record: one kernel frame, two frame-pointer addresses, the registers, a stack copy
    /// of `copied` bytes and `py` Python frames (`py_count` announced).
    fn dwarf_record(copied: usize, py: &[(i32, u32, u64)], py_count: u32) -> Vec<u8> {
        let mut out = record(1, 2, &[5], &[]);
        out.extend_from_slice(&0x10u64.to_ne_bytes());
        out.extend_from_slice(&0x20u64.to_ne_bytes());
        let regs = types::stacks_uregs {
            ip: 0x10,
            sp: 0x1000,
            bp: 0,
            copied: copied as u32,
            py_frames: py_count,
        };
        // SAFETY: viewing a plain #[repr(C)] struct of integers as its bytes.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts((&raw const regs).cast::<u8>(), UREGS_SIZE)
        });
        out.extend(std::iter::repeat_n(0xabu8, copied));
        for (status, flags, code) in py {
            out.extend_from_slice(&status.to_ne_bytes());
            out.extend_from_slice(&flags.to_ne_bytes());
            for v in [*code, code + 1, code + 2] {
                out.extend_from_slice(&v.to_ne_bytes());
            }
        }
        let uwindow = (out.len() - HEADER_SIZE - 8 - 16) as u32;
        let at = offset_of!(Header, uwindow);
        out[at..at + 4].copy_from_slice(&uwindow.to_ne_bytes());
        out
    }

    #[test]
    fn python_frames_after_a_d_stack_copy() {
        let frames = [
            (UFRAME_PYTHON, PYFRAME_ENTRY, 100),
            (UFRAME_PYTHON_FAIL, 4, 0),
        ];
        let data = dwarf_record(24, &frames, 2);
        let e = RawEvent::from_bytes(&data).unwrap();
        let d = e.dwarf().expect("a d stack");
        assert_eq!(
            (d.fp.as_slice(), d.stack.len()),
            ([0x10, 0x20].as_slice(), 24)
        );
        assert_eq!(
            e.python(),
            [
                PyPart::Frame {
                    code: 100,
                    qualname: 101,
                    prev_instr: 102,
                    entry: true
                },
                PyPart::Fail(4)
            ]
        );
        // More announced than sent: only those sent are read, none past the record.
        let data = dwarf_record(8, &frames[..1], 60);
        let e = RawEvent::from_bytes(&data).unwrap();
        assert_eq!(e.python().len(), 1);
        // None announced: the copy's bytes are not read as frames.
        let data = dwarf_record(64, &[], 0);
        assert!(RawEvent::from_bytes(&data).unwrap().python().is_empty());
    }
}
