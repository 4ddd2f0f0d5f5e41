//! User address normalization at capture time (blazesym): each user frame becomes
//! (module path, build id, file offset) while its process is alive, so symbolization can happen
//! later, elsewhere. Results are cached per (pid, address); a process's memory map is cached by
//! blazesym from first use, so events processed just after the process exited still resolve,
//! and a process gone before its map was read is normalized with its exit snapshot.
//! Frames are interned in a [`FrameTable`]: a stack is a slice of frame ids, so a repeated
//! stack costs no string copies and is compared and hashed as integers.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use blazesym::Pid;
use blazesym::normalize::{NormalizeOpts, Normalizer, Reason, UserMeta};

use crate::process::exit_maps::{ExitMaps, What};
use crate::process::perfmap::{JIT_MODULE, PerfMaps};

/// One normalized user frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct UserFrame {
    pub addr: u64,
    pub module: Option<String>,
    pub build_id: Option<String>,
    pub offset: Option<u64>,
    pub error: Option<String>,
    /// The name the process published for the code at `addr` (a perf map), for code in no
    /// file (JIT).
    pub symbol: Option<Rc<str>>,
    /// An interpreted frame's source file and line (`symbol` names its function).
    pub file: Option<Rc<str>>,
    pub line: Option<u32>,
}

/// Every distinct normalized frame of a recording, each with an id (its index).
#[derive(Default)]
pub(crate) struct FrameTable {
    frames: Vec<UserFrame>,
    ids: HashMap<UserFrame, u32, ahash::RandomState>,
}

impl FrameTable {
    /// The id of `f`, added when new.
    pub(crate) fn intern(&mut self, f: UserFrame) -> u32 {
        if let Some(&id) = self.ids.get(&f) {
            return id;
        }
        let id = u32::try_from(self.frames.len()).unwrap_or(u32::MAX);
        self.frames.push(f.clone());
        self.ids.insert(f, id);
        id
    }

    /// The frame with id `id` (from [`Self::intern`] on this table).
    pub(crate) fn get(&self, id: u32) -> &UserFrame {
        &self.frames[id as usize]
    }

    /// Distinct frames.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }
}

/// The build ids of the files a process's map names, by path, looked up while that map is the
/// one a [`PidState`] holds: a path then names one file (a file mapped anew is seen by a new
/// read of the map, which starts this over). Without it each lookup opened the file and read
/// the process's mount table (`/proc/PID/mountinfo`, for FUSE): 9.5% of the recorder's time
/// beside pgbench, whose broken frame-pointer chains bring new addresses at most stacks.
type BuildIds = HashMap<std::path::PathBuf, Option<String>, ahash::RandomState>;

struct PidState {
    normalizer: Normalizer,
    /// Build ids of the files `normalizer`'s map names.
    build_ids: BuildIds,
    /// Normalized frames (ids), and failures that will not change (no file behind the address).
    frames: HashMap<u64, u32, ahash::RandomState>,
    /// Addresses in memory no file backs (JIT code): named by the perf map at each use, since
    /// the map grows and code moves.
    anonymous: HashMap<u64, u32, ahash::RandomState>,
    /// When unmapped addresses were last looked up in a fresh read of the map.
    retried: Option<Instant>,
    /// Least time until the next such read: [`RETRY_EVERY`], doubled (up to [`RETRY_MAX`])
    /// each time a fresh read knew none of them, back to [`RETRY_EVERY`] when one did or the
    /// map is read again for the kernel side ([`UserNormalizer::read_map`]).
    retry_every: Duration,
}

impl PidState {
    fn new(normalizer: Normalizer) -> PidState {
        PidState {
            normalizer,
            build_ids: BuildIds::default(),
            frames: HashMap::default(),
            anonymous: HashMap::default(),
            retried: None,
            retry_every: RETRY_EVERY,
        }
    }
}

/// Least time between two fresh reads of one process's memory map for unmapped addresses.
const RETRY_EVERY: Duration = Duration::from_millis(20);
/// Most time between them, for a process whose fresh reads keep knowing none of its unmapped
/// addresses: the garbage a frame-pointer walk finds in code built without frame pointers
/// (PostgreSQL, most of a distribution) is a new unmapped address at nearly every stack, and
/// a fresh read of a large map every 20 ms per process was the largest part of the recorder's
/// time beside pgbench (docs/cost.md, "The recorder on a busy host").
const RETRY_MAX: Duration = Duration::from_secs(1);

