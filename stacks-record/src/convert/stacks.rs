//! The stacks of a row: kernel frames named, user frames normalized (by build id when the
//! kernel resolved them, blazesym otherwise), `d` stacks unwound by CFI (requests' sent apart
//! at submission), each distinct stack keyed in the row builder's dictionaries.

use std::rc::Rc;

use super::{APART_KEPT, Converter, RowStacks, USER_STACKS_CACHED, UserUnwind};
use crate::kernel::abi::types::stacks_uwindow;
use crate::kernel::event::{DwarfStack, KernelUserFrame, MAX_DEPTH, RawEvent, USTACK_APART};
use crate::output::rows::RowBuilder;
use crate::output::stack_table::{Captured, NewStack};
use crate::process::kallsyms::KernelSymbol;
use crate::process::modules::build_id_hex;
use crate::process::normalize::UserFrame;
use crate::process::unwind::Method;

impl Converter {
    /// The keys of a record's captured stacks (added to the dictionaries when new) and their
    /// capture errors.
    pub(super) fn stacks(&mut self, e: &RawEvent<'_>, rows: &mut RowBuilder) -> RowStacks {
        let h = &e.h;
        let kstack = e.kstack();
        if matches!(kstack, Some(Err(_))) {
            self.counts.kstack_errors += 1;
        }
        let mut unwind = UserUnwind::default();
        let ustack = if let Some(d) = e.dwarf() {
            let (ids, how) = self.dwarf_stack(e, h.pid, &d);
            unwind = how;
            Some(Ok(ids))
        } else if h.ustack_len == USTACK_APART {
            match crate::kinds::apart_request(e).and_then(|r| self.apart.get(&r)) {
                Some((ids, how)) => {
                    unwind = *how;
                    Some(Ok(Rc::clone(ids)))
                }
                None => {
                    self.counts.ustack_errors += 1;
                    Some(Err(-libc::ENOENT))
                }
            }
        } else {
            match e.ustack_bytes().and_then(|b| self.user_stacks.get(b)) {
                Some(ids) => Some(Ok(Rc::clone(ids))),
                None => match e.ustack() {
                    None => None,
                    Some(Err(errno)) => {
                        self.counts.ustack_errors += 1;
                        Some(Err(errno))
                    }
                    Some(Ok(frames)) => Some(Ok(self.user_stack(e, h.pid, &frames))),
                },
            }
        };
        if let (None, Some(Ok(ids))) = (unwind.method, &ustack) {
            // A frame-pointer walk cannot tell whether it reached the root; only the depth
            // limit says it did not.
            unwind = UserUnwind {
                method: Some(Method::Fp.as_str()),
                truncated: (ids.len() >= MAX_DEPTH).then_some(true),
            };
        }
        let kview = kstack
            .as_ref()
            .map(|r| r.as_ref().map(Vec::as_slice).map_err(|e| *e));
        let uview = ustack
            .as_ref()
            .map(|r| r.as_ref().map(|ids| &ids[..]).map_err(|e| *e));
        let key = rows
            .stacks()
            .key(kview, uview, || self.new_stack(kview, uview));
        let task = if self.python.knows(h.pid) {
            crate::process::python::Python::task_of(&e.python())
        } else {
            None
        };
        RowStacks {
            key,
            kstack_error: kview.and_then(Result::err),
            ustack_error: uview.and_then(Result::err),
            unwind,
            task,
        }
    }

    /// A `d` user stack unwound and normalized, with the Python frames of record `e`: its
    /// frame ids and how it was unwound.
    fn dwarf_stack(
        &mut self,
        e: &RawEvent<'_>,
        pid: u32,
        d: &DwarfStack<'_>,
    ) -> (Rc<[u32]>, UserUnwind) {
        let u = self.unwinders.unwind(pid, d, &self.exit_maps);
        let how = UserUnwind {
            method: Some(u.method.as_str()),
            truncated: u.truncated,
        };
        let frames: Vec<KernelUserFrame> = u.addrs.into_iter().map(KernelUserFrame::Ip).collect();
        let native = self.user_frames(pid, &frames);
        let py = e.python();
        if py.is_empty() {
            return (native.into(), how);
        }
        let ids = self
            .python
            .interleave(pid, &native, &py, &mut self.norm.table);
        (ids.into(), how)
    }

