//! The CPython builds whose frames stacks-record reads, by `Py_Version` (`PY_VERSION_HEX`,
//! exported by CPython since 3.11), and the layout of what it reads in them: how each thread's
//! own thread state is found, its frame chain, code objects, `str` and `bytes` objects. 3.11 and
//! 3.12 come from tables, each verified on the builds installed here by reading a live
//! interpreter's own structures with ctypes (`scripts/python_offsets.py`,
//! docs/python-frames.md); 3.13 and later from the `_Py_DebugOffsets` the interpreter carries at
//! the start of `_PyRuntime` ([`from_debug_offsets`]), whose own layout — the order of its
//! fields, which changes between minors — is described once per minor ([`TABLES`]). Other
//! versions are not read.

/// How a C-level call of the interpreter's eval loop shows in its frame chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// 3.11: `_PyInterpreterFrame.is_entry` (at this offset) is set in the call's first frame.
    IsEntry(u16),
    /// 3.12+: the call pushes a shim frame whose `_PyInterpreterFrame.owner` (at this offset)
    /// is `FRAME_OWNED_BY_CSTACK`, outer to its first frame.
    Owner(u16),
}

/// How a thread's own `PyThreadState` is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tstate {
    /// Under the pthread key `_PyRuntime.autoTSSkey` (a `Py_tss_t`), at this offset (3.11, 3.12:
    /// whether or not the thread holds the GIL).
    Key(u64),
    /// In the main interpreter's list of thread states, by native thread id (3.13+, whose
    /// debug offsets name the list; 3.15 has no `autoTSSkey`): `_PyRuntime.interpreters.head`,
    /// `PyInterpreterState.threads.head` and `PyThreadState.next`.
    List {
        interpreters_head: u64,
        threads_head: u16,
        next: u16,
    },
}

/// Byte offsets of the fields read in one CPython version (x86_64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub tstate: Tstate,
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
    /// `str`: its length and its state bit field; `bytes`: its size (`ob_size`) and bytes
    /// (`ob_sval`).
    pub str_length: u64,
    pub str_state: u64,
    pub bytes_size: u64,
    pub bytes_data: u64,
    /// For asyncio tasks (3.14+; 0 in the older tables): `PyObject.ob_type`,
    /// `PyTypeObject.tp_flags`, `int`'s `lv_tag` and digits, a set's `mask` and `table`.
    pub ob_type: u64,
    pub tp_flags: u64,
    pub long_tag: u64,
    pub long_digits: u64,
    pub set_mask: u64,
    pub set_table: u64,
}

/// CPython 3.11's layout: verified on Debian's 3.11.2 and pyenv's 3.11.7.
const V3_11: Layout = Layout {
    tstate: Tstate::Key(592),
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
    str_length: 16,
    str_state: 32,
    bytes_size: 16,
    bytes_data: 32,
    ob_type: 0,
    tp_flags: 0,
    long_tag: 0,
    long_digits: 0,
    set_mask: 0,
    set_table: 0,
};

/// CPython 3.12's layout: verified on pyenv's 3.12.1.
const V3_12: Layout = Layout {
    tstate: Tstate::Key(1544),
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
    str_length: 16,
    str_state: 32,
    bytes_size: 16,
    bytes_data: 32,
    ob_type: 0,
    tp_flags: 0,
    long_tag: 0,
    long_digits: 0,
    set_mask: 0,
    set_table: 0,
};

/// Versions verified, as `PY_VERSION_HEX` (major, minor, micro, release level `f`inal, serial).
const VERIFIED: &[(u32, &Layout)] = &[
    (0x030b_02f0, &V3_11),
    (0x030b_07f0, &V3_11),
    (0x030c_01f0, &V3_12),
];

/// The layout of CPython `version` (`PY_VERSION_HEX`), when it was verified.
pub(crate) fn layout(version: u32) -> Option<Layout> {
    VERIFIED
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, l)| **l)
}

