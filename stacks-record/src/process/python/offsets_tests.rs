//! Tests of the version tables and of reading `_Py_DebugOffsets`: the known minors' table
//! layouts against CPython's own headers (compiled), and real tables (3.13.0's, 3.14.10's and
//! 3.15.2's, as their interpreters carry them: `testdata/`) read, cross-read and corrupted.

use super::*;

/// A real table: the bytes at `_PyRuntime` of an interpreter of that minor.
fn real(minor: u32) -> Vec<u8> {
    let hex = match minor {
        13 => include_str!("testdata/debug_offsets_3.13.hex"),
        14 => include_str!("testdata/debug_offsets_3.14.hex"),
        15 => include_str!("testdata/debug_offsets_3.15.hex"),
        _ => unreachable!("no table of 3.{minor} kept"),
    };
    stacks_stream::hex::decode(hex.trim()).expect("hex")
}

/// The `PY_VERSION_HEX` a real table carries.
fn version_of(raw: &[u8]) -> u32 {
    u64::from_ne_bytes(raw[8..16].try_into().unwrap()) as u32
}

#[test]
fn verified_versions_only() {
    assert_eq!(layout(0x030b_02f0), Some(V3_11));
    assert_eq!(layout(0x030b_07f0), Some(V3_11));
    assert_eq!(layout(0x030c_01f0), Some(V3_12));
    assert_eq!(layout(0x030b_08f0), None, "3.11.8 was not verified");
    assert_eq!(layout(0x030c_00f0), None, "3.12.0 was not verified");
    assert_eq!(layout(0x030a_0cf0), None);
    for v in [
        0x030d_00f0,
        0x030d_05f0,
        0x030e_0af0,
        0x030f_02f0,
        0x0310_00a1,
    ] {
        assert!(has_debug_offsets(v), "{v:#x}");
    }
    assert!(!has_debug_offsets(0x030c_01f0));
}

#[test]
fn versions_are_named() {
    assert_eq!(version_name(0x030b_02f0), "3.11.2");
    assert_eq!(version_name(0x030c_00b1), "3.12.0b1");
    assert_eq!(version_name(0x030b_00c2), "3.11.0rc2");
}

/// The walked fields keep the order and alignment of CPython's structs: pointers 8-aligned,
/// 3.11's `is_entry` right after the 4-byte `stacktop` that follows `prev_instr`, 3.12's
/// `owner` after `stacktop` and the 2-byte `return_offset`.
#[test]
fn layouts_are_consistent() {
    for l in [V3_11, V3_12] {
        for off in [
            l.current_frame,
            l.code,
            l.previous,
            l.prev_instr,
            l.native_tid,
        ] {
            assert_eq!(off % 8, 0);
        }
        assert_eq!(l.cframe.map(|c| c % 8), Some(0));
        match l.entry {
            Entry::IsEntry(at) => assert_eq!(at, l.prev_instr + 8 + 4),
            Entry::Owner(at) => assert_eq!(at, l.prev_instr + 8 + 4 + 2),
        }
        assert!(l.co_filename < l.co_qualname && l.co_qualname < l.co_linetable);
        assert!(l.co_linetable < l.co_code);
        assert!(matches!(l.tstate, Tstate::Key(k) if k % 4 == 0));
    }
}

/// The tables' sizes, `sizeof(_Py_DebugOffsets)` of each minor on x86_64.
#[test]
fn table_sizes() {
    let size = |minor| TableLayout::of(minor).map(TableLayout::size);
    assert_eq!(size(13), Some(584));
    assert_eq!(size(14), Some(760));
    assert_eq!(size(15), Some(888));
    assert_eq!(size(16), None);
    assert_eq!(debug_offsets_size(), 888);
    for t in TABLES {
        assert_eq!(
            real(t.minor).len(),
            t.size(),
            "the kept table of 3.{}",
            t.minor
        );
    }
}

