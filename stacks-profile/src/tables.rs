//! The deduplicated tables of a profile under construction: strings, functions, mappings and
//! locations, each interned so a repeated frame costs a few hash lookups and no new entries.
//! Ids are 1-based positions, as pprof numbers them and as OTLP indexes them (its tables hold a
//! zero element at index 0).

use foldhash::HashMap;

use stacks_stream::frames::{Frame, KERNEL_MODULE, UNKNOWN_MODULE, unresolved_name};

/// A function: indexes into the string table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Function {
    pub name: i64,
    /// The symbol as the binary names it (mangled), else `name`.
    pub system_name: i64,
    pub filename: i64,
}

/// One source line of a location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    /// Id of the function (1-based).
    pub function: u64,
    pub line: i64,
    pub column: i64,
}

/// A code address and its source lines, innermost inlined function first, the containing
/// function last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Id of the mapping (1-based), 0 for a frame the profile adds.
    pub mapping: u64,
    pub address: u64,
    pub lines: Vec<Line>,
}

/// A binary (or the kernel) and the addresses its locations span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Index of its path (or `[kernel.kallsyms]`) in the string table.
    pub filename: i64,
    /// Index of its build id in the string table, 0 when unknown.
    pub build_id: i64,
    /// The kernel's mapping.
    pub kernel: bool,
    pub memory_start: u64,
    pub memory_limit: u64,
}

/// Mapping bounds are rounded to pages.
const PAGE: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MappingKey {
    Kernel,
    User { module: i64, build_id: i64 },
}

#[derive(Debug)]
struct MappingEntry {
    id: u64,
    mapping: Mapping,
    /// Lowest and highest location address seen in this mapping.
    min: u64,
    max: u64,
}

/// Strings, functions, mappings and locations of the profile being built. Ids are 1-based
/// positions in their table; string index 0 is `""`.
#[derive(Debug)]
pub struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: HashMap<(i64, i64), u64>,
    mappings: Vec<MappingEntry>,
    mapping_ids: HashMap<MappingKey, u64>,
    locations: Vec<Location>,
    /// (mapping id, address) → ids of the locations there (one per distinct line list).
    location_ids: HashMap<(u64, u64), Vec<u64>>,
    /// Append [`KERNEL_SUFFIX`] to the names of kernel functions.
    kernel_suffix: bool,
}

/// What flamegraph.pl and bcc append to kernel function names (`--annotate`).
pub const KERNEL_SUFFIX: &str = "_[k]";

/// The finished tables, ready to go into a `Profile`.
pub struct Finished {
    pub strings: Vec<String>,
    pub functions: Vec<Function>,
    pub mappings: Vec<Mapping>,
    pub locations: Vec<Location>,
}

impl Default for Tables {
    fn default() -> Self {
        Self::new()
    }
}

impl Tables {
    pub fn new() -> Self {
        let mut string_ids = HashMap::default();
        string_ids.insert(String::new(), 0);
        Self {
            strings: vec![String::new()],
            string_ids,
            functions: Vec::new(),
            function_ids: HashMap::default(),
            mappings: Vec::new(),
            mapping_ids: HashMap::default(),
            locations: Vec::new(),
            location_ids: HashMap::default(),
            kernel_suffix: false,
        }
    }

    /// Tables whose kernel function names end in [`KERNEL_SUFFIX`].
    pub fn with_kernel_suffix(kernel_suffix: bool) -> Self {
        Self {
            kernel_suffix,
            ..Self::new()
        }
    }

