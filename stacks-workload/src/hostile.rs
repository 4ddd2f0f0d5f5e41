//! The `hostile` workload: a traced process that attacks its recorder through what the
//! recorder reads of it. It runs a spin loop from anonymous executable memory (a JIT's code,
//! at a fixed address, [`JIT_AT`], function `hostile_spin` when named) so the recorder looks
//! for its perf map, and makes that map (or something else the recorder reads) hostile:
//! too large, too many lines, binary junk, names of 64 KiB, a symbolic link out of its view,
//! a FIFO. docs/threat-model.md lists what each case checks.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Where the spin loop's code is placed (fixed, so a test can write a map line naming it).
pub(crate) const JIT_AT: u64 = 0x7e57_0000_0000;
/// The spin loop's offset in its page, and its size.
const SPIN_OFFSET: u64 = 0x100;
/// `mov ecx, 0x100000; 1: dec ecx; jnz 1b; ret` (x86-64).
const SPIN: [u8; 10] = [0xb9, 0x00, 0x00, 0x10, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3];

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Case {
    /// A perf map of 1 GiB (sparse: one good line, then zeros with no line end).
    PerfmapHuge,
    /// A perf map of 10 million tiny lines (after one good line).
    PerfmapLines,
    /// A perf map of 64 MiB of random bytes (after one good line).
    PerfmapJunk,
    /// A perf map of 1,024 lines with 64 KiB names (after one good line).
    PerfmapLong,
    /// The perf map a symbolic link to LINK_TO (default /etc/shadow).
    PerfmapSymlink,
    /// The perf map a FIFO nobody writes.
    PerfmapFifo,
    /// A well-behaved perf map: the good line only.
    PerfmapGood,
    /// Re-executes itself from a copy of its executable with corrupt section headers and
    /// contents (`.eh_frame` wrapping around the address space, `.eh_frame_hdr` renamed
    /// `.gopclntab` over junk, `.symtab` renamed away, `.strtab` of 4 GiB in a sparse file,
    /// notes with sizes past their section), which then runs `perfmap-good` with a native
    /// spin (`hostile_native_spin`) between the calls of the JIT code. The copy is left in
    /// /tmp for the symbolizer: remove it after.
    ElfCorrupt,
    /// Its thread's span context (tracing-stacks' `otel_thread_ctx_v1`) switched, between
    /// calls of the JIT code, among hostile records: one announcing 65,535 attribute bytes
    /// and a name of 255 (past the record, invalid UTF-8, control characters), one ending
    /// where its page ends (the next one unmapped), a kernel address, and a record whose span
    /// id changes on every call (a million ids) while it is read.
    SpanRecords,
    /// Copies its executable to /tmp/hostile-mapped-PID, maps the copy's code segment and runs
    /// its native spin (`hostile_native_spin`) from there between the calls of the JIT code,
    /// while a thread truncates the copy to nothing and writes it back, over and over (every
    /// 10 ms; its own faults meanwhile wait for the file's return): a recorder reading the
    /// copy's CFI through a mapping of it faults (`SIGBUS`). The copy is written back whole at
    /// the end and left in /tmp for the symbolizer: remove it after.
    MappedTruncate,
    /// Maps [`CFI_FILES`] files of its own making executable before it spins, each an ELF
    /// file whose `.eh_frame` claims [`CFI_CLAIMED`] bytes (zeros, in a sparse file): more CFI
    /// than a recorder reading the CFI of every file a process maps can hold. The files are
    /// removed at the end.
    CfiMany,
    /// Runs PYTHON (CPython 3.13 or 3.14) on a script whose thread `spinner` spins in C under
    /// the Python frame of `spin` while the main thread rewrites that frame's caller link in
    /// place: a loop onto itself, a kernel address, an unmapped page, flipping between good and
    /// bad, then the caller's code object garbage (each undone before the next, all before the
    /// interpreter could follow them). The perf map and JIT code are not used.
    PythonFrames,
}

#[derive(clap::Args)]
pub(crate) struct HostileArgs {
    /// What to attack the recorder with.
    #[arg(long, value_enum)]
    case: Case,
    /// How long to run the spin loop, in seconds (after the attack is set up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// The file the perf map links to (`perfmap-symlink`).
    #[arg(long, value_name = "PATH", default_value = "/etc/shadow")]
    link_to: std::path::PathBuf,
    /// Spin in native code too (`hostile_native_spin`) between calls of the JIT code.
    #[arg(long, hide = true)]
    native: bool,
    /// The CPython the `python-frames` case runs.
    #[arg(long, value_name = "PATH", default_value = "python3")]
    python: std::path::PathBuf,
}