    /// A request's `d` user stack, sent at its submission: unwound now, while the
    /// process lives, and kept for the request's record (all of them, when it completes in
    /// parts; a request reused later gets a new one first).
    pub(super) fn user_stack_apart(&mut self, e: &RawEvent<'_>) {
        let Some(d) = e.dwarf() else {
            return;
        };
        let request = e.info::<stacks_uwindow>().request;
        let stack = self.dwarf_stack(e, e.h.pid, &d);
        if self.apart.len() >= APART_KEPT {
            self.apart.clear();
        }
        self.apart.insert(request, stack);
    }

    /// The entries of a captured stack seen for the first time: kernel frames named and the
    /// tracing machinery's dropped, user frames by id.
    fn new_stack(&mut self, kstack: Captured<'_, u64>, ustack: Captured<'_, u32>) -> NewStack {
        let (kstack, kstack_symbols) = match kstack {
            None => (None, None),
            Some(Err(_)) => (Some(Vec::new()), None),
            Some(Ok(addrs)) => {
                let (addrs, syms) = self.kernel_stack(addrs);
                (Some(addrs), syms)
            }
        };
        let ustack = match ustack {
            None => None,
            Some(Err(_)) => Some(Vec::new()),
            Some(Ok(ids)) => Some(ids.iter().map(|&i| self.norm.frame(i).clone()).collect()),
        };
        NewStack {
            kstack,
            ustack,
            kstack_symbols,
        }
    }

    /// The kernel stack without the tracing machinery's frames, and its symbols when kallsyms
    /// is readable.
    fn kernel_stack(&mut self, addrs: &[u64]) -> (Vec<u64>, Option<Vec<Option<KernelSymbol>>>) {
        let mut addrs = addrs.to_vec();
        let Some(names) = &self.ksyms else {
            return (addrs, None);
        };
        // Every frame but the first is a return address: name the call (address − 1), so a
        // call that ends a function is not named after the next one.
        let mut syms: Vec<Option<KernelSymbol>> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let probe = if i == 0 { *a } else { a.saturating_sub(1) };
                let mut sym = self
                    .ksym_cache
                    .entry(probe)
                    .or_insert_with(|| names.name(probe))
                    .clone();
                if let Some(k) = sym.as_mut()
                    && i > 0
                {
                    k.offset += 1;
                }
                sym
            })
            .collect();
        let skip = tracing_frames(&syms);
        addrs.drain(..skip);
        syms.drain(..skip);
        (addrs, Some(syms))
    }

    /// The frame ids of a captured user stack, remembered by its bytes when they mean the same
    /// in every process (every frame resolved by the kernel to a known file).
    fn user_stack(&mut self, e: &RawEvent<'_>, pid: u32, frames: &[KernelUserFrame]) -> Rc<[u32]> {
        let native = self.user_frames(pid, frames);
        let py = e.python();
        if !py.is_empty() {
            // Python frames name code objects of this process only: never shared by bytes.
            return self
                .python
                .interleave(pid, &native, &py, &mut self.norm.table)
                .into();
        }
        let ids: Rc<[u32]> = native.into();
        let portable = frames.iter().all(|f| match f {
            KernelUserFrame::Resolved { build_id, offset } => {
                self.resolved.contains_key(&(*build_id, *offset))
            }
            KernelUserFrame::Ip(_) => false,
        });
        if let (true, Some(bytes)) = (portable, e.ustack_bytes()) {
            if self.user_stacks.len() >= USER_STACKS_CACHED {
                self.user_stacks.clear();
            }
            self.user_stacks.insert(bytes.into(), Rc::clone(&ids));
        }
        ids
    }

    /// Name the files of kernel-resolved frames; normalize the rest (addresses only) with the
    /// live process's memory map. Returns the frames' ids in the normalizer's table.
    fn user_frames(&mut self, pid: u32, frames: &[KernelUserFrame]) -> Vec<u32> {
        self.modules.learn_process(pid);
        let ips: Vec<u64> = frames
            .iter()
            .filter_map(|f| match f {
                KernelUserFrame::Ip(ip) => Some(*ip),
                KernelUserFrame::Resolved { .. } => None,
            })
            .collect();
        // Frames first seen in this call get ids from `known` up: their files are learned.
        let known = self.norm.table.len();
        let mut normalized = if ips.is_empty() {
            Vec::new()
        } else {
            self.norm.normalize(pid, &ips, &mut self.exit_maps)
        }
        .into_iter();
        frames
            .iter()
            .map(|f| match f {
                KernelUserFrame::Resolved { build_id, offset } => {
                    if let Some(&id) = self.resolved.get(&(*build_id, *offset)) {
                        return id;
                    }
                    let (id, module) = match self.build_ids.get(build_id) {
                        Some(known) => known.clone(),
                        None => {
                            let id = build_id_hex(build_id);
                            if self.modules.path(&id).is_none() {
                                // A library loaded after the process's map was read.
                                self.modules.learn_again(pid);
                            }
                            let module = self.modules.path(&id).map(str::to_string);
                            // Only named files are remembered: a later exec may name it.
                            if module.is_some() {
                                self.build_ids
                                    .insert(*build_id, (id.clone(), module.clone()));
                            }
                            (id, module)
                        }
                    };
                    let named = module.is_some();
                    // The kernel takes the file offset from the first mapping that ends above
                    // the address, without checking that it starts below it: a garbage return
                    // address in the gap under a mapping (a frame-pointer walk through code
                    // built without them) wraps below zero. One frame per file stands for all
                    // of them, not one per garbage address.
                    let wrapped = *offset > i64::MAX as u64;
                    let frame = self.norm.table.intern(UserFrame {
                        addr: 0,
                        module,
                        build_id: Some(id),
                        offset: (!wrapped).then_some(*offset),
                        error: wrapped.then(|| WRAPPED_OFFSET.to_string()),
                        symbol: None,
                        file: None,
                        line: None,
                    });
                    if named {
                        self.resolved.insert((*build_id, *offset), frame);
                    }
                    frame
                }
                KernelUserFrame::Ip(ip) => match normalized.next() {
                    Some(id) => {
                        let f = self.norm.frame(id);
                        if let (true, Some(m), Some(b)) =
                            (id as usize >= known, &f.module, &f.build_id)
                        {
                            self.modules.learn(b, m);
                        }
                        id
                    }
                    None => self.norm.table.intern(UserFrame {
                        addr: *ip,
                        module: None,
                        build_id: None,
                        offset: None,
                        error: Some("not normalized".into()),
                        symbol: None,
                        file: None,
                        line: None,
                    }),
                },
            })
            .collect()
    }
}

