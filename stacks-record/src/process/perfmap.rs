//! JIT code named from the processes' perf maps (`/tmp/perf-PID.map`, written by V8's
//! `--perf-basic-prof`, HotSpot's `jcmd PID Compiler.perfmap` or `DumpPerfMapAtExit`, .NET's
//! `DOTNET_PerfMapEnabled`, CPython 3.12+'s `-X perf`, wasmtime's `--profile=perfmap`).
//!
//! A map is read through the process's own root (`/proc/PID/root`, so a process in a container
//! is read in its container's `/tmp`, named by the pid it sees itself as), from a handle on that
//! root opened while the process lives: the map can still be read after the process exited, and
//! it is read once more then. Maps grow while the program runs: an address the map does not
//! hold yet makes the new lines be read (at most every [`REREAD_EVERY`] per process). Parsing
//! is tolerant: `START SIZE name` with hex numbers, `0x`-prefixed or bare; a bad line is skipped
//! and counted, never the whole file.
//!
//! The map is the process's to write, so it is read as untrusted input (docs/threat-model.md):
//! opened inside the process's root and only as a regular file it owns ([`untrusted`]), read in
//! bounded pieces, at most [`MAP_BYTES_MAX`] bytes over its life, lines longer than
//! [`LINE_MAX`] skipped, at most [`MAP_ENTRIES_MAX`] entries kept of one map and
//! [`ENTRIES_MAX`] entries and [`NAME_BYTES_MAX`] bytes of names over all processes; each
//! refusal and skip is counted by cause.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::process::untrusted::{self, Refused};

/// Least time between two looks at one process's map for addresses it did not hold.
pub(crate) const REREAD_EVERY: Duration = Duration::from_millis(20);
/// Bytes of one process's map read over its life (a map rewritten is read again from its
/// start, and counts again): past it the map is read no more.
pub(crate) const MAP_BYTES_MAX: u64 = 128 << 20;
/// Longest line kept (a longer one is skipped whole).
pub(crate) const LINE_MAX: usize = 8192;
/// Entries kept of one map, and entries and bytes of names kept over all processes' maps:
/// a map that reaches either is read no further.
pub(crate) const MAP_ENTRIES_MAX: usize = 1 << 19;
pub(crate) const ENTRIES_MAX: usize = 1 << 20;
pub(crate) const NAME_BYTES_MAX: usize = 64 << 20;

// The module named for frames found in a perf map.
pub(crate) use stacks_stream::frames::JIT_MODULE;

/// One process's map as read so far.
struct ProcMap {
    /// The process's root directory, opened while it lived (None: it could not be opened).
    root: Option<File>,
    /// The map's path below that root.
    name: String,
    /// The process, whose mount table says whether the map is on FUSE (looked at once).
    pid: u32,
    mounts_checked: bool,
    /// Code ranges by start address: (end, name). A later line for the same start wins.
    entries: BTreeMap<u64, (u64, Rc<str>)>,
    /// The user ids of the process (its map must be owned by one of them).
    uids: Option<Vec<u32>>,
    /// Bytes of the file parsed so far (whole lines only).
    read: u64,
    /// Bytes read over the map's life (towards [`MAP_BYTES_MAX`]).
    consumed: u64,
    /// Bytes of names held.
    name_bytes: usize,
    /// Refused (a link, not a regular file, not the process's), or past the names budget:
    /// not read again.
    done: bool,
    /// When the file was last looked at.
    looked: Option<Instant>,
}

/// The perf maps of the traced processes, and what reading them found.
#[derive(Default)]
pub(crate) struct PerfMaps {
    procs: HashMap<u32, ProcMap, ahash::RandomState>,
    /// Lines that were not `START SIZE name`, skipped.
    pub bad_lines: u64,
    /// Processes whose perf map was found.
    pub maps_found: u64,
    /// What was not read, by cause.
    pub skipped: Skipped,
    /// Entries and bytes of names held over all maps.
    entries: usize,
    name_bytes: usize,
}