/// A normalizer that reads no file: build ids are read by
/// [`modules::process_file_build_id`](crate::process::modules::process_file_build_id), which
/// never opens a file on FUSE (blazesym opens it by path, and opening one there waits for its
/// server, maybe the process itself) and reads it with `pread` (blazesym maps it, and a
/// truncation by the process would then fault), and takes only the note named "GNU".
fn new_normalizer() -> Normalizer {
    Normalizer::builder()
        .enable_vma_caching(true)
        .enable_build_ids(false)
        .build()
}

/// Per-process normalization state.
#[derive(Default)]
pub(crate) struct UserNormalizer {
    pids: HashMap<u32, PidState, ahash::RandomState>,
    /// Every frame handed out, by id.
    pub table: FrameTable,
    /// Frames that could not be normalized.
    pub failed_frames: u64,
    /// The processes' perf maps, naming their JIT code.
    pub perf_maps: PerfMaps,
    /// Frames named by a perf map.
    pub jit_frames: u64,
    /// Set when a stack held JIT code of a process with no perf map (yet).
    pub unnamed_jit: bool,
    /// Reads of a memory map (`/proc/PID/maps`) for the kernel side ([`Self::read_map`]).
    pub map_reads: u64,
    /// Fresh reads of a memory map for addresses outside the one read before.
    pub fresh_map_reads: u64,
    /// Processes whose memory map was read for the kernel to send their user frames as plain
    /// addresses (`maps_read` of the BPF side): when.
    armed: HashMap<u32, Instant, ahash::RandomState>,
}

