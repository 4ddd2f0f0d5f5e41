//! The CPython builds whose frames stacks-record reads, by `Py_Version` (`PY_VERSION_HEX`,
//! exported by CPython since 3.11), and the layout of what it reads in them: where each
//! thread's own thread state is kept (the pthread key `_PyRuntime.autoTSSkey`), its frame chain,
//! code objects, `str` and `bytes` objects. 3.11 and 3.12 come from tables, each verified on the
//! builds installed here by reading a live interpreter's own structures with ctypes
//! (`scripts/python_offsets.py`, docs/python-frames.md); 3.13 from the `_Py_DebugOffsets` the
//! interpreter carries at the start of `_PyRuntime` ([`from_debug_offsets`]). Other versions
//! are not read.

/// How a C-level call of the interpreter's eval loop shows in its frame chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// 3.11: `_PyInterpreterFrame.is_entry` (at this offset) is set in the call's first frame.
    IsEntry(u16),
    /// 3.12+: the call pushes a shim frame whose `_PyInterpreterFrame.owner` (at this offset)
    /// is `FRAME_OWNED_BY_CSTACK`, outer to its first frame.
    Owner(u16),
}

/// Byte offsets of the fields read in one CPython version (x86_64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `_PyRuntime.autoTSSkey` (a `Py_tss_t`: the pthread key of each thread's state).
    pub tss_key: u64,
    /// `PyThreadState.native_thread_id`.
    pub native_tid: u16,
    /// `PyThreadState.cframe` (3.11, 3.12); `None`: the current frame is in the thread state.
    pub cframe: Option<u16>,
    /// `_PyCFrame.current_frame`, or `PyThreadState.current_frame` (3.13+).
    pub current_frame: u16,
    /// `_PyInterpreterFrame.f_code` (`f_executable`), `.previous`, `.prev_instr` (`instr_ptr`).
    pub code: u16,
    pub previous: u16,
    pub prev_instr: u16,
    pub entry: Entry,
    /// `PyCodeObject.co_firstlineno` (int), `.co_filename`, `.co_qualname`, `.co_linetable`.
    pub co_firstlineno: u64,
    pub co_filename: u64,
    pub co_qualname: u64,
    pub co_linetable: u64,
    /// `PyCodeObject.co_code_adaptive`: the first instruction (2-byte code units).
    pub co_code: u64,
    /// Where a compact ASCII `str`'s characters start (`sizeof(PyASCIIObject)`), and another
    /// compact `str`'s (`sizeof(PyCompactUnicodeObject)`).
    pub ascii_data: u64,
    pub compact_data: u64,
}

/// CPython 3.11's layout: verified on Debian's 3.11.2 and pyenv's 3.11.7.
const V3_11: Layout = Layout {
    tss_key: 592,
    native_tid: 160,
    cframe: Some(56),
    current_frame: 8,
    code: 32,
    previous: 48,
    prev_instr: 56,
    entry: Entry::IsEntry(68),
    co_firstlineno: 72,
    co_filename: 112,
    co_qualname: 128,
    co_linetable: 136,
    co_code: 184,
    ascii_data: 48,
    compact_data: 72,
};

/// CPython 3.12's layout: verified on pyenv's 3.12.1.
const V3_12: Layout = Layout {
    tss_key: 1544,
    native_tid: 144,
    cframe: Some(56),
    current_frame: 0,
    code: 0,
    previous: 8,
    prev_instr: 56,
    entry: Entry::Owner(70),
    co_firstlineno: 68,
    co_filename: 112,
    co_qualname: 128,
    co_linetable: 136,
    co_code: 192,
    ascii_data: 40,
    compact_data: 56,
};

/// Versions verified, as `PY_VERSION_HEX` (major, minor, micro, release level `f`inal, serial).
const VERIFIED: &[(u32, &Layout)] = &[
    (0x030b_02f0, &V3_11),
    (0x030b_07f0, &V3_11),
    (0x030c_01f0, &V3_12),
];

/// `_PyRuntime.autoTSSkey` of 3.13 (not among its debug offsets): verified on pyenv's 3.13.0.
const V3_13_TSS_KEY: u64 = 2160;

