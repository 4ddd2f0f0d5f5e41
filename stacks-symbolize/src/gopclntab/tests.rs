//! Tests over a Go program built here by the installed `go`: names, files and lines of known
//! functions, an inlined call, agreement with DWARF, PIE and a binary without section headers,
//! and corrupted tables (errors, never panics).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::*;
use crate::resolve::{Job, Worker};

/// The program: `mix` is small enough to be inlined into `hot`; `MARK:` comments name lines.
const SOURCE: &str = r#"package main

import "os"

//go:noinline
func hot(n int) uint64 { // MARK:hot-decl
	var x uint64 = 1
	for i := 0; i < n; i++ {
		x = mix(x, uint64(i)) // MARK:mix-call
	}
	return x
}

func mix(x, i uint64) uint64 {
	return x*6364136223846793005 + i // MARK:mix-body
}

func main() {
	n := 1000
	if len(os.Args) > 1 {
		n = 1 << 30
	}
	println(hot(n))
}
"#;

/// Line of the `MARK:` comment `mark` in [`SOURCE`].
fn line_of(mark: &str) -> u32 {
    let tag = format!("// MARK:{mark}");
    SOURCE
        .lines()
        .position(|l| l.ends_with(&tag))
        .map(|i| i as u32 + 1)
        .expect("a marked line")
}

struct Built {
    stripped: PathBuf,
    with_symbols: PathBuf,
    pie: PathBuf,
}

/// The program built twice (stripped and not), once per test run.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("stacks-gopclntab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("main.go");
        std::fs::write(&src, SOURCE).unwrap();
        let build = |out: &str, flags: &str| {
            let path = dir.join(out);
            let mut go = Command::new("go");
            go.arg("build");
            if out == "pie" {
                go.arg("-buildmode=pie");
            }
            let status = go
                .arg(format!("-ldflags={flags}"))
                .arg("-o")
                .arg(&path)
                .arg(&src)
                .current_dir(&dir)
                .status()
                .expect("go (apt-get install golang-go) builds the test program");
            assert!(status.success(), "go build {flags} failed");
            path
        };
        Built {
            stripped: build("stripped", "-s -w"),
            with_symbols: build("symbols", ""),
            pie: build("pie", "-s -w"),
        }
    })
}

const LINES: Options = Options {
    lines: true,
    inlines: true,
};

/// Function `name` of the binary.
fn func_named(go: &GoBinary, name: &str) -> Func {
    let t = go.table();
    (0..t.len())
        .map(|i| t.func(i).unwrap())
        .find(|f| t.name(f).unwrap() == name)
        .unwrap_or_else(|| panic!("{name} not in the function table"))
}

fn stripped() -> GoBinary {
    GoBinary::open(&built().stripped)
        .unwrap()
        .expect("a stripped Go binary has Go tables")
}

#[test]
fn names_files_and_lines_of_known_functions() {
    let go = stripped();
    assert!(go.table().len() > 100);
    assert!(go.has_inline_trees(), "moduledata not found");
    let hot = func_named(&go, "main.hot");
    let frames = go.frames(hot.entry, LINES).unwrap().unwrap();
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].function.as_deref(), Some("main.hot"));
    assert!(frames[0].file.as_deref().unwrap().ends_with("/main.go"));
    assert_eq!(frames[0].line, Some(line_of("hot-decl")));
    let main = func_named(&go, "main.main");
    let f = go.frames(main.end - 1, LINES).unwrap().unwrap();
    assert_eq!(f.last().unwrap().function.as_deref(), Some("main.main"));
    // Runtime functions too, with their files.
    let gc = func_named(&go, "runtime.mallocgc");
    let f = go.frames(gc.entry + 1, LINES).unwrap().unwrap();
    assert!(
        f.last()
            .unwrap()
            .file
            .as_deref()
            .unwrap()
            .ends_with("runtime/malloc.go")
    );
    // Names only when lines are not asked for.
    let names = Options {
        lines: false,
        inlines: false,
    };
    let f = go.frames(hot.entry + 1, names).unwrap().unwrap();
    assert_eq!((f.len(), f[0].line), (1, None));
    // Outside every function.
    assert!(
        go.frames(hot.entry.min(go.table().text_start) - 1, LINES)
            .unwrap()
            .is_none()
    );
}

#[test]
fn an_inlined_call_is_an_inlined_frame() {
    let go = stripped();
    let hot = func_named(&go, "main.hot");
    let inlined = (hot.entry..hot.end)
        .map(|pc| go.frames(pc, LINES).unwrap().unwrap())
        .find(|f| f.len() == 2)
        .expect("mix inlined into hot");
    assert_eq!(inlined[0].function.as_deref(), Some("main.mix"));
    assert!(inlined[0].inlined);
    assert_eq!(inlined[0].line, Some(line_of("mix-body")));
    assert_eq!(inlined[1].function.as_deref(), Some("main.hot"));
    assert!(!inlined[1].inlined);
    assert_eq!(inlined[1].line, Some(line_of("mix-call")));
    // Without inlines: the function, at the line of the address.
    let pc = (hot.entry..hot.end)
        .find(|&pc| go.frames(pc, LINES).unwrap().unwrap().len() == 2)
        .unwrap();
    let plain = Options {
        lines: true,
        inlines: false,
    };
    let f = go.frames(pc, plain).unwrap().unwrap();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].function.as_deref(), Some("main.hot"));
    assert_eq!(f[0].line, Some(line_of("mix-body")));
}