/// The error of a user frame whose kernel-computed file offset wrapped below zero.
pub(crate) const WRAPPED_OFFSET: &str =
    "address below its mapping (the kernel's file offset wrapped): a garbage return address";

/// How many leading kernel frames belong to the tracing machinery that ran our BPF program
/// (the program itself, `bpf_trace_run*`, perf's tracepoint glue): the stack the user cares
/// about starts below them.
fn tracing_frames(syms: &[Option<KernelSymbol>]) -> usize {
    let glue = |s: &str| {
        s.starts_with("bpf_trace_run")
            || s.starts_with("__bpf_trace_")
            || s.starts_with("bpf_prog_")
            || s.starts_with("perf_trace_")
            || s.starts_with("trace_call_bpf")
            || s.starts_with("__traceiter_")
            || s.starts_with("__bpf_prog_run")
    };
    let window = syms.len().min(8);
    syms[..window]
        .iter()
        .rposition(|s| s.as_ref().is_some_and(|k| glue(&k.symbol)))
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_glue_is_dropped_from_kernel_stacks() {
        let k = |s: &str| {
            Some(KernelSymbol {
                symbol: s.into(),
                offset: 0,
                module: None,
            })
        };
        let syms = vec![None, k("bpf_trace_run4"), k("__schedule"), k("schedule")];
        assert_eq!(tracing_frames(&syms), 2);
        assert_eq!(tracing_frames(&[k("vfs_read"), k("ksys_read")]), 0);
        assert_eq!(tracing_frames(&[]), 0);
    }

    #[test]
    fn wrapped_file_offsets_are_one_garbage_frame_per_file() {
        let mut conv = Converter::new(0, None);
        let at = |offset| KernelUserFrame::Resolved {
            build_id: [7; 20],
            offset,
        };
        let ids = conv.user_frames(
            0,
            &[
                at(0x1234),
                at(0xffff_a9aa_cb33_bfff),
                at(0xffff_ffff_ffff_f000),
            ],
        );
        assert_eq!(
            ids[1], ids[2],
            "every wrapped offset of a file is one frame"
        );
        assert_ne!(ids[0], ids[1]);
        let (good, bad) = (conv.norm.frame(ids[0]), conv.norm.frame(ids[1]));
        assert_eq!((good.offset, good.error.as_deref()), (Some(0x1234), None));
        assert_eq!(
            (bad.offset, bad.error.as_deref()),
            (None, Some(WRAPPED_OFFSET))
        );
        assert_eq!(bad.build_id, good.build_id);
    }
}