impl UserNormalizer {
    /// Forget a process (it exec'd a new image, or exited and its pid may be reused).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.pids.remove(&pid);
        self.perf_maps.forget(pid);
        self.armed.remove(&pid);
    }

    /// Whether the kernel is to be told (again) that `pid`'s memory map is read: at its first
    /// user stack, and again when a stack `resolved` by the kernel shows it took the process
    /// out (a new mapping), at most every RETRY_EVERY; for `dwarf` stacks, which do not show
    /// it, once a second. Then the caller adds it to `maps_read` and calls
    /// [`Self::read_map`].
    pub(crate) fn should_arm(&mut self, pid: u32, resolved: bool, dwarf: bool) -> bool {
        if pid == 0 {
            return false;
        }
        let due = match self.armed.get(&pid) {
            None => true,
            Some(t) if resolved => t.elapsed() > RETRY_EVERY,
            Some(t) => dwarf && t.elapsed() > Duration::from_secs(1),
        };
        if due {
            self.armed.insert(pid, Instant::now());
        }
        due
    }

    /// Read `pid`'s memory map now (after it was added to `maps_read`, so no mapping made
    /// since is missed): plain addresses the kernel sends from now on are normalized with it.
    pub(crate) fn read_map(&mut self, pid: u32) {
        self.map_reads += 1;
        let fresh = new_normalizer();
        // One lookup fills blazesym's cache of the map (the address itself does not matter).
        // A process gone by now keeps the map read before, if any: an empty one in its place
        // would leave every later frame of it unnormalized (records of a busy recording are
        // converted some time after they were made, often after a short process exited).
        if resolve(&fresh, &mut BuildIds::default(), pid, &[0]).is_err() {
            return;
        }
        let state = self
            .pids
            .entry(pid)
            .or_insert_with(|| PidState::new(new_normalizer()));
        state.normalizer = fresh;
        state.build_ids.clear();
        // Just read: a fresh read for addresses outside it is due RETRY_EVERY from now, not at
        // once (a new process's first unmapped address read its map twice).
        state.retried = Some(Instant::now());
        state.retry_every = RETRY_EVERY;
    }

    /// Start the frame table over (every id handed out so far is forgotten, the processes'
    /// address caches too); returns the old table, to look up ids still held.
    pub(crate) fn restart_frames(&mut self) -> FrameTable {
        for state in self.pids.values_mut() {
            state.frames.clear();
            state.anonymous.clear();
        }
        std::mem::take(&mut self.table)
    }

    /// The frame with id `id`.
    pub(crate) fn frame(&self, id: u32) -> &UserFrame {
        self.table.get(id)
    }

    /// Normalize `addrs` of process `pid`, in order: the ids of their frames in [`Self::table`]
    /// (`exit`: the exit snapshots, for a process whose map is gone).
    pub(crate) fn normalize(&mut self, pid: u32, addrs: &[u64], exit: &mut ExitMaps) -> Vec<u32> {
        let table = &mut self.table;
        if pid == 0 {
            // blazesym treats pid 0 as "this process": never normalize the idle task.
            return addrs
                .iter()
                .map(|&a| table.intern(failed(a, "idle task (pid 0) has no user address space")))
                .collect();
        }
        let state = self
            .pids
            .entry(pid)
            .or_insert_with(|| PidState::new(new_normalizer()));
        let mut missing: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !state.frames.contains_key(a) && !state.anonymous.contains_key(a))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        let mut retry = HashMap::new();
        if !missing.is_empty() {
            // A map that cannot be read: the exit snapshot's, if the exit record came; else
            // failed, not cached (the exit record may bring one).
            let mut resolved = resolve(&state.normalizer, &mut state.build_ids, pid, &missing)
                .unwrap_or_else(|why| {
                    resolve_exited(exit, pid, &missing).unwrap_or_else(|| {
                        missing.iter().map(|&a| (failed(a, &why), true)).collect()
                    })
                });
            // An address outside the cached map may come from a mapping created after the
            // cache was filled (libraries loaded after the first sample, dlopen, JIT): look
            // those up again in a fresh read of the map while the process lives, and keep that
            // map if it knew more. So may one in a file without a build id: the cached map can
            // name a file unmapped since, whose range new code took (the dynamic loader's
            // `ld.so.cache`, read while the process started, then JIT code mapped at its
            // address). At most every RETRY_EVERY, and less often while fresh reads find
            // nothing (up to RETRY_MAX), so a process with garbage frames (broken
            // frame-pointer chains) cannot make us spin on /proc.
            let stale = |(f, unmapped): &(UserFrame, bool)| {
                *unmapped || (f.error.is_none() && f.build_id.is_none())
            };
            let unmapped: Vec<u64> = resolved
                .iter()
                .filter(|r| stale(r))
                .map(|(f, _)| f.addr)
                .collect();
            let may_retry = state
                .retried
                .is_none_or(|t| t.elapsed() > state.retry_every);
            if !unmapped.is_empty() && may_retry && crate::process::target::is_alive(pid) {
                state.retried = Some(Instant::now());
                self.fresh_map_reads += 1;
                let fresh = new_normalizer();
                let mut fresh_ids = BuildIds::default();
                let again: HashMap<u64, (UserFrame, bool)> =
                    resolve(&fresh, &mut fresh_ids, pid, &unmapped)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|r| (r.0.addr, r))
                        .collect();
                if again.values().any(|(_, unmapped)| !unmapped) {
                    state.normalizer = fresh;
                    state.build_ids = fresh_ids;
                }
                // Whether the fresh read knew more than the cached one of some address: then
                // the map is changing, and is read again soon if need be.
                let mut learned = false;
                for r in resolved.iter_mut().filter(|r| stale(r)) {
                    if let Some(a) = again.get(&r.0.addr) {
                        learned |= a != r;
                        *r = a.clone();
                    }
                }
                state.retry_every = if learned {
                    RETRY_EVERY
                } else {
                    (state.retry_every * 2).min(RETRY_MAX)
                };
            }
            for (f, unmapped) in resolved {
                if f.error.is_some() {
                    self.failed_frames += 1;
                }
                let addr = f.addr;
                let anonymous = f.error.as_deref() == Some(ANONYMOUS);
                let id = table.intern(f);
                if unmapped {
                    // Not cached: a later refresh may find the mapping.
                    retry.insert(addr, id);
                } else if anonymous {
                    state.anonymous.insert(addr, id);
                } else {
                    state.frames.insert(addr, id);
                }
            }
        }
        addrs
            .iter()
            .map(|a| {
                if let Some(&unnamed) = state.anonymous.get(a) {
                    return match self.perf_maps.name(pid, *a) {
                        Some(name) => {
                            self.jit_frames += 1;
                            table.intern(jit(*a, name))
                        }
                        None => {
                            if !self.perf_maps.has_map(pid) {
                                self.unnamed_jit = true;
                            }
                            unnamed
                        }
                    };
                }
                match state.frames.get(a).or_else(|| retry.get(a)) {
                    Some(&id) => id,
                    None => table.intern(failed(*a, "not normalized")),
                }
            })
            .collect()
    }
}

fn failed(addr: u64, why: &str) -> UserFrame {
    UserFrame {
        addr,
        module: None,
        build_id: None,
        offset: None,
        error: Some(why.to_string()),
        symbol: None,
        file: None,
        line: None,
    }
}

