//! Raw batches → symbolized ones. Every stack element is reduced to a key (module + offset,
//! kernel symbol + offset, …); each distinct key of the stream is resolved once (on the worker
//! pool) and kept; a batch's `stack` column is a `take` from a small table of the batch's
//! distinct frames, with the per-element addresses set afterwards.

use std::collections::HashMap;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, StringArray, StructArray, UInt64Array};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType};
use stacks_stream::{ksym, uframe};

/// Stand-in path of a module recorded by build id only (looked up by build id; a path that
/// names no file, so the recorded-path step finds nothing).
const UNNAMED_MODULE: &str = "(module path not recorded)";

use crate::debuginfo::{Finder, ModuleFiles};
use crate::fx::FxMap;
use crate::kernel::KERNEL_MODULE;
pub use crate::layout::Layout;
use crate::resolve::{Frames, Pool, SymFrame};
use crate::table::{Place, Table};

/// How kernel frames are resolved.
pub struct KernelConfig {
    /// vmlinux with DWARF for file:line of record-time symbols.
    pub vmlinux: Option<PathBuf>,
    /// For streams without record-time symbols: kallsyms of this boot, or why not.
    pub fallback: Result<PathBuf, String>,
}

/// Counters reported at the end.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub rows: u64,
    pub frames_in: u64,
    pub frames_out: u64,
    /// Distinct frames resolved (user (module, offset), kernel symbol + offset, kernel address).
    pub unique: u64,
}

/// Everything kept across batches: located modules and resolved frames.
pub struct Symbolize {
    pub(crate) finder: Finder,
    pub(crate) kernel: KernelConfig,
    pub(crate) module_ids: HashMap<(String, Option<String>), u32>,
    pub(crate) module_keys: Vec<(String, Option<String>)>,
    pub(crate) modules: Vec<Option<Result<Arc<ModuleFiles>, Frames>>>,
    pub(crate) user: FxMap<(u32, u64), Frames>,
    pub(crate) ksym: FxMap<(Box<str>, u64), Frames>,
    pub(crate) kaddr: FxMap<u64, Frames>,
    /// Threads copying the stack columns of a batch.
    pub(crate) copiers: usize,
    pub stats: Stats,
}

/// Distinct output frames of a batch.
#[derive(Hash, PartialEq, Eq)]
enum GKey<'a> {
    User {
        module: u32,
        offset: u64,
        leaf: bool,
    },
    Unnormalized {
        module: Option<&'a str>,
        build_id: Option<&'a str>,
        offset: Option<u64>,
        error: Option<&'a str>,
    },
    KSym {
        symbol: &'a str,
        offset: u64,
        module: Option<&'a str>,
        leaf: bool,
    },
    KNoSym,
    KAddr {
        addr: u64,
    },
    Missed {
        kernel: bool,
        errno: i32,
    },
}

/// How a group's frames are found.
pub(crate) enum Res<'a> {
    User(u32, u64),
    KSym(&'a str, u64),
    KAddr(u64),
    Fixed(SymFrame),
}

pub(crate) struct Group<'a> {
    pub(crate) place: Place<'a>,
    pub(crate) res: Res<'a>,
}

fn errno_text(errno: i32) -> String {
    let e = std::io::Error::from_raw_os_error(errno.saturating_neg());
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

/// A frame standing for a stack that could not be captured, so the failure stays visible.
fn missed(kernel: bool, errno: i32) -> SymFrame {
    let what = if kernel { "kernel" } else { "user" };
    SymFrame {
        function: Some(format!("[missed {what} stack: {}]", errno_text(errno))),
        ..SymFrame::unresolved(format!(
            "{what} stack capture failed: errno {}",
            errno.saturating_neg()
        ))
    }
}

fn lookup(leaf: bool, v: u64) -> u64 {
    if leaf { v } else { v.saturating_sub(1) }
}

fn list_range(list: &ListArray, row: usize) -> std::ops::Range<usize> {
    let o = list.value_offsets();
    o[row] as usize..o[row + 1] as usize
}

fn opt_str(a: &StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

fn struct_field<'a>(s: &'a StructArray, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    s.column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("stack element has no field `{name}`")))
}

impl Symbolize {
    pub fn new(finder: Finder, kernel: KernelConfig) -> Self {
        Symbolize {
            finder,
            kernel,
            module_ids: HashMap::new(),
            module_keys: Vec::new(),
            modules: Vec::new(),
            user: FxMap::default(),
            ksym: FxMap::default(),
            kaddr: FxMap::default(),
            copiers: 1,
            stats: Stats::default(),
        }
    }