/// The name the good line gives the spin loop.
pub(crate) const GOOD_NAME: &str = "hostile_spin";

pub(crate) fn run(a: &HostileArgs) -> Result<Value> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        bail!("--seconds must be positive");
    }
    if !cfg!(target_arch = "x86_64") {
        bail!("the hostile workload's code is x86-64 machine code");
    }
    match a.case {
        Case::ElfCorrupt => return reexec_corrupt(a),
        Case::PythonFrames => return python_frames(a),
        _ => {}
    }
    let spin = map_code()?;
    let mut records = match a.case {
        Case::SpanRecords => Some(SpanRecords::new()?),
        _ => None,
    };
    let path = format!("/tmp/perf-{}.map", std::process::id());
    let _ = std::fs::remove_file(&path);
    let setup = Instant::now();
    let written = write_map(a, &path)?;
    let mut truncating = match a.case {
        Case::MappedTruncate => Some(Truncating::start()?),
        _ => None,
    };
    let cfi_files = match a.case {
        Case::CfiMany => map_cfi_files()?,
        _ => Vec::new(),
    };
    let native: Option<fn(u64) -> u64> = match &truncating {
        Some(t) => Some(t.spin),
        None => a.native.then_some(hostile_native_spin as fn(u64) -> u64),
    };
    let setup_ns = setup.elapsed().as_nanos() as u64;
    let start = Instant::now();
    let budget = Duration::from_secs_f64(a.seconds);
    let mut calls = 0u64;
    while start.elapsed() < budget {
        // SAFETY: `spin` is the loop's code, mapped executable, which only counts down and
        // returns.
        unsafe { spin() };
        if let Some(r) = &mut records {
            r.next(calls);
        }
        if let Some(native) = native {
            std::hint::black_box(native(std::hint::black_box(200_000)));
        }
        calls += 1;
    }
    let _ = std::fs::remove_file(&path);
    let truncations = match truncating.take() {
        Some(t) => t.stop()?,
        None => 0,
    };
    for f in &cfi_files {
        let _ = std::fs::remove_file(f);
    }
    Ok(serde_json::json!({
        "workload": "hostile",
        "case": format!("{:?}", a.case),
        "pid": std::process::id(),
        "jit_at": JIT_AT + SPIN_OFFSET,
        "map_bytes": written,
        "setup_ns": setup_ns,
        "calls": calls,
        "truncations": truncations,
        "cfi_files": cfi_files.len(),
        "cfi_claimed_bytes": cfi_files.len() as u64 * CFI_CLAIMED,
        "wall_ns": start.elapsed().as_nanos() as u64,
    }))
}

/// Where [`Case::MappedTruncate`] mapped the copy's code, and its length.
static MAPPED: AtomicUsize = AtomicUsize::new(0);
static MAPPED_LEN: AtomicUsize = AtomicUsize::new(0);
/// The copy is cut short now.
static CUT: AtomicBool = AtomicBool::new(false);

/// `SIGBUS` in the copy's code while it is cut short: wait until it is written back, and run
/// the instruction again. Any other `SIGBUS` kills the process as it would have.
extern "C" fn wait_for_the_file(_: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for a SIGBUS, which carries the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    let base = MAPPED.load(Ordering::SeqCst);
    if !(base..base + MAPPED_LEN.load(Ordering::SeqCst)).contains(&addr) {
        // SAFETY: back to the default action; the fault repeats and ends the process.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        return;
    }
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000,
    };
    while CUT.load(Ordering::SeqCst) {
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
}

/// [`Case::MappedTruncate`]: the copy of the executable, its code mapped, and the thread
/// truncating it.
struct Truncating {
    /// `hostile_native_spin` in the copy's code.
    spin: fn(u64) -> u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<u64>>,
}

