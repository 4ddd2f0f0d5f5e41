//! Small helpers shared by the resource workloads: system calls issued in the caller's own
//! frame, thread ids, errno, C paths, non-zero pseudo-random fill, argument checks and named
//! threads.
//!
//! Why raw system calls: glibc's wrappers (`send`, `recv`, `write`, `nanosleep`, …) are built
//! without frame pointers. A frame-pointer walk from inside one of them skips the function that
//! called it, or loses the whole stack when the wrapper uses rbp as a scratch register (`send`
//! and `recv` do). The workloads promise that their named functions are on the stack at each
//! system call, so those calls are made here with an inlined `syscall` instruction.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::thread::JoinHandle;

use anyhow::{Context, Result, bail};

/// Bytes in one MiB.
pub(crate) const MIB: u64 = 1 << 20;

/// The calling thread's kernel thread id.
pub(crate) fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The calling thread's CPU time so far, ns (`CLOCK_THREAD_CPUTIME_ID`: the scheduler's
/// sum_exec_runtime, which excludes time preempted or waiting).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The error of the last failed libc call.
pub(crate) fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// True when the last failed call was interrupted by a signal and should be retried.
pub(crate) fn interrupted(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
}

/// Issues system call `nr` with six arguments. Always inlined, so the instruction sits in the
/// caller's frame and a frame-pointer unwind from the kernel starts in the caller.
///
/// # Safety
/// The arguments must be valid for the call: pointers to live memory of the given lengths.
#[inline(always)]
unsafe fn syscall6(nr: libc::c_long, args: [usize; 6]) -> io::Result<usize> {
    let ret: isize;
    // SAFETY: the kernel's system call ABI; the caller vouches for the arguments.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") args[0] as isize => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            in("x4") args[4],
            in("x5") args[5],
            options(nostack),
        );
    }
    if (-4095..0).contains(&ret) {
        Err(io::Error::from_raw_os_error(-ret as i32))
    } else {
        Ok(ret as usize)
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("stacks-workload issues system calls directly on x86_64 and aarch64 only");

/// `openat(AT_FDCWD, path, flags, mode)`: a new descriptor.
#[inline(always)]
pub(crate) fn open(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<libc::c_int> {
    let at = libc::AT_FDCWD as isize as usize;
    // SAFETY: `path` is a live NUL-terminated string.
    let fd = unsafe {
        syscall6(
            libc::SYS_openat,
            [
                at,
                path.as_ptr() as usize,
                flags as usize,
                mode as usize,
                0,
                0,
            ],
        )
    }?;
    Ok(fd as libc::c_int)
}

/// `close(fd)`.
#[inline(always)]
pub(crate) fn close(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: no memory is passed.
    unsafe { syscall6(libc::SYS_close, [fd as usize, 0, 0, 0, 0, 0]) }.map(drop)
}

/// `getppid()`: the cheapest system call, for counting system calls.
#[inline(always)]
pub(crate) fn getppid() -> io::Result<usize> {
    // SAFETY: no memory is passed.
    unsafe { syscall6(libc::SYS_getppid, [0; 6]) }
}

/// `fsync(fd)`.
#[inline(always)]
pub(crate) fn fsync(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: no memory is passed.
    unsafe { syscall6(libc::SYS_fsync, [fd as usize, 0, 0, 0, 0, 0]) }.map(drop)
}

/// `lseek(fd, 0, SEEK_SET)`: back to the start of a file.
pub(crate) fn rewind(fd: libc::c_int) -> io::Result<()> {
    let a = [fd as usize, 0, libc::SEEK_SET as usize, 0, 0, 0];
    // SAFETY: no memory is passed.
    unsafe { syscall6(libc::SYS_lseek, a) }.map(drop)
}

/// `write(fd, buf)`: bytes written.
#[inline(always)]
pub(crate) fn write(fd: libc::c_int, buf: &[u8]) -> io::Result<usize> {
    let a = [fd as usize, buf.as_ptr() as usize, buf.len(), 0, 0, 0];
    // SAFETY: the kernel reads `buf`, which is live for its length.
    unsafe { syscall6(libc::SYS_write, a) }
}

/// `read(fd, buf)`: bytes read.
#[inline(always)]
pub(crate) fn read(fd: libc::c_int, buf: &mut [u8]) -> io::Result<usize> {
    let a = [fd as usize, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    unsafe { syscall6(libc::SYS_read, a) }
}

/// `send(fd, buf, flags)` on a connected socket (the `sendto` system call without an address,
/// as glibc's `send` makes it): bytes sent.
#[inline(always)]
pub(crate) fn send(fd: libc::c_int, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
    let a = [
        fd as usize,
        buf.as_ptr() as usize,
        buf.len(),
        flags as usize,
        0,
        0,
    ];
    // SAFETY: the kernel reads `buf`; no address is passed.
    unsafe { syscall6(libc::SYS_sendto, a) }
}

/// `recv(fd, buf, flags)` (the `recvfrom` system call without an address, as glibc's `recv`
/// makes it): bytes received.
#[inline(always)]
pub(crate) fn recv(fd: libc::c_int, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    let a = [
        fd as usize,
        buf.as_mut_ptr() as usize,
        buf.len(),
        flags as usize,
        0,
        0,
    ];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`; no address is asked for.
    unsafe { syscall6(libc::SYS_recvfrom, a) }
}

/// `nanosleep(req, rem)`.
#[inline(always)]
pub(crate) fn nanosleep(req: &libc::timespec, rem: &mut libc::timespec) -> io::Result<()> {
    let a = [req as *const _ as usize, rem as *mut _ as usize, 0, 0, 0, 0];
    // SAFETY: both point to live timespecs.
    unsafe { syscall6(libc::SYS_nanosleep, a) }.map(drop)
}

/// `mmap(NULL, len, prot, flags, -1, 0)`: a new anonymous mapping.
#[inline(always)]
pub(crate) fn mmap_anon(len: usize, prot: libc::c_int, flags: libc::c_int) -> io::Result<*mut u8> {
    let a = [0, len, prot as usize, flags as usize, -1isize as usize, 0];
    // SAFETY: a new mapping at an address the kernel picks; no existing memory is affected.
    unsafe { syscall6(libc::SYS_mmap, a) }.map(|p| p as *mut u8)
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
/// `addr`..`addr + len` must be a mapping this program owns; the advice may discard contents.
#[inline(always)]
pub(crate) unsafe fn madvise(addr: *mut u8, len: usize, advice: libc::c_int) -> io::Result<()> {
    let a = [addr as usize, len, advice as usize, 0, 0, 0];
    // SAFETY: the caller vouches for the range.
    unsafe { syscall6(libc::SYS_madvise, a) }.map(drop)
}

/// A path as a NUL-terminated C string.
pub(crate) fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{}: path contains a NUL byte", path.display()))
}

/// `mib` MiB in bytes; `what` names the flag in the error when it is zero or too large.
pub(crate) fn mib_bytes(mib: u64, what: &str) -> Result<u64> {
    match mib.checked_mul(MIB) {
        Some(b) if b > 0 => Ok(b),
        _ => bail!("{what} must be positive and below 2^44"),
    }
}

/// `kib` KiB in bytes, as a buffer size; `what` names the flag in the error.
pub(crate) fn kib_bytes(kib: usize, what: &str) -> Result<usize> {
    match kib.checked_mul(1024) {
        Some(b) if b > 0 && b <= 1 << 30 => Ok(b),
        _ => bail!("{what} must be between 1 and 1048576"),
    }
}

/// Fills `buf` with pseudo-random bytes, none of them zero (the low bit of each is set),
/// continuing the generator `state` (xorshift64) so successive buffers differ and nothing can
/// be compressed or deduplicated.
pub(crate) fn fill_nonzero(buf: &mut [u8], state: &mut u64) {
    let mut x = *state;
    let mut words = buf.chunks_exact_mut(8);
    for word in &mut words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&(x | 0x0101_0101_0101_0101).to_le_bytes());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = (x | 0x0101_0101_0101_0101).to_le_bytes();
        tail.copy_from_slice(&bytes[..tail.len()]);
    }
    *state = x;
}

/// Wall-clock time, ns since the Unix epoch (what the `time` column of rows holds).
pub(crate) fn realtime_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Waits until `path` exists (up to a minute): a tracer creates it once attached.
pub(crate) fn wait_for_file(path: &Path) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !path.exists() {
        if std::time::Instant::now() > deadline {
            bail!("{} did not appear within a minute", path.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(())
}

/// Spins on the CPU until this thread has used `ns` more nanoseconds of CPU time (its own CPU
/// clock: time preempted does not count).
#[inline(never)]
pub(crate) fn spin_cpu_ns(ns: u64) -> u64 {
    let start = thread_cpu_ns();
    let mut x = 0u64;
    while thread_cpu_ns() - start < ns {
        for i in 0..2000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

/// Starts `f` in a thread with the given name (its `comm`, at most 15 bytes).
pub(crate) fn spawn_named<T, F>(name: &str, f: F) -> Result<JoinHandle<Result<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .with_context(|| format!("starting thread {name}"))
}

/// Waits for a thread started by [`spawn_named`] and returns its result.
pub(crate) fn join_named<T>(name: &str, handle: JoinHandle<Result<T>>) -> Result<T> {
    match handle.join() {
        Ok(r) => r.with_context(|| format!("thread {name}")),
        Err(_) => bail!("thread {name} panicked"),
    }
}

/// Forks with the raw `clone` system call, issued in the caller's frame (so a stack captured
/// at the fork starts in the caller); the child exits at once with status 0. Returns the
/// child's pid. Only for a single-threaded caller: the child runs no atfork handler.
#[inline(always)]
pub(crate) fn fork_exiting_child() -> io::Result<libc::pid_t> {
    // SAFETY: clone(SIGCHLD) with no stack, tid pointers or TLS is fork(2).
    let pid = unsafe { syscall6(libc::SYS_clone, [libc::SIGCHLD as usize, 0, 0, 0, 0, 0]) }?;
    if pid == 0 {
        // SAFETY: the child only exits; exit_group takes a status.
        let _ = unsafe { syscall6(libc::SYS_exit_group, [0; 6]) };
        unreachable!("exit_group returned");
    }
    Ok(pid as libc::pid_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_is_nonzero_and_continues() {
        let (mut a, mut b) = ([0u8; 21], [0u8; 21]);
        let mut state = 1;
        fill_nonzero(&mut a, &mut state);
        fill_nonzero(&mut b, &mut state);
        assert!(a.iter().chain(&b).all(|&x| x != 0));
        assert_ne!(a, b);
    }
}