    /// Copy a batch's stack columns on up to `threads` threads (2 pays on large batches).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.copiers = threads.clamp(1, 2);
        self
    }

    /// The debug-file finder (for its end-of-run report).
    pub fn finder(&self) -> &Finder {
        &self.finder
    }

    fn module_id(&mut self, path: &str, build_id: Option<&str>) -> u32 {
        let key = (path.to_string(), build_id.map(str::to_string));
        if let Some(&id) = self.module_ids.get(&key) {
            return id;
        }
        let id = self.module_keys.len() as u32;
        self.module_keys.push(key.clone());
        self.modules.push(None);
        self.module_ids.insert(key, id);
        id
    }

    pub(crate) fn module(&mut self, id: u32) -> Result<Arc<ModuleFiles>, Frames> {
        if let Some(m) = &self.modules[id as usize] {
            return m.clone();
        }
        let (path, build_id) = &self.module_keys[id as usize];
        let m = match self.finder.locate(path, build_id.as_deref()) {
            Ok(files) => Ok(Arc::new(files)),
            Err(why) => Err(Frames::from(vec![SymFrame::unresolved(why)])),
        };
        self.modules[id as usize] = Some(m.clone());
        m
    }

    /// Symbolize one batch: group its stack elements by distinct frame, resolve the frames no
    /// earlier batch did, and build the `stack` column from the batch's frame table.
    pub fn batch(
        &mut self,
        batch: &RecordBatch,
        layout: &Layout,
        pool: &Pool,
    ) -> Result<RecordBatch, ArrowError> {
        let columns = StackColumns::new(batch, layout)?;
        let mut grouping = self.group(&columns);
        grouping.keys = FxMap::default(); // only needed while grouping
        self.resolve(&grouping.groups, pool);
        self.build(batch, layout, grouping)
    }

    /// Pass 1: each element's group; groups are the batch's distinct frames.
    fn group<'a>(&mut self, c: &StackColumns<'a>) -> Grouping<'a> {
        let n = c.kstack.len();
        let mut g = Grouping {
            keys: FxMap::default(),
            groups: Vec::new(),
            elem_group: Vec::new(),
            elem_addr: Vec::new(),
            row_end: Vec::with_capacity(n),
            row_valid: Vec::with_capacity(n),
        };
        let mut modules = ModuleCache::default();
        for row in 0..n {
            if c.kstack.is_null(row) && c.ustack.is_null(row) {
                g.row_valid.push(false);
                g.row_end.push(g.elem_group.len());
                continue;
            }
            g.row_valid.push(true);
            self.group_kernel(c, row, &mut g);
            self.group_user(c, row, &mut g, &mut modules);
            g.row_end.push(g.elem_group.len());
        }
        g
    }

    /// A row's kernel frames, leaf first.
    fn group_kernel<'a>(&self, c: &StackColumns<'a>, row: usize, g: &mut Grouping<'a>) {
        if c.kerr.is_valid(row) {
            let errno = c.kerr.value(row);
            let key = GKey::Missed {
                kernel: true,
                errno,
            };
            g.add(key, 0, || Group {
                place: kplace(None),
                res: Res::Fixed(missed(true, errno)),
            });
            return;
        }
        if !c.kstack.is_valid(row) {
            return;
        }
        let vmlinux = self.kernel.vmlinux.is_some();
        let range = list_range(c.kstack, row);
        let recorded = c.ksyms.as_ref().and_then(|k| {
            let r = list_range(k.list, row);
            (k.list.is_valid(row) && r.len() == range.len()).then_some((k, r.start))
        });
        for (i, j) in range.enumerate() {
            let addr = c.kvalues.value(j);
            let leaf = i == 0;
            let Some((k, start)) = recorded else {
                let a = lookup(leaf, addr);
                g.add(GKey::KAddr { addr: a }, addr, || Group {
                    place: kplace(None),
                    res: Res::KAddr(a),
                });
                continue;
            };
            let at = start + i;
            if k.entries.is_null(at) {
                g.add(GKey::KNoSym, addr, || Group {
                    place: kplace(None),
                    res: Res::Fixed(SymFrame::unresolved(
                        "address not in the recording kernel's kallsyms",
                    )),
                });
                continue;
            }
            let symbol = k.symbol.value(at);
            let offset = k.offset.value(at);
            let kmod = opt_str(k.module, at);
            // Line lookups differ for return addresses; names alone do not.
            let leaf = leaf && vmlinux && kmod.is_none();
            let key = GKey::KSym {
                symbol,
                offset,
                module: kmod,
                leaf,
            };
            g.add(key, addr, || Group {
                place: kplace(kmod),
                res: if vmlinux && kmod.is_none() {
                    Res::KSym(symbol, lookup(leaf, offset))
                } else {
                    Res::KSym(symbol, u64::MAX)
                },
            });
        }
    }

    /// A row's user frames, leaf first.
    fn group_user<'a>(
        &mut self,
        c: &StackColumns<'a>,
        row: usize,
        g: &mut Grouping<'a>,
        modules: &mut ModuleCache<'a>,
    ) {
        if c.uerr.is_valid(row) {
            let errno = c.uerr.value(row);
            let key = GKey::Missed {
                kernel: false,
                errno,
            };
            g.add(key, 0, || Group {
                place: Place {
                    kernel: false,
                    module: None,
                    build_id: None,
                    offset: None,
                },
                res: Res::Fixed(missed(false, errno)),
            });
            return;
        }
        if !c.ustack.is_valid(row) {
            return;
        }
        for (i, j) in list_range(c.ustack, row).enumerate() {
            let addr = c.u_addr.value(j);
            let recorded_path = opt_str(c.u_module, j);
            let build_id = opt_str(c.u_build_id, j);
            let offset = c.u_offset.is_valid(j).then(|| c.u_offset.value(j));
            // A frame the kernel normalized in a file no traced process was seen mapping has
            // a build id but no path: found by build id alone.
            let path = recorded_path.or(build_id.and(Some(UNNAMED_MODULE)));
            let (Some(path), Some(offset)) = (path, offset) else {
                let error = opt_str(c.u_error, j);
                let key = GKey::Unnormalized {
                    module: path,
                    build_id,
                    offset,
                    error,
                };
                g.add(key, addr, || Group {
                    place: Place {
                        kernel: false,
                        module: path,
                        build_id,
                        offset,
                    },
                    res: Res::Fixed(SymFrame::unresolved(
                        error.unwrap_or("address was not normalized at record time"),
                    )),
                });
                continue;
            };
            let module = modules.id(self, path, build_id);
            let leaf = i == 0;
            let key = GKey::User {
                module,
                offset,
                leaf,
            };
            g.add(key, addr, || Group {
                place: Place {
                    kernel: false,
                    module: recorded_path,
                    build_id,
                    offset: Some(offset),
                },
                res: Res::User(module, lookup(leaf, offset)),
            });
        }
    }

    /// The symbolized batch: the frame table of the batch's groups (each group's frames, in
    /// group order), taken per element, with each frame's address and row lengths set.
    fn build(
        &mut self,
        batch: &RecordBatch,
        layout: &Layout,
        g: Grouping<'_>,
    ) -> Result<RecordBatch, ArrowError> {
        let mut table = Table::default();
        let mut gstart: Vec<u32> = Vec::with_capacity(g.groups.len() + 1);
        for group in &g.groups {
            gstart.push(table.len);
            let frames = self.frames(&group.res);
            for f in frames.iter() {
                table.push(f, &group.place);
            }
        }
        gstart.push(table.len);

        // Pass 2: row lengths and each frame's address; the frames themselves are copied from
        // the table group by group (a group's frames are adjacent rows there).
        let mut lengths: Vec<usize> = Vec::with_capacity(g.row_end.len());
        let mut addrs: Vec<u64> = Vec::with_capacity(g.elem_group.len() * 2);
        let mut e = 0usize;
        for &end in &g.row_end {
            let before = addrs.len();
            while e < end {
                let grp = g.elem_group[e] as usize;
                let k = (gstart[grp + 1] - gstart[grp]) as usize;
                addrs.extend(std::iter::repeat_n(g.elem_addr[e], k));
                e += 1;
            }
            lengths.push(addrs.len() - before);
        }
        self.stats.rows += batch.num_rows() as u64;
        self.stats.frames_in += g.elem_group.len() as u64;
        self.stats.frames_out += addrs.len() as u64;

        let stack = table.finish(
            &g.elem_group,
            &gstart,
            UInt64Array::from(addrs),
            self.copiers,
        )?;
        let DataType::List(field) = stacks_stream::stack_type() else {
            unreachable!("stack type is a list")
        };
        let nulls = g.row_valid.iter().any(|v| !v).then(|| g.row_valid.into());
        let list = ListArray::try_new(
            field,
            OffsetBuffer::from_lengths(lengths),
            Arc::new(stack),
            nulls,
        )?;
        let mut columns: Vec<ArrayRef> = layout
            .keep
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        columns.push(Arc::new(list));
        RecordBatch::try_new(layout.output.clone(), columns)
    }

    fn frames(&self, res: &Res<'_>) -> Frames {
        let got = match res {
            Res::User(m, off) => self.user.get(&(*m, *off)).cloned(),
            Res::KSym(s, off) => self.ksym.get(&(Box::<str>::from(*s), *off)).cloned(),
            Res::KAddr(a) => self.kaddr.get(a).cloned(),
            Res::Fixed(f) => Some(Frames::from(vec![f.clone()])),
        };
        got.unwrap_or_else(|| Frames::from(vec![SymFrame::unresolved("not looked up")]))
    }
}