impl Truncating {
    fn start() -> Result<Truncating> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::FileExt;
        let original = std::fs::read("/proc/self/exe").context("reading /proc/self/exe")?;
        let path = format!("/tmp/hostile-mapped-{}", std::process::id());
        std::fs::write(&path, &original).with_context(|| format!("writing {path}"))?;
        let file = File::options().read(true).write(true).open(&path)?;
        // The executable mapping holding the native spin, and the same range of the copy.
        let at = hostile_native_spin as fn(u64) -> u64 as usize as u64;
        let maps = std::fs::read_to_string("/proc/self/maps")?;
        let (start, end, offset) = maps
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (s, e) = f.next()?.split_once('-')?;
                let (s, e) = (
                    u64::from_str_radix(s, 16).ok()?,
                    u64::from_str_radix(e, 16).ok()?,
                );
                let off = u64::from_str_radix(f.nth(1)?, 16).ok()?;
                (s..e).contains(&at).then_some((s, e, off))
            })
            .context("no mapping holds hostile_native_spin")?;
        let len = (end - start) as usize;
        // SAFETY: a fresh private mapping of the copy, at an address the kernel picks.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            bail!("mapping {path}: {}", std::io::Error::last_os_error());
        }
        MAPPED.store(base as usize, Ordering::SeqCst);
        MAPPED_LEN.store(len, Ordering::SeqCst);
        // The code faults too while the file is cut short: it waits for the file's return.
        // SAFETY: a handler that only reads atomics and sleeps (async-signal-safe).
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = wait_for_the_file as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO;
            if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) != 0 {
                bail!("sigaction: {}", std::io::Error::last_os_error());
            }
        }
        // SAFETY: the same code at the same distance from its segment's start as in the
        // running executable, whose calls are relative to it.
        let spin = unsafe {
            std::mem::transmute::<*mut u8, fn(u64) -> u64>(
                (base as *mut u8).add((at - start) as usize),
            )
        };
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        // Written back up to the end of the mapped code: the headers and CFI sections before it.
        let head = original[..(offset as usize + len).min(original.len())].to_vec();
        let full = original.len() as u64;
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !stopped.load(Ordering::Relaxed) {
                CUT.store(true, Ordering::SeqCst);
                file.set_len(0)?;
                std::thread::sleep(Duration::from_millis(5));
                file.write_all_at(&head, 0)?;
                file.set_len(full)?;
                CUT.store(false, Ordering::SeqCst);
                n += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            file.write_all_at(&original, 0)?;
            Ok(n)
        });
        Ok(Truncating { spin, stop, thread })
    }

    /// Stop truncating (the copy written back whole); how many times it was truncated.
    fn stop(self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let n = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the truncating thread panicked"))??;
        Ok(n)
    }
}

/// The spin loop copied into anonymous memory at [`JIT_AT`], made executable.
fn map_code() -> Result<unsafe extern "C" fn()> {
    // SAFETY: a fresh anonymous mapping at an address nothing else holds (NOREPLACE).
    let page = unsafe {
        libc::mmap(
            JIT_AT as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED || page as u64 != JIT_AT {
        bail!(
            "mapping the code page at {JIT_AT:#x}: {}",
            std::io::Error::last_os_error()
        );
    }
    let code = (JIT_AT + SPIN_OFFSET) as *mut u8;
    // SAFETY: the page is ours and writable; then made read-execute only.
    unsafe {
        std::ptr::copy_nonoverlapping(SPIN.as_ptr(), code, SPIN.len());
        if libc::mprotect(page, 4096, libc::PROT_READ | libc::PROT_EXEC) != 0 {
            bail!("mprotect: {}", std::io::Error::last_os_error());
        }
        Ok(std::mem::transmute::<*mut u8, unsafe extern "C" fn()>(code))
    }
}

/// The good line: the spin loop named [`GOOD_NAME`].
fn good_line() -> String {
    format!("{:x} {:x} {GOOD_NAME}\n", JIT_AT + SPIN_OFFSET, SPIN.len())
}

/// Write the case's perf map at `path`; its size in bytes.
fn write_map(a: &HostileArgs, path: &str) -> Result<u64> {
    let create = || File::create(path).with_context(|| format!("creating {path}"));
    match a.case {
        Case::PerfmapGood | Case::MappedTruncate | Case::CfiMany => {
            std::fs::write(path, good_line())?;
        }
        Case::PerfmapHuge => {
            let mut f = create()?;
            f.write_all(good_line().as_bytes())?;
            f.set_len(1 << 30)?;
        }
        Case::PerfmapLines => {
            let mut f = BufWriter::with_capacity(1 << 20, create()?);
            f.write_all(good_line().as_bytes())?;
            // Tiny and distinct: each would be an entry of its own (written by hand: a
            // formatter per line takes most of a minute in a debug build).
            let mut line = Vec::with_capacity(32);
            for i in 0..10_000_000u64 {
                line.clear();
                let start = 0x1000 + i;
                let digits = (64 - start.leading_zeros()).div_ceil(4);
                for d in (0..digits).rev() {
                    line.push(b"0123456789abcdef"[((start >> (4 * d)) & 0xf) as usize]);
                }
                line.extend_from_slice(b" 1 f\n");
                f.write_all(&line)?;
            }
            f.flush()?;
        }
        Case::PerfmapJunk => {
            let mut f = BufWriter::with_capacity(1 << 20, create()?);
            f.write_all(good_line().as_bytes())?;
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..(64 << 20) / 8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                f.write_all(&x.to_ne_bytes())?;
            }
            f.flush()?;
        }
        Case::PerfmapLong => {
            let mut f = BufWriter::with_capacity(1 << 20, create()?);
            f.write_all(good_line().as_bytes())?;
            let name = "n".repeat(64 << 10);
            for i in 0..1024u64 {
                writeln!(f, "{:x} 10 {name}", 0x1000 + 0x10 * i)?;
            }
            f.flush()?;
        }
        Case::PerfmapSymlink => {
            std::os::unix::fs::symlink(&a.link_to, path)
                .with_context(|| format!("linking {path} to {}", a.link_to.display()))?;
            return Ok(0);
        }
        Case::ElfCorrupt | Case::PythonFrames => unreachable!("run by another process"),
        Case::SpanRecords => {
            std::fs::write(path, good_line())?;
        }
        Case::PerfmapFifo => {
            let c = std::ffi::CString::new(path)?;
            // SAFETY: a NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o644) } != 0 {
                bail!("mkfifo {path}: {}", std::io::Error::last_os_error());
            }
            return Ok(0);
        }
    }
    let mut f = File::open(path)?;
    Ok(f.seek(SeekFrom::End(0))?)
}