#[test]
fn real_tables_give_the_layouts() {
    let l = from_debug_offsets(&real(13), 0x030d_00f0).expect("3.13.0's");
    assert_eq!(l.cframe, None);
    assert_eq!(l.current_frame, 72);
    assert_eq!(l.native_tid, 160);
    assert_eq!((l.code, l.previous, l.prev_instr), (0, 8, 56));
    assert_eq!(l.entry, Entry::Owner(70));
    assert_eq!(
        (l.co_firstlineno, l.co_filename, l.co_qualname),
        (68, 112, 128)
    );
    assert_eq!((l.co_linetable, l.co_code), (136, 200));
    assert_eq!((l.ascii_data, l.compact_data), (40, 56));
    assert_eq!((l.str_length, l.str_state), (16, 32));
    assert_eq!((l.bytes_size, l.bytes_data), (16, 32));
    assert!(matches!(l.tstate, Tstate::List { .. }));
    // 3.14 moved the frame's owner and the first instruction (f_executable a _PyStackRef,
    // `stackpointer` instead of `stacktop`); 3.15 the thread's native id.
    for (minor, version) in [(14, 0x030e_0af0), (15, 0x030f_02f0)] {
        let raw = real(minor);
        assert_eq!(version_of(&raw), version);
        let l = from_debug_offsets(&raw, version).expect("a real table");
        assert_eq!((l.code, l.previous, l.prev_instr), (0, 8, 56), "3.{minor}");
        assert_eq!(l.entry, Entry::Owner(74), "3.{minor}");
        assert_eq!(l.co_code, 208, "3.{minor}");
        assert_eq!((l.ascii_data, l.compact_data), (40, 56), "3.{minor}");
        let Tstate::List {
            interpreters_head,
            threads_head,
            next,
        } = l.tstate
        else {
            panic!("3.{minor} finds thread states in the list");
        };
        assert!(interpreters_head > 0 && threads_head > 0, "3.{minor}");
        assert_eq!(next, 8, "3.{minor}: PyThreadState.next follows prev");
    }
}

/// A table read with another minor's layout is refused, never read as offsets: each group's
/// fields must lie within its struct's size, which a shifted read breaks.
#[test]
fn a_table_read_as_another_minor_is_refused() {
    for (kept, claimed) in [(13, 14), (14, 13), (14, 15), (15, 14), (13, 15), (15, 13)] {
        let mut raw = real(kept);
        raw.resize(debug_offsets_size(), 0);
        // Claim another minor (same micro and level), as a build of that minor would.
        let v = (version_of(&raw) & !0x00ff_0000) | (claimed << 16);
        raw[8..16].copy_from_slice(&u64::from(v).to_ne_bytes());
        let got = from_debug_offsets(&raw, v);
        assert!(
            matches!(
                got,
                Err(DebugOffsetsError::PastSize(..) | DebugOffsetsError::Range(..))
            ),
            "3.{kept}'s table read as 3.{claimed}'s: {got:?}"
        );
    }
}

#[test]
fn bad_debug_offsets_are_refused() {
    let good = real(14);
    let v = version_of(&good);
    let mut raw = good.clone();
    raw[0] = b'X';
    assert_eq!(from_debug_offsets(&raw, v), Err(DebugOffsetsError::Cookie));
    assert!(matches!(
        from_debug_offsets(&good, 0x030e_0bf0),
        Err(DebugOffsetsError::Version(..))
    ));
    // A minor whose layout is not known: refused with what is, never read.
    let mut raw = good.clone();
    raw[8..16].copy_from_slice(&0x0310_00f0u64.to_ne_bytes());
    let err = from_debug_offsets(&raw, 0x0310_00f0).unwrap_err();
    assert!(matches!(err, DebugOffsetsError::UnknownMinor { .. }));
    assert!(err.to_string().contains("3.13, 3.14, 3.15"), "{err}");
    let mut raw = good.clone();
    raw[8..16].copy_from_slice(&0x030e_00b3u64.to_ne_bytes());
    assert_eq!(
        from_debug_offsets(&raw, 0x030e_00b3),
        Err(DebugOffsetsError::PreRelease)
    );
    let mut raw = good.clone();
    raw[16] = 1;
    assert_eq!(
        from_debug_offsets(&raw, v),
        Err(DebugOffsetsError::FreeThreaded)
    );
    // An offset past its struct's size.
    let t = TableLayout::of(14).unwrap();
    let at = t.place("thread_state", "native_thread_id").unwrap();
    let mut raw = good.clone();
    raw[at..at + 8].copy_from_slice(&100_000u64.to_ne_bytes());
    assert!(matches!(
        from_debug_offsets(&raw, v),
        Err(DebugOffsetsError::PastSize(f, 100_000, _)) if f == "thread_state.native_thread_id"
    ));
    // A size of nothing.
    let at = t.place("interpreter_frame", "size").unwrap();
    let mut raw = good.clone();
    raw[at..at + 8].copy_from_slice(&0u64.to_ne_bytes());
    assert!(matches!(
        from_debug_offsets(&raw, v),
        Err(DebugOffsetsError::Range(f, 0)) if f == "interpreter_frame.size"
    ));
    // Short or empty input never panics.
    for n in [0, 7, 8, 16, 100, good.len() - 1] {
        assert!(from_debug_offsets(&good[..n], v).is_err(), "{n} bytes");
    }
}