fn kplace(module: Option<&str>) -> Place<'_> {
    Place {
        kernel: true,
        module: Some(module.unwrap_or(KERNEL_MODULE)),
        build_id: None,
        offset: None,
    }
}

/// The stack columns of a raw batch, typed.
struct StackColumns<'a> {
    kstack: &'a ListArray,
    ustack: &'a ListArray,
    kerr: &'a arrow_array::Int32Array,
    uerr: &'a arrow_array::Int32Array,
    kvalues: &'a UInt64Array,
    u_addr: &'a UInt64Array,
    u_module: &'a StringArray,
    u_build_id: &'a StringArray,
    u_offset: &'a UInt64Array,
    u_error: &'a StringArray,
    ksyms: Option<KernelSymbols<'a>>,
}

/// The record-time kernel symbols of a batch's kernel frames.
struct KernelSymbols<'a> {
    list: &'a ListArray,
    entries: &'a StructArray,
    symbol: &'a StringArray,
    offset: &'a UInt64Array,
    module: &'a StringArray,
}

impl<'a> StackColumns<'a> {
    fn new(batch: &'a RecordBatch, layout: &Layout) -> Result<Self, ArrowError> {
        let ustack = batch.column(layout.ustack).as_list::<i32>();
        let u = ustack.values().as_struct();
        let ksyms = match layout.kstack_symbols {
            Some(i) => {
                let list = batch.column(i).as_list::<i32>();
                let s = list.values().as_struct();
                Some(KernelSymbols {
                    list,
                    entries: s,
                    symbol: struct_field(s, ksym::SYMBOL)?.as_string::<i32>(),
                    offset: struct_field(s, ksym::OFFSET)?.as_primitive::<UInt64Type>(),
                    module: struct_field(s, ksym::MODULE)?.as_string::<i32>(),
                })
            }
            None => None,
        };
        let kstack = batch.column(layout.kstack).as_list::<i32>();
        Ok(StackColumns {
            kstack,
            ustack,
            kerr: batch
                .column(layout.kstack_error)
                .as_primitive::<Int32Type>(),
            uerr: batch
                .column(layout.ustack_error)
                .as_primitive::<Int32Type>(),
            kvalues: kstack.values().as_primitive::<UInt64Type>(),
            u_addr: struct_field(u, uframe::ADDR)?.as_primitive::<UInt64Type>(),
            u_module: struct_field(u, uframe::MODULE)?.as_string::<i32>(),
            u_build_id: struct_field(u, uframe::BUILD_ID)?.as_string::<i32>(),
            u_offset: struct_field(u, uframe::OFFSET)?.as_primitive::<UInt64Type>(),
            u_error: struct_field(u, uframe::ERROR)?.as_string::<i32>(),
            ksyms,
        })
    }
}

