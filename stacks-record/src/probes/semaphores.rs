//! USDT semaphores the recorder sets itself. A probe guarded by a semaphore fires only while
//! its counter is non-zero. libbpf hands the kernel the counter's file offset
//! (`ref_ctr_offset`), and the kernel finds it in a writable mapping of that file offset. When
//! the page holding the counter is mapped twice (the end of the RELRO segment and the start of
//! the data segment share a file page, as lld lays binaries out), that is ambiguous until the
//! dynamic loader has made RELRO read-only: in a process started after the probe was attached,
//! or held at its exec, the counter was not set (seen on 6.18). So the command stacks-record
//! starts is held right after its exec, its probes are attached then, and the semaphores of
//! its executable are incremented at their virtual address through /proc/PID/mem (and
//! decremented at the end if it still runs).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::process::maps;

/// A USDT probe's semaphore: the file and the counter's virtual address in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Semaphore {
    /// The probe as `-e` named it.
    pub probe: String,
    pub path: PathBuf,
    /// The counter's address in the file's ELF image.
    pub vaddr: u64,
    /// A position-independent file (ET_DYN: PIE executable or library): `vaddr` is relative
    /// to where it is loaded.
    pub relocatable: bool,
}

/// The semaphore in libbpf's debug line about it (`usdt: sema  for 'P:N' in exec|lib 'PATH':
/// addr 0xVADDR base 0x… (resolved 0x…) in segment …`): its virtual address, and whether the
/// file is relocatable (`lib`, ET_DYN).
pub(crate) fn semaphore_in_libbpf_line(line: &str) -> Option<(u64, bool)> {
    let rest = line.strip_prefix("usdt: sema ")?;
    let relocatable = match rest.split("' in ").nth(1)?.split_whitespace().next()? {
        "exec" => false,
        "lib" => true,
        _ => return None,
    };
    let hex = rest.split(": addr 0x").nth(1)?.split_whitespace().next()?;
    Some((u64::from_str_radix(hex, 16).ok()?, relocatable))
}

/// Semaphores set in processes, to be cleared at the end.
#[derive(Default)]
pub(crate) struct Enabled {
    /// (pid, address) of each counter incremented.
    set: Vec<(u32, u64)>,
}

impl Enabled {
    /// Increment every semaphore of `sems` that process `pid` maps (held at its exec, that is
    /// its executable); returns the others (in libraries it has not loaded yet).
    pub(crate) fn enable<'s>(
        &mut self,
        pid: u32,
        sems: &'s [Semaphore],
    ) -> Result<Vec<&'s Semaphore>> {
        let mut missed = Vec::new();
        for s in sems {
            let Some(addr) = address_in(pid, s) else {
                missed.push(s);
                continue;
            };
            add(pid, addr, 1).with_context(|| {
                format!("-e {}: setting its semaphore in process {pid}", s.probe)
            })?;
            self.set.push((pid, addr));
        }
        Ok(missed)
    }

    /// Decrement what [`Enabled::enable`] incremented, in the processes still running.
    pub(crate) fn disable(&mut self) {
        for (pid, addr) in self.set.drain(..) {
            // The process may have exited: nothing to undo then.
            let _ = add(pid, addr, -1);
        }
    }
}

/// Where process `pid` has the counter of `s`, when it maps the file: the counter's virtual
/// address in a mapping of the file (same inode), plus, for a relocatable file, where the
/// file's first page is mapped.
fn address_in(pid: u32, s: &Semaphore) -> Option<u64> {
    let inode = std::fs::metadata(&s.path).ok()?.ino();
    let text = maps::read(pid).ok()?;
    // (start, end, file offset) of each mapping of the file.
    let mappings: Vec<(u64, u64, u64)> = maps::parse(&text)
        .filter(|m| m.inode == inode)
        .map(|m| (m.range.start, m.range.end, m.offset))
        .collect();
    let addr = if s.relocatable {
        let base = mappings.iter().find(|m| m.2 == 0)?.0;
        base + s.vaddr
    } else {
        s.vaddr
    };
    mappings
        .iter()
        .any(|&(start, end, _)| start <= addr && addr + 2 <= end)
        .then_some(addr)
}

/// Add `delta` to the 16-bit counter at `addr` in process `pid` (not below zero).
fn add(pid: u32, addr: u64, delta: i32) -> std::io::Result<()> {
    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    let mut b = [0u8; 2];
    mem.read_exact_at(&mut b, addr)?;
    let v = (i32::from(u16::from_ne_bytes(b)) + delta).clamp(0, i32::from(u16::MAX)) as u16;
    mem.write_all_at(&v.to_ne_bytes(), addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libbpf_line() {
        let line = "usdt: sema  for 'p:tick' in lib  '/bin/app': addr 0x299fa8 base 0x665ec \
                    (resolved 0x296fa8) in segment [0x2992a0, 0x299faa] at offset 0x2962a0";
        assert_eq!(semaphore_in_libbpf_line(line), Some((0x299fa8, true)));
        let exec = line.replace("in lib  '", "in exec '");
        assert_eq!(semaphore_in_libbpf_line(&exec), Some((0x299fa8, false)));
        assert_eq!(semaphore_in_libbpf_line("usdt: something else"), None);
    }

    #[test]
    fn counters_of_our_own_memory() {
        // A counter in our own writable data, found through our maps like a semaphore.
        static COUNTER: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let addr = COUNTER.as_ptr() as u64;
        let pid = std::process::id();
        add(pid, addr, 1).unwrap();
        add(pid, addr, 1).unwrap();
        assert_eq!(COUNTER.load(std::sync::atomic::Ordering::SeqCst), 2);
        add(pid, addr, -3).unwrap();
        assert_eq!(COUNTER.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
}