/// Files [`Case::CfiMany`] maps.
const CFI_FILES: u64 = 12;
/// The `.eh_frame` each claims: under a recorder's bound for one file, 288 MiB in all.
const CFI_CLAIMED: u64 = 24 << 20;

/// [`Case::CfiMany`]: write its files (`/tmp/hostile-cfi-PID-N`) and map their first page
/// executable (left mapped while the process lives); their paths.
fn map_cfi_files() -> Result<Vec<String>> {
    use std::os::fd::AsRawFd;
    let image = cfi_elf(CFI_CLAIMED);
    let mut paths = Vec::new();
    for n in 0..CFI_FILES {
        let path = format!("/tmp/hostile-cfi-{}-{n}", std::process::id());
        std::fs::write(&path, &image).with_context(|| format!("writing {path}"))?;
        let file = File::options().read(true).write(true).open(&path)?;
        // Sparse: the section lies past the bytes written.
        file.set_len(CFI_AT + CFI_CLAIMED)?;
        // SAFETY: a fresh private mapping of the file, at an address the kernel picks.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!("mapping {path}: {}", std::io::Error::last_os_error());
        }
        paths.push(path);
    }
    Ok(paths)
}

/// Where [`cfi_elf`]'s `.eh_frame` starts in the file.
const CFI_AT: u64 = 1 << 20;

