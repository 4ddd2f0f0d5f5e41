//! Address → frames with blazesym. A [`Worker`] owns one `Symbolizer` (which is not `Send` and
//! keeps the files it parsed until they age); a [`Pool`] runs one worker per thread and spreads a batch's
//! distinct lookups over them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use blazesym::inspect::Inspector;
use blazesym::symbolize::evict::{self, Evict};
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, inspect};
use stacks_stream::Unresolved;

use crate::elf::ElfError;
use crate::pinned::{self, Pinned};
use crate::recent::Recent;

pub use crate::frame::{Frames, Options, SymFrame, demangle};

/// One unit of work: addresses in one file.
#[derive(Clone, Debug)]
pub enum Job {
    /// ELF addresses (as in the file's symbol table) in `file`.
    Elf { file: PathBuf, addrs: Vec<u64> },
    /// Kernel addresses of this boot, against a kallsyms file.
    Kallsyms { file: PathBuf, addrs: Vec<u64> },
    /// Kernel `symbol + offset` looked up in a vmlinux with DWARF; the symbol's own name is
    /// the answer when the vmlinux does not know it.
    Vmlinux {
        file: PathBuf,
        syms: Vec<(String, u64)>,
    },
}

impl Job {
    pub fn len(&self) -> usize {
        match self {
            Job::Elf { addrs, .. } | Job::Kallsyms { addrs, .. } => addrs.len(),
            Job::Vmlinux { syms, .. } => syms.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file the job reads.
    fn file(&self) -> &PathBuf {
        match self {
            Job::Elf { file, .. } | Job::Kallsyms { file, .. } | Job::Vmlinux { file, .. } => file,
        }
    }
}

fn code_parts(ci: Option<&CodeInfo<'_>>) -> (Option<String>, Option<u32>, Option<u32>) {
    match ci {
        Some(ci) => (
            Some(ci.to_path().to_string_lossy().into_owned()),
            ci.line,
            ci.column.map(u32::from),
        ),
        None => (None, None, None),
    }
}

/// Expand one blazesym result into frames, innermost inlined function first.
fn expand(sym: Symbolized<'_>) -> Vec<SymFrame> {
    match sym {
        Symbolized::Unknown(why) => {
            vec![SymFrame::unresolved(Unresolved::NoSymbol, why.to_string())]
        }
        Symbolized::Sym(s) => {
            let mut out = Vec::with_capacity(s.inlined.len() + 1);
            for f in s.inlined.iter().rev() {
                let (file, line, column) = code_parts(f.code_info.as_ref());
                out.push(SymFrame {
                    function: Some(demangle(&f.name)),
                    symbol: Some(f.name.to_string()),
                    file,
                    line,
                    column,
                    inlined: true,
                    error: None,
                    reason: None,
                });
            }
            let (file, line, column) = code_parts(s.code_info.as_deref());
            out.push(SymFrame {
                function: Some(demangle(&s.name)),
                symbol: Some(s.name.to_string()),
                file,
                line,
                column,
                inlined: false,
                error: None,
                reason: None,
            });
            out
        }
    }
}

/// One thread's symbolizer.
pub struct Worker {
    symbolizer: Symbolizer,
    inspector: Inspector,
    opts: Options,
    /// Stripped Go binaries' own tables, for the addresses blazesym cannot name.
    go: crate::gopclntab::Cache,
    /// The files read in this period and in the one before: what [`Worker::age`] keeps.
    read: Recent<PathBuf, ()>,
    /// The module files of those, held open as checked (or why they cannot be read).
    pinned: HashMap<PathBuf, Result<Pinned, (Unresolved, String)>>,
}

impl Worker {
    pub fn new(opts: Options, debug_dirs: &[PathBuf]) -> Self {
        Worker {
            symbolizer: Symbolizer::builder()
                .enable_code_info(opts.lines)
                .enable_inlined_fns(opts.inlines && opts.lines)
                .enable_demangling(false)
                .set_debug_dirs(Some(debug_dirs))
                .build(),
            inspector: Inspector::new(),
            opts,
            go: crate::gopclntab::Cache::default(),
            read: Recent::default(),
            pinned: HashMap::new(),
        }
    }

    /// A period ends: the files this worker was given no job for in the whole period before
    /// are dropped from its symbolizer (their parsed symbols and debug information, and the
    /// mapping), and returned. What it parsed otherwise stays for as long as it runs: a host
    /// that ran a program once (a build, a tool) kept its debug information for good.
    pub fn age(&mut self) -> Vec<PathBuf> {
        let stale: Vec<PathBuf> = self.read.age().into_keys().collect();
        for file in &stale {
            // blazesym knows a module file by its descriptor's path: forgotten before the
            // descriptor is closed (its number may name another file next).
            let read_as = match self.pinned.get(file) {
                Some(Ok(p)) => p.path().to_path_buf(),
                _ => file.clone(),
            };
            // Best effort by blazesym's word; nothing cached for the file is no error.
            let _ = self
                .symbolizer
                .evict(&Evict::Elf(evict::Elf::new(&read_as)));
            self.go.forget(&read_as);
            self.pinned.remove(file);
        }
        stale
    }

    /// Frames for every input of `job`, in order.
    pub fn run(&mut self, job: &Job) -> Vec<Vec<SymFrame>> {
        if !matches!(job, Job::Kallsyms { .. }) {
            let file = job.file();
            if !self.read.keep(file) {
                self.read.insert(file.clone(), ());
            }
        }
        match job {
            Job::Elf { file, addrs } => {
                // The file checked is the file read: through the descriptor held open.
                let pinned = self.pinned.entry(file.clone()).or_insert_with(|| {
                    pinned::pin(file).map_err(|e| {
                        let reason = match e {
                            ElfError::OnFuse(_) => Unresolved::OnFuse,
                            _ => Unresolved::UnreadableFile,
                        };
                        (reason, e.to_string())
                    })
                });
                let read_as = match pinned {
                    Ok(p) => p.path().to_path_buf(),
                    Err((reason, why)) => {
                        return vec![vec![SymFrame::unresolved(*reason, why.clone())]; addrs.len()];
                    }
                };
                let src = Source::Elf(Elf::new(&read_as));
                match self.symbolizer.symbolize(&src, Input::VirtOffset(addrs)) {
                    Ok(syms) => {
                        let mut out: Vec<Vec<SymFrame>> = syms.into_iter().map(expand).collect();
                        self.go.name_unnamed(&read_as, addrs, &mut out, self.opts);
                        out
                    }
                    Err(e) => {
                        let why = format!("reading {}: {e}", file.display());
                        vec![
                            vec![SymFrame::unresolved(Unresolved::UnreadableFile, why)];
                            addrs.len()
                        ]
                    }
                }
            }
            Job::Kallsyms { file, addrs } => {
                let src = Source::Kernel(Kernel {
                    kallsyms: MaybeDefault::Some(file.clone()),
                    vmlinux: MaybeDefault::None,
                    kaslr_offset: None,
                    debug_syms: false,
                    ..Default::default()
                });
                match self.symbolizer.symbolize(&src, Input::AbsAddr(addrs)) {
                    Ok(syms) => syms.into_iter().map(expand).collect(),
                    Err(e) => {
                        let why = format!("{}: {e}", file.display());
                        vec![
                            vec![SymFrame::unresolved(Unresolved::NoKernelSymbols, why)];
                            addrs.len()
                        ]
                    }
                }
            }
            Job::Vmlinux { file, syms } => self.vmlinux(file, syms),
        }
    }

    fn vmlinux(&mut self, file: &PathBuf, syms: &[(String, u64)]) -> Vec<Vec<SymFrame>> {
        let named = |s: &str| vec![SymFrame::named(s)];
        let mut names: Vec<&str> = syms.iter().map(|(s, _)| s.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut src = inspect::source::Elf::new(file);
        src.debug_syms = false;
        let found = match self
            .inspector
            .lookup(&inspect::source::Source::Elf(src), &names)
        {
            Ok(found) => found,
            Err(_) => return syms.iter().map(|(s, _)| named(s)).collect(),
        };
        let addr_of: std::collections::HashMap<&str, u64> = names
            .iter()
            .zip(&found)
            .filter_map(|(n, infos)| Some((*n, infos.first()?.addr)))
            .collect();
        let src = Source::Elf(Elf::new(file));
        syms.iter()
            .map(|(s, off)| {
                let Some(base) = addr_of.get(s.as_str()) else {
                    return named(s);
                };
                match self
                    .symbolizer
                    .symbolize_single(&src, Input::VirtOffset(base + off))
                {
                    Ok(sym @ Symbolized::Sym(_)) => expand(sym),
                    _ => named(s),
                }
            })
            .collect()
    }
}

type Reply = (usize, Vec<Vec<SymFrame>>);

/// What a worker is asked.
enum Msg {
    /// Run a job, replying with its tag.
    Run(usize, Arc<Job>),
    /// Start over with a new `Symbolizer`, dropping every parsed file.
    Reset,
    /// Say so once everything sent before was handled (see [`Pool::while_idle`]).
    Idle(Sender<()>),
    /// A period ends ([`Worker::age`]): answer with the files dropped.
    Age(Sender<Vec<PathBuf>>),
}

/// Worker threads, one `Symbolizer` each, living as long as the scope they were started in.
/// A file stays with the worker that first read it: each worker maps and parses the files it
/// is given, so a file read by every worker is held once per worker (two workers held the
/// recorder's own 30 MB binary twice, and their parsed debug information twice).
pub struct Pool {
    senders: Vec<Sender<Msg>>,
    replies: Receiver<Reply>,
    owner: std::sync::Mutex<HashMap<PathBuf, usize>>,
}

/// Jobs with fewer inputs than twice this are not split across workers: each worker parses
/// the debug information of every file it gets, so splitting a file's lookups pays only when
/// there are many (measured: 6,000 lookups in 16 files ran faster unsplit, whole files in
/// parallel).
const SPLIT_MIN: usize = 2048;

impl Pool {
    /// Start `n` workers (at least one) in `scope`.
    pub fn start<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        n: usize,
        opts: Options,
        debug_dirs: Vec<PathBuf>,
    ) -> Self {
        let (reply_tx, replies) = channel::<Reply>();
        let mut senders = Vec::new();
        for _ in 0..n.max(1) {
            let (tx, rx) = channel::<Msg>();
            let reply_tx = reply_tx.clone();
            let dirs = debug_dirs.clone();
            scope.spawn(move || {
                let mut w = Worker::new(opts, &dirs);
                for msg in rx {
                    match msg {
                        Msg::Run(tag, job) => {
                            if reply_tx.send((tag, w.run(&job))).is_err() {
                                break;
                            }
                        }
                        Msg::Reset => w = Worker::new(opts, &dirs),
                        Msg::Idle(ack) => {
                            let _ = ack.send(());
                        }
                        Msg::Age(answer) => {
                            let _ = answer.send(w.age());
                        }
                    }
                }
            });
            senders.push(tx);
        }
        Pool {
            senders,
            replies,
            owner: Default::default(),
        }
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.senders.len()
    }

    /// Every worker starts over with a new `Symbolizer` (the files it parsed are dropped)
    /// before its next job.
    pub fn reset(&self) {
        self.owners().clear();
        for tx in &self.senders {
            tx.send(Msg::Reset).expect("symbolizer worker alive");
        }
    }

    /// Run `f` while every worker is idle, having handled everything sent to it before (its
    /// jobs, a reset): no worker maps or unmaps a file meanwhile, as the pool is given work
    /// only by the caller.
    pub(crate) fn while_idle<T>(&self, f: impl FnOnce() -> T) -> T {
        let (ack, acks) = channel();
        for tx in &self.senders {
            tx.send(Msg::Idle(ack.clone()))
                .expect("symbolizer worker alive");
        }
        drop(ack);
        for _ in &self.senders {
            let _ = acks.recv();
        }
        f()
    }

    /// A period ends for every worker ([`Worker::age`]): each drops the files it was given no
    /// job for in the whole period before, and a file no worker holds any longer goes to the
    /// least loaded one when next read. Returns the files dropped.
    pub fn age(&self) -> usize {
        let mut dropped = 0;
        for (w, tx) in self.senders.iter().enumerate() {
            let (answer, answers) = channel();
            tx.send(Msg::Age(answer)).expect("symbolizer worker alive");
            let stale = answers.recv().expect("symbolizer worker alive");
            let mut owners = self.owners();
            for file in stale {
                dropped += 1;
                if owners.get(&file) == Some(&w) {
                    owners.remove(&file);
                }
            }
        }
        dropped
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, usize>> {
        self.owner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Run `jobs`, large ones split across the workers; results in input order.
    pub fn run(&self, jobs: Vec<Job>) -> Vec<Vec<Vec<SymFrame>>> {
        let n = self.senders.len();
        let njobs = jobs.len();
        // Split into pieces: (job index, piece).
        let mut pieces: Vec<(usize, Job)> = Vec::new();
        for (i, job) in jobs.into_iter().enumerate() {
            let parts = if n > 1 && job.len() >= SPLIT_MIN * 2 {
                n
            } else {
                1
            };
            if parts == 1 {
                pieces.push((i, job));
                continue;
            }
            let chunk = job.len().div_ceil(parts);
            match job {
                Job::Elf { file, addrs } => {
                    for c in addrs.chunks(chunk) {
                        pieces.push((
                            i,
                            Job::Elf {
                                file: file.clone(),
                                addrs: c.to_vec(),
                            },
                        ))
                    }
                }
                Job::Kallsyms { file, addrs } => {
                    for c in addrs.chunks(chunk) {
                        pieces.push((
                            i,
                            Job::Kallsyms {
                                file: file.clone(),
                                addrs: c.to_vec(),
                            },
                        ))
                    }
                }
                Job::Vmlinux { file, syms } => {
                    for c in syms.chunks(chunk) {
                        pieces.push((
                            i,
                            Job::Vmlinux {
                                file: file.clone(),
                                syms: c.to_vec(),
                            },
                        ))
                    }
                }
            }
        }
        // A file's pieces to the worker that holds it; a split job's other pieces and new
        // files, largest first, to the least loaded worker (which then holds the file).
        let mut order: Vec<usize> = (0..pieces.len()).collect();
        order.sort_by_key(|&p| std::cmp::Reverse(pieces[p].1.len()));
        let mut load = vec![0usize; n];
        let owners: Vec<usize> = pieces.iter().map(|(i, _)| *i).collect();
        let mut pieces: Vec<Option<Job>> = pieces.into_iter().map(|(_, j)| Some(j)).collect();
        let mut held = self.owners();
        let mut given: HashMap<usize, Vec<usize>> = HashMap::new();
        for p in order {
            let job = pieces[p].take().expect("sent once");
            let split = given.entry(owners[p]).or_default();
            let least = || (0..n).min_by_key(|&w| load[w]).expect("a worker");
            let w = match held.get(job.file()) {
                Some(&w) if !split.contains(&w) => w,
                Some(_) => (0..n)
                    .filter(|w| !split.contains(w))
                    .min_by_key(|&w| load[w])
                    .unwrap_or_else(least),
                None => {
                    let w = least();
                    held.insert(job.file().clone(), w);
                    w
                }
            };
            split.push(w);
            load[w] += job.len().max(1);
            self.senders[w]
                .send(Msg::Run(p, Arc::new(job)))
                .expect("symbolizer worker alive");
        }
        drop(held);
        let mut got: Vec<Option<Vec<Vec<SymFrame>>>> = vec![None; owners.len()];
        for _ in 0..owners.len() {
            let (tag, frames) = self.replies.recv().expect("symbolizer worker alive");
            got[tag] = Some(frames);
        }
        let mut out: Vec<Vec<Vec<SymFrame>>> = vec![Vec::new(); njobs];
        for (p, frames) in got.into_iter().enumerate() {
            out[owners[p]].extend(frames.expect("every piece answered"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_stays_with_the_worker_that_read_it_unless_its_job_is_split() {
        let elf = |f: &str, n: usize| Job::Elf {
            file: PathBuf::from(f),
            addrs: (0..n as u64).collect(),
        };
        let opts = Options {
            lines: false,
            inlines: false,
        };
        std::thread::scope(|s| {
            let pool = Pool::start(s, 2, opts, vec![]);
            let holder = |f: &str| pool.owners().get(&PathBuf::from(f)).copied();
            pool.run(vec![elf("/nonexistent/a", 10), elf("/nonexistent/b", 5)]);
            let (a, b) = (
                holder("/nonexistent/a").unwrap(),
                holder("/nonexistent/b").unwrap(),
            );
            assert_ne!(a, b, "two new files to the two workers");
            // b is now the larger job, a new file the smaller: each known file to its worker.
            let out = pool.run(vec![
                elf("/nonexistent/a", 1),
                elf("/nonexistent/b", 50),
                elf("/nonexistent/c", 2),
            ]);
            assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), [1, 50, 2]);
            assert_eq!(
                (holder("/nonexistent/a"), holder("/nonexistent/b")),
                (Some(a), Some(b))
            );
            // A job split across the workers answers whole, in order.
            let out = pool.run(vec![elf("/nonexistent/a", SPLIT_MIN * 2)]);
            assert_eq!(out[0].len(), SPLIT_MIN * 2);
            assert_eq!(holder("/nonexistent/a"), Some(a));
            // A period ends with both read in it, then another with only b read.
            assert_eq!(pool.age(), 0);
            pool.run(vec![elf("/nonexistent/b", 1)]);
            assert_eq!(
                pool.age(),
                3,
                "a (in both workers: its last job was split) and c unread for a whole period"
            );
            assert_eq!(
                (
                    holder("/nonexistent/a"),
                    holder("/nonexistent/b"),
                    holder("/nonexistent/c")
                ),
                (None, Some(b), None),
                "a dropped file goes to the least loaded worker when next read"
            );
            pool.reset();
            assert_eq!(
                holder("/nonexistent/b"),
                None,
                "a reset forgets who held what"
            );
        });
    }

    #[inline(never)]
    fn known_function() -> u64 {
        std::hint::black_box(7)
    }

    fn own_vaddr() -> (PathBuf, u64) {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let n = blazesym::normalize::Normalizer::new();
        let out = n
            .normalize_user_addrs(blazesym::Pid::Slf, &[known_function as *const () as u64])
            .unwrap();
        let info = crate::elf::read(&exe).unwrap();
        (exe, info.file_offset_to_vaddr(out.outputs[0].0).unwrap())
    }

    #[test]
    fn resolves_a_known_function_with_file_and_line() {
        let (exe, vaddr) = own_vaddr();
        let mut w = Worker::new(
            Options {
                lines: true,
                inlines: true,
            },
            &[],
        );
        let frames = w.run(&Job::Elf {
            file: exe,
            addrs: vec![vaddr],
        });
        let last = frames[0].last().unwrap();
        assert!(
            last.function
                .as_deref()
                .unwrap()
                .ends_with("known_function"),
            "{frames:?}"
        );
        assert!(
            last.symbol.as_deref().unwrap().starts_with("_R")
                || last.symbol.as_deref().unwrap().starts_with("_ZN"),
            "{frames:?}"
        );
        assert!(
            last.file.as_deref().unwrap().ends_with("resolve.rs"),
            "{frames:?}"
        );
        assert!(last.line.unwrap() > 0);
    }

    #[test]
    fn without_lines_only_names() {
        let (exe, vaddr) = own_vaddr();
        let mut w = Worker::new(
            Options {
                lines: false,
                inlines: false,
            },
            &[],
        );
        let frames = w.run(&Job::Elf {
            file: exe,
            addrs: vec![vaddr, 0x7fff_ffff_0000],
        });
        assert_eq!(frames[0].len(), 1);
        assert!(
            frames[0][0]
                .function
                .as_deref()
                .unwrap()
                .ends_with("known_function")
        );
        assert!(frames[0][0].file.is_none() && frames[0][0].line.is_none());
        assert!(frames[1][0].function.is_none() && frames[1][0].error.is_some());
        assert_eq!(frames[0][0].reason, None);
        assert_eq!(frames[1][0].reason, Some(Unresolved::NoSymbol));
    }

    #[test]
    fn a_file_unread_for_a_whole_period_is_dropped_and_read_again_when_needed() {
        let (exe, vaddr) = own_vaddr();
        let dir = std::env::temp_dir().join(format!("stacks-age-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::copy(&exe, &a).unwrap();
        std::fs::copy(&exe, &b).unwrap();
        let mapped = |f: &PathBuf| {
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            maps.lines().any(|l| l.ends_with(f.to_str().unwrap()))
        };
        let job = |f: &PathBuf| Job::Elf {
            file: f.clone(),
            addrs: vec![vaddr],
        };
        let named = |frames: Vec<Vec<SymFrame>>| {
            frames[0][0]
                .function
                .as_deref()
                .is_some_and(|f| f.ends_with("known_function"))
        };
        let mut w = Worker::new(
            Options {
                lines: false,
                inlines: false,
            },
            &[],
        );
        assert!(named(w.run(&job(&a))) && named(w.run(&job(&b))));
        assert!(mapped(&a) && mapped(&b), "both files parsed and mapped");
        assert_eq!(w.age(), Vec::<PathBuf>::new(), "both read in that period");
        assert!(named(w.run(&job(&a))));
        assert_eq!(
            w.age(),
            vec![b.clone()],
            "b had no lookup for a whole period"
        );
        assert!(
            mapped(&a) && !mapped(&b),
            "b's mapping went with its parsed data"
        );
        assert!(named(w.run(&job(&b))), "b read again when needed");
        assert!(mapped(&b));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pool_splits_and_keeps_order() {
        let (exe, vaddr) = own_vaddr();
        let opts = Options {
            lines: true,
            inlines: true,
        };
        std::thread::scope(|s| {
            let pool = Pool::start(s, 2, opts, vec![]);
            let addrs: Vec<u64> = (0..5000)
                .map(|i| {
                    if i % 3 == 0 {
                        vaddr
                    } else {
                        0x7fff_ffff_0000 + i
                    }
                })
                .collect();
            let out = pool.run(vec![
                Job::Elf {
                    file: exe.clone(),
                    addrs: addrs.clone(),
                },
                Job::Elf {
                    file: "/nonexistent".into(),
                    addrs: vec![5],
                },
            ]);
            assert_eq!(out.len(), 2);
            assert_eq!(out[0].len(), 5000);
            for (i, f) in out[0].iter().enumerate() {
                assert_eq!(
                    f.last().unwrap().function.is_some(),
                    i % 3 == 0,
                    "{i}: {f:?}"
                );
            }
            assert!(
                out[1][0][0]
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("/nonexistent")
            );
            assert_eq!(out[1][0][0].reason, Some(Unresolved::UnreadableFile));
        });
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core9panicking9panic_fmt17h5f1a6fd39197ad62E"),
            "core::panicking::panic_fmt"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("plain_c"), "plain_c");
        assert_eq!(demangle("_Z"), "_Z");
    }
}
