//! asyncio tasks of CPython 3.14+: where the thread state keeps the task it runs and where a
//! task keeps its name and the task awaiting it, from the `_Py_AsyncioModuleDebugOffsets`
//! table CPython puts in an ELF section `.AsyncioDebug` (of the `_asyncio` extension module,
//! or of the interpreter when it is built in); then, from the live process, each task's name
//! (a `str`, or the number of an unnamed `Task-N`) and the chain of tasks awaiting it.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use object::{Object, ObjectSection};

use super::code::{ReadError, read_mem, read_str, read_u64};
use super::offsets::{Layout, place_in};

/// The table's groups, in order, each with its `uint64_t` fields in order: the same in 3.14
/// and 3.15 (104 bytes).
const ASYNCIO_TABLE: &[(&str, &[&str])] = &[
    (
        "asyncio_task_object",
        &[
            "size",
            "task_name",
            "task_awaited_by",
            "task_is_task",
            "task_awaited_by_is_set",
            "task_coro",
            "task_node",
        ],
    ),
    ("asyncio_interpreter_state", &["size", "asyncio_tasks_head"]),
    (
        "asyncio_thread_state",
        &[
            "size",
            "asyncio_running_loop",
            "asyncio_running_task",
            "asyncio_tasks_head",
        ],
    ),
];

/// The table's size in bytes.
fn table_size() -> usize {
    8 * ASYNCIO_TABLE.iter().map(|(_, f)| f.len()).sum::<usize>()
}

/// Where the fields read lie (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AsyncioLayout {
    /// The thread state's `asyncio_running_task` (read by the kernel side).
    pub running_task: u16,
    /// `TaskObj.task_name` (read by the kernel side too: a task freed and its memory reused
    /// between the event and its conversion shows as another name pointer).
    pub task_name: u16,
    task_awaited_by: u64,
    task_is_task: u64,
    task_awaited_by_is_set: u64,
}

/// The layout in a `.AsyncioDebug` section's bytes, checked: each group's fields within its
/// struct's size (`None` when not).
pub(crate) fn parse(raw: &[u8]) -> Option<AsyncioLayout> {
    if raw.len() < table_size() {
        return None;
    }
    let word = |at: usize| u64::from_ne_bytes(raw[at..at + 8].try_into().unwrap_or([0xff; 8]));
    let get = |group: &str, field: &str| -> Option<u64> {
        let at = place_in(ASYNCIO_TABLE, 0, group, field)?;
        let size = word(place_in(ASYNCIO_TABLE, 0, group, "size")?);
        let v = word(at);
        (size > 0 && size < 1 << 20 && v < size).then_some(v)
    };
    let small = |group, field| get(group, field).and_then(|v| u16::try_from(v).ok());
    Some(AsyncioLayout {
        running_task: small("asyncio_thread_state", "asyncio_running_task")?,
        task_name: small("asyncio_task_object", "task_name")?,
        task_awaited_by: get("asyncio_task_object", "task_awaited_by")?,
        task_is_task: get("asyncio_task_object", "task_is_task")?,
        task_awaited_by_is_set: get("asyncio_task_object", "task_awaited_by_is_set")?,
    })
}

/// The `.AsyncioDebug` section of ELF file `bytes`, if it has one.
pub(crate) fn section(bytes: &[u8]) -> Option<Vec<u8>> {
    let elf = object::File::parse(bytes).ok()?;
    let s = elf.section_by_name(".AsyncioDebug")?;
    s.data().ok().map(<[u8]>::to_vec)
}

