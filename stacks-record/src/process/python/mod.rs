//! Python frames of CPython processes (issue #35): finds the interpreter of each traced
//! process that runs one ([`find`]), hands the kernel side where each thread's own thread state
//! lies and the layout of its frames (`py_procs`), which appends the thread's Python frames to
//! the user stack of every event that takes one; then reads the code objects those frames name
//! from the live process ([`code`]), cached per (process, code object), and puts each Python
//! frame inner to the `_PyEval_EvalFrameDefault` native frame that ran it
//! ([`Python::interleave`]).

mod code;
mod find;
mod linetable;
mod offsets;
mod tasks;
#[cfg(test)]
mod tests;

pub(crate) use tasks::TaskLabel;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use libbpf_rs::{MapCore, MapFlags};

use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::stacks_py_proc;
use crate::kernel::event::PyPart;
use crate::process::normalize::{FrameTable, UserFrame};
use code::Code;

use find::Interpreter;

// The module of Python frames.
pub(crate) use stacks_stream::frames::PYTHON_MODULE as PY_MODULE;
/// The function of the frame that stands, outermost, for Python frames not read (more than the
/// kernel side walks).
pub(crate) const PY_TRUNCATED: &str = "[more Python frames]";

/// Where glibc keeps a thread's pthread-specific values in its `struct pthread` (at the thread
/// pointer) on x86_64: `specific_1stblock` (32 `{seq, data}` pairs) and `specific` (pointers to
/// the further blocks of 32). Verified on glibc 2.36 (docs/python-frames.md).
const GLIBC_SPECIFIC_1ST: u16 = 784;
const GLIBC_SPECIFIC: u16 = 1296;

/// How often a process with no interpreter found is looked at again (its library may be
/// mapped after its first samples), and at most how many times: while no interpreter is mapped
/// (most processes run none), and once one is, until it is ready to be read (its library
/// mapped, its thread-state key set up: a start-up that takes longer on a loaded machine).
const LOOK_EVERY: Duration = Duration::from_millis(10);
const LOOKS_UNMAPPED: u32 = 10;
const LOOKS: u32 = 40;
/// Code objects kept per process (all forgotten past it).
const CODES_KEPT: usize = 65536;
/// Bytes of code objects kept over all processes (names, files, location tables: a process
/// can make each of its frames name a code object with a 1 MiB table): past it, the process's
/// codes are forgotten, and all processes' if that is not enough.
const CODE_BYTES_KEPT: usize = 64 << 20;

/// Python frames read and why some were not, for the summary.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PyCounts {
    /// Python frames put into stacks.
    pub frames: u64,
    /// Events of a thread with no Python thread state (not a Python thread, or not yet).
    pub no_tstate: u64,
    /// Events whose thread state found was not the thread's (another C library's layout).
    pub other_tstate: u64,
    /// Samples whose interpreter frames the kernel side could not read.
    pub unreadable: u64,
    /// Samples with more Python frames than were read.
    pub truncated: u64,
    /// Frames whose code object could not be read.
    pub code_unreadable: u64,
    /// Frames whose code object was freed and its address reused before it was read.
    pub code_replaced: u64,
    /// Rows labelled with the asyncio task their thread ran, and tasks that could not be read
    /// (gone before the event was converted).
    pub task_rows: u64,
    pub task_unreadable: u64,
}

struct Proc {
    interp: Interpreter,
    codes: HashMap<u64, Rc<Code>, ahash::RandomState>,
    /// Bytes of `codes` (see [`CODE_BYTES_KEPT`]).
    code_bytes: usize,
    tasks: tasks::Tasks,
}

/// The Python processes of a recording.
pub(crate) struct Python {
    enabled: bool,
    procs: HashMap<u32, Proc>,
    /// Processes looked at with no interpreter found: when last, how many times.
    looked: HashMap<u32, (Instant, u32)>,
    /// Interpreter files not supported (warned about once each).
    warned: HashSet<String>,
    /// Processes warned about (once each).
    warned_pids: HashSet<u32>,
    /// Interpreter files read.
    files: find::Files,
    /// The kernel side's `py_procs_any`, set at the first process handed to it.
    any: Option<crate::kernel::globals::Global>,
    /// Bytes of code objects kept over all processes.
    code_bytes: usize,
    pub counts: PyCounts,
}

