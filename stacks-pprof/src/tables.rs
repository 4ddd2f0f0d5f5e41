//! The deduplicated tables of a profile under construction: strings, functions, mappings and
//! locations, each interned so a repeated frame costs a few hash lookups and no new entries.

use std::collections::HashMap;

use stacks_stream::frames::{Frame, KERNEL_MODULE, UNKNOWN_MODULE, unresolved_name};

use crate::proto::{Function, Line, Location, Mapping};
/// Mapping bounds are rounded to pages.
const PAGE: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum MappingKey {
    Kernel,
    User { module: i64, build_id: i64 },
}

#[derive(Debug)]
struct MappingEntry {
    mapping: Mapping,
    kernel: bool,
    /// Lowest and highest location address seen in this mapping.
    min: u64,
    max: u64,
}

/// Strings, functions, mappings and locations of the profile being built. Ids are 1-based
/// positions in their table; string index 0 is `""`.
#[derive(Debug)]
pub(crate) struct Tables {
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
pub(crate) const KERNEL_SUFFIX: &str = "_[k]";

/// The finished tables, ready to go into a `Profile`.
pub(crate) struct Finished {
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
    pub(crate) fn new() -> Self {
        let mut string_ids = HashMap::new();
        string_ids.insert(String::new(), 0);
        Self {
            strings: vec![String::new()],
            string_ids,
            functions: Vec::new(),
            function_ids: HashMap::new(),
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
            locations: Vec::new(),
            location_ids: HashMap::new(),
            kernel_suffix: false,
        }
    }

    /// Tables whose kernel function names end in [`KERNEL_SUFFIX`].
    pub(crate) fn with_kernel_suffix(kernel_suffix: bool) -> Self {
        Self {
            kernel_suffix,
            ..Self::new()
        }
    }

    /// Index of `s` in the string table, adding it if new.
    pub(crate) fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    /// Id of the function a frame is in; its system name is the frame's raw symbol when the
    /// stream has one. Unresolved frames are named by [`unresolved_name`].
    pub(crate) fn function(&mut self, f: &Frame<'_>) -> u64 {
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
            id,
            name,
            system_name,
            filename: file,
            start_line: 0,
        });
        self.function_ids.insert((name, file), id);
        id
    }

    /// Id of a location standing for no code: a frame the profile adds (process name, the
    /// kernel/user delimiter, folded short intervals). It has no mapping (id 0) and address 0,
    /// which pprof readers accept and show by function name.
    pub(crate) fn synthetic(&mut self, name: &str) -> u64 {
        let name = self.string(name);
        let function_id = match self.function_ids.get(&(name, 0)) {
            Some(&id) => id,
            None => {
                let id = self.functions.len() as u64 + 1;
                self.functions.push(Function {
                    id,
                    name,
                    system_name: name,
                    filename: 0,
                    start_line: 0,
                });
                self.function_ids.insert((name, 0), id);
                id
            }
        };
        self.location(
            0,
            0,
            &[Line {
                function_id,
                line: 0,
                column: 0,
            }],
        )
    }

    /// Id of the mapping a frame belongs to and the frame's address within it: the file offset
    /// for user frames (the raw address when the offset is unknown), the address for kernel ones.
    pub(crate) fn mapping(&mut self, f: &Frame<'_>) -> (u64, u64) {
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
                    mapping: Mapping {
                        id,
                        filename,
                        build_id,
                        has_functions: true,
                        has_filenames: true,
                        has_line_numbers: true,
                        has_inline_frames: true,
                        ..Default::default()
                    },
                    kernel: key == MappingKey::Kernel,
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
    pub(crate) fn location(&mut self, mapping_id: u64, address: u64, lines: &[Line]) -> u64 {
        let candidates = self.location_ids.entry((mapping_id, address)).or_default();
        for &id in candidates.iter() {
            if let Some(l) = self.locations.get(id as usize - 1)
                && l.line == lines
            {
                return id;
            }
        }
        let id = self.locations.len() as u64 + 1;
        candidates.push(id);
        self.locations.push(Location {
            id,
            mapping_id,
            address,
            line: lines.to_vec(),
            is_folded: false,
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
    pub(crate) fn finish(self) -> Finished {
        let mut entries = self.mappings;
        entries.sort_by_key(|e| {
            let name = self
                .strings
                .get(e.mapping.filename as usize)
                .map_or("", String::as_str);
            (e.kernel, is_library(name), e.mapping.id)
        });
        let mut new_ids = vec![0u64; entries.len() + 1];
        let mappings: Vec<Mapping> = entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let id = i as u64 + 1;
                if let Some(slot) = new_ids.get_mut(e.mapping.id as usize) {
                    *slot = id;
                }
                let (start, limit) = if e.kernel {
                    (e.min - e.min % PAGE, round_up(e.max))
                } else {
                    (0, round_up(e.max))
                };
                Mapping {
                    id,
                    memory_start: start,
                    memory_limit: limit,
                    file_offset: 0,
                    ..e.mapping
                }
            })
            .collect();
        let mut locations = self.locations;
        for l in &mut locations {
            l.mapping_id = new_ids
                .get(l.mapping_id as usize)
                .copied()
                .unwrap_or(l.mapping_id);
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
            function_id: fid,
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
            assert_eq!(m.id, id);
            done.strings[m.filename as usize].clone()
        };
        assert_eq!(name(1), "/bin/app");
        assert_eq!(name(2), "/lib/libc.so.6");
        assert_eq!(name(3), KERNEL_MODULE);
        let loc = |id: u64| done.locations[id as usize - 1].mapping_id;
        assert_eq!(name(loc(lk)), KERNEL_MODULE);
        assert_eq!(name(loc(ll)), "/lib/libc.so.6");
        assert_eq!(name(loc(le)), "/bin/app");
    }
}