/// The `_asyncio` extension module of interpreter file `file` (`…/bin/python3.N` or
/// `…/lib/libpython3.N.so*`), in its standard library's `lib-dynload`, as seen from process
/// `pid`'s root: the file's bytes.
pub(crate) fn extension_module(pid: u32, file: &str, minor: u32) -> Option<Vec<u8>> {
    let dir = std::path::Path::new(file).parent()?;
    let lib = format!("python3.{minor}/lib-dynload");
    let candidates = [
        dir.parent().map(|p| p.join("lib").join(&lib)),
        Some(dir.join(&lib)),
    ];
    for d in candidates.into_iter().flatten() {
        let here = format!("/proc/{pid}/root{}", d.display());
        let Ok(entries) = std::fs::read_dir(&here) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("_asyncio.") && name.ends_with(".so") {
                let path = d.join(&*name);
                return crate::process::untrusted::read_of(pid, &path.to_string_lossy(), 64 << 20)
                    .ok();
            }
        }
    }
    None
}

/// A running task's labels: its name, and the chain from the outermost task awaiting it
/// down to it, `;`-joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TaskLabel {
    pub name: Rc<str>,
    pub chain: Rc<str>,
}

/// How long a task's chain is used before it is read again (a task's awaiters change).
const CHAIN_FRESH: Duration = Duration::from_millis(100);
/// Tasks awaiting one another followed at most.
const CHAIN_MAX: usize = 16;
/// Tasks kept per process (all forgotten past it).
const TASKS_KEPT: usize = 16384;

/// The tasks of one process read so far, by task address and name pointer.
#[derive(Default)]
pub(crate) struct Tasks {
    seen: HashMap<(u64, u64), (TaskLabel, Instant)>,
    names: HashMap<(u64, u64), Rc<str>>,
}

impl Tasks {
    /// The labels of task `task` (whose `task_name` was `name` at the event) of process `pid`.
    pub(crate) fn label(
        &mut self,
        pid: u32,
        task: u64,
        name: u64,
        l: &Layout,
        a: &AsyncioLayout,
    ) -> Result<TaskLabel, ReadError> {
        if let Some((label, at)) = self.seen.get(&(task, name))
            && at.elapsed() < CHAIN_FRESH
        {
            return Ok(label.clone());
        }
        if self.seen.len() >= TASKS_KEPT {
            self.seen.clear();
            self.names.clear();
        }
        // The task's name pointer now must be the event's: else the task is gone and its
        // memory holds another.
        if read_u64(pid, task.wrapping_add(u64::from(a.task_name)))? != name {
            return Err(ReadError::Replaced(task));
        }
        let own = self.name(pid, task, name, l)?;
        let mut chain = vec![Rc::clone(&own)];
        let mut at = task;
        while chain.len() < CHAIN_MAX {
            let Some(parent) = awaited_by(pid, at, l, a)? else {
                break;
            };
            let parent_name = read_u64(pid, parent.wrapping_add(u64::from(a.task_name)))?;
            chain.push(self.name(pid, parent, parent_name, l)?);
            at = parent;
        }
        chain.reverse();
        let label = TaskLabel {
            name: own,
            chain: chain.join(";").into(),
        };
        self.seen
            .insert((task, name), (label.clone(), Instant::now()));
        Ok(label)
    }

    /// Task `task`'s name, object `name`: a `str`, or an `int` N for an unnamed task
    /// (`Task-N`, as `Task.get_name()` makes it).
    fn name(&mut self, pid: u32, task: u64, name: u64, l: &Layout) -> Result<Rc<str>, ReadError> {
        if let Some(n) = self.names.get(&(task, name)) {
            return Ok(Rc::clone(n));
        }
        let ty = read_u64(pid, name.wrapping_add(l.ob_type))?;
        let flags = read_u64(pid, ty.wrapping_add(l.tp_flags))?;
        let text: Rc<str> = if flags & TPFLAGS_UNICODE_SUBCLASS != 0 {
            read_str(pid, name, l)?.into()
        } else if flags & TPFLAGS_LONG_SUBCLASS != 0 {
            format!("Task-{}", read_int(pid, name, l)?).into()
        } else {
            return Err(ReadError::NotAString(name));
        };
        self.names.insert((task, name), Rc::clone(&text));
        Ok(text)
    }
}

