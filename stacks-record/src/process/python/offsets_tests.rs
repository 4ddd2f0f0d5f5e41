//! Tests of the version tables and of reading 3.13's `_Py_DebugOffsets`.

use super::*;

#[test]
fn verified_versions_only() {
    assert_eq!(layout(0x030b_02f0), Some(V3_11));
    assert_eq!(layout(0x030b_07f0), Some(V3_11));
    assert_eq!(layout(0x030c_01f0), Some(V3_12));
    assert_eq!(layout(0x030b_08f0), None, "3.11.8 was not verified");
    assert_eq!(layout(0x030c_00f0), None, "3.12.0 was not verified");
    assert_eq!(layout(0x030a_0cf0), None);
    assert!(has_debug_offsets(0x030d_00f0));
    assert!(has_debug_offsets(0x030d_05f0));
    assert!(
        !has_debug_offsets(0x030e_00f0),
        "3.14's debug offsets differ"
    );
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
        assert_eq!(l.tss_key % 4, 0);
    }
}

/// 3.13.0's `_Py_DebugOffsets` as its `_PyRuntime` starts (the values it carries).
fn debug_offsets_3_13_0() -> Vec<u8> {
    let mut raw = vec![0u8; DEBUG_OFFSETS_SIZE];
    raw[..8].copy_from_slice(b"xdebugpy");
    let mut put = |at: usize, v: u64| raw[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    put(8, 0x030d_00f0);
    for (at, v) in [
        (184, 72),
        (200, 160),
        (232, 8),
        (240, 0),
        (248, 56),
        (264, 70),
        (280, 112),
        (296, 128),
        (304, 136),
        (312, 68),
        (344, 200),
        (560, 40),
    ] {
        put(at, v);
    }
    raw
}

#[test]
fn debug_offsets_give_the_layout() {
    let l = from_debug_offsets(&debug_offsets_3_13_0(), 0x030d_00f0).expect("3.13.0's");
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
    assert_eq!(l.tss_key, 2160);
    // A later 3.13.x with the same offsets.
    assert!(from_debug_offsets(&debug_offsets_3_13_0(), 0x030d_05f0).is_ok());
}

#[test]
fn bad_debug_offsets_are_refused() {
    let good = debug_offsets_3_13_0();
    let mut raw = good.clone();
    raw[0] = b'X';
    assert_eq!(
        from_debug_offsets(&raw, 0x030d_00f0),
        Err(DebugOffsetsError::Cookie)
    );
    assert!(matches!(
        from_debug_offsets(&good, 0x030e_00f0),
        Err(DebugOffsetsError::Version(..))
    ));
    let mut raw = good.clone();
    raw[16] = 1;
    assert_eq!(
        from_debug_offsets(&raw, 0x030d_00f0),
        Err(DebugOffsetsError::FreeThreaded)
    );
    let mut raw = good.clone();
    raw[184..192].copy_from_slice(&u64::MAX.to_ne_bytes());
    assert!(matches!(
        from_debug_offsets(&raw, 0x030d_00f0),
        Err(DebugOffsetsError::Range("thread_state.current_frame", _))
    ));
    // Short or empty input never panics.
    assert!(from_debug_offsets(&good[..100], 0x030d_00f0).is_err());
    assert!(from_debug_offsets(&[], 0x030d_00f0).is_err());
}