/// One minor's `_Py_DebugOffsets`: after the 8-byte cookie, `uint64_t` fields only — `version`,
/// `free_threaded`, then each group (a struct of the table) with its fields in order, as the
/// minor's `pycore_debug_offsets.h` (3.14+) or `pycore_runtime.h` (3.13) declares them. This is
/// all a new minor needs here (docs/python-frames.md, "A new minor"): the values come from the
/// process's own table, never from here.
#[derive(Debug)]
pub(crate) struct TableLayout {
    pub minor: u32,
    pub groups: &'static [(&'static str, &'static [&'static str])],
}

/// The table's groups shared by every minor so far, by name.
const RUNTIME_STATE: (&str, &[&str]) = (
    "runtime_state",
    &["size", "finalizing", "interpreters_head"],
);
const PYOBJECT: (&str, &[&str]) = ("pyobject", &["size", "ob_type"]);
const TUPLE: (&str, &[&str]) = ("tuple_object", &["size", "ob_item", "ob_size"]);
const LIST: (&str, &[&str]) = ("list_object", &["size", "ob_item", "ob_size"]);
const SET: (&str, &[&str]) = ("set_object", &["size", "used", "table", "mask"]);
const DICT: (&str, &[&str]) = ("dict_object", &["size", "ma_keys", "ma_values"]);
const FLOAT: (&str, &[&str]) = ("float_object", &["size", "ob_fval"]);
const LONG: (&str, &[&str]) = ("long_object", &["size", "lv_tag", "ob_digit"]);
const BYTES: (&str, &[&str]) = ("bytes_object", &["size", "ob_size", "ob_sval"]);
const GEN: (&str, &[&str]) = (
    "gen_object",
    &["size", "gi_name", "gi_iframe", "gi_frame_state"],
);
const LLIST: (&str, &[&str]) = ("llist_node", &["next", "prev"]);
const DEBUGGER: (&str, &[&str]) = (
    "debugger_support",
    &[
        "eval_breaker",
        "remote_debugger_support",
        "remote_debugging_enabled",
        "debugger_pending_call",
        "debugger_script_path",
        "debugger_script_path_size",
    ],
);
const INTERPRETER_3_14: (&str, &[&str]) = (
    "interpreter_state",
    &[
        "size",
        "id",
        "next",
        "threads_head",
        "threads_main",
        "gc",
        "imports_modules",
        "sysdict",
        "builtins",
        "ceval_gil",
        "gil_runtime_state",
        "gil_runtime_state_enabled",
        "gil_runtime_state_locked",
        "gil_runtime_state_holder",
        "code_object_generation",
        "tlbc_generation",
    ],
);
const THREAD_3_13: (&str, &[&str]) = (
    "thread_state",
    &[
        "size",
        "prev",
        "next",
        "interp",
        "current_frame",
        "thread_id",
        "native_thread_id",
        "datastack_chunk",
        "status",
    ],
);
const FRAME_3_14: (&str, &[&str]) = (
    "interpreter_frame",
    &[
        "size",
        "previous",
        "executable",
        "instr_ptr",
        "localsplus",
        "owner",
        "stackpointer",
        "tlbc_index",
    ],
);
const CODE_3_13: &[&str] = &[
    "size",
    "filename",
    "name",
    "qualname",
    "linetable",
    "firstlineno",
    "argcount",
    "localsplusnames",
    "localspluskinds",
    "co_code_adaptive",
];
const CODE_3_14: (&str, &[&str]) = (
    "code_object",
    &[
        "size",
        "filename",
        "name",
        "qualname",
        "linetable",
        "firstlineno",
        "argcount",
        "localsplusnames",
        "localspluskinds",
        "co_code_adaptive",
        "co_tlbc",
    ],
);
const TYPE_3_13: (&str, &[&str]) = ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]);
const UNICODE_3_13: (&str, &[&str]) = (
    "unicode_object",
    &["size", "state", "length", "asciiobject_size"],
);