/// Why a frame in memory no file backs is unnamed (no perf map names it).
const ANONYMOUS: &str = "anonymous memory (JIT code?) that no perf map names";

/// A frame of JIT code, named by its process's perf map.
fn jit(addr: u64, name: Rc<str>) -> UserFrame {
    UserFrame {
        addr,
        module: Some(JIT_MODULE.into()),
        build_id: None,
        offset: None,
        error: None,
        symbol: Some(name),
        file: None,
        line: None,
    }
}

/// Why a frame of an exited process's file is not normalized.
const FILE_GONE: &str =
    "the file was deleted or replaced before the recorder read the process's exit snapshot";

/// Normalize the addresses of a process gone before its map was read with its exit snapshot:
/// `None` when it sent none.
fn resolve_exited(exit: &mut ExitMaps, pid: u32, addrs: &[u64]) -> Option<Vec<(UserFrame, bool)>> {
    let maps = exit.maps(pid)?;
    let out = addrs
        .iter()
        .map(|&addr| {
            let m = maps
                .iter()
                .find(|m| m.what != What::Stack && m.range.contains(&addr));
            let frame = match m {
                None => failed(addr, "not in the process's executable mappings at its exit"),
                Some(m) => {
                    let offset = addr - m.range.start + m.offset;
                    match (m.what, exit.build_id(m)) {
                        (What::Vdso, _) => vdso_frame(addr, offset, None),
                        (_, Ok(build_id)) => UserFrame {
                            addr,
                            module: m.path.clone(),
                            build_id,
                            offset: Some(offset),
                            error: None,
                            symbol: None,
                            file: None,
                            line: None,
                        },
                        (_, Err(_)) => failed(addr, FILE_GONE),
                    }
                }
            };
            (frame, false)
        })
        .collect();
    Some(out)
}

/// Normalize sorted addresses; each result says whether the address was outside every known
/// mapping (worth retrying after re-reading the map). Fails (why) when the process's map
/// cannot be read.
fn resolve(
    normalizer: &Normalizer,
    build_ids: &mut BuildIds,
    pid: u32,
    sorted: &[u64],
) -> Result<Vec<(UserFrame, bool)>, String> {
    let opts = NormalizeOpts {
        sorted_addrs: true,
        map_files: false,
        ..Default::default()
    };
    let out = match normalizer.normalize_user_addrs_opts(Pid::from(pid), sorted, &opts) {
        Ok(out) => out,
        Err(e) => {
            return Err(if Path::new(&format!("/proc/{pid}")).exists() {
                format!("normalization failed: {e}")
            } else {
                "process exited before its memory map was read".to_string()
            });
        }
    };
    // Each file's build id, looked up once while this map is held (see BuildIds; each file is
    // read once: see new_normalizer).
    let ids: Vec<Option<String>> = out
        .meta
        .iter()
        .map(|m| match m {
            UserMeta::Elf(elf) => build_ids
                .entry(elf.path.clone())
                .or_insert_with(|| crate::process::modules::process_file_build_id(pid, &elf.path))
                .clone(),
            _ => None,
        })
        .collect();
    Ok(sorted
        .iter()
        .zip(out.outputs.iter())
        .map(
            |(&addr, &(offset, meta_idx))| match out.meta.get(meta_idx) {
                // Mapped, but by no file: JIT code, which a perf map may name.
                Some(UserMeta::Unknown(u)) if u.reason == Reason::MissingComponent => {
                    (failed(addr, ANONYMOUS), false)
                }
                Some(UserMeta::Unknown(u)) => (
                    failed(addr, &u.reason.to_string()),
                    u.reason == Reason::Unmapped,
                ),
                other => {
                    let mut f = frame(addr, offset, other);
                    if let Some(Some(id)) = ids.get(meta_idx) {
                        f.build_id = Some(id.clone());
                    }
                    (f, false)
                }
            },
        )
        .collect())
}

/// The module of vDSO frames, as `/proc/PID/maps` names it.
const VDSO_MODULE: &str = "[vdso]";

/// A frame of the vDSO at `offset` in its image (`symbol`: the function blazesym named).
fn vdso_frame(addr: u64, offset: u64, symbol: Option<&str>) -> UserFrame {
    match crate::process::vdso::own() {
        Some(vdso) => UserFrame {
            addr,
            module: Some(VDSO_MODULE.into()),
            build_id: Some(vdso.build_id.clone()),
            offset: Some(offset),
            error: None,
            symbol: None,
            file: None,
            line: None,
        },
        None => UserFrame {
            addr,
            module: Some(VDSO_MODULE.into()),
            build_id: None,
            offset: Some(offset),
            error: Some(format!(
                "no file backs this address (in {})",
                symbol.unwrap_or(VDSO_MODULE)
            )),
            symbol: None,
            file: None,
            line: None,
        },
    }
}

