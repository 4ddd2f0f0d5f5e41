//! DWARF unwinding of `d` stacks: the registers and stack copy a record carries are unwound
//! with framehop over the CFI (`.eh_frame` through its `.eh_frame_hdr` index, `.debug_frame`)
//! of the files the process maps, read while it lives, or, once its map is gone, from the exit
//! snapshot its exit record carried ([`ExitMaps`]); where that stops early (the copy ends, a
//! frame has no CFI and no frame pointer), the kernel's frame-pointer walk continues it when
//! it passes through the same return address, otherwise the stack is marked truncated.

use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

use framehop::Error as UnwindError;
use framehop::Unwinder;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};

use crate::kernel::event::{DwarfStack, MAX_DEPTH};

mod cfi;
use crate::process::exit_maps::{ExitMaps, What};
use crate::process::maps;
use cfi::{FileCache, Mapping, Section, parse_maps};

/// How a user stack was unwound (the `ustack_unwind` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// By frame pointers only (`u` stacks, or a `d` stack whose CFI unwind gave nothing).
    Fp,
    /// By CFI from the top to the root.
    Dwarf,
    /// By CFI, then continued by the frame-pointer walk.
    DwarfFp,
}

impl Method {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Method::Fp => "fp",
            Method::Dwarf => "dwarf",
            Method::DwarfFp => "dwarf+fp",
        }
    }
}

/// A `d` stack unwound: its addresses (innermost first: the instruction pointer, then return
/// addresses as they are on the stack), how, and whether it ends before the stack's root
/// (`None`: not known, as where the frame-pointer walk ends).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unwound {
    pub addrs: Vec<u64>,
    pub method: Method,
    pub truncated: Option<bool>,
}

/// What the summary reports about `d` stacks.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct UnwindCounts {
    pub stacks: u64,
    /// Unwound by CFI to the root.
    pub complete: u64,
    /// Continued by the frame-pointer walk.
    pub spliced: u64,
    /// The frame-pointer walk alone (CFI gave no frame past the first).
    pub fp_only: u64,
    /// Ended before the root.
    pub truncated: u64,
    /// Stacks of processes whose memory map could not be read (exited first) and whose exit
    /// record carried no snapshot.
    pub no_map: u64,
    /// Processes whose map was taken from their exit snapshot.
    pub from_snapshot: u64,
    /// Files of exit snapshots not read (deleted or replaced since, or their path not known).
    pub snapshot_files_gone: u64,
    /// Files whose CFI was not read: larger than read of one file, or past the budget with
    /// nothing idle left to drop.
    pub cfi_over_budget: u64,
    /// Files whose CFI was dropped to make room (no process held it).
    pub cfi_evicted: u64,
}

/// A process's unwinder: a module per executable mapping that has CFI.
struct Proc {
    unwinder: UnwinderX86_64<Section>,
    /// Executable mappings seen in the latest read of the map (with or without CFI).
    mapped: Vec<Range<u64>>,
    /// Every mapping of that read (thread stacks among them).
    all: Vec<Range<u64>>,
    read_at: Instant,
    /// Reads of the map so far (the first ones are not throttled: see [`Self::may_reread`]).
    reads: u32,
    /// Built from the exit snapshot: the process is gone, there is nothing to read again.
    exited: bool,
}

impl Proc {
    fn covers(&self, addr: u64) -> bool {
        self.mapped.iter().any(|r| r.contains(&addr))
    }

    /// Whether the map may be read again now. A process's first reads are not throttled:
    /// ld.so maps its libraries just after the exec, so a record of the first milliseconds
    /// can be in a library mapped since the last read, and a throttled read left it to frame
    /// pointers.
    fn may_reread(&self) -> bool {
        !self.exited && (self.reads < FREE_READS || self.read_at.elapsed() > REREAD_EVERY)
    }

    /// The end of the mapping holding `addr`, if this read of the map has it.
    fn mapping_end(&self, addr: u64) -> Option<u64> {
        self.all.iter().find(|r| r.contains(&addr)).map(|r| r.end)
    }
}