/// Perf maps and lines not read, by cause.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    /// Maps that were symbolic links, not regular files (a FIFO, a device), on FUSE, or not
    /// owned by their process's user.
    pub symlink: u64,
    pub not_regular: u64,
    pub fuse: u64,
    pub not_owner: u64,
    /// Lines longer than [`LINE_MAX`].
    pub long_lines: u64,
    /// Maps whose reading stopped at [`MAP_BYTES_MAX`].
    pub over_size: u64,
    /// Maps read no further because [`MAP_ENTRIES_MAX`], [`ENTRIES_MAX`] or
    /// [`NAME_BYTES_MAX`] was reached.
    pub over_budget: u64,
}

impl Skipped {
    /// The summary's words, empty when nothing was skipped.
    pub(crate) fn describe(&self) -> String {
        let parts = [
            (self.symlink, "maps refused as symbolic links"),
            (self.not_regular, "maps refused as not regular files"),
            (self.fuse, "maps refused on FUSE"),
            (self.not_owner, "maps refused as not their process's"),
            (self.long_lines, "lines over 8 KiB skipped"),
            (self.over_size, "maps read up to 128 MiB only"),
            (self.over_budget, "maps read up to the names budget only"),
        ];
        parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl PerfMaps {
    /// The name the perf map of `pid` gives the code at `addr`, reading what the map gained
    /// since it was last read when it does not hold `addr`.
    pub(crate) fn name(&mut self, pid: u32, addr: u64) -> Option<Rc<str>> {
        let map = self.procs.entry(pid).or_insert_with(|| open(pid));
        if let Some(name) = lookup(&map.entries, addr) {
            return Some(name);
        }
        if map.looked.is_some_and(|t| t.elapsed() < REREAD_EVERY) {
            return None;
        }
        self.reread(pid);
        lookup(&self.procs[&pid].entries, addr)
    }

    /// Whether `pid` has a perf map, looking again (at most every [`REREAD_EVERY`]) while it
    /// has none.
    pub(crate) fn refresh(&mut self, pid: u32) -> bool {
        let map = self.procs.entry(pid).or_insert_with(|| open(pid));
        if map.read == 0 && map.looked.is_none_or(|t| t.elapsed() >= REREAD_EVERY) {
            self.reread(pid);
        }
        self.has_map(pid)
    }

    /// Whether a perf map of `pid` was read.
    pub(crate) fn has_map(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|m| m.read > 0)
    }

    /// The process exited: read what its map gained one last time (a runtime may write it at
    /// exit); its names stay until [`Self::forget`].
    pub(crate) fn exited(&mut self, pid: u32) {
        if self.procs.contains_key(&pid) {
            self.reread(pid);
        }
    }

    /// Read what the map of `pid` (known) gained, counting what was found.
    fn reread(&mut self, pid: u32) {
        let Some(map) = self.procs.get_mut(&pid) else {
            return;
        };
        let had = map.read > 0;
        let mut budget = Budget {
            entries: &mut self.entries,
            name_bytes: &mut self.name_bytes,
        };
        self.bad_lines += read_new(map, &mut budget, &mut self.skipped);
        if !had && map.read > 0 {
            self.maps_found += 1;
        }
    }

    /// Forget a process (gone, or exec'd a new image).
    pub(crate) fn forget(&mut self, pid: u32) {
        if let Some(map) = self.procs.remove(&pid) {
            self.entries -= map.entries.len();
            self.name_bytes -= map.name_bytes;
        }
    }
}

/// Whether process `pid` said it writes its perf map as it exits (HotSpot's
/// `-XX:+DumpPerfMapAtExit`, on its command line or in the JVM's options variables).
pub(crate) fn writes_map_at_exit(pid: u32) -> bool {
    const FLAG: &[u8] = b"+DumpPerfMapAtExit";
    let has = |bytes: &[u8]| bytes.windows(FLAG.len()).any(|w| w == FLAG);
    let read = |what: &str| std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default();
    has(&read("cmdline"))
        || read("environ").split(|&b| b == 0).any(|var| {
            (var.starts_with(b"JAVA_TOOL_OPTIONS=") || var.starts_with(b"JDK_JAVA_OPTIONS="))
                && has(var)
        })
}

/// The code range holding `addr`, if any.
fn lookup(entries: &BTreeMap<u64, (u64, Rc<str>)>, addr: u64) -> Option<Rc<str>> {
    let (_, (end, name)) = entries.range(..=addr).next_back()?;
    (addr < *end).then(|| Rc::clone(name))
}

/// A process's map, its root opened now (while it lives).
fn open(pid: u32) -> ProcMap {
    ProcMap {
        root: untrusted::root_of(pid).ok(),
        name: format!("tmp/perf-{}.map", own_pid(pid)),
        pid,
        mounts_checked: false,
        uids: untrusted::uids_of(pid),
        entries: BTreeMap::new(),
        read: 0,
        consumed: 0,
        name_bytes: 0,
        done: false,
        looked: None,
    }
}

/// The entries and bytes of names held over all maps, against [`ENTRIES_MAX`] and
/// [`NAME_BYTES_MAX`].
struct Budget<'a> {
    entries: &'a mut usize,
    name_bytes: &'a mut usize,
}

