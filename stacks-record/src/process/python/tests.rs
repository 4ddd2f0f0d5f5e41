//! Python frames from code objects laid out as CPython 3.11 lays them out, in this process's
//! own memory (read back through process_vm_readv like a traced process's), interleaved with
//! native frames.

use super::find::Interpreter;
use super::offsets::{self, Layout};
use super::{Proc, Python};
use crate::kernel::event::PyPart;
use crate::process::normalize::{FrameTable, UserFrame};

fn layout() -> Layout {
    offsets::layout(0x030b_02f0).expect("3.11.2 is verified")
}

/// Objects built in this process's memory, kept alive while read.
#[derive(Default)]
struct Heap(Vec<Vec<u64>>);

impl Heap {
    /// `n` zeroed bytes (8-aligned); their address.
    fn alloc(&mut self, n: usize, fill: impl FnOnce(&mut [u8])) -> u64 {
        let mut words = vec![0u64; n.div_ceil(8)];
        // SAFETY: viewing the u64 buffer as its bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), n) };
        fill(bytes);
        let at = words.as_ptr() as u64;
        self.0.push(words);
        at
    }

    /// A compact ASCII `str`.
    fn str(&mut self, s: &str) -> u64 {
        self.alloc(48 + s.len() + 1, |b| {
            b[16..24].copy_from_slice(&(s.len() as u64).to_ne_bytes());
            b[32..36].copy_from_slice(&0x64u32.to_ne_bytes()); // kind 1, compact, ascii
            b[48..48 + s.len()].copy_from_slice(s.as_bytes());
        })
    }

    fn bytes(&mut self, v: &[u8]) -> u64 {
        self.alloc(32 + v.len() + 1, |b| {
            b[16..24].copy_from_slice(&(v.len() as u64).to_ne_bytes());
            b[32..32 + v.len()].copy_from_slice(v);
        })
    }

    /// A code object named `name` in `file` from line `first`, each code unit a line further
    /// (a location table of one-line entries, delta 1, one unit each); its address.
    fn code(&mut self, name: &str, file: &str, first: i32, units: usize) -> u64 {
        let l = layout();
        let q = self.str(name);
        let f = self.str(file);
        // The first unit on the first line (delta 0), then one line further each.
        let mut table = vec![0x80 | (10 << 3), 0, 0];
        for _ in 1..units {
            table.extend([0x80 | (11 << 3), 0, 0]);
        }
        let t = self.bytes(&table);
        self.alloc(l.co_code as usize + 2 * units, |b| {
            let put = |b: &mut [u8], at: u64, v: u64| {
                b[at as usize..at as usize + 8].copy_from_slice(&v.to_ne_bytes())
            };
            b[l.co_firstlineno as usize..l.co_firstlineno as usize + 4]
                .copy_from_slice(&first.to_ne_bytes());
            put(b, l.co_qualname, q);
            put(b, l.co_filename, f);
            put(b, l.co_linetable, t);
        })
    }
}

/// The `co_qualname` pointer of the code object at `code` (what the kernel side reads).
fn qualname_of(code: u64) -> u64 {
    // SAFETY: `code` is a live object of the test's heap, with room past co_qualname.
    unsafe { std::ptr::read((code + layout().co_qualname) as *const u64) }
}

fn frame(code: u64, unit: u64, entry: bool) -> PyPart {
    PyPart::Frame {
        code,
        qualname: qualname_of(code),
        prev_instr: code + layout().co_code + 2 * unit,
        entry,
    }
}

fn native(table: &mut FrameTable, build_id: &str, offset: u64) -> u32 {
    table.intern(UserFrame {
        addr: 0,
        module: Some("/usr/bin/python3.11".into()),
        build_id: Some(build_id.into()),
        offset: Some(offset),
        error: None,
        symbol: None,
        file: None,
        line: None,
    })
}