impl Python {
    pub(crate) fn new(enabled: bool) -> Python {
        Python {
            enabled,
            procs: HashMap::new(),
            looked: HashMap::new(),
            warned: HashSet::new(),
            warned_pids: HashSet::new(),
            files: find::Files::default(),
            any: None,
            code_bytes: 0,
            counts: PyCounts::default(),
        }
    }

    /// `any`: the kernel side's `py_procs_any`, which it reads before looking a process up.
    pub(crate) fn tell_kernel(&mut self, any: Option<crate::kernel::globals::Global>) {
        self.any = any;
    }

    /// Look for an interpreter in process `pid` (at a sample of it) unless known or looked at
    /// recently (or often) enough; when found, the kernel side reads its frames from now on.
    pub(crate) fn look(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        if !self.enabled || pid == 0 || self.procs.contains_key(&pid) {
            return;
        }
        let tries = match self.looked.get(&pid) {
            Some((at, n)) if *n >= LOOKS || at.elapsed() < LOOK_EVERY => return,
            Some((_, n)) => *n,
            None => 0,
        };
        self.looked.insert(pid, (Instant::now(), tries + 1));
        let interp = match find::find(pid, &mut self.files) {
            Ok(Some(i)) => i,
            Ok(None) => {
                if tries + 1 >= LOOKS_UNMAPPED {
                    self.looked.insert(pid, (Instant::now(), LOOKS));
                }
                return;
            }
            // The executable, before the dynamic loader mapped the library it runs.
            // Or the interpreter before it set up its thread-state key.
            Err(
                find::FindError::NoSymbol(..)
                | find::FindError::NoTssKey { .. }
                | find::FindError::NoInterpreter { .. },
            ) if tries + 1 < LOOKS => {
                return;
            }
            Err(find::FindError::Io(..)) => {
                // The process is gone (its events are read after its exit): nothing to say.
                self.looked.insert(pid, (Instant::now(), LOOKS));
                return;
            }
            Err(e) => {
                // Not looked at again: the same file gives the same answer.
                self.looked.insert(pid, (Instant::now(), LOOKS));
                // One warning per process (its executable and its libpython say the same) and
                // per text (many processes of one interpreter).
                let text = e.to_string();
                let first_of_pid = self.warned_pids.insert(pid);
                if self.warned.insert(text.clone()) && first_of_pid {
                    eprintln!(
                        "stacks-record: warning: Python frames of pid {pid} not read (native stacks kept): {text}"
                    );
                }
                return;
            }
        };
        let l = interp.layout;
        let (is_entry, owner) = match l.entry {
            offsets::Entry::IsEntry(at) => (at, 0),
            offsets::Entry::Owner(at) => (0, at),
        };
        let (tss_key, interp_head, threads_head, tstate_next) = match l.tstate {
            offsets::Tstate::Key(_) => (interp.tstate_at, 0, 0, 0),
            offsets::Tstate::List {
                threads_head, next, ..
            } => (0, interp.tstate_at, threads_head, next),
        };
        let value = stacks_py_proc {
            tss_key,
            specific_1st: GLIBC_SPECIFIC_1ST,
            specific: GLIBC_SPECIFIC,
            native_tid: l.native_tid,
            cframe: l.cframe.unwrap_or(STACKS_PY_NO_CFRAME),
            current_frame: l.current_frame,
            code: l.code,
            previous: l.previous,
            prev_instr: l.prev_instr,
            is_entry,
            owner,
            qualname: l.co_qualname as u16,
            pad: 0,
            interp_head,
            threads_head,
            tstate_next,
            running_task: interp.asyncio.map_or(0, |a| a.running_task),
            task_name: interp.asyncio.map_or(0, |a| a.task_name),
        };
        // SAFETY: a plain #[repr(C)] struct of integers, viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const value).cast::<u8>(), size_of::<stacks_py_proc>())
        };
        if skel
            .maps
            .py_procs
            .update(&pid.to_ne_bytes(), bytes, MapFlags::ANY)
            .is_ok()
        {
            if let Some(any) = &self.any {
                any.set(1);
            }
            self.looked.remove(&pid);
            self.procs.insert(
                pid,
                Proc {
                    interp,
                    codes: HashMap::default(),
                    code_bytes: 0,
                    tasks: tasks::Tasks::default(),
                },
            );
        }
    }

    /// Process `pid` exec'd or exited: its interpreter (if any) is no more.
    pub(crate) fn forget(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        self.looked.remove(&pid);
        if let Some(p) = self.procs.remove(&pid) {
            self.code_bytes -= p.code_bytes;
            let _ = skel.maps.py_procs.delete(&pid.to_ne_bytes());
        }
    }

    /// The user stack of process `pid`: its native frames `native` (ids in `table`, innermost
    /// first) with the Python frames `py` read at the sample, each group of Python frames (up
    /// to and including an entry frame) inner to the next `_PyEval_EvalFrameDefault` frame;
    /// Python frames left when the native stack has no more such frames go outermost.
    pub(crate) fn interleave(
        &mut self,
        pid: u32,
        native: &[u32],
        py: &[PyPart],
        table: &mut FrameTable,
    ) -> Vec<u32> {
        let mut frames = Vec::with_capacity(py.len());
        for p in py {
            match p {
                PyPart::Frame {
                    code,
                    qualname,
                    prev_instr,
                    entry,
                } => frames.push((self.frame(pid, *code, *qualname, *prev_instr), *entry)),
                PyPart::Fail(why) => {
                    self.count_fail(*why);
                    if *why == STACKS_PY_TRUNCATED {
                        frames.push((truncated_frame(), false));
                    }
                }
                PyPart::Task { .. } => {}
            }
        }
        let eval = self.procs.get(&pid).map(|p| &p.interp);
        // Without a `_PyEval_EvalFrameDefault` frame (its loop in unnamed functions, or
        // skipped by the walk), the Python frames go inner to the innermost function that
        // entered the loop.
        let entry = eval
            .filter(|i| !native.iter().any(|&id| is_eval(table.get(id), i)))
            .and_then(|i| native.iter().position(|&id| is_entry(table.get(id), i)));
        let mut out = Vec::with_capacity(native.len() + frames.len());
        let mut next = frames.into_iter();
        for (at, &id) in native.iter().enumerate() {
            if entry == Some(at) {
                out.extend(next.by_ref().map(|(f, _)| table.intern(f)));
            }
            if let Some(i) = eval
                && is_eval(table.get(id), i)
            {
                for (f, entry) in next.by_ref() {
                    out.push(table.intern(f));
                    if entry {
                        break;
                    }
                }
            }
            out.push(id);
        }
        out.extend(next.map(|(f, _)| table.intern(f)));
        out
    }

    fn count_fail(&mut self, why: u32) {
        let c = &mut self.counts;
        match why {
            STACKS_PY_NO_TSTATE => c.no_tstate += 1,
            STACKS_PY_OTHER_TSTATE => c.other_tstate += 1,
            STACKS_PY_TRUNCATED => c.truncated += 1,
            _ => c.unreadable += 1,
        }
    }

    /// The frame of code object `code` of process `pid` (whose `co_qualname` was `qualname`
    /// at the sample) at instruction `prev_instr`.
    fn frame(&mut self, pid: u32, code: u64, qualname: u64, prev_instr: u64) -> UserFrame {
        let total = &mut self.code_bytes;
        let all = &mut self.procs;
        let read = all.get_mut(&pid).map(|p| {
            let layout = p.interp.layout;
            // A code object freed (a module's, once imported) leaves its address to another:
            // one is used only while it names the sample's qualified name (the object read
            // again otherwise). Failures are not kept: the address may hold code later.
            if let Some(c) = p.codes.get(&code)
                && c.qualname_at == qualname
            {
                return Ok::<_, code::ReadError>(Rc::clone(c));
            }
            let c = Rc::new(Code::read(pid, code, &layout)?);
            let size = c.size();
            if p.codes.len() >= CODES_KEPT || *total + size > CODE_BYTES_KEPT {
                *total -= p.code_bytes;
                p.codes.clear();
                p.code_bytes = 0;
            }
            if let Some(old) = p.codes.insert(code, Rc::clone(&c)) {
                p.code_bytes -= old.size();
                *total -= old.size();
            }
            p.code_bytes += size;
            *total += size;
            Ok(c)
        });
        if self.code_bytes > CODE_BYTES_KEPT {
            for p in self.procs.values_mut() {
                p.codes.clear();
                p.code_bytes = 0;
            }
            self.code_bytes = 0;
        }
        let why = match read {
            Some(Ok(c)) if c.qualname_at == qualname => {
                self.counts.frames += 1;
                return UserFrame {
                    addr: 0,
                    module: Some(PY_MODULE.into()),
                    build_id: None,
                    offset: None,
                    error: None,
                    symbol: Some(Rc::clone(&c.qualname)),
                    file: Some(Rc::clone(&c.filename)),
                    line: c.line(prev_instr),
                };
            }
            Some(Ok(_)) => {
                self.counts.code_replaced += 1;
                "Python code object freed and replaced before it was read".to_string()
            }
            Some(Err(e)) => {
                self.counts.code_unreadable += 1;
                format!("Python code object unreadable: {e}")
            }
            None => {
                self.counts.code_unreadable += 1;
                "Python code object of a process no longer known".to_string()
            }
        };
        UserFrame {
            addr: code,
            module: Some(PY_MODULE.into()),
            build_id: None,
            offset: None,
            error: Some(why),
            symbol: None,
            file: None,
            line: None,
        }
    }

    /// Whether process `pid`'s Python frames are read.
    pub(crate) fn knows(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The asyncio task an event's thread ran, among the Python parts `py` read at it: the
    /// task's address and its `task_name` pointer then.
    pub(crate) fn task_of(py: &[PyPart]) -> Option<(u64, u64)> {
        py.iter().find_map(|p| match p {
            PyPart::Task { task, name } => Some((*task, *name)),
            _ => None,
        })
    }

    /// Task `task` of process `pid` (its `task_name` pointer `name` at the event), named with
    /// the tasks awaiting it.
    pub(crate) fn task(&mut self, pid: u32, task: u64, name: u64) -> Option<TaskLabel> {
        let p = self.procs.get_mut(&pid)?;
        let a = p.interp.asyncio?;
        match p.tasks.label(pid, task, name, &p.interp.layout, &a) {
            Ok(label) => {
                self.counts.task_rows += 1;
                Some(label)
            }
            Err(_) => {
                self.counts.task_unreadable += 1;
                None
            }
        }
    }

    /// The summary's line, when any process ran Python.
    pub(crate) fn report(&self) {
        let c = &self.counts;
        if c == &PyCounts::default() {
            return;
        }
        eprintln!(
            "stacks-record: Python frames: {} read; stacks without: {} thread without a Python thread state, {} thread state not the thread's, {} interpreter memory unreadable; {} stacks truncated; frames whose code object was unreadable {}, replaced before read {}; rows with their asyncio task {}, task unreadable {}",
            c.frames,
            c.no_tstate,
            c.other_tstate,
            c.unreadable,
            c.truncated,
            c.code_unreadable,
            c.code_replaced,
            c.task_rows,
            c.task_unreadable
        );
    }
}

