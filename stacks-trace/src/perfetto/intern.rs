//! Interning for one Perfetto packet sequence: every string, frame, mapping and stack gets an
//! iid the first time it is seen, and its definition goes into the `InternedData` of the packet
//! that first refers to it ([`Interner::take`]), so each is defined once, before any use. The
//! tables grow with distinct names and stacks, never with rows.

use std::collections::HashMap;
use std::ops::Range;

use stacks_stream::frames::{JIT_MODULE, KERNEL_MODULE, PYTHON_MODULE, StackFrames};

use super::protos::{
    Callstack, DebugAnnotationName, EventName, FRAME_INTERPRETED, FRAME_JIT, FRAME_KERNEL,
    FRAME_NATIVE, Frame, InternedData, InternedString, Mapping,
};

/// One table of strings: iids from 1 in order of first use.
#[derive(Default)]
struct Strings {
    ids: HashMap<Box<str>, u64>,
}

impl Strings {
    /// The iid of `s`, and whether it is new.
    fn get(&mut self, s: &str) -> (u64, bool) {
        if let Some(&id) = self.ids.get(s) {
            return (id, false);
        }
        let id = self.ids.len() as u64 + 1;
        self.ids.insert(s.into(), id);
        (id, true)
    }
}

/// A frame as Perfetto keys it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct FrameKey {
    function: u64,
    mapping: u64,
    rel_pc: Option<u64>,
    source: Option<u64>,
    line: Option<u32>,
    kind: i32,
}

/// The interning tables of the sequence, and the definitions not yet written.
#[derive(Default)]
pub(crate) struct Interner {
    event_names: Strings,
    annotation_names: Strings,
    annotation_values: Strings,
    function_names: Strings,
    source_paths: Strings,
    mapping_paths: Strings,
    build_ids: Strings,
    mappings: HashMap<(u64, Option<u64>), u64>,
    frames: HashMap<FrameKey, u64>,
    callstacks: HashMap<Vec<u64>, u64>,
    pending: InternedData,
    /// Reused frame id buffer.
    scratch: Vec<u64>,
}

fn interned(iid: u64, s: &str) -> InternedString {
    InternedString {
        iid: Some(iid),
        str: Some(s.as_bytes().to_vec()),
    }
}

/// Perfetto's kind of a frame: kernel, interpreted (CPython), JIT or native.
fn frame_kind(kernel: bool, module: Option<&str>) -> i32 {
    match module {
        _ if kernel => FRAME_KERNEL,
        Some(PYTHON_MODULE) => FRAME_INTERPRETED,
        Some(JIT_MODULE) => FRAME_JIT,
        _ => FRAME_NATIVE,
    }
}

impl Interner {
    /// The definitions made since the last call, for the packet about to be written.
    pub(crate) fn take(&mut self) -> Option<InternedData> {
        (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
    }

    /// The number of distinct stacks interned.
    #[cfg(test)]
    pub(crate) fn callstacks(&self) -> usize {
        self.callstacks.len()
    }

    /// The iid of an event name.
    pub(crate) fn event_name(&mut self, name: &str) -> u64 {
        let (iid, new) = self.event_names.get(name);
        if new {
            self.pending.event_names.push(EventName {
                iid: Some(iid),
                name: Some(name.into()),
            });
        }
        iid
    }

    /// The iid of a debug annotation's name.
    pub(crate) fn annotation_name(&mut self, name: &str) -> u64 {
        let (iid, new) = self.annotation_names.get(name);
        if new {
            self.pending
                .debug_annotation_names
                .push(DebugAnnotationName {
                    iid: Some(iid),
                    name: Some(name.into()),
                });
        }
        iid
    }

    /// The iid of a debug annotation's string value.
    pub(crate) fn annotation_value(&mut self, value: &str) -> u64 {
        let (iid, new) = self.annotation_values.get(value);
        if new {
            self.pending
                .debug_annotation_string_values
                .push(interned(iid, value));
        }
        iid
    }

    fn function_name(&mut self, name: &str) -> u64 {
        let (iid, new) = self.function_names.get(name);
        if new {
            self.pending.function_names.push(interned(iid, name));
        }
        iid
    }

    fn source_path(&mut self, path: &str) -> u64 {
        let (iid, new) = self.source_paths.get(path);
        if new {
            self.pending.source_paths.push(interned(iid, path));
        }
        iid
    }

    /// The mapping of a module (its path, and its build id when known: hex in the stream, raw
    /// bytes in the trace, as Perfetto's own profilers write them).
    fn mapping(&mut self, module: &str, build_id: Option<&str>) -> u64 {
        let (path, new) = self.mapping_paths.get(module);
        if new {
            self.pending.mapping_paths.push(interned(path, module));
        }
        let build = build_id.filter(|b| !b.is_empty()).map(|b| {
            let (iid, new) = self.build_ids.get(b);
            if new {
                let raw = stacks_stream::hex::decode(b).unwrap_or_else(|| b.as_bytes().into());
                self.pending.build_ids.push(InternedString {
                    iid: Some(iid),
                    str: Some(raw),
                });
            }
            iid
        });
        let next = self.mappings.len() as u64 + 1;
        let iid = *self.mappings.entry((path, build)).or_insert(next);
        if iid == next {
            self.pending.mappings.push(Mapping {
                iid: Some(iid),
                build_id: build,
                path_string_ids: vec![path],
            });
        }
        iid
    }

    /// The callstack iid of `frames` (a row's or a dictionary entry's, leaf first in the
    /// column), interning its frames; `None` for an empty stack.
    pub(crate) fn callstack(&mut self, stack: &StackFrames, frames: Range<usize>) -> Option<u64> {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        // Root first, as Perfetto's callstacks list their frames.
        for i in frames.rev() {
            let Some(f) = stack.frame(i) else { continue };
            let module = if f.kernel {
                KERNEL_MODULE
            } else {
                f.module.unwrap_or(stacks_stream::frames::UNKNOWN_MODULE)
            };
            let key = FrameKey {
                function: self.function_name(&f.name()),
                mapping: self.mapping(module, f.build_id),
                rel_pc: f.offset,
                source: f
                    .file
                    .filter(|s| !s.is_empty())
                    .map(|s| self.source_path(s)),
                line: u32::try_from(f.line).ok().filter(|&l| l > 0),
                kind: frame_kind(f.kernel, f.module),
            };
            let next = self.frames.len() as u64 + 1;
            let iid = *self.frames.entry(key.clone()).or_insert(next);
            if iid == next {
                self.pending.frames.push(Frame {
                    iid: Some(iid),
                    function_name_id: Some(key.function),
                    mapping_id: Some(key.mapping),
                    rel_pc: key.rel_pc,
                    source_path_iid: key.source,
                    line_number: key.line,
                    kind: Some(key.kind),
                });
            }
            ids.push(iid);
        }
        let result = if ids.is_empty() {
            None
        } else if let Some(&iid) = self.callstacks.get(&ids) {
            Some(iid)
        } else {
            let iid = self.callstacks.len() as u64 + 1;
            self.callstacks.insert(ids.clone(), iid);
            self.pending.callstacks.push(Callstack {
                iid: Some(iid),
                frame_ids: ids.clone(),
            });
            Some(iid)
        };
        self.scratch = ids;
        result
    }
}