/// The pid process `pid` sees itself as (the last `NSpid` of its status: its own pid
/// namespace's), which names its perf map; `pid` when not known.
fn own_pid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|ids| ids.split_whitespace().last()?.parse().ok())
        })
        .unwrap_or(pid)
}

/// Read the whole lines the map gained since the last read (all of it again when it shrank:
/// rewritten), within the bounds; the bad lines among them.
fn read_new(map: &mut ProcMap, budget: &mut Budget<'_>, skipped: &mut Skipped) -> u64 {
    map.looked = Some(Instant::now());
    let Some(root) = &map.root else {
        return 0;
    };
    if map.done || map.consumed >= MAP_BYTES_MAX {
        return 0;
    }
    // Not even walked to on FUSE (its server may never answer); the mount table is read
    // once, at the first look.
    if !map.mounts_checked {
        map.mounts_checked = true;
        if untrusted::on_fuse(map.pid, &format!("/{}", map.name)) {
            skipped.fuse += 1;
            map.done = true;
            return 0;
        }
    }
    let (file, len) = match untrusted::open_in_root(root, &map.name, u64::MAX, map.uids.as_deref())
    {
        Ok(opened) => opened,
        Err(e) => {
            let count = match e {
                Refused::Symlink(_) => &mut skipped.symlink,
                Refused::NotRegular(_) => &mut skipped.not_regular,
                Refused::Fuse(_) => &mut skipped.fuse,
                Refused::NotOwner(_) => &mut skipped.not_owner,
                // Not there (yet): looked at again.
                Refused::Io(..) | Refused::TooLarge(..) => return 0,
            };
            *count += 1;
            map.done = true;
            return 0;
        }
    };
    if len < map.read {
        map.read = 0;
        *budget.entries -= map.entries.len();
        *budget.name_bytes -= map.name_bytes;
        map.entries.clear();
        map.name_bytes = 0;
    }
    if len == map.read {
        return 0;
    }
    let mut file = file;
    if file.seek(SeekFrom::Start(map.read)).is_err() {
        return 0;
    }
    let allowed = (len - map.read).min(MAP_BYTES_MAX - map.consumed);
    let mut reader = BufReader::with_capacity(1 << 16, file.take(allowed));
    let mut line = Vec::with_capacity(256);
    // Whether the line being read is already longer than LINE_MAX (its rest is skipped).
    let mut long = false;
    // Bytes of the line being read so far.
    let mut pending = 0u64;
    let (mut bad, mut taken) = (0, 0u64);
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let n = chunk.len();
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if !long && line.len() + end <= LINE_MAX {
                line.extend_from_slice(&rest[..end]);
                match keep_line(map, &line, budget) {
                    Kept::Entry => {}
                    Kept::Bad => bad += 1,
                    Kept::Full => {
                        skipped.over_budget += 1;
                        map.done = true;
                        return bad;
                    }
                }
            } else {
                skipped.long_lines += 1;
            }
            map.read += pending + end as u64 + 1;
            pending = 0;
            line.clear();
            long = false;
            rest = &rest[end + 1..];
        }
        // A line still being written (or cut at the bound) is read again next time.
        pending += rest.len() as u64;
        if !long && line.len() + rest.len() <= LINE_MAX {
            line.extend_from_slice(rest);
        } else {
            long = true;
            line.clear();
        }
        taken += n as u64;
        reader.consume(n);
    }
    map.consumed += taken;
    if map.consumed >= MAP_BYTES_MAX {
        skipped.over_size += 1;
    }
    bad
}