/// Whether native frame `f` is in the interpreter's `_PyEval_EvalFrameDefault`.
fn is_eval(f: &UserFrame, i: &Interpreter) -> bool {
    f.offset
        .is_some_and(|o| (i.eval.start..=i.eval.end).contains(&o))
        && in_interpreter(f, i)
}

/// Whether native frame `f` is in one of the interpreter's functions that enter the eval loop.
fn is_entry(f: &UserFrame, i: &Interpreter) -> bool {
    f.offset
        .is_some_and(|o| i.entries.iter().any(|r| (r.start..=r.end).contains(&o)))
        && in_interpreter(f, i)
}

/// Whether native frame `f` is in the interpreter's file.
fn in_interpreter(f: &UserFrame, i: &Interpreter) -> bool {
    match (&f.build_id, &i.build_id) {
        (Some(a), Some(b)) => a == b,
        _ => f.module.as_deref() == Some(i.file.as_str()),
    }
}

/// The outermost frame of a stack whose Python frames were not all read.
fn truncated_frame() -> UserFrame {
    UserFrame {
        addr: 0,
        module: Some(PY_MODULE.into()),
        build_id: None,
        offset: None,
        error: None,
        symbol: Some(PY_TRUNCATED.into()),
        file: None,
        line: None,
    }
}

/// Why the kernel side read no (or not all) Python frames (enum stacks_py_fail).
const STACKS_PY_NO_TSTATE: u32 = 1;
const STACKS_PY_OTHER_TSTATE: u32 = 2;
const STACKS_PY_TRUNCATED: u32 = 4;
/// `stacks_py_proc.cframe` of a version whose thread state holds the current frame.
const STACKS_PY_NO_CFRAME: u16 = 0xffff;
