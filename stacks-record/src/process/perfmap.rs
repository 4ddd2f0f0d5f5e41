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

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Least time between two looks at one process's map for addresses it did not hold.
pub(crate) const REREAD_EVERY: Duration = Duration::from_millis(20);

// The module named for frames found in a perf map.
pub(crate) use stacks_stream::frames::JIT_MODULE;

/// One process's map as read so far.
struct ProcMap {
    /// The process's root directory, opened while it lived (None: it could not be opened).
    root: Option<File>,
    /// The map's path below that root.
    name: String,
    /// Code ranges by start address: (end, name). A later line for the same start wins.
    entries: BTreeMap<u64, (u64, Rc<str>)>,
    /// Bytes of the file parsed so far (whole lines only).
    read: u64,
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
        self.bad_lines += read_new(map);
        if !had && map.read > 0 {
            self.maps_found += 1;
        }
    }

    /// Forget a process (gone, or exec'd a new image).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
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
    let root = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(format!("/proc/{pid}/root"))
        .ok();
    ProcMap {
        root,
        name: format!("tmp/perf-{}.map", own_pid(pid)),
        entries: BTreeMap::new(),
        read: 0,
        looked: None,
    }
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
/// rewritten); the bad lines among them.
fn read_new(map: &mut ProcMap) -> u64 {
    map.looked = Some(Instant::now());
    let Some(root) = &map.root else {
        return 0;
    };
    let path = format!("/proc/self/fd/{}/{}", root.as_raw_fd(), map.name);
    let Ok(mut file) = File::open(&path) else {
        return 0;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len < map.read {
        map.read = 0;
        map.entries.clear();
    }
    if len == map.read || file.seek(SeekFrom::Start(map.read)).is_err() {
        return 0;
    }
    let mut text = Vec::new();
    if file.take(len - map.read).read_to_end(&mut text).is_err() {
        return 0;
    }
    // A line still being written is read next time.
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    map.read += whole as u64;
    let mut bad = 0;
    for line in text[..whole].split(|&b| b == b'\n') {
        match parse_line(line) {
            Some((start, size, name)) => {
                map.entries
                    .insert(start, (start.saturating_add(size), Rc::from(name)));
            }
            None if line.iter().all(u8::is_ascii_whitespace) => {}
            None => bad += 1,
        }
    }
    bad
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
    (size > 0 && !name.is_empty()).then(|| (start, size, name.to_string()))
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

    #[test]
    fn a_process_without_a_map_names_nothing() {
        let mut maps = PerfMaps::default();
        assert_eq!(maps.name(u32::MAX - 1, 0x1000), None);
        assert_eq!(maps.maps_found, 0);
    }
}