/// What became of a line.
enum Kept {
    /// An entry (or a blank line).
    Entry,
    Bad,
    /// The budget is reached: the map is read no further.
    Full,
}

/// Keep one whole line of a map, within the budget.
fn keep_line(map: &mut ProcMap, line: &[u8], budget: &mut Budget<'_>) -> Kept {
    let Some((start, size, name)) = parse_line(line) else {
        return if line.iter().all(u8::is_ascii_whitespace) {
            Kept::Entry
        } else {
            Kept::Bad
        };
    };
    let replaced = map.entries.get(&start).map(|(_, old)| old.len());
    if replaced.is_none()
        && (map.entries.len() >= MAP_ENTRIES_MAX
            || *budget.entries >= ENTRIES_MAX
            || *budget.name_bytes + name.len() > NAME_BYTES_MAX)
    {
        return Kept::Full;
    }
    let (old_len, new_len) = (replaced.unwrap_or(0), name.len());
    if replaced.is_none() {
        *budget.entries += 1;
    }
    *budget.name_bytes = *budget.name_bytes + new_len - old_len;
    map.name_bytes = map.name_bytes + new_len - old_len;
    map.entries
        .insert(start, (start.saturating_add(size), Rc::from(name)));
    Kept::Entry
}

/// `START SIZE name` (hex numbers, with or without `0x`; the name is the rest of the line and
/// may hold spaces); None for anything else, or an empty range.
fn parse_line(line: &[u8]) -> Option<(u64, u64, String)> {
    let line = std::str::from_utf8(line)
        .ok()?
        .trim_end_matches(['\r', '\n']);
    let (start, rest) = line.trim_start().split_once(' ')?;
    let (size, name) = rest.trim_start().split_once(' ')?;
    let hex = |s: &str| {
        let s = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        u64::from_str_radix(s, 16).ok()
    };
    let (start, size, name) = (hex(start)?, hex(size)?, name.trim());
    // Control characters in a name would reach terminals (stacks-top) as they are.
    (size > 0 && !name.is_empty() && !name.chars().any(char::is_control))
        .then(|| (start, size, name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_parse_with_or_without_0x_and_names_keep_their_spaces() {
        assert_eq!(
            parse_line(b"7f0a1000 40 LazyCompile:*hot /app/x.js:3"),
            Some((0x7f0a_1000, 0x40, "LazyCompile:*hot /app/x.js:3".into()))
        );
        assert_eq!(
            parse_line(b"0x1000 0x20 void Foo.bar(int)\r"),
            Some((0x1000, 0x20, "void Foo.bar(int)".into()))
        );
        for bad in [
            &b"zz 10 f"[..],
            b"1000 10",
            b"1000 0 empty",
            b"1000 10  ",
            b"\xff 1 x",
            b"1000 10 a\x1b[2Jb",
        ] {
            assert_eq!(parse_line(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// Our own process's map, written in our root's /tmp under our pid: found, read as it
    /// grows (a line cut short is read once whole), bad lines counted, later lines winning.
    #[test]
    fn a_growing_map_is_read_through_the_process_root() {
        let pid = std::process::id();
        let path = format!("/tmp/perf-{}.map", own_pid(pid));
        let mut f = File::create(&path).unwrap();
        writeln!(
            f,
            "1000 100 first\nnot a line\n0x2000 0x10 second with spaces"
        )
        .unwrap();
        write!(f, "3000 10 thi").unwrap();
        f.flush().unwrap();
        let mut maps = PerfMaps::default();
        assert_eq!(maps.name(pid, 0x1050).as_deref(), Some("first"));
        assert_eq!(
            maps.name(pid, 0x200f).as_deref(),
            Some("second with spaces")
        );
        assert_eq!(maps.name(pid, 0x2010), None, "past the range's end");
        assert_eq!((maps.bad_lines, maps.maps_found), (1, 1));
        // Cut short: not read until whole; an address missing is looked for again later.
        assert_eq!(maps.name(pid, 0x3004), None);
        writeln!(f, "rd\n1000 80 recompiled").unwrap();
        f.flush().unwrap();
        std::thread::sleep(REREAD_EVERY + Duration::from_millis(5));
        assert_eq!(maps.name(pid, 0x3004).as_deref(), Some("third"));
        assert_eq!(maps.name(pid, 0x1010).as_deref(), Some("recompiled"));
        // The file removed: what was read stays.
        std::fs::remove_file(&path).unwrap();
        maps.exited(pid);
        assert_eq!(maps.name(pid, 0x3004).as_deref(), Some("third"));
        assert_eq!(maps.bad_lines, 1);
    }

    /// Lines over [`LINE_MAX`] (one across many read pieces) are skipped and counted, the
    /// lines around them kept; a map past its entries budget is read no further.
    #[test]
    fn long_lines_are_skipped_and_a_full_map_is_read_no_further() {
        let dir = std::env::temp_dir().join(format!("perfmap-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf.map");
        let mut text = String::from("1000 10 before\n");
        text += &format!("2000 10 {}\n", "x".repeat(LINE_MAX));
        text += &format!("3000 10 {}\n", "y".repeat(200_000));
        text += "4000 10 after\n";
        std::fs::write(&path, &text).unwrap();
        let root = File::open("/").unwrap();
        let mut map = ProcMap {
            root: Some(root),
            name: path.to_str().unwrap().trim_start_matches('/').to_string(),
            pid: std::process::id(),
            mounts_checked: false,
            uids: None,
            entries: BTreeMap::new(),
            read: 0,
            consumed: 0,
            name_bytes: 0,
            done: false,
            looked: None,
        };
        let (mut entries, mut names) = (0, 0);
        let mut budget = Budget {
            entries: &mut entries,
            name_bytes: &mut names,
        };
        let mut skipped = Skipped::default();
        assert_eq!(read_new(&mut map, &mut budget, &mut skipped), 0);
        assert_eq!(skipped.long_lines, 2);
        assert_eq!(map.read, text.len() as u64, "every line consumed");
        let kept: Vec<&str> = map.entries.values().map(|(_, n)| &**n).collect();
        assert_eq!(kept, ["before", "after"]);
        assert_eq!((entries, names), (2, 11));
        // The budget reached: the map is done.
        let mut full = ENTRIES_MAX;
        let mut budget = Budget {
            entries: &mut full,
            name_bytes: &mut names,
        };
        std::fs::write(&path, format!("{text}5000 10 more\n")).unwrap();
        read_new(&mut map, &mut budget, &mut skipped);
        assert!(map.done && skipped.over_budget == 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_process_without_a_map_names_nothing() {
        let mut maps = PerfMaps::default();
        assert_eq!(maps.name(u32::MAX - 1, 0x1000), None);
        assert_eq!(maps.maps_found, 0);
    }
}