/// What framehop gave for one stack.
struct Walk {
    addrs: Vec<u64>,
    reached_root: bool,
    /// Where it needed to read outside the stack copy.
    past_copy: Option<u64>,
}

/// Least time between two reads of one process's memory map.
const REREAD_EVERY: Duration = Duration::from_millis(20);
/// Reads of a process's map that [`REREAD_EVERY`] does not throttle.
const FREE_READS: u32 = 4;
/// Modules added before the rule cache starts over (framehop's generation counter is 16 bits).
const CACHE_GENERATIONS: u32 = 30_000;

/// Per-recording unwinding state: the files' CFI (shared by every process mapping them) and
/// each process's modules.
pub(crate) struct Unwinders {
    procs: HashMap<u32, Proc, ahash::RandomState>,
    files: FileCache,
    cache: CacheX86_64,
    modules_added: u32,
    pub counts: UnwindCounts,
}

impl Default for Unwinders {
    fn default() -> Self {
        Self {
            procs: HashMap::default(),
            files: FileCache::default(),
            cache: CacheX86_64::new(),
            modules_added: 0,
            counts: UnwindCounts::default(),
        }
    }
}

impl Unwinders {
    /// Forget a process (it exec'd, or exited).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Whether `pid`'s map is known, or can be read now (then it is kept); false when
    /// `/proc/PID/maps` reads empty: the process exited, or is exiting.
    pub(crate) fn read_live(&mut self, pid: u32) -> bool {
        self.procs.contains_key(&pid) || self.read_now(pid)
    }

    /// Read `pid`'s map now from `/proc` (not from an exit snapshot); false when it reads
    /// empty.
    pub(crate) fn read_now(&mut self, pid: u32) -> bool {
        match self.read_proc(pid, None) {
            Some(mut p) => {
                p.reads = self.procs.get(&pid).map_or(0, |old| old.reads) + 1;
                self.procs.insert(pid, p);
                true
            }
            None => false,
        }
    }

    /// Unwind a `d` stack of process `pid` (`exit`: the exit snapshots, for a process whose
    /// map is gone).
    pub(crate) fn unwind(&mut self, pid: u32, d: &DwarfStack<'_>, exit: &ExitMaps) -> Unwound {
        self.counts.stacks += 1;
        let known = self.procs.get(&pid);
        if known.is_none_or(|p| !p.covers(d.ip) && p.may_reread()) {
            self.reread(pid, exit);
        }
        let mut walk = self.walk(pid, d);
        // An address outside the map as read: a library loaded since (ld.so maps them after
        // the exec); read the map again and unwind again.
        let stale = |p: &Proc, w: &Walk| w.addrs.iter().any(|&a| !p.covers(a));
        if self
            .procs
            .get(&pid)
            .is_some_and(|p| !walk.reached_root && stale(p, &walk) && p.may_reread())
            && self.reread(pid, exit)
        {
            walk = self.walk(pid, d);
        }
        let reached_root = walk.reached_root
            || walk
                .past_copy
                .is_some_and(|a| self.read_past_stack_end(pid, d, a, exit));
        let out = finish(walk.addrs, reached_root, &d.fp);
        match (out.method, out.truncated) {
            (_, Some(true)) => self.counts.truncated += 1,
            (Method::Dwarf, _) => self.counts.complete += 1,
            (Method::DwarfFp, _) => self.counts.spliced += 1,
            (Method::Fp, _) => self.counts.fp_only += 1,
        }
        out
    }

    /// Read `pid`'s map again (from its exit snapshot once `/proc/PID/maps` is empty); false
    /// when it could not be read (the process exited, and sent no snapshot).
    fn reread(&mut self, pid: u32, exit: &ExitMaps) -> bool {
        match self.read_proc(pid, Some(exit)) {
            Some(mut p) => {
                p.reads = self.procs.get(&pid).map_or(0, |old| old.reads) + 1;
                if p.exited && self.procs.get(&pid).is_none_or(|old| !old.exited) {
                    self.counts.from_snapshot += 1;
                }
                self.procs.insert(pid, p);
                true
            }
            None => {
                if !self.procs.contains_key(&pid) {
                    self.counts.no_map += 1;
                }
                false
            }
        }
    }