/// Where a minor's `_Py_DebugOffsets` is declared: 3.14+'s `pycore_debug_offsets.h` (from
/// scripts/setup-pythons' prefixes), 3.13's `pycore_runtime.h` (pyenv's 3.13).
fn header_of(minor: u32) -> Option<std::path::PathBuf> {
    let home = std::env::var("HOME").unwrap_or_default();
    let pythons =
        std::env::var("STACKS_PYTHONS").unwrap_or_else(|_| format!("{home}/.cache/stacks-pythons"));
    let mut candidates = vec![std::path::PathBuf::from(format!(
        "{pythons}/3.{minor}/usr/include/python3.{minor}/internal/pycore_debug_offsets.h"
    ))];
    if let Ok(dir) = std::fs::read_dir(format!("{home}/.pyenv/versions")) {
        for e in dir.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("3.{minor}."))
            {
                candidates.push(
                    e.path()
                        .join(format!("include/python3.{minor}/internal/pycore_runtime.h")),
                );
            }
        }
    }
    candidates.into_iter().find(|p| p.exists())
}

/// Each known minor's layout, field by field, against the struct its CPython headers declare:
/// the struct is cut out of the header and compiled, printing every field's offset and the
/// struct's size. A layout that drifts from CPython's (a field missed, moved or misnamed)
/// fails here.
#[test]
fn known_layouts_match_cpythons_headers() {
    let dir = std::env::temp_dir().join(format!("stacks-dbgoff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for t in TABLES {
        let header = header_of(t.minor).unwrap_or_else(|| {
            panic!(
                "no header declaring 3.{}'s _Py_DebugOffsets: run scripts/setup-pythons",
                t.minor
            )
        });
        let text = std::fs::read_to_string(&header).unwrap();
        let start = text
            .find("typedef struct _Py_DebugOffsets {")
            .expect("the struct");
        let end = text[start..].find("} _Py_DebugOffsets;").expect("its end") + start;
        let mut c = String::from(
            "#include <stdint.h>\n#include <stddef.h>\n#include <stdio.h>\n#define _Py_NONSTRING\n",
        );
        c.push_str(&text[start..end]);
        c.push_str("} _Py_DebugOffsets;\nint main(void) {\n");
        c.push_str("  printf(\"size %zu\\n\", sizeof(_Py_DebugOffsets));\n");
        for (group, fields) in t.groups {
            for field in *fields {
                c.push_str(&format!(
                    "  printf(\"{group}.{field} %zu\\n\", offsetof(_Py_DebugOffsets, {group}.{field}));\n"
                ));
            }
        }
        c.push_str("  return 0;\n}\n");
        let src = dir.join(format!("t{}.c", t.minor));
        let bin = dir.join(format!("t{}", t.minor));
        std::fs::write(&src, c).unwrap();
        let out = std::process::Command::new("cc")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("cc");
        assert!(
            out.status.success(),
            "3.{}: a field this layout names is not in {} ({})",
            t.minor,
            header.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let out = std::process::Command::new(&bin).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        for line in text.lines() {
            let (name, at) = line.split_once(' ').unwrap();
            let at: usize = at.parse().unwrap();
            if name == "size" {
                assert_eq!(at, t.size(), "3.{}: sizeof(_Py_DebugOffsets)", t.minor);
            } else {
                let (g, f) = name.split_once('.').unwrap();
                assert_eq!(t.place(g, f), Some(at), "3.{}: {name}", t.minor);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