/// Names, files, lines and inlined frames as blazesym reads them from the DWARF of the same
/// program built with symbols (the code is the same: `-s -w` only drops tables).
#[test]
fn agrees_with_dwarf_of_the_same_program() {
    let go = stripped();
    assert!(GoBinary::open(&built().with_symbols).unwrap().is_none());
    let mut w = Worker::new(LINES, &[]);
    let mut addrs = Vec::new();
    for name in [
        "main.hot",
        "main.main",
        "runtime.mallocgc",
        "runtime.schedule",
    ] {
        let f = func_named(&go, name);
        addrs.extend(f.entry..f.end);
    }
    let dwarf = w.run(&Job::Elf {
        file: built().with_symbols.clone(),
        addrs: addrs.clone(),
    });
    let key = |f: &SymFrame| (f.function.clone(), f.file.clone(), f.line, f.inlined);
    let mut compared = 0;
    let mut differ = Vec::new();
    for (addr, want) in addrs.iter().zip(&dwarf) {
        if want[0].reason.is_some() {
            continue; // padding after a function's code
        }
        compared += 1;
        let ours = go.frames(*addr, LINES).unwrap().unwrap();
        if ours.iter().map(key).collect::<Vec<_>>() != want.iter().map(key).collect::<Vec<_>>() {
            differ.push((addr, ours, want));
        }
    }
    assert!(
        differ.is_empty() && compared > 2000,
        "{} of {compared} addresses differ from DWARF, first: {:?}",
        differ.len(),
        differ.first()
    );
}

#[test]
fn the_worker_names_what_blazesym_cannot() {
    let go = stripped();
    let hot = func_named(&go, "main.hot");
    let mut w = Worker::new(LINES, &[]);
    let out = w.run(&Job::Elf {
        file: built().stripped.clone(),
        addrs: vec![hot.entry, 0x10],
    });
    assert_eq!(out[0].last().unwrap().function.as_deref(), Some("main.hot"));
    assert_eq!(out[1][0].reason, Some(Unresolved::NoSymbol));
    assert!(
        out[1][0].error.as_deref().unwrap().contains(".gopclntab"),
        "{out:?}"
    );
}

/// A copy of `src` at `dst` changed by `edit`.
fn edited(src: &Path, dst: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(src).unwrap();
    edit(&mut bytes);
    std::fs::write(dst, bytes).unwrap();
}

#[test]
fn without_section_headers_the_table_is_found_by_its_magic() {
    let dir = built().stripped.parent().unwrap().join("noshdr");
    edited(&built().stripped, &dir, |b| {
        b[0x28..0x30].fill(0); // e_shoff
        b[0x3c..0x40].fill(0); // e_shnum, e_shstrndx
    });
    let go = GoBinary::open(&dir).unwrap().expect("found by scanning");
    let hot = func_named(&go, "main.hot");
    let f = go.frames(hot.entry, LINES).unwrap().unwrap();
    assert_eq!(f[0].line, Some(line_of("hot-decl")));
    assert!(go.has_inline_trees());
}

#[test]
fn pie_builds_are_named_too() {
    let go = GoBinary::open(&built().pie)
        .unwrap()
        .expect("a stripped PIE Go binary has Go tables");
    let hot = func_named(&go, "main.hot");
    let f = go.frames(hot.entry, LINES).unwrap().unwrap();
    assert_eq!(f[0].line, Some(line_of("hot-decl")));
    assert!(go.has_inline_trees(), "PIE moduledata not found");
    let inlined = (hot.entry..hot.end).any(|pc| go.frames(pc, LINES).unwrap().unwrap().len() == 2);
    assert!(inlined, "no inlined frame in a PIE build");
}

#[test]
fn corrupted_tables_are_errors_not_panics() {
    let good = stripped();
    let hot = func_named(&good, "main.hot");
    let bytes = std::fs::read(&built().stripped).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == [0xf0, 0xff, 0xff, 0xff] || w == [0xf1, 0xff, 0xff, 0xff])
        .expect("a pcHeader");
    let path = built().stripped.parent().unwrap().join("corrupt");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..40 {
        edited(&built().stripped, &path, |b| {
            for _ in 0..(1 + round % 8) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                // The header, the function table and records near its start.
                let i = at + (seed % if round % 2 == 0 { 0x80 } else { 0x4_0000 }) as usize;
                b[i] = (seed >> 32) as u8;
            }
            if round == 39 {
                b.truncate(at + 0x100);
            }
        });
        if let Ok(Some(go)) = GoBinary::open(&path) {
            for pc in (hot.entry..hot.end).chain([0, u64::MAX, go.table().text_start]) {
                let _ = go.frames(pc, LINES);
            }
        }
        let mut w = Worker::new(LINES, &[]);
        let out = w.run(&Job::Elf {
            file: path.clone(),
            addrs: vec![hot.entry, hot.entry + 7],
        });
        assert_eq!(out.len(), 2);
    }
}

