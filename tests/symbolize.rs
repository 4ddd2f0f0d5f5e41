//! End-to-end symbolization: debug files by build id, inlines, mismatches, kernel symbols.
//!
//! Fixture programs (tests/fixtures/symbolize) are compiled here with gcc/g++; their raw
//! streams are built directly (module path, build id and file offsets taken from the compiled
//! file with binutils), so no BPF or root is needed and every expected value comes from the
//! fixture's own source markers and symbol table.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use stacks_tests::{
    Frame, Ksym, Row, UFrame, bin, raw_rows_stream, read_frames, read_stream, scratch,
};

fn fixture_src(name: &str) -> PathBuf {
    stacks_tests::crate_dir()
        .join("fixtures/symbolize")
        .join(name)
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A compiled fixture and what binutils says about it.
struct Fixture {
    exe: PathBuf,
    build_id: String,
    /// name → (address, size) from the symbol table (local symbols included).
    syms: HashMap<String, (u64, u64)>,
    /// Names of the functions (text symbols with a size).
    funcs: Vec<String>,
    /// LOAD segments: (file offset, address, file size).
    loads: Vec<(u64, u64, u64)>,
    /// `LINE:name` markers of the source → line number.
    lines: HashMap<String, u32>,
}

fn compile(dir: &Path, src: &str, out: &str, extra: &[&str]) -> Fixture {
    let source = fixture_src(src);
    let compiler = if src.ends_with(".cpp") { "g++" } else { "gcc" };
    let exe = dir.join(out);
    run_ok(
        Command::new(compiler)
            .args(["-O2", "-g", "-fno-omit-frame-pointer"])
            .args(extra)
            .arg("-o")
            .arg(&exe)
            .arg(&source),
    );
    let lines = std::fs::read_to_string(&source)
        .unwrap()
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let m = l.split("LINE:").nth(1)?;
            let name: String = m
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            Some((name, i as u32 + 1))
        })
        .collect();
    describe(&exe, lines)
}

fn describe(exe: &Path, lines: HashMap<String, u32>) -> Fixture {
    Fixture {
        exe: exe.to_path_buf(),
        build_id: build_id(exe),
        syms: symbols(exe),
        funcs: functions(exe),
        loads: loads(exe),
        lines,
    }
}

fn build_id(path: &Path) -> String {
    let notes = run_ok(Command::new("readelf").arg("-n").arg(path));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build id", path.display()))
        .trim()
        .to_string()
}

fn symbols(path: &Path) -> HashMap<String, (u64, u64)> {
    let text = run_ok(Command::new("nm").args(["-S", "--defined-only"]).arg(path));
    let mut out = HashMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            [addr, size, _, name] => {
                out.insert(
                    name.to_string(),
                    (
                        u64::from_str_radix(addr, 16).unwrap(),
                        u64::from_str_radix(size, 16).unwrap(),
                    ),
                );
            }
            [addr, _, name] => {
                out.insert(
                    name.to_string(),
                    (u64::from_str_radix(addr, 16).unwrap(), 0),
                );
            }
            _ => {}
        }
    }
    out
}

fn functions(path: &Path) -> Vec<String> {
    let text = run_ok(Command::new("nm").args(["-S", "--defined-only"]).arg(path));
    text.lines()
        .filter_map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                [_, _, "t" | "T", name] => Some(name.to_string()),
                _ => None,
            },
        )
        .collect()
}

fn loads(path: &Path) -> Vec<(u64, u64, u64)> {
    let text = run_ok(Command::new("readelf").arg("-lW").arg(path));
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&"LOAD")).then(|| {
                let h = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
                (h(f[1]), h(f[2]), h(f[4]))
            })
        })
        .collect()
}

impl Fixture {
    fn addr(&self, sym: &str) -> u64 {
        self.syms
            .get(sym)
            .unwrap_or_else(|| panic!("{sym} not in {}", self.exe.display()))
            .0
    }

    fn end(&self, sym: &str) -> u64 {
        let (a, s) = self.syms[sym];
        assert!(s > 0, "{sym} has no size");
        a + s
    }

    fn offset(&self, vaddr: u64) -> u64 {
        self.loads
            .iter()
            .find(|(_, v, sz)| *v <= vaddr && vaddr < v + sz)
            .map(|(o, v, _)| vaddr - v + o)
            .unwrap_or_else(|| panic!("{vaddr:#x} is in no LOAD segment"))
    }

    fn line(&self, marker: &str) -> u32 {
        self.lines[marker]
    }

    /// A user frame at ELF address `vaddr`, recorded as at `module` (default: the exe).
    fn frame(&self, vaddr: u64) -> UFrame {
        self.frame_as(vaddr, &self.exe)
    }

    fn frame_as(&self, vaddr: u64, module: &Path) -> UFrame {
        UFrame {
            // A plausible process address: the module loaded at 0x5555_0000_0000.
            addr: 0x5555_0000_0000 + vaddr,
            module: Some(module.display().to_string()),
            build_id: Some(self.build_id.clone()),
            offset: Some(self.offset(vaddr)),
            error: None,
            symbol: None,
        }
    }
}