    /// Index of `s` in the string table, adding it if new.
    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    /// The string at index `i` of the string table (`""` out of range).
    pub fn str(&self, i: i64) -> &str {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.strings.get(i))
            .map_or("", String::as_str)
    }

    /// Id of the function a frame is in; its system name is the frame's raw symbol when the
    /// stream has one. Unresolved frames are named by [`unresolved_name`].
    pub fn function(&mut self, f: &Frame<'_>) -> u64 {
        let name = match (f.function, f.kernel && self.kernel_suffix) {
            (Some(name), false) => self.string(name),
            (Some(name), true) => self.string(&format!("{name}{KERNEL_SUFFIX}")),
            (None, suffix) => {
                let mut made = unresolved_name(f);
                if suffix {
                    made.push_str(KERNEL_SUFFIX);
                }
                self.string(&made)
            }
        };
        let file = f.file.map_or(0, |file| self.string(file));
        if let Some(&id) = self.function_ids.get(&(name, file)) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let system_name = match (f.function, f.symbol) {
            (Some(_), Some(symbol)) => self.string(symbol),
            _ => name,
        };
        self.functions.push(Function {
            name,
            system_name,
            filename: file,
        });
        self.function_ids.insert((name, file), id);
        id
    }

    /// Id of a location standing for no code: a frame the profile adds (process name, the
    /// kernel/user delimiter, folded short intervals). It has no mapping (id 0) and address 0,
    /// which pprof readers accept and show by function name.
    pub fn synthetic(&mut self, name: &str) -> u64 {
        let name = self.string(name);
        let function_id = match self.function_ids.get(&(name, 0)) {
            Some(&id) => id,
            None => {
                let id = self.functions.len() as u64 + 1;
                self.functions.push(Function {
                    name,
                    system_name: name,
                    filename: 0,
                });
                self.function_ids.insert((name, 0), id);
                id
            }
        };
        self.location(
            0,
            0,
            &[Line {
                function: function_id,
                line: 0,
                column: 0,
            }],
        )
    }

    /// Id of the mapping a frame belongs to and the frame's address within it: the file offset
    /// for user frames (the raw address when the offset is unknown), the address for kernel ones.
    pub fn mapping(&mut self, f: &Frame<'_>) -> (u64, u64) {
        let (key, address) = if f.kernel {
            (MappingKey::Kernel, f.addr)
        } else {
            let module = self.string(f.module.unwrap_or(UNKNOWN_MODULE));
            let build_id = f.build_id.map_or(0, |b| self.string(b));
            (
                MappingKey::User { module, build_id },
                f.offset.unwrap_or(f.addr),
            )
        };
        let id = match self.mapping_ids.get(&key) {
            Some(&id) => id,
            None => {
                let (filename, build_id) = match key {
                    MappingKey::Kernel => (self.string(KERNEL_MODULE), 0),
                    MappingKey::User { module, build_id } => (module, build_id),
                };
                let id = self.mappings.len() as u64 + 1;
                self.mappings.push(MappingEntry {
                    id,
                    mapping: Mapping {
                        filename,
                        build_id,
                        kernel: key == MappingKey::Kernel,
                        memory_start: 0,
                        memory_limit: 0,
                    },
                    min: address,
                    max: address,
                });
                self.mapping_ids.insert(key, id);
                id
            }
        };
        if let Some(entry) = self.mappings.get_mut(id as usize - 1) {
            entry.min = entry.min.min(address);
            entry.max = entry.max.max(address);
        }
        (id, address)
    }

    /// Id of the location at `address` in mapping `mapping_id` whose lines are `lines`
    /// (innermost inlined function first, the containing function last).
    pub fn location(&mut self, mapping_id: u64, address: u64, lines: &[Line]) -> u64 {
        let candidates = self.location_ids.entry((mapping_id, address)).or_default();
        for &id in candidates.iter() {
            if let Some(l) = self.locations.get(id as usize - 1)
                && l.lines == lines
            {
                return id;
            }
        }
        let id = self.locations.len() as u64 + 1;
        candidates.push(id);
        self.locations.push(Location {
            mapping: mapping_id,
            address,
            lines: lines.to_vec(),
        });
        id
    }

    /// Fix the mapping bounds and order, and hand the tables over.
    ///
    /// User locations carry file offsets, so a user mapping spans `[0, max offset]` with file
    /// offset 0 (address − start + offset is then the file offset again); the kernel mapping
    /// spans the kernel addresses seen. Bounds are page-rounded so every address lies inside.
    /// The main executable comes first (pprof reports it as the profile's file), shared
    /// libraries next, the kernel last.
    pub fn finish(self) -> Finished {
        let mut entries = self.mappings;
        entries.sort_by_key(|e| {
            let name = self
                .strings
                .get(e.mapping.filename as usize)
                .map_or("", String::as_str);
            (e.mapping.kernel, is_library(name), e.id)
        });
        let mut new_ids = vec![0u64; entries.len() + 1];
        let mappings: Vec<Mapping> = entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let id = i as u64 + 1;
                if let Some(slot) = new_ids.get_mut(e.id as usize) {
                    *slot = id;
                }
                let (start, limit) = if e.mapping.kernel {
                    (e.min - e.min % PAGE, round_up(e.max))
                } else {
                    (0, round_up(e.max))
                };
                Mapping {
                    memory_start: start,
                    memory_limit: limit,
                    ..e.mapping
                }
            })
            .collect();
        let mut locations = self.locations;
        for l in &mut locations {
            l.mapping = new_ids
                .get(l.mapping as usize)
                .copied()
                .unwrap_or(l.mapping);
        }
        Finished {
            strings: self.strings,
            functions: self.functions,
            mappings,
            locations,
        }
    }
}