fn python_of_self() -> (Python, u32) {
    let pid = std::process::id();
    let mut py = Python::new(true);
    py.procs.insert(
        pid,
        Proc {
            interp: Interpreter {
                file: "/usr/bin/python3.11".into(),
                layout: layout(),
                tstate_at: 0,
                build_id: Some("ab".into()),
                eval: 0x1000..0x2000,
                entries: vec![std::ops::Range {
                    start: 0x3000,
                    end: 0x3100,
                }],
                asyncio: None,
            },
            codes: Default::default(),
            code_bytes: 0,
            tasks: Default::default(),
        },
    );
    (py, pid)
}

/// What a frame id stands for, in words: `name@file:line` for Python frames.
fn describe(table: &FrameTable, id: u32) -> String {
    let f = table.get(id);
    match (&f.symbol, &f.file) {
        (Some(s), Some(file)) => format!("{s}@{file}:{}", f.line.unwrap_or(0)),
        (Some(s), None) => s.to_string(),
        _ => match &f.error {
            Some(e) => format!("error: {e}"),
            None => format!("native+{:#x}", f.offset.unwrap_or(0)),
        },
    }
}

#[test]
fn python_frames_go_inner_to_the_eval_frame_that_ran_them() {
    let mut heap = Heap::default();
    let leaf = heap.code("leaf", "s.py", 3, 8);
    let middle = heap.code("C.middle", "s.py", 10, 4);
    let outer = heap.code("outer", "t.py", 20, 4);
    let module = heap.code("<module>", "t.py", 1, 4);
    let (mut py, pid) = python_of_self();
    let mut table = FrameTable::default();
    let leafmost = native(&mut table, "ab", 0x3000);
    let eval1 = native(&mut table, "ab", 0x1800);
    let between = native(&mut table, "cd", 0x1800); // another file: not the interpreter's
    let eval2 = native(&mut table, "ab", 0x1000);
    let main = native(&mut table, "ab", 0x400);
    let parts = [
        frame(leaf, 2, false),
        frame(middle, 0, true),
        frame(outer, 3, false),
        frame(module, 1, true),
    ];
    let ids = py.interleave(
        pid,
        &[leafmost, eval1, between, eval2, main],
        &parts,
        &mut table,
    );
    let got: Vec<String> = ids.iter().map(|&i| describe(&table, i)).collect();
    assert_eq!(
        got,
        [
            "native+0x3000",
            "leaf@s.py:5",
            "C.middle@s.py:10",
            "native+0x1800",
            "native+0x1800",
            "outer@t.py:23",
            "<module>@t.py:2",
            "native+0x1000",
            "native+0x400",
        ]
    );
    assert_eq!(py.counts.frames, 4);
    // Read once each: the same frames again come from the cache.
    assert_eq!(py.procs[&pid].codes.len(), 4);
}

#[test]
fn python_frames_past_the_native_stack_go_outermost() {
    let mut heap = Heap::default();
    let leaf = heap.code("leaf", "s.py", 3, 2);
    let (mut py, pid) = python_of_self();
    let mut table = FrameTable::default();
    let other = native(&mut table, "cd", 0x10);
    let parts = [frame(leaf, 1, true), PyPart::Fail(4)];
    let ids = py.interleave(pid, &[other], &parts, &mut table);
    let got: Vec<String> = ids.iter().map(|&i| describe(&table, i)).collect();
    // The frames not read are marked, outermost.
    assert_eq!(got, ["native+0x10", "leaf@s.py:4", "[more Python frames]"]);
    assert_eq!(py.counts.truncated, 1);
    // Other failures are counted only.
    let ids = py.interleave(pid, &[other], &[PyPart::Fail(1)], &mut table);
    assert_eq!(ids, [other]);
    assert_eq!(py.counts.no_tstate, 1);
}