/// `Py_TPFLAGS_UNICODE_SUBCLASS`, `Py_TPFLAGS_LONG_SUBCLASS`.
const TPFLAGS_UNICODE_SUBCLASS: u64 = 1 << 28;
const TPFLAGS_LONG_SUBCLASS: u64 = 1 << 24;

/// A small non-negative `int`'s value (`lv_tag`: digit count << 3, sign in the low bits;
/// 30-bit digits).
fn read_int(pid: u32, addr: u64, l: &Layout) -> Result<u64, ReadError> {
    let tag = read_u64(pid, addr.wrapping_add(l.long_tag))?;
    let (digits, sign) = (tag >> 3, tag & 3);
    if sign == 1 || digits == 0 {
        return Ok(0);
    }
    if sign != 0 || digits > 2 {
        return Err(ReadError::TooLarge(addr, digits));
    }
    let raw = read_mem(pid, addr.wrapping_add(l.long_digits), 4 * digits as usize)?;
    Ok(raw
        .chunks_exact(4)
        .enumerate()
        .map(|(i, c)| u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])) << (30 * i))
        .sum())
}

/// The task awaiting task `task`, when one does: its `task_awaited_by` is that task, or a set
/// of them (then the first that is a task).
fn awaited_by(
    pid: u32,
    task: u64,
    l: &Layout,
    a: &AsyncioLayout,
) -> Result<Option<u64>, ReadError> {
    let by = read_u64(pid, task.wrapping_add(a.task_awaited_by))?;
    if by == 0 {
        return Ok(None);
    }
    let is_set = read_mem(pid, task.wrapping_add(a.task_awaited_by_is_set), 1)?[0] != 0;
    let is_task = |obj: u64| -> Result<bool, ReadError> {
        Ok(read_mem(pid, obj.wrapping_add(a.task_is_task), 1)?[0] == 1)
    };
    if !is_set {
        return Ok(is_task(by)?.then_some(by));
    }
    // A set of awaiters (`gather` of one task by several): its table's live entries.
    let mask = read_u64(pid, by.wrapping_add(l.set_mask))?;
    let table = read_u64(pid, by.wrapping_add(l.set_table))?;
    let n = mask.saturating_add(1).min(64) as usize;
    let raw = read_mem(pid, table, 16 * n)?;
    for entry in raw.chunks_exact(16) {
        let key = u64::from_ne_bytes(entry[..8].try_into().unwrap_or([0; 8]));
        let hash = u64::from_ne_bytes(entry[8..].try_into().unwrap_or([0; 8]));
        // Empty slots are null; a removed key's slot holds the set's dummy, hash -1.
        if key != 0 && hash != u64::MAX && is_task(key).unwrap_or(false) {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `.AsyncioDebug`: 3.14.10's (its `_asyncio` module's) or 3.15.2's (its
    /// executable's).
    fn real(minor: u32) -> Vec<u8> {
        let hex = match minor {
            14 => include_str!("testdata/asyncio_debug_3.14.hex"),
            _ => include_str!("testdata/asyncio_debug_3.15.hex"),
        };
        stacks_stream::hex::decode(hex.trim()).expect("hex")
    }

    #[test]
    fn a_table_is_read_and_checked() {
        let l = parse(&real(14)).expect("3.14's");
        assert_eq!((l.running_task, l.task_name), (872, 136));
        assert_eq!(
            (l.task_awaited_by, l.task_is_task, l.task_awaited_by_is_set),
            (96, 108, 109)
        );
        let l = parse(&real(15)).expect("3.15's");
        assert_eq!((l.running_task, l.task_name), (1032, 136));
        // Short, or a field past its struct.
        assert_eq!(parse(&real(14)[..100]), None);
        let mut raw = real(14);
        raw[8..16].copy_from_slice(&999u64.to_ne_bytes());
        assert_eq!(parse(&raw), None);
        assert_eq!(parse(&[]), None);
    }
}
