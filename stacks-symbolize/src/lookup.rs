//! Filling the caches: the distinct keys of a batch that no earlier batch resolved, located
//! (debug files) and looked up on the worker pool, one job per file.

use crate::fx::FxMap;
use stacks_stream::Unresolved;

use crate::resolve::{Frames, Job, Pool, SymFrame};
use crate::transform::{Group, Res, Symbolize};

impl Symbolize {
    /// Resolve the groups' keys not in the caches, on the pool.
    pub(crate) fn resolve(&mut self, groups: &[Group<'_>], pool: &Pool) {
        enum Back {
            User(u32, Vec<u64>),
            KSym(Vec<(String, u64)>),
            KAddr(Vec<u64>),
        }
        let mut per_module: FxMap<u32, Vec<u64>> = FxMap::default();
        let mut ksyms: Vec<(String, u64)> = Vec::new();
        let mut kaddrs: Vec<u64> = Vec::new();
        for g in groups {
            match &g.res {
                Res::User(m, off) if !self.user.keep(&(*m, *off)) => {
                    per_module.entry(*m).or_default().push(*off)
                }
                Res::KSym(s, off) if !self.ksym.keep(&(Box::<str>::from(*s), *off)) => {
                    if *off == u64::MAX {
                        // Name only: no lookup needed.
                        self.ksym.insert(
                            (Box::from(*s), *off),
                            Frames::from(vec![SymFrame::named(s)]),
                        );
                        self.stats.unique += 1;
                    } else {
                        ksyms.push((s.to_string(), *off));
                    }
                }
                Res::KAddr(a) if !self.kaddr.keep(a) => kaddrs.push(*a),
                _ => {}
            }
        }
        let mut jobs = Vec::new();
        let mut backs = Vec::new();
        let mut modules: Vec<(u32, Vec<u64>)> = per_module.into_iter().collect();
        modules.sort_unstable_by_key(|(m, _)| *m);
        for (m, mut offs) in modules {
            offs.sort_unstable();
            offs.dedup();
            self.stats.unique += offs.len() as u64;
            match self.module(m) {
                Err(why) => {
                    for o in offs {
                        self.user.insert((m, o), why.clone());
                    }
                }
                Ok(files) => {
                    let mut look = Vec::with_capacity(offs.len());
                    let mut vaddrs = Vec::with_capacity(offs.len());
                    // One shared answer for the module's offsets outside its segments (the
                    // offset is the frame's own column): garbage return addresses are many.
                    let mut outside: Option<Frames> = None;
                    for o in offs {
                        match files.vaddr(o) {
                            Some(v) => {
                                look.push(o);
                                vaddrs.push(v);
                            }
                            None => {
                                let f = outside.get_or_insert_with(|| {
                                    Frames::from(vec![SymFrame::unresolved(
                                        Unresolved::OutsideSegments,
                                        format!(
                                            "file offset outside the loaded segments of {}",
                                            files.symbols.display()
                                        ),
                                    )])
                                });
                                self.user.insert((m, o), f.clone());
                            }
                        }
                    }
                    if !look.is_empty() {
                        jobs.push(Job::Elf {
                            file: files.symbols.clone(),
                            addrs: vaddrs,
                        });
                        backs.push(Back::User(m, look));
                    }
                }
            }
        }
        if !ksyms.is_empty() {
            ksyms.sort_unstable();
            ksyms.dedup();
            self.stats.unique += ksyms.len() as u64;
            let file = self
                .kernel
                .vmlinux
                .clone()
                .expect("KSym lookups only with vmlinux");
            jobs.push(Job::Vmlinux {
                file,
                syms: ksyms.clone(),
            });
            backs.push(Back::KSym(ksyms));
        }
        if !kaddrs.is_empty() {
            kaddrs.sort_unstable();
            kaddrs.dedup();
            self.stats.unique += kaddrs.len() as u64;
            match &self.kernel.fallback {
                Err(why) => {
                    let f = Frames::from(vec![SymFrame::unresolved(
                        Unresolved::NoKernelSymbols,
                        why.clone(),
                    )]);
                    for a in kaddrs {
                        self.kaddr.insert(a, f.clone());
                    }
                }
                Ok(file) => {
                    jobs.push(Job::Kallsyms {
                        file: file.clone(),
                        addrs: kaddrs.clone(),
                    });
                    backs.push(Back::KAddr(kaddrs));
                }
            }
        }
        if jobs.is_empty() {
            return;
        }
        for (back, results) in backs.into_iter().zip(pool.run(jobs)) {
            let results = results.into_iter().map(Frames::from);
            match back {
                Back::User(m, offs) => {
                    for (o, f) in offs.into_iter().zip(results) {
                        self.user.insert((m, o), f);
                    }
                }
                Back::KSym(syms) => {
                    for ((s, o), f) in syms.into_iter().zip(results) {
                        self.ksym.insert((s.into_boxed_str(), o), f);
                    }
                }
                Back::KAddr(addrs) => {
                    for (a, f) in addrs.into_iter().zip(results) {
                        self.kaddr.insert(a, f);
                    }
                }
            }
        }
    }
}
