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

    /// Symbolize one batch.
    pub fn batch(
        &mut self,
        batch: &RecordBatch,
        layout: &Layout,
        pool: &Pool,
    ) -> Result<RecordBatch, ArrowError> {
        let n = batch.num_rows();
        let kstack = batch.column(layout.kstack).as_list::<i32>();
        let ustack = batch.column(layout.ustack).as_list::<i32>();
        let kerr = batch
            .column(layout.kstack_error)
            .as_primitive::<Int32Type>();
        let uerr = batch
            .column(layout.ustack_error)
            .as_primitive::<Int32Type>();
        let kvalues = kstack.values().as_primitive::<UInt64Type>();
        let u = ustack.values().as_struct();
        let u_addr = struct_field(u, uframe::ADDR)?.as_primitive::<UInt64Type>();
        let u_module = struct_field(u, uframe::MODULE)?.as_string::<i32>();
        let u_build_id = struct_field(u, uframe::BUILD_ID)?.as_string::<i32>();
        let u_offset = struct_field(u, uframe::OFFSET)?.as_primitive::<UInt64Type>();
        let u_error = struct_field(u, uframe::ERROR)?.as_string::<i32>();
        let ksyms = match layout.kstack_symbols {
            Some(i) => {
                let list = batch.column(i).as_list::<i32>();
                let s = list.values().as_struct();
                Some((
                    list,
                    s,
                    struct_field(s, ksym::SYMBOL)?.as_string::<i32>(),
                    struct_field(s, ksym::OFFSET)?.as_primitive::<UInt64Type>(),
                    struct_field(s, ksym::MODULE)?.as_string::<i32>(),
                ))
            }
            None => None,
        };
        let vmlinux = self.kernel.vmlinux.is_some();

        // Pass 1: each element's group; groups are the batch's distinct frames.
        let mut gmap: FxMap<GKey<'_>, u32> = FxMap::default();
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut elem_group: Vec<u32> = Vec::new();
        let mut elem_addr: Vec<u64> = Vec::new();
        let mut row_end: Vec<usize> = Vec::with_capacity(n);
        let mut row_valid: Vec<bool> = Vec::with_capacity(n);
        let mut last_module: Option<(&str, Option<&str>, u32)> = None;
        let mut batch_modules: FxMap<(&str, Option<&str>), u32> = FxMap::default();
        for row in 0..n {
            if kstack.is_null(row) && ustack.is_null(row) {
                row_valid.push(false);
                row_end.push(elem_group.len());
                continue;
            }
            row_valid.push(true);
            // Kernel frames, leaf first.
            if kerr.is_valid(row) {
                let errno = kerr.value(row);
                push(
                    &mut gmap,
                    &mut groups,
                    &mut elem_group,
                    &mut elem_addr,
                    GKey::Missed {
                        kernel: true,
                        errno,
                    },
                    || Group {
                        place: Place {
                            kernel: true,
                            module: Some(KERNEL_MODULE),
                            build_id: None,
                            offset: None,
                        },
                        res: Res::Fixed(missed(true, errno)),
                    },
                    0,
                );
            } else if kstack.is_valid(row) {
                let range = list_range(kstack, row);
                let recorded = ksyms.as_ref().and_then(|(list, ..)| {
                    let r = list_range(list, row);
                    (list.is_valid(row) && r.len() == range.len()).then_some(r.start)
                });
                for (i, j) in range.enumerate() {
                    let addr = kvalues.value(j);
                    let leaf = i == 0;
                    match (recorded, &ksyms) {
                        (Some(start), Some((_, s, sym, off, module))) => {
                            let k = start + i;
                            if s.is_null(k) {
                                push(
                                    &mut gmap,
                                    &mut groups,
                                    &mut elem_group,
                                    &mut elem_addr,
                                    GKey::KNoSym,
                                    || Group {
                                        place: kplace(None),
                                        res: Res::Fixed(SymFrame::unresolved(
                                            "address not in the recording kernel's kallsyms",
                                        )),
                                    },
                                    addr,
                                );
                                continue;
                            }
                            let symbol = sym.value(k);
                            let offset = off.value(k);
                            let kmod = opt_str(module, k);
                            // Line lookups differ for return addresses; names alone do not.
                            let leaf = leaf && vmlinux && kmod.is_none();
                            push(
                                &mut gmap,
                                &mut groups,
                                &mut elem_group,
                                &mut elem_addr,
                                GKey::KSym {
                                    symbol,
                                    offset,
                                    module: kmod,
                                    leaf,
                                },
                                || Group {
                                    place: kplace(kmod),
                                    res: if vmlinux && kmod.is_none() {
                                        Res::KSym(symbol, lookup(leaf, offset))
                                    } else {
                                        Res::KSym(symbol, u64::MAX)
                                    },
                                },
                                addr,
                            );
                        }
                        _ => {
                            let a = lookup(leaf, addr);
                            push(
                                &mut gmap,
                                &mut groups,
                                &mut elem_group,
                                &mut elem_addr,
                                GKey::KAddr { addr: a },
                                || Group {
                                    place: kplace(None),
                                    res: Res::KAddr(a),
                                },
                                addr,
                            );
                        }
                    }
                }
            }
            // User frames, leaf first.
            if uerr.is_valid(row) {
                let errno = uerr.value(row);
                push(
                    &mut gmap,
                    &mut groups,
                    &mut elem_group,
                    &mut elem_addr,
                    GKey::Missed {
                        kernel: false,
                        errno,
                    },
                    || Group {
                        place: Place {
                            kernel: false,
                            module: None,
                            build_id: None,
                            offset: None,
                        },
                        res: Res::Fixed(missed(false, errno)),
                    },
                    0,
                );
            } else if ustack.is_valid(row) {
                for (i, j) in list_range(ustack, row).enumerate() {
                    let addr = u_addr.value(j);
                    let recorded_path = opt_str(u_module, j);
                    let build_id = opt_str(u_build_id, j);
                    let offset = u_offset.is_valid(j).then(|| u_offset.value(j));
                    // A frame the kernel normalized in a file no traced process was seen
                    // mapping has a build id but no path: found by build id alone.
                    let path = recorded_path.or(build_id.and(Some(UNNAMED_MODULE)));
                    let (Some(path), Some(offset)) = (path, offset) else {
                        let error = opt_str(u_error, j);
                        push(
                            &mut gmap,
                            &mut groups,
                            &mut elem_group,
                            &mut elem_addr,
                            GKey::Unnormalized {
                                module: path,
                                build_id,
                                offset,
                                error,
                            },
                            || Group {
                                place: Place {
                                    kernel: false,
                                    module: path,
                                    build_id,
                                    offset,
                                },
                                res: Res::Fixed(SymFrame::unresolved(
                                    error.unwrap_or("address was not normalized at record time"),
                                )),
                            },
                            addr,
                        );
                        continue;
                    };
                    let module = match last_module {
                        Some((p, b, id)) if p == path && b == build_id => id,
                        _ => {
                            let id = match batch_modules.get(&(path, build_id)) {
                                Some(&id) => id,
                                None => {
                                    let id = self.module_id(path, build_id);
                                    batch_modules.insert((path, build_id), id);
                                    id
                                }
                            };
                            last_module = Some((path, build_id, id));
                            id
                        }
                    };
                    let leaf = i == 0;
                    push(
                        &mut gmap,
                        &mut groups,
                        &mut elem_group,
                        &mut elem_addr,
                        GKey::User {
                            module,
                            offset,
                            leaf,
                        },
                        || Group {
                            place: Place {
                                kernel: false,
                                module: recorded_path,
                                build_id,
                                offset: Some(offset),
                            },
                            res: Res::User(module, lookup(leaf, offset)),
                        },
                        addr,
                    );
                }
            }
            row_end.push(elem_group.len());
        }
        drop(gmap);

        // Resolve what no earlier batch did.
        self.resolve(&groups, pool);

        // The batch's frame table: each group's frames, in group order.
        let mut table = Table::default();
        let mut gstart: Vec<u32> = Vec::with_capacity(groups.len() + 1);
        for g in &groups {
            gstart.push(table.len);
            let frames = self.frames(&g.res);
            for f in frames.iter() {
                table.push(f, &g.place);
            }
        }
        gstart.push(table.len);

        // Pass 2: row lengths and each frame's address; the frames themselves are copied from
        // the table group by group (a group's frames are adjacent rows there).
        let mut lengths: Vec<usize> = Vec::with_capacity(n);
        let mut addrs: Vec<u64> = Vec::with_capacity(elem_group.len() * 2);
        let mut e = 0usize;
        for &end in &row_end {
            let before = addrs.len();
            while e < end {
                let g = elem_group[e] as usize;
                let a = elem_addr[e];
                let k = (gstart[g + 1] - gstart[g]) as usize;
                addrs.extend(std::iter::repeat_n(a, k));
                e += 1;
            }
            lengths.push(addrs.len() - before);
        }
        self.stats.rows += n as u64;
        self.stats.frames_in += elem_group.len() as u64;
        self.stats.frames_out += addrs.len() as u64;

        let stack = table.finish(&elem_group, &gstart, UInt64Array::from(addrs), self.copiers)?;
        let DataType::List(field) = stacks_stream::stack_type() else {
            unreachable!("stack type is a list")
        };
        let nulls = row_valid.iter().any(|v| !v).then(|| row_valid.into());
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

/// Add one element to its group (made by `group` when new).
#[allow(clippy::too_many_arguments)]
fn push<'a>(
    gmap: &mut FxMap<GKey<'a>, u32>,
    groups: &mut Vec<Group<'a>>,
    elem_group: &mut Vec<u32>,
    elem_addr: &mut Vec<u64>,
    key: GKey<'a>,
    group: impl FnOnce() -> Group<'a>,
    addr: u64,
) {
    let g = match gmap.get(&key) {
        Some(&g) => g,
        None => {
            let g = groups.len() as u32;
            groups.push(group());
            gmap.insert(key, g);
            g
        }
    };
    elem_group.push(g);
    elem_addr.push(addr);
}