/// A batch's elements grouped by distinct frame.
struct Grouping<'a> {
    keys: FxMap<GKey<'a>, u32>,
    groups: Vec<Group<'a>>,
    /// Each stack element's group and address, rows one after the other.
    elem_group: Vec<u32>,
    elem_addr: Vec<u64>,
    /// Where each row's elements end, and whether it has a stack.
    row_end: Vec<usize>,
    row_valid: Vec<bool>,
}

impl<'a> Grouping<'a> {
    /// Add one element at `addr` to the group of `key` (made by `group` when new).
    fn add(&mut self, key: GKey<'a>, addr: u64, group: impl FnOnce() -> Group<'a>) {
        let g = match self.keys.get(&key) {
            Some(&g) => g,
            None => {
                let g = self.groups.len() as u32;
                self.groups.push(group());
                self.keys.insert(key, g);
                g
            }
        };
        self.elem_group.push(g);
        self.elem_addr.push(addr);
    }
}

/// The batch's modules: the last one (frames of a stack often share it) and all seen.
#[derive(Default)]
struct ModuleCache<'a> {
    last: Option<(&'a str, Option<&'a str>, u32)>,
    seen: FxMap<(&'a str, Option<&'a str>), u32>,
}

impl<'a> ModuleCache<'a> {
    fn id(&mut self, sym: &mut Symbolize, path: &'a str, build_id: Option<&'a str>) -> u32 {
        match self.last {
            Some((p, b, id)) if p == path && b == build_id => id,
            _ => {
                let id = *self
                    .seen
                    .entry((path, build_id))
                    .or_insert_with(|| sym.module_id(path, build_id));
                self.last = Some((path, build_id, id));
                id
            }
        }
    }
}