/// Run stacks-symbolize on `rows`; returns the frames of each row and its stderr.
fn symbolize_rows(
    dir: &Path,
    rows: &[Row],
    boot_id: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Vec<Option<Vec<Frame>>>, String) {
    let input = dir.join("in.arrow");
    std::fs::write(&input, raw_rows_stream(rows, 1000, boot_id)).unwrap();
    let out = dir.join("out.arrow");
    let mut cmd = Command::new(bin("stacks-symbolize"));
    cmd.args(args).arg(&input).arg("-o").arg(&out);
    cmd.env_remove("DEBUGINFOD_URLS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let res = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&res.stderr).into_owned();
    assert!(
        res.status.success(),
        "stacks-symbolize {args:?} failed: {stderr}"
    );
    assert!(res.stdout.is_empty(), "stdout must stay empty with -o");
    (read_frames(&read_stream(&out)), stderr)
}

fn names(frames: &[Frame]) -> Vec<Option<&str>> {
    frames.iter().map(|f| f.function.as_deref()).collect()
}

fn ends_with(file: &Option<String>, name: &str) -> bool {
    file.as_deref().is_some_and(|f| f.ends_with(name))
}

/// The inline chain at `mark_leaf` (innermost first), as the fixture's source says.
fn assert_inline_chain(fx: &Fixture, frames: &[Frame]) {
    assert_eq!(
        names(&frames[..3]),
        [Some("leaf_add"), Some("middle"), Some("outer_fn")],
        "{frames:#?}"
    );
    assert_eq!(
        frames[..3].iter().map(|f| f.inlined).collect::<Vec<_>>(),
        [true, true, false]
    );
    assert_eq!(
        frames[..3].iter().map(|f| f.line).collect::<Vec<_>>(),
        [
            Some(fx.line("asm")),
            Some(fx.line("leaf_call")),
            Some(fx.line("middle_call"))
        ],
        "{frames:#?}"
    );
    for f in &frames[..3] {
        assert!(ends_with(&f.file, "inline.c"), "{f:?}");
        assert_eq!(f.addr, frames[0].addr, "one address, several frames");
        assert!(f.error.is_none(), "{f:?}");
    }
}

#[test]
fn inlines_lines_and_return_addresses() {
    let dir = scratch("sym-inline");
    let fx = compile(&dir, "inline.c", "app", &[]);
    let leaf = fx.frame(fx.addr("mark_leaf"));
    // Return addresses: the byte after caller_fn's last instruction (its call returns there
    // only if it is looked up at −1), and main + 1.
    let ret = fx.frame(fx.end("caller_fn"));
    let main = fx.frame(fx.addr("main") + 1);
    let rows = vec![
        Row {
            ustack: Some(vec![leaf.clone(), ret.clone(), main.clone()]),
            ..Default::default()
        },
        Row {
            ustack: Some(vec![
                leaf.clone(),
                UFrame {
                    addr: 0x7fff_0000_1000,
                    error: Some("no file backs this address".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        },
        Row {
            ustack: Some(vec![]),
            ustack_error: Some(-14),
            ..Default::default()
        },
        Row::default(),
    ];
    let (out, stderr) = symbolize_rows(&dir, &rows, None, &[], &[]);
    let f = out[0].as_ref().unwrap();
    assert_inline_chain(&fx, f);
    assert_eq!(names(&f[3..]), [Some("caller_fn"), Some("main")], "{f:#?}");
    for (frame, raw) in f.iter().zip([&leaf, &leaf, &leaf, &ret, &main]) {
        assert!(!frame.kernel);
        assert_eq!(frame.module, raw.module);
        assert_eq!(frame.build_id, raw.build_id);
        assert_eq!(
            frame.offset, raw.offset,
            "the recorded offset, not the looked-up one"
        );
        assert_eq!(frame.addr, raw.addr);
        assert!(
            frame.symbol.is_some(),
            "every resolved frame has its symbol: {frame:?}"
        );
        assert_eq!(frame.symbol, frame.function, "C symbols are not mangled");
    }
    // An address the recorder could not normalize is kept, with its reason.
    let f = out[1].as_ref().unwrap();
    assert_inline_chain(&fx, f);
    assert_eq!(f[3].function, None);
    assert_eq!(f[3].error.as_deref(), Some("no file backs this address"));
    assert_eq!(f[3].reason.as_deref(), Some("not_normalized"));
    assert_eq!(f.len(), 4);
    // A failed capture is a visible marker; a row without stacks has a null stack.
    let f = out[2].as_ref().unwrap();
    assert_eq!(f.len(), 1);
    assert!(
        f[0].function
            .as_deref()
            .unwrap()
            .starts_with("[missed user stack")
    );
    assert!(out[3].is_none());
    assert!(stderr.contains("4 rows"), "{stderr}");

    // --no-inlines: one frame per address; --no-lines: names only.
    let (out, _) = symbolize_rows(&dir, &rows[..1], None, &["--no-inlines"], &[]);
    let f = out[0].as_ref().unwrap();
    assert_eq!(
        names(f),
        [Some("outer_fn"), Some("caller_fn"), Some("main")]
    );
    assert!(f.iter().all(|f| !f.inlined && f.line.is_some()), "{f:#?}");
    let (out, _) = symbolize_rows(&dir, &rows[..1], None, &["--no-lines", "-j", "1"], &[]);
    let f = out[0].as_ref().unwrap();
    assert_eq!(
        names(f),
        [Some("outer_fn"), Some("caller_fn"), Some("main")]
    );
    assert!(
        f.iter().all(|f| f.file.is_none() && f.line.is_none()),
        "{f:#?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn cpp_names_are_demangled() {
    let dir = scratch("sym-cpp");
    let fx = compile(&dir, "widget.cpp", "widget", &[]);
    let mangled = fx
        .syms
        .keys()
        .find(|k| k.starts_with("_Z") && k.contains("Widget7compute"))
        .expect("mangled Widget::compute")
        .clone();
    let demangled = run_ok(Command::new("c++filt").arg(&mangled))
        .trim()
        .to_string();
    assert_ne!(demangled, mangled);
    let rows = vec![Row {
        ustack: Some(vec![fx.frame(fx.addr(&mangled) + 1)]),
        ..Default::default()
    }];
    let (out, _) = symbolize_rows(&dir, &rows, None, &[], &[]);
    let f = out[0].as_ref().unwrap();
    let outer = f.iter().find(|f| !f.inlined).unwrap();
    assert_eq!(
        outer.function.as_deref(),
        Some(demangled.as_str()),
        "{f:#?}"
    );
    assert_eq!(outer.symbol.as_deref(), Some(mangled.as_str()), "{outer:?}");
    assert!(ends_with(&outer.file, "widget.cpp"), "{outer:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The fixture stripped of everything (`strip --strip-all`) and its separate debug file.
fn stripped(dir: &Path, fx: &Fixture) -> (PathBuf, PathBuf) {
    let debug = dir.join("app.debug");
    run_ok(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&fx.exe)
            .arg(&debug),
    );
    let bare = dir.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let s = bare.join("app");
    run_ok(
        Command::new("strip")
            .arg("--strip-all")
            .arg("-o")
            .arg(&s)
            .arg(&fx.exe),
    );
    assert_eq!(build_id(&s), fx.build_id);
    assert!(!symbols(&s).contains_key("outer_fn"), "strip left symbols");
    (s, debug)
}

#[test]
fn separate_debug_files_by_build_id_debuglink_and_b() {
    let dir = scratch("sym-debug");
    let fx = compile(&dir, "inline.c", "app", &[]);
    let (bare, debug) = stripped(&dir, &fx);
    let row = |module: &Path| Row {
        ustack: Some(vec![
            fx.frame_as(fx.addr("mark_leaf"), module),
            fx.frame_as(fx.end("caller_fn"), module),
        ]),
        ..Default::default()
    };

    // Nothing but the stripped binary: unresolved, with a reason.
    let (out, _) = symbolize_rows(&dir, &[row(&bare)], None, &[], &[]);
    let f = out[0].as_ref().unwrap();
    assert!(
        f.iter().all(|f| f.function.is_none() && f.error.is_some()),
        "{f:#?}"
    );
    assert!(
        f.iter().all(|f| f.reason.as_deref() == Some("no_symbol")),
        "{f:#?}"
    );

    // --debug-dir with the debug file under .build-id/xx/rest.debug.
    let ddir = dir.join("debug-root");
    let id = &fx.build_id;
    let sub = ddir.join(".build-id").join(&id[..2]);
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::copy(&debug, sub.join(format!("{}.debug", &id[2..]))).unwrap();
    let dd = ddir.to_str().unwrap();
    let (out, _) = symbolize_rows(&dir, &[row(&bare)], None, &["--debug-dir", dd], &[]);
    let f = out[0].as_ref().unwrap();
    assert_inline_chain(&fx, f);
    assert_eq!(f[3].function.as_deref(), Some("caller_fn"));

    // The binary is gone; the debug file alone still serves (found by build id).
    let gone = dir.join("gone/app");
    let (out, _) = symbolize_rows(&dir, &[row(&gone)], None, &["--debug-dir", dd], &[]);
    assert_inline_chain(&fx, out[0].as_ref().unwrap());

    // Normalized by the kernel in a file the recorder never saw mapped: no module path, only
    // build id + offset (and no address). Found by build id; the frame keeps no made-up path.
    let unnamed = |vaddr: u64| UFrame {
        addr: 0,
        module: None,
        ..fx.frame(vaddr)
    };
    let anonymous = Row {
        ustack: Some(vec![
            unnamed(fx.addr("mark_leaf")),
            unnamed(fx.end("caller_fn")),
        ]),
        ..Default::default()
    };
    let (out, _) = symbolize_rows(&dir, &[anonymous], None, &["--debug-dir", dd], &[]);
    let f = out[0].as_ref().unwrap();
    assert_inline_chain(&fx, f);
    assert_eq!(f[3].function.as_deref(), Some("caller_fn"));
    assert!(f.iter().all(|f| f.module.is_none()), "{f:#?}");

    // .gnu_debuglink next to the binary (in .debug/), no --debug-dir.
    let linked_dir = dir.join("linked");
    std::fs::create_dir_all(linked_dir.join(".debug")).unwrap();
    let linked = linked_dir.join("app");
    run_ok(
        Command::new("objcopy")
            .arg("--add-gnu-debuglink=app.debug")
            .arg(&bare)
            .arg(&linked)
            .current_dir(&dir),
    );
    std::fs::copy(&debug, linked_dir.join(".debug/app.debug")).unwrap();
    assert_eq!(build_id(&linked), fx.build_id);
    let (out, _) = symbolize_rows(&dir, &[row(&linked)], None, &[], &[]);
    assert_inline_chain(&fx, out[0].as_ref().unwrap());

    // -b: an unstripped copy elsewhere, matched by its build id.
    let copy = dir.join("copy-of-app");
    std::fs::copy(&fx.exe, &copy).unwrap();
    let (out, stderr) = symbolize_rows(
        &dir,
        &[row(&bare)],
        None,
        &["-b", copy.to_str().unwrap()],
        &[],
    );
    assert_inline_chain(&fx, out[0].as_ref().unwrap());
    assert!(!stderr.contains("matches no module"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A JIT frame the recorder named from a perf map is that name, with module `[jit]` and no
/// reason; two JIT frames of one name at two addresses stay two frames of one function; an
/// unnamed one next to them stays unresolved.
#[test]
fn perf_map_names_become_the_functions_of_jit_frames() {
    let dir = scratch("sym-jit");
    let jit = |addr: u64, name: Option<&str>| UFrame {
        addr,
        module: name.map(|_| "[jit]".to_string()),
        error: name
            .is_none()
            .then(|| "anonymous memory (JIT code?) that no perf map names".into()),
        symbol: name.map(Into::into),
        ..Default::default()
    };
    let rows = vec![Row {
        ustack: Some(vec![
            jit(0x7f00_0010, Some("JS:*hot /app/x.js:3:13")),
            jit(0x7f00_0800, None),
            jit(0x7f00_0020, Some("JS:*hot /app/x.js:3:13")),
            jit(0x7f00_1000, Some("int Hot.hot(int)")),
        ]),
        ..Default::default()
    }];
    let (out, _) = symbolize_rows(&dir, &rows, None, &[], &[]);
    let f = out[0].as_ref().unwrap();
    let names: Vec<Option<&str>> = f.iter().map(|f| f.function.as_deref()).collect();
    assert_eq!(
        names,
        [
            Some("JS:*hot /app/x.js:3:13"),
            None,
            Some("JS:*hot /app/x.js:3:13"),
            Some("int Hot.hot(int)")
        ]
    );
    for i in [0, 2, 3] {
        assert_eq!(f[i].module.as_deref(), Some("[jit]"), "{:#?}", f[i]);
        assert_eq!(f[i].reason, None, "{:#?}", f[i]);
        assert_eq!(f[i].error, None, "{:#?}", f[i]);
    }
    assert_eq!(
        f[1].reason.as_deref(),
        Some("not_normalized"),
        "{:#?}",
        f[1]
    );
    assert_eq!((f[0].addr, f[2].addr), (0x7f00_0010, 0x7f00_0020));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replaced_binary_is_reported_not_misattributed() {
    let dir = scratch("sym-replaced");
    let v1 = compile(&dir, "inline.c", "app", &[]);
    let saved = dir.join("app-v1");
    std::fs::copy(&v1.exe, &saved).unwrap();
    let rows = vec![Row {
        ustack: Some(vec![
            v1.frame(v1.addr("mark_leaf")),
            v1.frame(v1.end("caller_fn")),
        ]),
        ..Default::default()
    }];
    // Rebuilt after the recording: same path, different code and build id.
    let v2 = compile(&dir, "inline.c", "app", &["-DVARIANT=2"]);
    assert_ne!(v1.build_id, v2.build_id);
    let (out, _) = symbolize_rows(&dir, &rows, None, &[], &[]);
    for f in out[0].as_ref().unwrap() {
        assert_eq!(f.function, None, "{f:?}");
        let e = f.error.as_deref().unwrap();
        assert!(e.contains("build id mismatch"), "{e}");
        assert_eq!(f.reason.as_deref(), Some("module_not_found"));
        assert!(e.contains(&v1.build_id) && e.contains(&v2.build_id), "{e}");
    }
    // -b with a file of another build: reported, not used.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(&v2.exe, other.join("app")).unwrap();
    let b = other.join("app");
    let (out, stderr) = symbolize_rows(&dir, &rows, None, &["-b", b.to_str().unwrap()], &[]);
    let e = out[0].as_ref().unwrap()[0].error.clone().unwrap();
    assert!(e.contains("mismatch") && e.contains("-b"), "{e}");
    assert!(stderr.contains("matches no module"), "{stderr}");
    // -b with the recorded build: used.
    let (out, _) = symbolize_rows(&dir, &rows, None, &["-b", saved.to_str().unwrap()], &[]);
    assert_inline_chain(&v1, out[0].as_ref().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run `cmd` in a mount namespace of its own where a FUSE file system is mounted at `mnt`
/// whose server never answers (what a traced program may leave behind: nobody reads the
/// device, so even the kernel's first request waits). The process holds the device, so the
/// file system goes with it. Needs root and `/dev/fuse`.
fn with_hung_fuse(cmd: &mut Command, mnt: &Path) -> std::fs::File {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .expect("/dev/fuse (the FUSE module) and root, to mount a FUSE file system");
    let fd = dev.as_raw_fd();
    let target = CString::new(mnt.to_str().unwrap()).unwrap();
    let opts = CString::new(format!("fd={fd},rootmode=40000,user_id=0,group_id=0")).unwrap();
    // SAFETY: only system calls between fork and exec, on strings made before.
    unsafe {
        cmd.pre_exec(move || {
            let err = || Err(std::io::Error::last_os_error());
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                || libc::fcntl(fd, libc::F_SETFD, 0) != 0
                || libc::mount(
                    c"hung".as_ptr(),
                    target.as_ptr(),
                    c"fuse.hung".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ) != 0
            {
                return err();
            }
            Ok(())
        });
    }
    dev
}

/// A module on a FUSE file system whose server never answers (a traced program may serve its
/// own files and stop answering): stacks-symbolize does not open it, nor a path leading into
/// it through a symbolic link, and ends promptly with those frames unresolved (`on_fuse`),
/// counted in its summary, while the other modules resolve. The mount does hang whoever
/// looks a name up in it (`stat`, checked first).
#[test]
fn modules_on_a_hung_fuse_mount_are_not_opened() {
    let dir = scratch("sym-fuse");
    let fx = compile(&dir, "inline.c", "app", &[]);
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    std::os::unix::fs::symlink(&mnt, dir.join("into-fuse")).unwrap();
    let row = |module: &Path| Row {
        ustack: Some(vec![
            fx.frame_as(fx.addr("mark_leaf"), module),
            fx.frame_as(fx.end("caller_fn"), module),
        ]),
        ..Default::default()
    };
    let rows = vec![
        row(&mnt.join("app")),
        row(&dir.join("into-fuse/app")),
        row(&fx.exe),
    ];
    let input = dir.join("in.arrow");
    std::fs::write(&input, raw_rows_stream(&rows, 1000, None)).unwrap();

    let wait = |child: &mut std::process::Child, within: std::time::Duration| {
        let start = std::time::Instant::now();
        while start.elapsed() < within {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    };
    let mut stat = Command::new("stat");
    stat.arg(mnt.join("app"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let dev = with_hung_fuse(&mut stat, &mnt);
    let mut child = stat.spawn().unwrap();
    drop(dev);
    let hung = wait(&mut child, std::time::Duration::from_secs(2)).is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        hung,
        "the FUSE mount answered stat: it does not stand for a hung server"
    );

    let out = dir.join("out.arrow");
    let mut cmd = Command::new(bin("stacks-symbolize"));
    cmd.arg(&input)
        .arg("-o")
        .arg(&out)
        .env_remove("DEBUGINFOD_URLS")
        .stderr(std::process::Stdio::piped());
    let dev = with_hung_fuse(&mut cmd, &mnt);
    let start = std::time::Instant::now();
    let mut child = cmd.spawn().unwrap();
    drop(dev);
    let Some(status) = wait(&mut child, std::time::Duration::from_secs(60)) else {
        child.kill().unwrap();
        child.wait().unwrap();
        panic!("stacks-symbolize hung on a module on FUSE");
    };
    let took = start.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    eprintln!("stacks-symbolize beside a hung FUSE mount: {took:?}; {stderr}");
    let frames = read_frames(&read_stream(&out));
    for (i, module) in [(0, "mnt/app"), (1, "into-fuse/app")] {
        let f = frames[i].as_ref().unwrap();
        assert_eq!(f.len(), 2, "{f:#?}");
        for f in f {
            assert_eq!(f.function, None, "{f:?}");
            assert_eq!(f.reason.as_deref(), Some("on_fuse"), "{f:?}");
            assert!(f.module.as_deref().unwrap().ends_with(module), "{f:?}");
            let e = f.error.as_deref().unwrap();
            assert!(e.contains("FUSE") && e.contains("fuse.hung"), "{e}");
        }
    }
    assert_inline_chain(&fx, frames[2].as_ref().unwrap());
    assert!(
        stderr.contains("2 module paths on FUSE file systems not opened"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

const KADDRS: [u64; 3] = [
    0xffff_ffff_8100_0010,
    0xffff_ffff_8100_0120,
    0xffff_ffff_c040_0010,
];

/// A kernel symbol recorded at record time.
fn ksym(symbol: &str, offset: u64, module: Option<&str>) -> Ksym {
    Ksym {
        symbol: symbol.into(),
        offset,
        module: module.map(Into::into),
    }
}

fn recorded_ksyms() -> Vec<Option<Ksym>> {
    vec![
        Some(ksym("rec_leaf_fn", 0x10, None)),
        Some(ksym("rec_caller_fn", 0x20, None)),
        Some(ksym("e1000_xmit", 0x10, Some("e1000"))),
    ]
}

#[test]
fn kernel_frames_use_the_symbols_recorded_at_record_time() {
    let dir = scratch("sym-kernel");
    // The live kernel's symbols differ: a kallsyms with other names at the same addresses.
    let live = dir.join("kallsyms");
    std::fs::write(
        &live,
        "ffffffff81000000 T live_wrong_a\nffffffff81000100 T live_wrong_b\n\
         ffffffffc0400000 T live_wrong_c\t[e1000]\n",
    )
    .unwrap();
    let mut partly = recorded_ksyms();
    partly[1] = None;
    let rows = vec![
        Row {
            kstack: Some(KADDRS.to_vec()),
            kstack_symbols: Some(recorded_ksyms()),
            ..Default::default()
        },
        // An older stream's row: no recorded symbols, recorded during another boot.
        Row {
            kstack: Some(KADDRS.to_vec()),
            ..Default::default()
        },
        Row {
            kstack: Some(KADDRS.to_vec()),
            kstack_symbols: Some(partly),
            ..Default::default()
        },
    ];
    let boot = Some("00000000-0000-0000-0000-not-this-boot");
    let args = ["--kallsyms", live.to_str().unwrap()];
    let (out, _) = symbolize_rows(&dir, &rows, boot, &args, &[]);
    let f = out[0].as_ref().unwrap();
    assert_eq!(
        names(f),
        [
            Some("rec_leaf_fn"),
            Some("rec_caller_fn"),
            Some("e1000_xmit")
        ]
    );
    assert_eq!(
        f.iter().map(|f| f.module.as_deref()).collect::<Vec<_>>(),
        [
            Some("[kernel.kallsyms]"),
            Some("[kernel.kallsyms]"),
            Some("e1000")
        ]
    );
    assert!(
        f.iter()
            .all(|f| f.kernel && f.error.is_none() && f.file.is_none())
    );
    assert!(f.iter().all(|f| f.symbol == f.function), "{f:#?}");
    assert_eq!(f.iter().map(|f| f.addr).collect::<Vec<_>>(), KADDRS);
    for frame in out[1].as_ref().unwrap() {
        assert_eq!(frame.function, None);
        assert!(
            frame.error.as_deref().unwrap().contains("another boot"),
            "{frame:?}"
        );
        assert_eq!(
            frame.reason.as_deref(),
            Some("no_kernel_symbols"),
            "{frame:?}"
        );
    }
    let f = out[2].as_ref().unwrap();
    assert_eq!(names(f), [Some("rec_leaf_fn"), None, Some("e1000_xmit")]);
    assert!(
        f[1].error.as_deref().unwrap().contains("kallsyms"),
        "{:?}",
        f[1]
    );
    assert_eq!(f[1].reason.as_deref(), Some("not_in_kallsyms"));

    // Same boot (a kallsyms of this boot given): recorded symbols still win, the fallback
    // resolves the row without them.
    let live_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let (out, _) = symbolize_rows(&dir, &rows[..2], Some(live_boot.trim()), &args, &[]);
    assert_eq!(
        names(out[0].as_ref().unwrap()),
        [
            Some("rec_leaf_fn"),
            Some("rec_caller_fn"),
            Some("e1000_xmit")
        ]
    );
    assert_eq!(
        names(&out[1].as_ref().unwrap()[..2]),
        [Some("live_wrong_a"), Some("live_wrong_b")]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn vmlinux_adds_file_and_line_to_recorded_kernel_symbols() {
    let dir = scratch("sym-vmlinux");
    // Any ELF file with DWARF serves as "vmlinux": the fixture, whose outer_fn has inlines.
    let fx = compile(&dir, "inline.c", "vmlinux", &[]);
    let off = fx.addr("mark_leaf") - fx.addr("outer_fn");
    let rows = vec![Row {
        kstack: Some(vec![0xffff_ffff_8100_0000 + off, 0xffff_ffff_8200_0000]),
        kstack_symbols: Some(vec![
            Some(ksym("outer_fn", off, None)),
            Some(ksym("not_in_vmlinux", 0x40, None)),
        ]),
        ..Default::default()
    }];
    let vm = fx.exe.to_str().unwrap();
    let (out, _) = symbolize_rows(&dir, &rows, Some("other-boot"), &["--vmlinux", vm], &[]);
    let f = out[0].as_ref().unwrap();
    assert_inline_chain(&fx, f);
    assert!(
        f.iter()
            .all(|f| f.kernel && f.module.as_deref() == Some("[kernel.kallsyms]"))
    );
    assert_eq!(f[3].function.as_deref(), Some("not_in_vmlinux"));
    assert_eq!(f[3].file, None);
    // Without --vmlinux: the recorded names only.
    let (out, _) = symbolize_rows(&dir, &rows, Some("other-boot"), &[], &[]);
    assert_eq!(
        names(out[0].as_ref().unwrap()),
        [Some("outer_fn"), Some("not_in_vmlinux")]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_100k_row_stream_symbolized_twice_is_identical() {
    let dir = scratch("sym-determinism");
    let fx = compile(&dir, "inline.c", "app", &[]);
    let text: Vec<(u64, u64)> = {
        let mut t: Vec<(u64, u64)> = fx
            .funcs
            .iter()
            .map(|f| fx.syms[f])
            .filter(|(_, s)| *s > 0)
            .collect();
        t.sort_unstable();
        t
    };
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let rows: Vec<Row> = (0..100_000)
        .map(|i| {
            let depth = 1 + (next() % 6) as usize;
            let ustack = (0..depth)
                .map(|_| {
                    let (a, s) = text[(next() % text.len() as u64) as usize];
                    let mut f = fx.frame(a + next() % s);
                    f.addr += (i as u64 % 3) << 32; // different processes, same file
                    f
                })
                .collect();
            let k = (next() % 4) as usize;
            Row {
                kstack: Some(KADDRS[..k.min(3)].to_vec()),
                kstack_symbols: Some(recorded_ksyms()[..k.min(3)].to_vec()),
                ustack: Some(ustack),
                ..Default::default()
            }
        })
        .collect();
    let input = dir.join("in.arrow");
    std::fs::write(&input, raw_rows_stream(&rows, 4096, Some("other-boot"))).unwrap();
    let run = |jobs: &str, name: &str| {
        let out = dir.join(name);
        let r = Command::new(bin("stacks-symbolize"))
            .args(["-j", jobs])
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .env_remove("DEBUGINFOD_URLS")
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let input = stacks_stream::open_input(Some(&out)).unwrap();
        let md = input.schema().metadata().clone();
        (md, input.collect::<Result<Vec<_>, _>>().unwrap())
    };
    let (md1, a) = run("2", "a.arrow");
    let (md2, b) = run("2", "b.arrow");
    let (_, c) = run("1", "c.arrow");
    assert_eq!(a.iter().map(|b| b.num_rows()).sum::<usize>(), 100_000);
    assert_eq!(md1, md2);
    assert!(a == b, "two runs differ");
    assert!(a == c, "-j 1 and -j 2 differ");
    // And the output is not trivially equal: frames resolved, with inlines.
    let frames = read_frames(&a);
    let all: Vec<&Frame> = frames.iter().flatten().flatten().collect();
    assert!(
        all.iter()
            .any(|f| f.function.as_deref() == Some("leaf_add") && f.inlined)
    );
    assert!(
        all.iter()
            .filter(|f| !f.kernel)
            .all(|f| f.function.is_some() || f.error.is_some())
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A one-file debuginfod server: `/buildid/<id>/debuginfo` serves `body`, anything else 404.
/// Returns its URL and a counter of requests.
fn debuginfod_server(
    id: String,
    body: Vec<u8>,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut reader = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            loop {
                let mut hdr = String::new();
                if reader.read_line(&mut hdr).unwrap_or(0) == 0 || hdr == "\r\n" {
                    break;
                }
            }
            let want = format!("GET /buildid/{id}/debuginfo ");
            if line.starts_with(&want) {
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(&body);
            } else {
                let _ = s.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        }
    });
    (url, hits)
}

#[test]
fn debuginfod_fetches_by_build_id_into_a_cache() {
    let dir = scratch("sym-debuginfod");
    let fx = compile(&dir, "inline.c", "app", &[]);
    let (bare, debug) = stripped(&dir, &fx);
    let (url, hits) = debuginfod_server(fx.build_id.clone(), std::fs::read(&debug).unwrap());
    let rows = vec![Row {
        ustack: Some(vec![fx.frame_as(fx.addr("mark_leaf"), &bare)]),
        ..Default::default()
    }];
    let cache = dir.join("cache");
    let c = cache.to_str().unwrap();
    let env = [
        ("DEBUGINFOD_URLS", url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", c),
    ];
    let (out, _) = symbolize_rows(&dir, &rows, None, &[], &env);
    assert_inline_chain(&fx, out[0].as_ref().unwrap());
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let cached = cache.join(&fx.build_id).join("debuginfo");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        std::fs::read(&debug).unwrap()
    );
    // From the cache now: the server is gone (a port nothing listens on).
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let env = [
        ("DEBUGINFOD_URLS", dead_url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", c),
    ];
    let (out, _) = symbolize_rows(&dir, &rows, None, &[], &env);
    assert_inline_chain(&fx, out[0].as_ref().unwrap());
    // An unknown build id: unresolved, the reason names debuginfod, and it does not hang.
    let mut other = rows.clone();
    other[0].ustack.as_mut().unwrap()[0].build_id = Some("00".repeat(20));
    let t = std::time::Instant::now();
    let env = [
        ("DEBUGINFOD_URLS", url.as_str()),
        ("DEBUGINFOD_CACHE_PATH", c),
    ];
    let (out, _) = symbolize_rows(&dir, &other, None, &[], &env);
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
    let e = out[0].as_ref().unwrap()[0].error.clone().unwrap();
    assert!(e.contains("debuginfod") && e.contains("not found"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_flags_are_one_line_errors_naming_them() {
    let dir = scratch("sym-flags");
    let input = dir.join("in.arrow");
    std::fs::write(&input, raw_rows_stream(&[Row::default()], 10, None)).unwrap();
    let not_elf = dir.join("notes.txt");
    std::fs::write(
        &not_elf,
        "plain text, long enough to look at: ................................",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--debug-dir".into(), dir.join("nope").display().to_string()],
            "--debug-dir",
        ),
        (vec!["-b".into(), not_elf.display().to_string()], "-b"),
        (
            vec!["--vmlinux".into(), dir.join("nope").display().to_string()],
            "--vmlinux",
        ),
        (vec!["-j".into(), "0".into()], "--jobs"),
    ];
    for (args, flag) in cases {
        let r = Command::new(bin("stacks-symbolize"))
            .args(&args)
            .arg(&input)
            .arg("-o")
            .arg(dir.join("out.arrow"))
            .output()
            .unwrap();
        assert!(!r.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&r.stderr);
        let first = err.lines().next().unwrap_or("");
        assert!(first.contains(flag), "{args:?}: {err}");
        if flag != "--jobs" {
            assert!(first.starts_with("stacks-symbolize: error: "), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rows drawing their stacks from a pool of 24 (so stacks repeat), with null kernel stacks,
/// failed user stacks, rows without any stack, recorded kernel symbols.
fn repeating_rows(fx: &Fixture, n: usize) -> Vec<Row> {
    let text: Vec<u64> = fx
        .funcs
        .iter()
        .map(|f| fx.syms[f])
        .filter(|(_, s)| *s > 0)
        .map(|(a, _)| a)
        .collect();
    let pool: Vec<Row> = (0..24usize)
        .map(|p| {
            let k = p % 4;
            let ustack = (0..1 + p % 5)
                .map(|d| fx.frame(text[(p * 7 + d * 3) % text.len()]))
                .collect();
            let (ustack, ustack_error) = match p % 6 {
                5 => (None, Some(-14)),
                _ => (Some(ustack), None),
            };
            Row {
                kstack: (k > 0).then(|| KADDRS[..k].to_vec()),
                kstack_symbols: (k > 0).then(|| recorded_ksyms()[..k].to_vec()),
                ustack,
                ustack_error,
                ..Default::default()
            }
        })
        .collect();
    (0..n)
        .map(|i| {
            let stacks = if i % 97 == 0 {
                Row::default()
            } else {
                pool[(i * 7) % pool.len()].clone()
            };
            Row {
                time: 1_700_000_000_000_000_000 + i as i64,
                kind: "profile".into(),
                pid: 42,
                tid: 43,
                comm: "app".into(),
                thread: "app".into(),
                value: 10_101_010,
                ..stacks
            }
        })
        .collect()
}

/// A raw stream of `rows` in batches of 500: plain (schema version 1, as older recorders
/// wrote), or with its stack columns dictionary-encoded as `keys` says.
fn raw_stream(rows: &[Row], keys: Option<stacks_testkit::Keys>) -> Vec<u8> {
    let mut md = HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    md.insert("stacks.boot_id".to_string(), "other-boot".to_string());
    let version = if keys.is_some() { "2" } else { "1" };
    md.insert("stacks.schema_version".to_string(), version.to_string());
    let schema = std::sync::Arc::new(stacks_stream::raw_schema(md));
    match keys {
        None => {
            let batches: Vec<_> = rows
                .chunks(500)
                .map(|c| stacks_testkit::batch(&schema, c))
                .collect();
            stacks_testkit::stream_bytes(&schema, &batches, true)
        }
        Some(keys) => {
            let mut e = stacks_testkit::Encoder::new(&schema, keys);
            let batches: Vec<_> = rows.chunks(500).map(|c| e.batch(c)).collect();
            stacks_testkit::stream_bytes(&e.schema(), &batches, true)
        }
    }
}

#[test]
fn plain_and_dictionary_raw_streams_symbolize_alike_each_stack_once() {
    let dir = scratch("sym-dictionary");
    let fx = compile(&dir, "inline.c", "app", &[]);
    let rows = repeating_rows(&fx, 3000);
    // Distinct raw stacks among the rows that have any.
    let distinct = rows
        .iter()
        .filter(|r| r.kstack.is_some() || r.ustack.is_some())
        .map(|r| format!("{:?}", (&r.kstack, &r.ustack, &r.ustack_error)))
        .collect::<std::collections::HashSet<_>>()
        .len();
    assert!(distinct > 10, "{distinct} distinct stacks");
    let mut outputs = Vec::new();
    for (name, keys) in [
        ("plain", None),
        ("per-column", Some(stacks_testkit::Keys::PerColumn)),
        ("shared", Some(stacks_testkit::Keys::SharedRaw)),
    ] {
        let input = dir.join(format!("{name}.raw.arrow"));
        std::fs::write(&input, raw_stream(&rows, keys)).unwrap();
        let out = dir.join(format!("{name}.arrow"));
        let r = Command::new(bin("stacks-symbolize"))
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .env_remove("DEBUGINFOD_URLS")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
        assert!(r.status.success(), "{name}: {stderr}");
        // Each distinct stack once; rows without any stack have no entry.
        assert!(
            stderr.contains("3000 rows,")
                && stderr.contains(&format!("({distinct} distinct stacks:")),
            "{name}: {stderr}"
        );
        let batches = read_stream(&out);
        let schema = batches[0].schema();
        assert_eq!(schema.metadata()["stacks.schema_version"], "2", "{name}");
        for c in ["kstack", "ustack", "kstack_symbols", "stack"] {
            assert!(
                matches!(
                    schema.field_with_name(c).unwrap().data_type(),
                    arrow_schema::DataType::Dictionary(..)
                ),
                "{name}: {c} is dictionary-encoded"
            );
        }
        let last = batches.last().unwrap();
        let entries =
            stacks_stream::dict::Entries::new(last.column_by_name("stack").unwrap()).unwrap();
        assert_eq!(
            entries.values().len(),
            distinct,
            "{name}: one entry per stack"
        );
        outputs.push((name, out, read_frames(&batches)));
    }
    let frames = &outputs[0].2;
    assert_eq!(frames.len(), 3000);
    assert!(frames[0].is_none(), "a row without stacks has no stack");
    let app: Vec<&Frame> = frames.iter().flatten().flatten().collect();
    assert!(
        app.iter()
            .any(|f| !f.kernel && f.function.as_ref().is_some_and(|n| fx.funcs.contains(n))),
        "user frames resolved"
    );
    assert!(app.iter().any(|f| f.kernel && f.function.is_some()));
    assert!(app.iter().any(|f| {
        f.function
            .as_deref()
            .is_some_and(|n| n.contains("missed user stack"))
    }));
    for (name, _, f) in &outputs[1..] {
        assert!(f == frames, "{name}: frames differ from the plain input's");
    }
    // pyarrow reads every output (delta dictionaries); every column, raw stacks included,
    // decodes to the same values whichever form the input had.
    let script = "import sys, pyarrow as pa, pyarrow.ipc as ipc\n\
        ts = [ipc.open_stream(open(p, 'rb')).read_all() for p in sys.argv[1:]]\n\
        cols = [n for n in ts[0].schema.names if n != 'time']\n\
        rows = [[t.column(n).to_pylist() for n in cols] for t in ts]\n\
        assert all(r == rows[0] for r in rows), 'outputs differ'\n\
        s = ts[0].column('stack')\n\
        print(ts[0].num_rows, s.type.value_type.value_type.field(0).name, s[1].as_py()[0]['addr'] > 0)";
    let paths: Vec<String> = outputs
        .iter()
        .map(|(_, p, _)| p.display().to_string())
        .collect();
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    let py = stacks_tests::python(script, &args);
    stacks_tests::check(&py, "pyarrow");
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        "3000 function True"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Raw dictionaries with keys past the end or negative are refused as an invalid stream (the
/// Arrow reader checks keys); a key of a null entry is a row without that stack. No panics.
#[test]
fn broken_raw_dictionaries_are_refused_or_read_as_no_stack() {
    let dir = scratch("sym-broken-dict");
    let rows: Vec<Row> = (0..6u64)
        .map(|i| Row {
            kind: "profile".into(),
            kstack: Some(KADDRS[..1 + (i % 3) as usize].to_vec()),
            kstack_symbols: Some(recorded_ksyms()[..1 + (i % 3) as usize].to_vec()),
            ustack: Some(vec![UFrame {
                addr: 0x5555_0000_1000 + i,
                module: Some("/nonexistent/app".into()),
                build_id: Some("abcd".into()),
                offset: Some(0x1000 + i),
                error: None,
                symbol: None,
            }]),
            ..Default::default()
        })
        .collect();
    let mut md = HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    let schema = std::sync::Arc::new(stacks_stream::raw_schema(md));
    let mut e = stacks_testkit::Encoder::new(&schema, stacks_testkit::Keys::SharedRaw);
    let batch = e.batch(&rows);
    let broken = stacks_testkit::broken_dictionaries(&batch);
    assert_eq!(broken.len(), 9, "three variants of three raw stack columns");
    for (what, b) in broken {
        let input = dir.join("in.arrow");
        std::fs::write(
            &input,
            stacks_testkit::stream_bytes(&e.schema(), &[b], true),
        )
        .unwrap();
        let out = dir.join("out.arrow");
        let o = Command::new(bin("stacks-symbolize"))
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .env_remove("DEBUGINFOD_URLS")
            .output()
            .unwrap();
        if what.ends_with("null entry") {
            stacks_tests::check(&o, &what);
            let frames = read_frames(&read_stream(&out));
            assert_eq!(frames.len(), 6, "{what}");
            assert!(frames[1..].iter().all(Option::is_some), "{what}");
        } else {
            stacks_tests::assert_refused(&o, "stacks-symbolize", 1, "invalid Arrow stream", &what);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A dictionary replaced by a smaller one (a foreign writer's replacement, not a delta) means
/// new keys: stacks are told apart anew, and every row still gets its own stack.
#[test]
fn replaced_raw_dictionaries_start_afresh() {
    let dir = scratch("sym-replaced-dict");
    let row = |k: usize| Row {
        kind: "profile".into(),
        kstack: Some(KADDRS[..k].to_vec()),
        kstack_symbols: Some(recorded_ksyms()[..k].to_vec()),
        ..Default::default()
    };
    let (first, second) = (vec![row(1), row(2), row(3)], vec![row(3), row(1)]);
    let mut md = HashMap::new();
    stacks_stream::stamp(&mut md, "fixture", "0", stacks_stream::stage::RAW);
    let schema = std::sync::Arc::new(stacks_stream::raw_schema(md));
    // Two encoders: the second batch's dictionaries start again from key 0.
    let mut a = stacks_testkit::Encoder::new(&schema, stacks_testkit::Keys::SharedRaw);
    let mut b = stacks_testkit::Encoder::new(&schema, stacks_testkit::Keys::SharedRaw);
    let batches = [a.batch(&first), b.batch(&second)];
    let mut bytes = Vec::new();
    {
        let options = arrow_ipc::writer::IpcWriteOptions::default()
            .with_dictionary_handling(arrow_ipc::writer::DictionaryHandling::Resend);
        let mut w =
            arrow_ipc::writer::StreamWriter::try_new_with_options(&mut bytes, &a.schema(), options)
                .unwrap();
        for batch in &batches {
            w.write(batch).unwrap();
        }
        w.finish().unwrap();
    }
    let input = dir.join("in.arrow");
    std::fs::write(&input, bytes).unwrap();
    let out = dir.join("out.arrow");
    let o = Command::new(bin("stacks-symbolize"))
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    stacks_tests::check(&o, "stacks-symbolize");
    let frames = read_frames(&read_stream(&out));
    let depth: Vec<usize> = frames.iter().map(|f| f.as_ref().unwrap().len()).collect();
    assert_eq!(depth, [1, 2, 3, 3, 1], "each row its own stack");
    let top: Vec<Option<&str>> = frames
        .iter()
        .map(|f| f.as_ref().unwrap().last().unwrap().function.as_deref())
        .collect();
    assert_eq!(top[3], top[2]);
    assert_eq!(top[4], top[0]);
    std::fs::remove_dir_all(&dir).unwrap();
}