/// A one-function table in `version`'s layout (text at 0x1000, 0x40 bytes): `main.outer` at
/// lines 10, 20, 30 of `/src/a.go` by 0x10-byte steps, `main.inner` inlined over 0x10..0x20
/// from the call at offset 8; and its inline tree, written to `tree`.
fn synthetic(version: Version, tree: &Path) -> GoBinary {
    let mut d = vec![0u8; 72];
    let put = |d: &mut Vec<u8>, v: &[u8]| -> u64 {
        let at = d.len() as u64;
        d.extend_from_slice(v);
        at
    };
    let names = put(&mut d, b"main.outer\0main.inner\0");
    let cutab = put(&mut d, &0u32.to_le_bytes());
    let filetab = put(&mut d, b"/src/a.go\0");
    let pctab = put(&mut d, &[0]);
    // Values are zigzag deltas from -1; pcs deltas from the entry; 0 ends a table.
    let pcfile = put(&mut d, &[2, 0x40, 0]) - pctab;
    let pcln = put(&mut d, &[22, 0x10, 20, 0x10, 20, 0x20, 0]) - pctab;
    let inl = put(&mut d, &[0, 0x10, 2, 0x10, 1, 0x20, 0]) - pctab;
    let functab = d.len() as u64;
    let mut ft = Vec::new();
    for w in [0u32, 16, 0x40, 0] {
        ft.extend_from_slice(&w.to_le_bytes());
    }
    put(&mut d, &ft);
    let mut f = Vec::new();
    let mut fields = vec![0u32, 0, 0, 0, 0, pcfile as u32, pcln as u32, 3, 0];
    if version == Version::Go120 {
        fields.push(5); // startLine
    }
    for w in fields {
        f.extend_from_slice(&w.to_le_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 4]); // funcID, flag, pad, nfuncdata
    for w in [0u32, 0, inl as u32, u32::MAX, u32::MAX, u32::MAX, 0] {
        f.extend_from_slice(&w.to_le_bytes());
    }
    put(&mut d, &f);
    let magic: u32 = match version {
        Version::Go118 => 0xffff_fff0,
        Version::Go120 => 0xffff_fff1,
    };
    d[..4].copy_from_slice(&magic.to_le_bytes());
    d[4..8].copy_from_slice(&[0, 0, 1, 8]);
    for (i, w) in [1, 1, 0x1000, names, cutab, filetab, pctab, functab]
        .into_iter()
        .enumerate()
    {
        d[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
    }
    let mut call = Vec::new();
    match version {
        Version::Go118 => {
            call.extend_from_slice(&(-1i16).to_le_bytes());
            call.extend_from_slice(&[0, 0]);
            for w in [0u32, 20, 11, 8] {
                call.extend_from_slice(&w.to_le_bytes());
            }
        }
        Version::Go120 => {
            call.extend_from_slice(&[0, 0, 0, 0]);
            for w in [11u32, 8, 19] {
                call.extend_from_slice(&w.to_le_bytes());
            }
        }
    }
    std::fs::write(tree, &call).unwrap();
    let file = std::fs::File::open(tree).unwrap();
    GoBinary {
        table: Table::parse(d, None).unwrap(),
        inline: Some(InlineTrees::new(file, 0, call.len() as u64)),
    }
}

#[test]
fn both_layouts_read_alike() {
    let dir = built().stripped.parent().unwrap().to_path_buf();
    for version in [Version::Go118, Version::Go120] {
        let go = synthetic(version, &dir.join(format!("tree-{version:?}")));
        assert_eq!(go.table().version, version);
        let at = |pc: u64| -> Vec<(String, u32, bool)> {
            go.frames(pc, LINES)
                .unwrap()
                .unwrap()
                .into_iter()
                .map(|f| (f.function.unwrap(), f.line.unwrap(), f.inlined))
                .collect()
        };
        let s = |n: &str| n.to_string();
        assert_eq!(at(0x1000), [(s("main.outer"), 10, false)], "{version:?}");
        assert_eq!(
            at(0x1018),
            [(s("main.inner"), 20, true), (s("main.outer"), 10, false)],
            "{version:?}"
        );
        assert_eq!(at(0x103f), [(s("main.outer"), 30, false)], "{version:?}");
        let f = go.frames(0x1018, LINES).unwrap().unwrap();
        assert_eq!(f[0].file.as_deref(), Some("/src/a.go"));
        assert!(go.frames(0x1040, LINES).unwrap().is_none());
        assert!(go.frames(0xfff, LINES).unwrap().is_none());
    }
}