/// The minors whose table layout is known, oldest first.
pub(crate) const TABLES: &[TableLayout] = &[
    TableLayout {
        minor: 13,
        groups: &[
            RUNTIME_STATE,
            (
                "interpreter_state",
                &[
                    "size",
                    "id",
                    "next",
                    "threads_head",
                    "gc",
                    "imports_modules",
                    "sysdict",
                    "builtins",
                    "ceval_gil",
                    "gil_runtime_state",
                    "gil_runtime_state_enabled",
                    "gil_runtime_state_locked",
                    "gil_runtime_state_holder",
                ],
            ),
            THREAD_3_13,
            (
                "interpreter_frame",
                &[
                    "size",
                    "previous",
                    "executable",
                    "instr_ptr",
                    "localsplus",
                    "owner",
                ],
            ),
            ("code_object", CODE_3_13),
            PYOBJECT,
            TYPE_3_13,
            TUPLE,
            LIST,
            DICT,
            FLOAT,
            LONG,
            BYTES,
            UNICODE_3_13,
            ("gc", &["size", "collecting"]),
        ],
    },
    TableLayout {
        minor: 14,
        groups: &[
            RUNTIME_STATE,
            INTERPRETER_3_14,
            THREAD_3_13,
            FRAME_3_14,
            CODE_3_14,
            PYOBJECT,
            TYPE_3_13,
            TUPLE,
            LIST,
            SET,
            DICT,
            FLOAT,
            LONG,
            BYTES,
            UNICODE_3_13,
            ("gc", &["size", "collecting"]),
            GEN,
            LLIST,
            DEBUGGER,
        ],
    },
    TableLayout {
        minor: 15,
        groups: &[
            RUNTIME_STATE,
            INTERPRETER_3_14,
            (
                "thread_state",
                &[
                    "size",
                    "prev",
                    "next",
                    "interp",
                    "current_frame",
                    "base_frame",
                    "last_profiled_frame",
                    "last_profiled_frame_seq",
                    "thread_id",
                    "native_thread_id",
                    "datastack_chunk",
                    "status",
                    "holds_gil",
                    "gil_requested",
                    "current_exception",
                    "exc_state",
                ],
            ),
            ("err_stackitem", &["exc_value"]),
            FRAME_3_14,
            CODE_3_14,
            PYOBJECT,
            (
                "type_object",
                &[
                    "size",
                    "tp_name",
                    "tp_repr",
                    "tp_flags",
                    "tp_basicsize",
                    "tp_dictoffset",
                ],
            ),
            ("heap_type_object", &["size", "ht_cached_keys"]),
            TUPLE,
            LIST,
            SET,
            DICT,
            FLOAT,
            LONG,
            BYTES,
            (
                "unicode_object",
                &[
                    "size",
                    "state",
                    "length",
                    "asciiobject_size",
                    "compactunicodeobject_size",
                ],
            ),
            (
                "gc",
                &[
                    "size",
                    "collecting",
                    "frame",
                    "generation_stats_size",
                    "generation_stats",
                ],
            ),
            GEN,
            LLIST,
            DEBUGGER,
        ],
    },
];

/// Where the table's groups start: after the cookie, `version` and `free_threaded`.
const TABLE_HEAD: usize = 24;

impl TableLayout {
    /// The known layout of minor `minor`'s table.
    pub(crate) fn of(minor: u32) -> Option<&'static TableLayout> {
        TABLES.iter().find(|t| t.minor == minor)
    }

    /// The table's size in bytes (`sizeof(_Py_DebugOffsets)`).
    pub(crate) fn size(&self) -> usize {
        TABLE_HEAD + 8 * self.groups.iter().map(|(_, f)| f.len()).sum::<usize>()
    }

    /// Where field `group.field` lies in the table, if the minor has it.
    pub(crate) fn place(&self, group: &str, field: &str) -> Option<usize> {
        place_in(self.groups, TABLE_HEAD, group, field)
    }
}

