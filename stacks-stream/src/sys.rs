//! Small facts and habits of the running system every tool shares: the host name and boot
//! id recorded in streams and file names, giving what a tool creates under sudo back to the
//! invoking user, stop signals that only set a flag, and giving freed memory back.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// This machine's host name from `gethostname(2)`, unsanitized (up to its first NUL, lossy
/// UTF-8); `unknown` if unavailable.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The running kernel's boot id (`/proc/sys/kernel/random/boot_id`); empty if unavailable.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The user who ran `sudo stacks-…`: what a tool creates is chowned to them, so a profile
/// taken as root can be read, moved and deleted without root.
#[derive(Debug)]
pub struct SudoOwner {
    tool: &'static str,
    uid: u32,
    gid: u32,
    warned: Cell<bool>,
}

impl SudoOwner {
    /// `Some` when we run as root and `SUDO_UID`/`SUDO_GID` name the invoking user; `tool`
    /// names the warning when a chown fails.
    pub fn from_sudo(tool: &'static str) -> Option<Self> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let var = |k| std::env::var(k).ok()?.trim().parse::<u32>().ok();
        let (uid, gid) = (var("SUDO_UID")?, var("SUDO_GID")?);
        (uid != 0).then(|| Self {
            tool,
            uid,
            gid,
            warned: Cell::new(false),
        })
    }

    /// Chown a path. Failure only warns (once): the data is safe either way.
    pub fn chown_path(&self, path: &Path) {
        if let Err(e) = std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid)) {
            self.warn(path, &e);
        }
    }

    /// Chown an open file (before it gets its final name).
    pub fn chown_file(&self, file: &File, path: &Path) {
        if let Err(e) = std::os::unix::fs::fchown(file, Some(self.uid), Some(self.gid)) {
            self.warn(path, &e);
        }
    }

    fn warn(&self, path: &Path, e: &io::Error) {
        if !self.warned.replace(true) {
            eprintln!(
                "{}: warning: cannot give {} to uid {} gid {} (SUDO_UID/SUDO_GID): {e}",
                self.tool,
                path.display(),
                self.uid,
                self.gid
            );
        }
    }
}

static CAUGHT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    CAUGHT.store(true, Ordering::SeqCst);
}

/// Install, for each of `signals` (e.g. `libc::SIGTERM`), a handler that only sets the flag
/// [`signal_caught`] reads. It is installed without `SA_RESTART`, so a read or poll blocked
/// at the time returns `EINTR` and the tool gets to look at the flag.
pub fn catch_signals(signals: &[libc::c_int]) -> io::Result<()> {
    for &sig in signals {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler is
        // async-signal-safe (a single atomic store) and lives for the whole program.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Give the heap's free pages back to the system (glibc's `malloc_trim`), after a tool dropped
/// a large part of what it held (a stack dictionary started over, a file pair's stacks): glibc
/// keeps freed memory in its arenas, and a long-running stage whose allocations come and go in
/// sizes that do not fit the holes left would otherwise grow in RSS without holding more.
/// Costs a walk over the arenas: call it on such events, not per batch.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Have every allocation of 128 KiB or more mapped on its own and unmapped when freed
/// (glibc's `M_MMAP_THRESHOLD`, fixed). glibc otherwise raises that threshold up to 32 MiB
/// each time such a block is freed, after which a stage's large buffers (Arrow batches, their
/// columns) come from the heap: freed, they stay resident until a trim, next to the next
/// batch's, and a long-running stage's peaks carry several batches' worth. Setting the
/// threshold turns that adjustment off. Call it once, first thing.
pub fn map_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; no pointer is involved.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// [`release_free_memory`] at most once a second, for a streaming stage to call per batch.
/// glibc gives a thread arena's pages back only from its top, so freed batches in the middle
/// stay resident: stacks-pack, whose live heap peaked at 17 MiB, held 57 MiB in its reading
/// thread's arena a minute into a system-wide recording. Trimming costs a walk over the free
/// chunks, well under a millisecond at these sizes.
pub fn release_free_memory_now_and_then() {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
        return;
    }
    *last = Some(std::time::Instant::now());
    drop(last);
    release_free_memory();
}

/// Bytes of the process's own memory resident now (`RssAnon` of `/proc/self/status`: heap,
/// thread arenas, stacks), without the pages of files it maps; 0 when unreadable.
pub fn resident_anon_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let kb = s.lines().find_map(|l| l.strip_prefix("RssAnon:"))?;
            kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
        .map_or(0, |kb| kb << 10)
}