    /// framehop over the stack copy with `pid`'s modules as known.
    fn walk(&mut self, pid: u32, d: &DwarfStack<'_>) -> Walk {
        let mut w = Walk {
            addrs: Vec::with_capacity(32),
            reached_root: false,
            past_copy: None,
        };
        let Some(p) = self.procs.get(&pid) else {
            return w;
        };
        let (sp, stack) = (d.sp, d.stack);
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(b.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(d.ip, d.sp, d.bp);
        let mut it = p
            .unwinder
            .iter_frames(d.ip, regs, &mut self.cache, &mut read);
        loop {
            match it.next() {
                Ok(Some(f)) => {
                    w.addrs.push(f.address());
                    if w.addrs.len() >= MAX_DEPTH {
                        break;
                    }
                }
                Ok(None) | Err(UnwindError::ReturnAddressIsNull) => {
                    w.reached_root = true;
                    break;
                }
                Err(UnwindError::CouldNotReadStack(a)) => {
                    w.past_copy = Some(a);
                    break;
                }
                Err(_) => break,
            }
        }
        w
    }

    /// Whether the unwinder's read at `a`, outside the stack copy, lies past the end of the
    /// thread's stack, which the copy reached: the frame before was the outermost (glibc's
    /// and ld.so's entry points do not all say so in their CFI).
    fn read_past_stack_end(
        &mut self,
        pid: u32,
        d: &DwarfStack<'_>,
        a: u64,
        exit: &ExitMaps,
    ) -> bool {
        let top = d.sp + d.stack.len() as u64;
        if a < top {
            return false;
        }
        let end = self.procs.get(&pid).and_then(|p| p.mapping_end(d.sp));
        let end = match end {
            Some(end) => Some(end),
            // A thread stack mapped after the map was read.
            None if self.procs.get(&pid).is_some_and(Proc::may_reread) => {
                self.reread(pid, exit);
                self.procs.get(&pid).and_then(|p| p.mapping_end(d.sp))
            }
            None => None,
        };
        end == Some(top)
    }

    /// `pid`'s map from `/proc`, else (`exit` given) from its exit snapshot.
    fn read_proc(&mut self, pid: u32, exit: Option<&ExitMaps>) -> Option<Proc> {
        let text = maps::read(pid).unwrap_or_default();
        let maps = parse_maps(&text);
        let (maps, all, exited) = if maps.is_empty() {
            // Exited (a zombie's map is empty): what its exit record carried, if anything.
            let snap = exit?.maps(pid)?;
            let all = snap.iter().map(|m| m.range.clone()).collect();
            let maps = snap
                .iter()
                .filter(|m| m.what != What::Stack)
                .map(|m| Mapping {
                    range: m.range.clone(),
                    offset: m.offset,
                    file: (m.what == What::File).then(|| (m.dev.clone(), m.inode)),
                    path: m.path.clone().unwrap_or_default(),
                    exited: true,
                })
                .collect();
            (maps, all, true)
        } else {
            (maps, maps::parse(&text).map(|m| m.range).collect(), false)
        };
        let gone = self.files.gone;
        let mut unwinder = UnwinderX86_64::new();
        let mut mapped = Vec::new();
        for m in maps {
            mapped.push(m.range.clone());
            let Some(cfi) = self.files.get(pid, &m) else {
                continue;
            };
            let Some(bias) = cfi.bias(m.range.start, m.offset) else {
                continue;
            };
            unwinder.add_module(cfi.module(&m.path, m.range.clone(), bias));
            self.modules_added += 1;
        }
        if self.modules_added > CACHE_GENERATIONS {
            self.cache = CacheX86_64::new();
            self.modules_added = 0;
        }
        self.counts.snapshot_files_gone += self.files.gone - gone;
        self.counts.cfi_over_budget = self.files.over_budget;
        self.counts.cfi_evicted = self.files.evicted;
        Some(Proc {
            unwinder,
            mapped,
            all,
            read_at: Instant::now(),
            reads: 1,
            exited,
        })
    }
}

/// Where in the frame-pointer walk `fp` the CFI unwind `addrs` ends: an entry equal to its
/// last address. A recursion repeats one return address, so the entry is chosen by how the
/// walk up to it lines up with the unwind: best when every entry up to it is in the unwind, in
/// order (the walk skips the callers of functions without a frame pointer, never adds frames),
/// then by how many line up.
fn splice_at(addrs: &[u64], fp: &[u64]) -> Option<usize> {
    let last = *addrs.last()?;
    let fit = |j: usize| {
        let (mut i, mut k, mut matched) = (addrs.len(), j + 1, 0);
        while i > 0 && k > 0 {
            i -= 1;
            if addrs[i] == fp[k - 1] {
                matched += 1;
                k -= 1;
            }
        }
        (k == 0, matched)
    };
    let aligned = addrs.len() - 1;
    (0..fp.len())
        .filter(|&j| fp[j] == last)
        .max_by_key(|&j| (fit(j), std::cmp::Reverse(j.abs_diff(aligned))))
}

/// The stack from a CFI unwind that gave `addrs` (and reached the root or not), continued by
/// the frame-pointer walk `fp` when that passes through its last address.
fn finish(mut addrs: Vec<u64>, reached_root: bool, fp: &[u64]) -> Unwound {
    // Where the frame-pointer walk ends, it cannot tell whether that is the root; only the
    // depth limit says it is not.
    let fp_end = |n: usize| (n >= MAX_DEPTH).then_some(true);
    if reached_root || addrs.len() >= MAX_DEPTH {
        return Unwound {
            method: if addrs.len() > 1 || fp.is_empty() {
                Method::Dwarf
            } else {
                Method::Fp
            },
            addrs,
            truncated: Some(!reached_root),
        };
    }
    if addrs.is_empty() {
        // Nothing unwound (no map): the frame-pointer walk as it is.
        return Unwound {
            addrs: fp.to_vec(),
            method: Method::Fp,
            truncated: fp_end(fp.len()),
        };
    }
    match splice_at(&addrs, fp) {
        Some(j) if j + 1 < fp.len() => {
            let method = if addrs.len() > 1 {
                Method::DwarfFp
            } else {
                Method::Fp
            };
            addrs.extend(fp[j + 1..].iter().take(MAX_DEPTH - addrs.len()));
            let truncated = fp_end(addrs.len());
            Unwound {
                addrs,
                method,
                truncated,
            }
        }
        _ => Unwound {
            method: if addrs.len() > 1 {
                Method::Dwarf
            } else {
                Method::Fp
            },
            addrs,
            truncated: Some(true),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::exit_maps::SnapMapping;

    #[test]
    fn root_reached_is_complete_and_a_stop_is_continued_by_frame_pointers() {
        let done = finish(vec![1, 2, 3], true, &[1, 9]);
        assert_eq!((done.method, done.truncated), (Method::Dwarf, Some(false)));
        // CFI stopped at 3; the frame-pointer walk passes 3 and goes on (to where, it cannot
        // tell).
        let spliced = finish(vec![1, 2, 3], false, &[1, 3, 4, 5]);
        assert_eq!(spliced.addrs, vec![1, 2, 3, 4, 5]);
        assert_eq!((spliced.method, spliced.truncated), (Method::DwarfFp, None));
        // The walk never passes 3: truncated, never silently short.
        let cut = finish(vec![1, 2, 3], false, &[1, 7, 8]);
        assert_eq!((cut.addrs, cut.truncated), (vec![1, 2, 3], Some(true)));
        // Only the first frame from CFI: it is the frame-pointer stack.
        let fp = finish(vec![1], false, &[1, 7, 8]);
        assert_eq!(
            (fp.addrs, fp.method, fp.truncated),
            (vec![1, 7, 8], Method::Fp, None)
        );
        // In a recursion the last address repeats: the walk continues from the entry aligned
        // with the whole unwind, not from the first equal one.
        let rec = finish(vec![1, 5, 5, 5], false, &[1, 5, 5, 5, 5, 5, 9]);
        assert_eq!(rec.addrs, vec![1, 5, 5, 5, 5, 5, 9]);
        // The walk missed a top frame (its callee has no frame pointer), in a recursion too.
        let skew = finish(vec![1, 2, 3, 4], false, &[1, 3, 4, 7]);
        assert_eq!(skew.addrs, vec![1, 2, 3, 4, 7]);
        let skew = finish(vec![1, 2, 5, 5], false, &[1, 5, 5, 5, 9]);
        assert_eq!(skew.addrs, vec![1, 2, 5, 5, 5, 9]);
        // The depth limit is a truncation whichever way it was reached.
        let long: Vec<u64> = (0..MAX_DEPTH as u64 + 5).collect();
        assert_eq!(finish(vec![0], false, &long).truncated, Some(true));
        // Nothing unwound at all.
        let none = finish(vec![], false, &[1, 7]);
        assert_eq!((none.addrs, none.method), (vec![1, 7], Method::Fp));
    }

    #[inline(never)]
    fn here() -> u64 {
        here as *const () as usize as u64
    }

    #[test]
    fn own_process_modules_have_cfi() {
        let mut u = Unwinders::default();
        let p = u.read_proc(std::process::id(), None).expect("own maps");
        assert!(p.covers(here()));
        let local = 0u64;
        let sp = &raw const local as u64;
        assert!(
            p.mapping_end(sp).is_some_and(|end| end > sp),
            "this thread's stack is mapped"
        );
        // The test binary and libc have .eh_frame.
        assert!(u.files.with_cfi() >= 2);
    }

    /// This process's executable mappings as its exit record would carry them (`inode_delta`:
    /// added to each inode, naming other files).
    fn own_snapshot(inode_delta: u64) -> Vec<SnapMapping> {
        let text = maps::read(std::process::id()).unwrap();
        maps::parse(&text)
            .filter(|m| m.executable() && m.inode != 0)
            .map(|m| SnapMapping {
                range: m.range.clone(),
                offset: m.offset,
                what: What::File,
                dev: m.dev.to_string(),
                inode: m.inode + inode_delta,
                path: Some(m.path.to_string()),
            })
            .collect()
    }

    #[test]
    fn a_process_gone_is_unwound_from_its_exit_snapshot() {
        let gone = 4_194_400; // above the kernel's pid limit: no /proc entry, as a process gone
        let mut exit = ExitMaps::default();
        let mut u = Unwinders::default();
        assert!(u.read_proc(gone, Some(&exit)).is_none(), "no snapshot yet");
        assert!(!u.read_live(gone));
        exit.exited(gone, own_snapshot(0));
        let p = u.read_proc(gone, Some(&exit)).expect("from the snapshot");
        assert!(p.covers(here()) && p.exited && !p.may_reread());
        assert!(u.files.with_cfi() >= 2, "files opened by path");
        assert_eq!(u.counts.snapshot_files_gone, 0);
        assert!(u.reread(gone, &exit) && u.counts.from_snapshot == 1);
        // Files replaced since (other inodes at their paths) are not read.
        let mut u = Unwinders::default();
        exit.exited(gone, own_snapshot(1));
        let p = u.read_proc(gone, Some(&exit)).expect("from the snapshot");
        assert!(p.covers(here()), "mapped, without CFI");
        assert_eq!(u.files.with_cfi(), 0);
        assert!(u.counts.snapshot_files_gone >= 2);
    }
}