/// Where field `group.field` lies in a table of `uint64_t` fields whose `groups` start at byte
/// `head`, if it has it.
pub(crate) fn place_in(
    groups: &[(&str, &[&str])],
    head: usize,
    group: &str,
    field: &str,
) -> Option<usize> {
    let mut at = head;
    for (g, fields) in groups {
        if *g == group {
            return fields.iter().position(|f| *f == field).map(|i| at + 8 * i);
        }
        at += 8 * fields.len();
    }
    None
}

/// Whether `version` carries a `_Py_DebugOffsets` table (3.13 and later).
pub(crate) fn has_debug_offsets(version: u32) -> bool {
    version >> 16 >= 0x030d
}

/// Bytes of `_Py_DebugOffsets` read: the largest known table's.
pub(crate) fn debug_offsets_size() -> usize {
    TABLES.iter().map(TableLayout::size).max().unwrap_or(0)
}

/// Why a process's `_Py_DebugOffsets` are not used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum DebugOffsetsError {
    #[error("_PyRuntime does not start with the debug offsets' cookie")]
    Cookie,
    #[error("debug offsets of version {0:#x}, interpreter {1:#x}")]
    Version(u64, u32),
    #[error(
        "its debug offsets' layout is not known to this stacks-record (known: {known}): add it as docs/python-frames.md says"
    )]
    UnknownMinor { known: String },
    #[error("a pre-release, whose debug offsets may differ from the final release's")]
    PreRelease,
    #[error("a free-threaded build, whose frames are not read")]
    FreeThreaded,
    #[error("debug offset {0} out of range: {1}")]
    Range(String, u64),
    #[error("debug offset {0} ({1}) is past its struct's size ({2})")]
    PastSize(String, u64, u64),
}

/// A process's `_Py_DebugOffsets` read with its minor's [`TableLayout`].
struct Table<'a> {
    raw: &'a [u8],
    layout: &'static TableLayout,
}

impl Table<'_> {
    fn word(&self, at: usize) -> u64 {
        self.raw.get(at..at + 8).map_or(u64::MAX, |b| {
            u64::from_ne_bytes(b.try_into().unwrap_or([0xff; 8]))
        })
    }

    /// Field `group.field`, which must be under `limit` (a field the table lacks reads as
    /// out of range).
    fn get(&self, group: &str, field: &str, limit: u64) -> Result<u64, DebugOffsetsError> {
        let name = || format!("{group}.{field}");
        let v = self
            .layout
            .place(group, field)
            .map_or(u64::MAX, |at| self.word(at));
        if v >= limit {
            return Err(DebugOffsetsError::Range(name(), v));
        }
        Ok(v)
    }

    /// A field the minor may lack (3.13 has no `set_object`): 0 then.
    fn opt(&self, group: &str, field: &str) -> Result<u64, DebugOffsetsError> {
        match self.layout.place(group, field) {
            Some(_) => self.get(group, field, 1024),
            None => Ok(0),
        }
    }

    /// A field read by the kernel side (an offset it keeps in 16 bits).
    fn small(&self, group: &str, field: &str) -> Result<u16, DebugOffsetsError> {
        self.get(group, field, 1 << 16).map(|v| v as u16)
    }

    /// Every group's fields are within its struct (`size`; fields named `…_size` aside): a
    /// table read with another minor's layout fails this, its groups' sizes and offsets read
    /// from the wrong places.
    fn check_sizes(&self) -> Result<(), DebugOffsetsError> {
        let mut at = TABLE_HEAD;
        for (group, fields) in self.layout.groups {
            if fields.first() == Some(&"size") {
                let size = self.word(at);
                if size == 0 || size > 1 << 28 {
                    return Err(DebugOffsetsError::Range(format!("{group}.size"), size));
                }
                // Fields named `…_size` are other structs' sizes, not offsets in this one.
                for (i, field) in fields.iter().enumerate().skip(1) {
                    if field.ends_with("_size") {
                        continue;
                    }
                    let v = self.word(at + 8 * i);
                    if v > size {
                        return Err(DebugOffsetsError::PastSize(
                            format!("{group}.{field}"),
                            v,
                            size,
                        ));
                    }
                }
            }
            at += 8 * fields.len();
        }
        Ok(())
    }
}

