//! The CPython builds whose frames stacks-record reads, by `Py_Version` (`PY_VERSION_HEX`,
//! exported by CPython since 3.11), and the layout of what it reads in them: the thread state
//! of the thread holding the GIL, its frame chain, code objects, `str` and `bytes` objects.
//! Each version was verified on a build installed here by reading a live interpreter's own
//! structures with ctypes (docs/python-frames.md says how); a version not listed is not read.

/// Byte offsets of the fields read in one CPython version (x86_64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `_PyRuntime.gilstate.tstate_current`: the thread state of the thread holding the GIL.
    pub tstate_current: u64,
    /// `PyThreadState.native_thread_id`.
    pub native_tid: u16,
    /// `PyThreadState.cframe`.
    pub cframe: u16,
    /// `_PyCFrame.current_frame`.
    pub current_frame: u16,
    /// `_PyInterpreterFrame.f_code`, `.previous`, `.prev_instr`, `.is_entry`.
    pub code: u16,
    pub previous: u16,
    pub prev_instr: u16,
    pub is_entry: u16,
    /// `PyCodeObject.co_firstlineno` (int), `.co_filename`, `.co_qualname`, `.co_linetable`.
    pub co_firstlineno: u64,
    pub co_filename: u64,
    pub co_qualname: u64,
    pub co_linetable: u64,
    /// `PyCodeObject.co_code_adaptive`: the first instruction (2-byte code units).
    pub co_code: u64,
}

/// CPython 3.11's layout: verified on Debian's 3.11.2 and pyenv's 3.11.7.
const V3_11: Layout = Layout {
    tstate_current: 576,
    native_tid: 160,
    cframe: 56,
    current_frame: 8,
    code: 32,
    previous: 48,
    prev_instr: 56,
    is_entry: 68,
    co_firstlineno: 72,
    co_filename: 112,
    co_qualname: 128,
    co_linetable: 136,
    co_code: 184,
};

/// Versions verified, as `PY_VERSION_HEX` (major, minor, micro, release level `f`inal, serial).
const VERIFIED: &[(u32, &Layout)] = &[(0x030b_02f0, &V3_11), (0x030b_07f0, &V3_11)];

/// The layout of CPython `version` (`PY_VERSION_HEX`), when it was verified.
pub(crate) fn layout(version: u32) -> Option<&'static Layout> {
    VERIFIED
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, l)| *l)
}

/// `PY_VERSION_HEX` as people write it: `3.11.2`, `3.12.0b1`.
pub(crate) fn version_name(version: u32) -> String {
    let (major, minor, micro) = (version >> 24, (version >> 16) & 0xff, (version >> 8) & 0xff);
    let level = match (version >> 4) & 0xf {
        0xa => "a",
        0xb => "b",
        0xc => "rc",
        _ => "",
    };
    let serial = if level.is_empty() {
        String::new()
    } else {
        (version & 0xf).to_string()
    };
    format!("{major}.{minor}.{micro}{level}{serial}")
}

/// `str` objects (`PyASCIIObject`, `PyCompactUnicodeObject`), the same from 3.3 to 3.11:
/// length, the state bit field, and where a compact string's characters start.
pub(crate) mod unicode {
    pub(crate) const LENGTH: u64 = 16;
    pub(crate) const STATE: u64 = 32;
    /// Characters of a compact ASCII string.
    pub(crate) const ASCII_DATA: u64 = 48;
    /// Characters of another compact string (1, 2 or 4 bytes each).
    pub(crate) const COMPACT_DATA: u64 = 72;
}

/// `bytes` objects: their size (`ob_size`) and bytes (`ob_sval`).
pub(crate) mod bytes {
    pub(crate) const SIZE: u64 = 16;
    pub(crate) const DATA: u64 = 32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_versions_only() {
        assert_eq!(layout(0x030b_02f0), Some(&V3_11));
        assert_eq!(layout(0x030b_07f0), Some(&V3_11));
        assert_eq!(layout(0x030b_08f0), None, "3.11.8 was not verified");
        assert_eq!(layout(0x030c_00f0), None, "3.12 has another layout");
        assert_eq!(layout(0x030a_0cf0), None);
    }

    #[test]
    fn versions_are_named() {
        assert_eq!(version_name(0x030b_02f0), "3.11.2");
        assert_eq!(version_name(0x030c_00b1), "3.12.0b1");
        assert_eq!(version_name(0x030b_00c2), "3.11.0rc2");
    }

    /// The walked fields keep the order and alignment of CPython 3.11's structs: pointers
    /// 8-aligned, `is_entry` right after the 4-byte `stacktop` that follows `prev_instr`.
    #[test]
    fn layout_is_consistent() {
        let l = V3_11;
        for off in [l.cframe, l.current_frame, l.code, l.previous, l.prev_instr] {
            assert_eq!(off % 8, 0);
        }
        assert!(l.code < l.previous && l.previous < l.prev_instr);
        assert_eq!(l.is_entry, l.prev_instr + 8 + 4);
        assert_eq!(l.native_tid % 8, 0);
        assert!(l.co_filename < l.co_qualname && l.co_qualname < l.co_linetable);
        assert!(l.co_linetable < l.co_code);
    }
}