/// The frame for an address that normalization placed in `meta` (anything but unknown).
fn frame(addr: u64, offset: u64, meta: Option<&UserMeta<'_>>) -> UserFrame {
    match meta {
        Some(UserMeta::Elf(elf)) => UserFrame {
            addr,
            module: Some(elf.path.to_string_lossy().into_owned()),
            build_id: elf.build_id.as_ref().map(|b| stacks_stream::hex::encode(b)),
            offset: Some(offset),
            error: None,
            symbol: None,
            file: None,
            line: None,
        },
        // blazesym names vDSO addresses itself; the frame is kept as one of the vDSO image
        // (`stacks.vdso` in the stream), which stacks-symbolize finds by its build id.
        Some(UserMeta::Sym(sym)) => {
            if sym
                .module
                .as_ref()
                .is_none_or(|m| m.to_string_lossy() == VDSO_MODULE)
            {
                vdso_frame(addr, offset, Some(&*sym.name))
            } else {
                UserFrame {
                    addr,
                    module: sym
                        .module
                        .as_ref()
                        .map(|m| m.to_string_lossy().into_owned()),
                    build_id: None,
                    offset: Some(offset),
                    error: Some(format!("no file backs this address (in {})", sym.name)),
                    symbol: None,
                    file: None,
                    line: None,
                }
            }
        }
        Some(UserMeta::Unknown(u)) => failed(addr, &u.reason.to_string()),
        Some(_) => failed(addr, "unsupported mapping type"),
        None => failed(addr, "normalization returned no metadata"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn marker() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn normalizes_own_code_to_our_binary() {
        let pid = std::process::id();
        let addr = marker as *const () as u64;
        let mut n = UserNormalizer::default();
        let ids = n.normalize(pid, &[addr, addr, 1], &mut ExitMaps::default());
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[0], ids[1], "one frame, one id");
        let frames: Vec<UserFrame> = ids.iter().map(|&i| n.frame(i).clone()).collect();
        let f = &frames[0];
        assert_eq!(f.error, None, "{f:?}");
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert_eq!(f.module.as_deref(), Some(exe.to_str().unwrap()));
        assert!(f.build_id.as_ref().is_some_and(|b| b.len() >= 16), "{f:?}");
        assert!(f.offset.unwrap() > 0);
        assert_eq!(frames[0], frames[1]);
        assert!(frames[2].error.is_some(), "address 1 is unmapped");
        assert_eq!(n.failed_frames, 1);
    }

    #[test]
    fn fresh_reads_that_learn_nothing_back_off_until_the_map_is_read_again() {
        let pid = std::process::id();
        let mut n = UserNormalizer::default();
        let every = |n: &UserNormalizer| n.pids[&pid].retry_every;
        // Address 1 is never mapped: each fresh read for it learns nothing.
        n.normalize(pid, &[1], &mut ExitMaps::default());
        assert_eq!(every(&n), RETRY_EVERY * 2);
        // Too soon for another read: nothing changes.
        n.normalize(pid, &[2], &mut ExitMaps::default());
        assert_eq!(every(&n), RETRY_EVERY * 2);
        std::thread::sleep(RETRY_EVERY * 2 + Duration::from_millis(5));
        n.normalize(pid, &[3], &mut ExitMaps::default());
        assert_eq!(every(&n), RETRY_EVERY * 4);
        for a in 4..20 {
            n.pids.get_mut(&pid).unwrap().retried = None;
            n.normalize(pid, &[a], &mut ExitMaps::default());
        }
        assert_eq!(every(&n), RETRY_MAX, "bounded");
        // The kernel side saw a new mapping: the map is read, fresh reads are due soon again.
        n.read_map(pid);
        assert_eq!(every(&n), RETRY_EVERY);
    }

    #[test]
    fn mappings_created_after_first_use_are_found() {
        let pid = std::process::id();
        let mut n = UserNormalizer::default();
        // Fill the cache (the unmapped address 1 already forces one re-read), then map a file
        // that did not exist before: it must still be found.
        n.normalize(
            pid,
            &[marker as *const () as u64, 1],
            &mut ExitMaps::default(),
        );
        // The fresh read for address 1 knew nothing more: the next comes after twice
        // RETRY_EVERY.
        std::thread::sleep(RETRY_EVERY * 2);
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        // SAFETY: a fresh private read-only mapping of our own executable, unmapped below.
        let addr = unsafe {
            libc::mmap(
                // A hint far from everything else (not MAP_FIXED): tests running in parallel
                // map and unmap memory too, and a reused range would look anonymous in the
                // cached map.
                0x5a5a_0000_0000usize as *mut libc::c_void,
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&exe),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let f: Vec<UserFrame> = n
            .normalize(pid, &[addr as u64 + 16], &mut ExitMaps::default())
            .iter()
            .map(|&i| n.frame(i).clone())
            .collect();
        // SAFETY: unmapping what we mapped above.
        unsafe { libc::munmap(addr, 4096) };
        assert_eq!(f[0].error, None, "{f:?}");
        assert_eq!(f[0].offset, Some(16));
    }

    #[test]
    fn code_mapped_where_a_file_without_build_id_was_is_found() {
        // As the dynamic loader's `ld.so.cache`: a file that is no ELF object, mapped while the
        // cache is filled, then unmapped and its range taken by anonymous (JIT) code.
        let pid = std::process::id();
        let path = std::env::temp_dir().join(format!("stacks-norm-cache-{pid}"));
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let at = 0x5b5b_0000_0000usize as *mut libc::c_void;
        // SAFETY: a fresh private read-only mapping of our own file, unmapped below.
        let addr = unsafe {
            libc::mmap(
                at,
                8192,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_FIXED_NOREPLACE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_eq!(addr, at);
        let mut n = UserNormalizer::default();
        let first = n.normalize(pid, &[addr as u64 + 16], &mut ExitMaps::default())[0];
        let first = n.frame(first).clone();
        // SAFETY: our mapping above is replaced by an anonymous one of the same range.
        let anon = unsafe {
            libc::munmap(addr, 8192);
            libc::mmap(
                at,
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        // The first address's fresh read knew nothing more (the same file): the next comes
        // after twice RETRY_EVERY.
        std::thread::sleep(RETRY_EVERY * 2);
        let later = n.normalize(pid, &[anon as u64 + 32], &mut ExitMaps::default())[0];
        let later = n.frame(later).clone();
        // SAFETY: unmapping what we mapped above.
        unsafe { libc::munmap(anon, 8192) };
        let _ = std::fs::remove_file(&path);
        assert_eq!(anon, at);
        assert_eq!(
            (first.build_id.as_deref(), first.offset),
            (None, Some(16)),
            "{first:?}"
        );
        assert_eq!(later.error.as_deref(), Some(ANONYMOUS), "{later:?}");
    }

    #[test]
    fn a_process_gone_is_normalized_with_its_exit_snapshot() {
        let addr = marker as *const () as u64;
        let mut n = UserNormalizer::default();
        let mut exit = ExitMaps::default();
        let live = n.normalize(std::process::id(), &[addr], &mut exit)[0];
        let live = n.frame(live).clone();
        let gone = 4_194_400; // above the kernel's pid limit: no /proc entry, as a process gone
        let before = n.normalize(gone, &[addr], &mut exit)[0];
        assert!(n.frame(before).error.is_some(), "no snapshot yet");
        let text = crate::process::maps::read(std::process::id()).unwrap();
        let snapshot = crate::process::maps::parse(&text)
            .filter(|m| m.executable() && m.inode != 0)
            .map(|m| crate::process::exit_maps::SnapMapping {
                range: m.range.clone(),
                offset: m.offset,
                what: What::File,
                dev: m.dev.to_string(),
                inode: m.inode,
                path: Some(m.path.to_string()),
            })
            .collect();
        exit.exited(gone, snapshot);
        let after = n.normalize(gone, &[addr, 1], &mut exit);
        let f = n.frame(after[0]);
        assert_eq!(f.error, None, "{f:?}");
        assert_eq!(
            (&f.module, &f.build_id, f.offset),
            (&live.module, &live.build_id, live.offset)
        );
        assert!(
            n.frame(after[1]).error.is_some(),
            "address 1 is in no mapping"
        );
    }

    #[test]
    fn idle_pid_is_never_normalized_as_self() {
        let mut n = UserNormalizer::default();
        let f = n.normalize(0, &[marker as *const () as u64], &mut ExitMaps::default());
        assert!(n.frame(f[0]).error.as_ref().unwrap().contains("pid 0"));
    }
}