/// The layout of CPython `version` (`PY_VERSION_HEX`), when it was verified.
pub(crate) fn layout(version: u32) -> Option<Layout> {
    VERIFIED
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, l)| **l)
}

/// Whether `version` carries `_Py_DebugOffsets` this reader knows (3.13.x).
pub(crate) fn has_debug_offsets(version: u32) -> bool {
    version >> 16 == 0x030d
}

/// Bytes of 3.13's `_Py_DebugOffsets` read (up to its `unicode_object` fields).
pub(crate) const DEBUG_OFFSETS_SIZE: usize = 568;

/// Why a process's `_Py_DebugOffsets` are not used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum DebugOffsetsError {
    #[error("_PyRuntime does not start with the debug offsets' cookie")]
    Cookie,
    #[error("debug offsets of version {0:#x}, interpreter {1:#x}")]
    Version(u64, u32),
    #[error("a free-threaded build, whose frames are not read")]
    FreeThreaded,
    #[error("debug offset {0} out of range: {1}")]
    Range(&'static str, u64),
}

/// The layout of a CPython 3.13 whose `_PyRuntime` starts with `raw` (its `_Py_DebugOffsets`,
/// [`DEBUG_OFFSETS_SIZE`] bytes), `version` being its `Py_Version`.
pub(crate) fn from_debug_offsets(raw: &[u8], version: u32) -> Result<Layout, DebugOffsetsError> {
    let word = |at: usize| {
        raw.get(at..at + 8).map_or(u64::MAX, |b| {
            u64::from_ne_bytes(b.try_into().unwrap_or([0xff; 8]))
        })
    };
    if raw.get(..8) != Some(b"xdebugpy".as_slice()) {
        return Err(DebugOffsetsError::Cookie);
    }
    if word(8) >> 16 != u64::from(version >> 16) {
        return Err(DebugOffsetsError::Version(word(8), version));
    }
    if word(16) != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    // Each field's place in the struct (bytes), for 3.13's `_Py_DebugOffsets`: cookie,
    // version, free_threaded, runtime_state (3 words), interpreter_state (13), thread_state
    // (from 152), interpreter_frame (224), code_object (272), … bytes (512), unicode (536).
    let small = |name: &'static str, at: usize| -> Result<u16, DebugOffsetsError> {
        let v = word(at);
        u16::try_from(v)
            .ok()
            .filter(|v| *v < 1024)
            .ok_or(DebugOffsetsError::Range(name, v))
    };
    let large = |name, at| small(name, at).map(u64::from);
    Ok(Layout {
        tss_key: V3_13_TSS_KEY,
        native_tid: small("thread_state.native_thread_id", 200)?,
        cframe: None,
        current_frame: small("thread_state.current_frame", 184)?,
        code: small("interpreter_frame.executable", 240)?,
        previous: small("interpreter_frame.previous", 232)?,
        prev_instr: small("interpreter_frame.instr_ptr", 248)?,
        entry: Entry::Owner(small("interpreter_frame.owner", 264)?),
        co_firstlineno: large("code_object.firstlineno", 312)?,
        co_filename: large("code_object.filename", 280)?,
        co_qualname: large("code_object.qualname", 296)?,
        co_linetable: large("code_object.linetable", 304)?,
        co_code: large("code_object.co_code_adaptive", 344)?,
        ascii_data: large("unicode_object.asciiobject_size", 560)?,
        // PyCompactUnicodeObject: PyASCIIObject, then utf8_length and utf8.
        compact_data: large("unicode_object.asciiobject_size", 560)? + 16,
    })
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

/// `str` objects (`PyASCIIObject`): length and the state bit field, the same from 3.3 to 3.13
/// (where the characters start is the layout's).
pub(crate) mod unicode {
    pub(crate) const LENGTH: u64 = 16;
    pub(crate) const STATE: u64 = 32;
}

/// `bytes` objects: their size (`ob_size`) and bytes (`ob_sval`).
pub(crate) mod bytes {
    pub(crate) const SIZE: u64 = 16;
    pub(crate) const DATA: u64 = 32;
}

#[cfg(test)]
#[path = "offsets_tests.rs"]
mod tests;