/// The headers of a 64-bit ELF file (one loadable segment at 0, executable) whose sections
/// are `.text` (in the first page), `.eh_frame` of `claimed` bytes at [`CFI_AT`] (past the
/// headers written: zeros once the file is extended) and `.shstrtab`.
fn cfi_elf(claimed: u64) -> Vec<u8> {
    let mut b = vec![0u8; 0x400];
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
    // ELF header: 64-bit, little-endian, ET_DYN, x86-64.
    put(&mut b, 0, b"\x7fELF\x02\x01\x01");
    put(&mut b, 16, &3u16.to_le_bytes());
    put(&mut b, 18, &62u16.to_le_bytes());
    put(&mut b, 20, &1u32.to_le_bytes());
    put(&mut b, 32, &0x40u64.to_le_bytes()); // e_phoff
    put(&mut b, 40, &0x200u64.to_le_bytes()); // e_shoff
    put(&mut b, 52, &64u16.to_le_bytes()); // e_ehsize
    put(&mut b, 54, &56u16.to_le_bytes()); // e_phentsize
    put(&mut b, 56, &1u16.to_le_bytes()); // e_phnum
    put(&mut b, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut b, 60, &4u16.to_le_bytes()); // e_shnum
    put(&mut b, 62, &3u16.to_le_bytes()); // e_shstrndx
    // PT_LOAD, R+X, offset 0 at address 0, one page.
    let ph = 0x40;
    put(&mut b, ph, &1u32.to_le_bytes());
    put(&mut b, ph + 4, &5u32.to_le_bytes());
    put(&mut b, ph + 32, &0x1000u64.to_le_bytes());
    put(&mut b, ph + 40, &0x1000u64.to_le_bytes());
    put(&mut b, ph + 48, &0x1000u64.to_le_bytes());
    let names = b"\0.text\0.eh_frame\0.shstrtab\0";
    put(&mut b, 0x100, names);
    // Section headers: null, .text, .eh_frame, .shstrtab.
    let section =
        |b: &mut Vec<u8>, i: usize, name: u32, ty: u32, flags: u64, at: u64, size: u64| {
            let h = 0x200 + 64 * i;
            b[h..h + 4].copy_from_slice(&name.to_le_bytes());
            b[h + 4..h + 8].copy_from_slice(&ty.to_le_bytes());
            b[h + 8..h + 16].copy_from_slice(&flags.to_le_bytes());
            b[h + 16..h + 24].copy_from_slice(&(if flags != 0 { at } else { 0 }).to_le_bytes());
            b[h + 24..h + 32].copy_from_slice(&at.to_le_bytes());
            b[h + 32..h + 40].copy_from_slice(&size.to_le_bytes());
            b[h + 48..h + 56].copy_from_slice(&1u64.to_le_bytes());
        };
    const PROGBITS: u32 = 1;
    const STRTAB: u32 = 3;
    const ALLOC_EXEC: u64 = 0x6;
    const ALLOC: u64 = 0x2;
    section(&mut b, 1, 1, PROGBITS, ALLOC_EXEC, 0x300, 0x100);
    section(&mut b, 2, 7, PROGBITS, ALLOC, CFI_AT, claimed);
    section(&mut b, 3, 17, STRTAB, 0, 0x100, names.len() as u64);
    b
}

/// Native work between the calls of the JIT code (`--native`).
#[inline(never)]
fn hostile_native_spin(n: u64) -> u64 {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = std::hint::black_box(x);
    }
    x
}

/// Copy this executable to `/tmp/hostile-elf-PID` with corrupt sections (see
/// [`Case::ElfCorrupt`]) and execute it (it never returns but by failing).
fn reexec_corrupt(a: &HostileArgs) -> Result<Value> {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let mut elf = std::fs::read("/proc/self/exe").context("reading /proc/self/exe")?;
    let len = elf.len() as u64;
    corrupt(&mut elf, len)?;
    let path = format!("/tmp/hostile-elf-{}", std::process::id());
    std::fs::write(&path, &elf).with_context(|| format!("writing {path}"))?;
    // Sparse: the 4 GiB `.strtab` lies past the bytes written.
    File::options()
        .write(true)
        .open(&path)?
        .set_len(len + (4 << 30) + 4096)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    let err = std::process::Command::new(&path)
        .arg0("stacks-workload")
        .args(["hostile", "--case", "perfmap-good", "--native", "--seconds"])
        .arg(a.seconds.to_string())
        .exec();
    Err(err).with_context(|| format!("executing {path}"))
}