/// The layout of a CPython 3.13+ whose `_PyRuntime` starts with `raw` (its `_Py_DebugOffsets`:
/// [`debug_offsets_size`] bytes, or fewer when the section ends sooner), `version` being its
/// `Py_Version` (or, where the file has none, the table's own).
pub(crate) fn from_debug_offsets(raw: &[u8], version: u32) -> Result<Layout, DebugOffsetsError> {
    if raw.get(..8) != Some(b"xdebugpy".as_slice()) {
        return Err(DebugOffsetsError::Cookie);
    }
    let word = |at: usize| {
        raw.get(at..at + 8).map_or(u64::MAX, |b| {
            u64::from_ne_bytes(b.try_into().unwrap_or([0xff; 8]))
        })
    };
    if word(8) != u64::from(version) {
        return Err(DebugOffsetsError::Version(word(8), version));
    }
    let Some(layout) = TableLayout::of((version >> 16) & 0xff) else {
        let known: Vec<String> = TABLES.iter().map(|t| format!("3.{}", t.minor)).collect();
        return Err(DebugOffsetsError::UnknownMinor {
            known: known.join(", "),
        });
    };
    if matches!((version >> 4) & 0xf, 0xa | 0xb) {
        return Err(DebugOffsetsError::PreRelease);
    }
    if word(16) != 0 {
        return Err(DebugOffsetsError::FreeThreaded);
    }
    if raw.len() < layout.size() {
        return Err(DebugOffsetsError::Range(
            "the table's size".to_string(),
            raw.len() as u64,
        ));
    }
    let t = Table { raw, layout };
    t.check_sizes()?;
    let ascii = t.get("unicode_object", "asciiobject_size", 1024)?;
    // PyCompactUnicodeObject: PyASCIIObject, then utf8_length and utf8 (3.15 names its size).
    let compact = match layout.place("unicode_object", "compactunicodeobject_size") {
        Some(_) => t.get("unicode_object", "compactunicodeobject_size", 1024)?,
        None => ascii + 16,
    };
    Ok(Layout {
        tstate: Tstate::List {
            interpreters_head: t.get("runtime_state", "interpreters_head", 1 << 24)?,
            threads_head: t.small("interpreter_state", "threads_head")?,
            next: t.small("thread_state", "next")?,
        },
        native_tid: t.small("thread_state", "native_thread_id")?,
        cframe: None,
        current_frame: t.small("thread_state", "current_frame")?,
        code: t.small("interpreter_frame", "executable")?,
        previous: t.small("interpreter_frame", "previous")?,
        prev_instr: t.small("interpreter_frame", "instr_ptr")?,
        entry: Entry::Owner(t.small("interpreter_frame", "owner")?),
        co_firstlineno: t.get("code_object", "firstlineno", 1024)?,
        co_filename: t.get("code_object", "filename", 1024)?,
        co_qualname: t.get("code_object", "qualname", 1024)?,
        co_linetable: t.get("code_object", "linetable", 1024)?,
        co_code: t.get("code_object", "co_code_adaptive", 1024)?,
        ascii_data: ascii,
        compact_data: compact,
        str_length: t.get("unicode_object", "length", 1024)?,
        str_state: t.get("unicode_object", "state", 1024)?,
        bytes_size: t.get("bytes_object", "ob_size", 1024)?,
        bytes_data: t.get("bytes_object", "ob_sval", 1024)?,
        ob_type: t.get("pyobject", "ob_type", 1024)?,
        tp_flags: t.get("type_object", "tp_flags", 1024)?,
        long_tag: t.get("long_object", "lv_tag", 1024)?,
        long_digits: t.get("long_object", "ob_digit", 1024)?,
        set_mask: t.opt("set_object", "mask")?,
        set_table: t.opt("set_object", "table")?,
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

#[cfg(test)]
#[path = "offsets_tests.rs"]
mod tests;
