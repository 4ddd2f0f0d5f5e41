//! Pass 1 of symbolizing a batch's new stacks: every stack element reduced to the key of its
//! distinct frame (module + offset, JIT or interpreted name, kernel symbol + offset, kernel
//! address, a missed stack…), each distinct key a group with where its frames come from.

use arrow_array::Array;
use stacks_stream::Unresolved;

use super::columns::{StackColumns, list_range, opt_str};
use super::{RawStack, Symbolize, UNNAMED_MODULE};
use crate::fx::FxMap;
use crate::kernel::KERNEL_MODULE;
use crate::resolve::SymFrame;
use crate::table::Place;

/// Distinct output frames of a batch.
#[derive(Hash, PartialEq, Eq)]
enum GKey<'a> {
    User {
        module: u32,
        offset: u64,
        leaf: bool,
    },
    /// JIT code, named by the process's perf map at record time; or an interpreted frame
    /// (a Python function), named with its file and line by the recorder.
    Jit {
        module: Option<&'a str>,
        name: &'a str,
        file: Option<&'a str>,
        line: Option<u32>,
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
        ..SymFrame::unresolved(
            Unresolved::MissedStack,
            format!(
                "{what} stack capture failed: errno {}",
                errno.saturating_neg()
            ),
        )
    }
}

fn lookup(leaf: bool, v: u64) -> u64 {
    if leaf { v } else { v.saturating_sub(1) }
}

fn kplace(module: Option<&str>) -> Place<'_> {
    Place {
        kernel: true,
        module: Some(module.unwrap_or(KERNEL_MODULE)),
        build_id: None,
        offset: None,
    }
}

/// A batch's elements grouped by distinct frame.
pub(super) struct Grouping<'a> {
    /// Each distinct frame's group, while grouping.
    keys: FxMap<GKey<'a>, u32>,
    pub(super) groups: Vec<Group<'a>>,
    /// Each stack element's group and address, rows one after the other.
    pub(super) elem_group: Vec<u32>,
    pub(super) elem_addr: Vec<u64>,
    /// Where each row's elements end, and whether it has a stack.
    pub(super) row_end: Vec<usize>,
    pub(super) row_valid: Vec<bool>,
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

impl Symbolize {
    /// Pass 1: each element's group; groups are the distinct frames of the new stacks.
    pub(super) fn group<'a>(&mut self, c: &'a StackColumns, new: &[RawStack]) -> Grouping<'a> {
        let n = new.len();
        let mut g = Grouping {
            keys: FxMap::default(),
            groups: Vec::new(),
            elem_group: Vec::new(),
            elem_addr: Vec::new(),
            row_end: Vec::with_capacity(n),
            row_valid: Vec::with_capacity(n),
        };
        let mut modules = ModuleCache::default();
        for r in new {
            if r.k.is_none() && r.u.is_none() {
                g.row_valid.push(false);
                g.row_end.push(g.elem_group.len());
                continue;
            }
            g.row_valid.push(true);
            self.group_kernel(c, r, &mut g);
            self.group_user(c, r, &mut g, &mut modules);
            g.row_end.push(g.elem_group.len());
        }
        g.keys = FxMap::default(); // only needed while grouping
        g
    }

    /// A stack's kernel frames, leaf first.
    fn group_kernel<'a>(&self, c: &'a StackColumns, r: &RawStack, g: &mut Grouping<'a>) {
        if let Some(errno) = r.kerr {
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
        let Some(entry) = r.k else {
            return;
        };
        let vmlinux = self.kernel.vmlinux.is_some();
        let range = list_range(&c.kstack, entry);
        let recorded = c.ksyms.as_ref().zip(r.s).and_then(|(k, s)| {
            let r = list_range(&k.list, s);
            (r.len() == range.len()).then_some((k, r.start))
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
                        Unresolved::NotInKallsyms,
                        "address not in the recording kernel's kallsyms",
                    )),
                });
                continue;
            }
            let symbol = k.symbol.value(at);
            let offset = k.offset.value(at);
            let kmod = opt_str(&k.module, at);
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

    /// A stack's user frames, leaf first.
    fn group_user<'a>(
        &mut self,
        c: &'a StackColumns,
        r: &RawStack,
        g: &mut Grouping<'a>,
        modules: &mut ModuleCache<'a>,
    ) {
        if let Some(errno) = r.uerr {
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
        let Some(entry) = r.u else {
            return;
        };
        for (i, j) in list_range(&c.ustack, entry).enumerate() {
            let addr = c.u_addr.value(j);
            let recorded_path = opt_str(&c.u_module, j);
            if let Some(name) = c.u_symbol.as_ref().and_then(|s| opt_str(s, j)) {
                let file = c.u_file.as_ref().and_then(|s| opt_str(s, j));
                let line = c
                    .u_line
                    .as_ref()
                    .and_then(|l| l.is_valid(j).then(|| l.value(j)));
                let key = GKey::Jit {
                    module: recorded_path,
                    name,
                    file,
                    line,
                };
                g.add(key, addr, || Group {
                    place: Place {
                        kernel: false,
                        module: recorded_path,
                        build_id: None,
                        offset: None,
                    },
                    res: Res::Fixed(SymFrame::named_at(name, file, line)),
                });
                continue;
            }
            let build_id = opt_str(&c.u_build_id, j);
            let offset = c.u_offset.is_valid(j).then(|| c.u_offset.value(j));
            // A frame the kernel normalized in a file no traced process was seen mapping has
            // a build id but no path: found by build id alone.
            let path = recorded_path.or(build_id.and(Some(UNNAMED_MODULE)));
            let (Some(path), Some(offset)) = (path, offset) else {
                let error = opt_str(&c.u_error, j);
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
                        Unresolved::NotNormalized,
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
}