#[test]
fn replaced_and_unreadable_code_objects_are_counted_not_named() {
    let mut heap = Heap::default();
    let leaf = heap.code("leaf", "s.py", 3, 2);
    let (mut py, pid) = python_of_self();
    let mut table = FrameTable::default();
    // The sample saw another co_qualname at that address: the object was replaced.
    let replaced = PyPart::Frame {
        code: leaf,
        qualname: 8,
        prev_instr: leaf + layout().co_code,
        entry: true,
    };
    let unmapped = PyPart::Frame {
        code: 8,
        qualname: 0,
        prev_instr: 0,
        entry: true,
    };
    let ids = py.interleave(pid, &[], &[replaced, unmapped], &mut table);
    assert_eq!(ids.len(), 2);
    for &id in &ids {
        let f = table.get(id);
        assert!(f.symbol.is_none() && f.error.is_some(), "{f:?}");
    }
    assert_eq!(py.counts.code_replaced, 1);
    assert_eq!(py.counts.code_unreadable, 1);
    assert_eq!(py.counts.frames, 0);
    // Frames entered before their first instruction are at the function's first line.
    let entered = PyPart::Frame {
        code: leaf,
        qualname: qualname_of(leaf),
        prev_instr: leaf + layout().co_code - 2,
        entry: true,
    };
    let ids = py.interleave(pid, &[], &[entered], &mut table);
    assert_eq!(describe(&table, ids[0]), "leaf@s.py:3");
}

/// A hostile process's frames (docs/threat-model.md): a name of 2^40 characters, code at a
/// kernel address or at the top of the address space, code objects that each bring a 1 MiB
/// location table. Each bad frame becomes an error frame, counted; the code objects kept
/// stay within their byte budget.
#[test]
fn hostile_code_objects_become_counted_error_frames_within_the_budget() {
    let l = layout();
    let mut heap = Heap::default();
    let good = heap.code("good", "g.py", 1, 1);
    // A str claiming 2^40 characters.
    let huge = heap.alloc(64, |b| {
        b[16..24].copy_from_slice(&(1u64 << 40).to_ne_bytes());
        b[32..36].copy_from_slice(&0x64u32.to_ne_bytes());
    });
    let name_huge = heap.alloc(l.co_code as usize + 2, |b| {
        b[l.co_qualname as usize..l.co_qualname as usize + 8].copy_from_slice(&huge.to_ne_bytes());
    });
    let (mut py, pid) = python_of_self();
    let mut table = FrameTable::default();
    let at = |code: u64| PyPart::Frame {
        code,
        qualname: 0,
        prev_instr: code.wrapping_add(l.co_code),
        entry: true,
    };
    let bad = [at(name_huge), at(0xffff_8880_0000_0000), at(u64::MAX - 4)];
    let ids = py.interleave(pid, &[], &bad, &mut table);
    for &id in &ids {
        let f = table.get(id);
        assert!(f.symbol.is_none() && f.error.is_some(), "{f:?}");
    }
    assert_eq!((py.counts.code_unreadable, py.counts.frames), (3, 0));
    // 100 code objects sharing one location table of 1 MiB (read once per object).
    let big_table = heap.bytes(&vec![0x80 | (10 << 3); 1 << 20]);
    let name = heap.str("big");
    let codes: Vec<u64> = (0..100)
        .map(|_| {
            heap.alloc(l.co_code as usize + 2, |b| {
                let put = |b: &mut [u8], at: u64, v: u64| {
                    b[at as usize..at as usize + 8].copy_from_slice(&v.to_ne_bytes())
                };
                put(b, l.co_qualname, name);
                put(b, l.co_filename, name);
                put(b, l.co_linetable, big_table);
            })
        })
        .collect();
    let mut peak = 0;
    for &code in &codes {
        py.interleave(pid, &[], &[frame(code, 0, true)], &mut table);
        peak = peak.max(py.code_bytes);
    }
    assert_eq!(py.counts.frames, 100, "every frame named");
    assert!(
        peak <= super::CODE_BYTES_KEPT,
        "{peak} bytes of code objects kept"
    );
    assert!(peak > super::CODE_BYTES_KEPT / 2, "{peak}: the budget used");
    let ids = py.interleave(pid, &[], &[frame(good, 0, true)], &mut table);
    assert_eq!(describe(&table, ids[0]), "good@g.py:1");
}