/// Corrupt the section headers and notes of ELF image `elf` (64-bit little-endian, `len`
/// bytes written of a file made 4 GiB longer).
fn corrupt(elf: &mut [u8], len: u64) -> Result<()> {
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        bail!("not a 64-bit little-endian ELF file");
    }
    let shoff = u64_at(elf, 0x28) as usize;
    let (shentsize, shnum, shstrndx) = (u16_at(elf, 0x3a), u16_at(elf, 0x3c), u16_at(elf, 0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab_off = u64_at(elf, header(shstrndx) + 0x18) as usize;
    let mut done = Vec::new();
    for i in 0..shnum {
        let h = header(i);
        let name_at = strtab_off + u32_at(elf, h) as usize;
        let end = elf[name_at..].iter().position(|&b| b == 0).unwrap_or(0);
        let name = String::from_utf8_lossy(&elf[name_at..name_at + end]).into_owned();
        let (off, size) = (
            u64_at(elf, h + 0x18) as usize,
            u64_at(elf, h + 0x20) as usize,
        );
        let mut put = |at: usize, v: u64| elf[at..at + 8].copy_from_slice(&v.to_le_bytes());
        match name.as_str() {
            // Wraps around: offset + size overflows.
            ".eh_frame" => {
                put(h + 0x18, u64::MAX - 0xfff);
                put(h + 0x20, 0x10_0000);
            }
            ".strtab" => {
                put(h + 0x18, len);
                put(h + 0x20, 4 << 30);
            }
            ".symtab" => elf[name_at + 1] = b'x',
            ".eh_frame_hdr" if size >= 64 => {
                elf[name_at..name_at + 11].copy_from_slice(b".gopclntab\0");
                // Go 1.20's magic, then header fields and offsets all pointing far away.
                elf[off..off + 8].copy_from_slice(&[0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8]);
                for at in (off + 8..off + size - 7).step_by(8) {
                    elf[at..at + 8].copy_from_slice(&(u64::MAX - at as u64).to_le_bytes());
                }
            }
            // The note's sizes past its section (not the notes the kernel and the loader
            // read at exec: `.note.gnu.property`, `.note.ABI-tag`).
            ".note.gnu.build-id" | ".note.stapsdt" if size >= 12 => {
                elf[off..off + 4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
                elf[off + 4..off + 8].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
            }
            _ => continue,
        }
        done.push(name);
    }
    if !done.iter().any(|n| n == ".eh_frame") {
        bail!("no .eh_frame to corrupt (sections: {done:?})");
    }
    Ok(())
}

unsafe extern "C" {
    /// tracing-stacks' C side: point this thread's context at a record (null: no span).
    fn stacks_tracing_set(record: *const u8);
}

/// The hostile span records of [`Case::SpanRecords`], in memory that stays mapped.
struct SpanRecords {
    /// Announces 65,535 attribute bytes; a name attribute of 255 bytes running past it.
    long: Vec<u8>,
    /// Its header and first attributes at the end of a page whose next page is unmapped.
    edge: *const u8,
    /// Its span id changed at every call.
    changing: Vec<u8>,
}

impl SpanRecords {
    fn new() -> Result<Self> {
        let header = |span: u64, attrs: u16| {
            let mut b = vec![0u8; 28];
            b[..16].copy_from_slice(&0xbad_u128.to_be_bytes());
            b[16..24].copy_from_slice(&span.to_be_bytes());
            b[24] = 1;
            b[26..28].copy_from_slice(&attrs.to_le_bytes());
            b
        };
        let mut long = header(0xbad1, u16::MAX);
        long.extend_from_slice(&[0, 255, b'n', 0xff, 0xfe, 0x1b, b'[', b'2', b'J', 0]);
        // Two pages, the second unmapped: the record's last byte is the first page's.
        // SAFETY: a fresh anonymous mapping; the second page is ours to unmap.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            bail!("mmap: {}", std::io::Error::last_os_error());
        }
        let mut edge = header(0xbad2, 40);
        edge.extend_from_slice(&[0, 38]);
        edge.extend_from_slice(&[b'e'; 38]);
        // SAFETY: the record fits in the first page; the second is unmapped after.
        let at = unsafe {
            let at = page.cast::<u8>().add(4096 - edge.len());
            std::ptr::copy_nonoverlapping(edge.as_ptr(), at, edge.len());
            libc::munmap(page.cast::<u8>().add(4096).cast(), 4096);
            at
        };
        let mut changing = header(1, 7);
        changing.extend_from_slice(&[0, 5, b'c', b'h', b'a', b'n', b'g']);
        Ok(SpanRecords {
            long,
            edge: at,
            changing,
        })
    }

    /// Point the thread's context at the next hostile record (call `n`).
    fn next(&mut self, n: u64) {
        let id = 0x1000 + n % 1_000_000;
        self.changing[16..24].copy_from_slice(&id.to_be_bytes());
        let record = match n % 4 {
            0 => self.long.as_ptr(),
            1 => self.edge,
            2 => 0xffff_8880_0000_0000usize as *const u8,
            _ => self.changing.as_ptr(),
        };
        // SAFETY: stores the pointer in this thread's context; the recorder only reads it.
        unsafe { stacks_tracing_set(record) };
    }
}

/// The `python-frames` script, run by `--python` (it prints its own report; never returns but
/// by failing).
fn python_frames(a: &HostileArgs) -> Result<Value> {
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(&a.python)
        .args(["-c", include_str!("hostile_frames.py")])
        .arg(a.seconds.to_string())
        .exec();
    Err(err).with_context(|| format!("executing {}", a.python.display()))
}