/// The first page boundary above `max`, or `u64::MAX` at the top of the address space.
fn round_up(max: u64) -> u64 {
    (max / PAGE)
        .checked_add(1)
        .and_then(|pages| pages.checked_mul(PAGE))
        .unwrap_or(u64::MAX)
}

fn is_library(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.ends_with(".so") || base.contains(".so.") || base.starts_with('[')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kernel: bool, module: Option<&'static str>, offset: u64) -> Frame<'static> {
        Frame {
            function: None,
            file: None,
            line: 0,
            column: 0,
            inlined: false,
            kernel,
            module,
            build_id: None,
            offset: Some(offset),
            addr: 0xffff_ffff_8100_1234,
            symbol: None,
        }
    }

    #[test]
    fn tables_deduplicate() {
        let mut t = Tables::new();
        assert_eq!(t.string(""), 0);
        let a = t.string("a");
        assert_eq!(t.string("a"), a);
        let f = frame(false, Some("/bin/x"), 0x10);
        let fid = t.function(&f);
        assert_eq!(t.function(&f), fid);
        let (m, addr) = t.mapping(&f);
        assert_eq!(addr, 0x10);
        let (m2, _) = t.mapping(&frame(false, Some("/bin/x"), 0x5000));
        assert_eq!(m, m2);
        let (k, kaddr) = t.mapping(&frame(true, None, 0));
        assert_ne!(k, m);
        assert_eq!(kaddr, 0xffff_ffff_8100_1234);
        let line = [Line {
            function: fid,
            line: 3,
            column: 0,
        }];
        let l = t.location(m, addr, &line);
        assert_eq!(t.location(m, addr, &line), l);
        assert_ne!(t.location(m, addr, &[]), l);
        let done = t.finish();
        assert_eq!(done.mappings.len(), 2);
        let user = &done.mappings[0];
        assert_eq!((user.memory_start, user.memory_limit), (0, 0x6000));
        let kernel = &done.mappings[1];
        assert_eq!(done.strings[kernel.filename as usize], KERNEL_MODULE);
        assert_eq!(kernel.memory_start, 0xffff_ffff_8100_1000);
        assert_eq!(kernel.memory_limit, 0xffff_ffff_8100_2000);
    }

    #[test]
    fn kernel_mapping_ordered_last() {
        let mut t = Tables::new();
        let (k, _) = t.mapping(&frame(true, None, 0));
        let (lib, _) = t.mapping(&frame(false, Some("/lib/libc.so.6"), 1));
        let (exe, _) = t.mapping(&frame(false, Some("/bin/app"), 2));
        let lk = t.location(k, 0, &[]);
        let ll = t.location(lib, 1, &[]);
        let le = t.location(exe, 2, &[]);
        let done = t.finish();
        let name = |id: u64| {
            let m = &done.mappings[id as usize - 1];
            done.strings[m.filename as usize].clone()
        };
        assert_eq!(name(1), "/bin/app");
        assert_eq!(name(2), "/lib/libc.so.6");
        assert_eq!(name(3), KERNEL_MODULE);
        let loc = |id: u64| done.locations[id as usize - 1].mapping;
        assert_eq!(name(loc(lk)), KERNEL_MODULE);
        assert_eq!(name(loc(ll)), "/lib/libc.so.6");
        assert_eq!(name(loc(le)), "/bin/app");
    }
}