/// Take the pages of the process's read-only shared file mappings (`r--s` in
/// `/proc/self/maps`: files mapped whole to be read, such as the binaries a symbolizer reads
/// symbols and debug information from) out of its resident set. They stay in the page cache
/// and fault back in, unchanged, when next read; until then they no longer count in the
/// process's RSS, which would otherwise keep every page of every file it ever read. Returns
/// the bytes of the mappings advised.
pub fn drop_mapped_file_pages() -> u64 {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut advised = 0;
    for line in maps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // Only files (a path after offset, device and inode), never writable or private ones.
        if perms != "r--s" || fields.nth(3).is_none_or(|path| !path.starts_with('/')) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        #[cfg(target_os = "linux")]
        // SAFETY: the range is a whole read-only shared file mapping of this process; for
        // such a mapping MADV_DONTNEED only unmaps its pages, whose contents (the file's) are
        // read again from the page cache at the next access. No memory is freed or changed.
        let ok = unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) == 0
        };
        #[cfg(not(target_os = "linux"))]
        let ok = false;
        if ok {
            advised += (end - start) as u64;
        }
    }
    advised
}

/// Whether one of the signals given to [`catch_signals`] has arrived.
pub fn signal_caught() -> bool {
    CAUGHT.load(Ordering::SeqCst)
}

/// Whether stdout is a terminal (binary output is refused there).
pub fn stdout_is_tty() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}

/// Whether stdout is a pipe or a socket: a stream read by another process as it is written,
/// not kept.
pub fn stdout_is_pipe() -> bool {
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_facts() {
        let h = hostname();
        assert!(!h.is_empty() && !h.contains('\0'));
        assert!(!boot_id().contains('\n'));
    }

    #[test]
    fn a_caught_signal_sets_the_flag() {
        catch_signals(&[libc::SIGUSR2]).unwrap();
        assert!(!signal_caught());
        // SAFETY: raising a signal whose handler was just installed.
        unsafe {
            libc::raise(libc::SIGUSR2);
        }
        assert!(signal_caught());
    }

    /// Resident KiB of the mapping that starts at `addr` (its `Rss:` in smaps).
    fn mapping_rss_kib(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap())
            .expect("mapping listed")
    }

    #[test]
    fn mapped_file_pages_leave_the_resident_set_and_read_back_unchanged() {
        use std::io::Write;
        let len = 4 << 20;
        let path = std::env::temp_dir().join(format!("stacks-sys-{}.bin", std::process::id()));
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        // SAFETY: a fresh read-only shared mapping of a file this test owns, unmapped below.
        let (shared, private) = unsafe {
            use std::os::fd::AsRawFd;
            let shared = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            let private = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(shared != libc::MAP_FAILED && private != libc::MAP_FAILED);
            (shared as *const u8, private as *mut u8)
        };
        // SAFETY: both mappings are `len` bytes long and live until the end of the test.
        let (read, mine) = unsafe {
            (
                std::slice::from_raw_parts(shared, len),
                std::slice::from_raw_parts_mut(private, len),
            )
        };
        mine.fill(7);
        assert_eq!(read, &data[..]);
        assert!(mapping_rss_kib(shared as usize) >= (len as u64 >> 10) / 2);

        assert!(drop_mapped_file_pages() >= len as u64);
        assert_eq!(
            mapping_rss_kib(shared as usize),
            0,
            "file pages still resident"
        );
        assert!(
            mine.iter().all(|&b| b == 7),
            "a private mapping was touched"
        );
        assert_eq!(read, &data[..], "the file reads back the same");
        // SAFETY: unmapping the two mappings made above; the slices are not used after.
        unsafe {
            libc::munmap(shared as *mut libc::c_void, len);
            libc::munmap(private as *mut libc::c_void, len);
        }
    }
}
