//! Raw batches → symbolized ones, each distinct raw stack once per stream. A row's raw stack
//! (its kernel and user stacks, recorded kernel symbols and capture errors) is told apart by
//! its dictionary entries when the input's stack columns are dictionary-encoded, else by a
//! 128-bit hash of its contents; a stack not seen before in the stream is symbolized and
//! appended to the `stack` dictionary, and every row holds its stack's key. Symbolizing the new
//! stacks of a batch: every stack element is reduced to a key (module + offset, kernel symbol +
//! offset, …); each distinct key of the stream is resolved once (on the worker pool) and kept;
//! the new entries are a `take` from a small table of their distinct frames, with the
//! per-element addresses set afterwards. Reading a batch's stack columns is in `columns.rs`,
//! grouping stack elements by distinct frame in `group.rs`.

mod columns;
mod group;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int32Array, ListArray, RecordBatch, UInt32Array, UInt64Array};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType};
use stacks_stream::Unresolved;
use stacks_stream::dict::{Entries, StackDictionary};

use columns::{StackColumns, hash_lanes};
use group::Grouping;
pub(crate) use group::{Group, Res};

/// Entries of the output dictionaries past which they start afresh (a replacement dictionary
/// in the stream, see `stacks_stream::dict`; they also start afresh past
/// `stacks_stream::dict::MAX_BYTES`). A stack seen again after a restart is written again (its
/// frames stay resolved).
pub const MAX_STACKS: usize = stacks_stream::dict::MAX_ENTRIES;

/// Modules located, bytes of the files symbols are read from (the symbolizers map and parse
/// them), and frames resolved (user, kernel symbol and kernel address lookups), past which
/// everything resolved is forgotten and the symbolizers start over (their parsed files
/// dropped) before the next batch: on a host where new binaries keep being run (builds, test
/// runs, deployments), memory follows the modules of the recent stacks, not every module ever
/// seen. Recurring frames are resolved again after that, once.
pub const MAX_MODULES: usize = 256;
pub const MAX_MODULE_BYTES: u64 = 512 << 20;
pub const MAX_FRAMES: usize = 1 << 18;
/// And past this much of the process's own resident memory, measured (`RssAnon`): what the
/// symbolizers hold of the files they parsed (their parsed debug information: lazily, more of
/// a file's DWARF with each new address, so it grows on a quiet host whose binaries do not
/// change) is not known from the file sizes above. The first time at once. 128 MiB is about
/// 1.3 times what a system-wide recording of a host with process churn holds after its first
/// minutes (about 90-110 MiB), so it is reached by growth, not by the usual working set.
pub const MAX_RESIDENT: u64 = 128 << 20;

/// How often the pages of the files the symbolizers map are taken out of the resident set
/// (`stacks_stream::sys::drop_mapped_file_pages`): they are the page cache's, read again from
/// it when next needed, and the process's RSS is what it holds itself plus the pages read in
/// the last seconds, not every page of every binary it read symbols from.
const DROP_FILE_PAGES_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Least time between two such starts over, so that a working set larger than the limits is
/// parsed again once a minute, not at every batch.
const FORGET_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Stand-in path of a module recorded by build id only (looked up by build id; a path that
/// names no file, so the recorded-path step finds nothing).
const UNNAMED_MODULE: &str = "(module path not recorded)";

use crate::debuginfo::{Finder, ModuleFiles};
use crate::fx::FxMap;
pub use crate::layout::Layout;
use crate::resolve::{Frames, Pool, SymFrame};
use crate::table::Table;

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
    /// Distinct raw stacks symbolized (entries of the `stack` dictionary, over its restarts).
    pub stacks: u64,
    /// Times the output dictionaries were full and started afresh.
    pub restarts: u64,
    /// Times the resolved frames and located modules were forgotten ([`MAX_MODULES`],
    /// [`MAX_MODULE_BYTES`], [`MAX_FRAMES`]).
    pub forgotten: u64,
    /// Frames of the distinct stacks: stack elements in, symbolized frames out.
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
    /// Bytes of the files of the modules located (see [`MAX_MODULE_BYTES`]).
    module_bytes: u64,
    /// When the resolved frames were last forgotten (`None`: never).
    forgot_at: Option<std::time::Instant>,
    /// When the mapped files' pages were last dropped (see [`DROP_FILE_PAGES_EVERY`]).
    dropped_pages_at: std::time::Instant,
    /// [`MAX_FRAMES`], [`MAX_RESIDENT`] and [`FORGET_EVERY`] (tests lower them).
    max_frames: usize,
    max_resident: u64,
    forget_every: std::time::Duration,
    pub(crate) user: FxMap<(u32, u64), Frames>,
    pub(crate) ksym: FxMap<(Box<str>, u64), Frames>,
    pub(crate) kaddr: FxMap<u64, Frames>,
    /// Threads copying the stack columns of a batch.
    pub(crate) copiers: usize,
    /// The stream's distinct raw stacks and the dictionaries written so far.
    stream: StreamState,
    /// Entries past which the output dictionaries start afresh (see [`MAX_STACKS`]).
    max_stacks: usize,
    pub stats: Stats,
}

/// What tells a raw stack apart: its entries in dictionary-encoded stack columns (keys hold
/// for the whole stream), or a 128-bit hash of its contents.
#[derive(Hash, PartialEq, Eq, Clone, Copy)]
enum StackId {
    Entries(RawStack),
    Hash(u64, u64),
}

/// Per-stream state: each distinct raw stack's key in the output dictionaries.
#[derive(Default)]
struct StreamState {
    keys: FxMap<StackId, i32>,
    /// The `stack` dictionary (created with the first batch).
    stack: Option<StackDictionary>,
    /// Raw stack columns encoded anew (input column index → dictionary), when they are not
    /// all dictionary-encoded in the input.
    raw: HashMap<usize, StackDictionary>,
    /// Entries of the input dictionaries at the last batch: a dictionary that shrinks was
    /// replaced, and the keys seen so far mean nothing any more.
    entries: [usize; 3],
}

/// One row's raw stack: its entries in the kernel, user and kernel-symbol columns (`None`:
/// null) and its capture errors.
#[derive(Hash, PartialEq, Eq, Clone, Copy, Debug)]
struct RawStack {
    k: Option<usize>,
    u: Option<usize>,
    s: Option<usize>,
    kerr: Option<i32>,
    uerr: Option<i32>,
}

impl Symbolize {
    pub fn new(finder: Finder, kernel: KernelConfig) -> Self {
        Symbolize {
            finder,
            kernel,
            module_ids: HashMap::new(),
            module_keys: Vec::new(),
            modules: Vec::new(),
            module_bytes: 0,
            forgot_at: None,
            dropped_pages_at: std::time::Instant::now(),
            max_frames: MAX_FRAMES,
            max_resident: MAX_RESIDENT,
            forget_every: FORGET_EVERY,
            user: FxMap::default(),
            ksym: FxMap::default(),
            kaddr: FxMap::default(),
            copiers: 1,
            stream: StreamState::default(),
            max_stacks: MAX_STACKS,
            stats: Stats::default(),
        }
    }

    /// Start the output dictionaries afresh once they hold `max` entries (default
    /// [`MAX_STACKS`]).
    pub fn with_max_stacks(mut self, max: usize) -> Self {
        self.max_stacks = max.max(1);
        self
    }

    /// Forget what was resolved before every batch, by the memory bound (tests: results must
    /// not change).
    #[cfg(test)]
    fn forgetting_every_batch(mut self) -> Self {
        self.max_resident = 0;
        self.forget_every = std::time::Duration::ZERO;
        self
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
            Ok(files) => {
                self.module_bytes += std::fs::metadata(&files.symbols).map_or(0, |m| m.len());
                Ok(Arc::new(files))
            }
            Err(why) => Err(Frames::from(vec![SymFrame::unresolved(
                Unresolved::ModuleNotFound,
                why,
            )])),
        };
        self.modules[id as usize] = Some(m.clone());
        m
    }

    /// Forget every located module and resolved frame, and start the pool's symbolizers over.
    fn forget_resolved(&mut self, pool: &Pool) {
        self.module_ids = HashMap::new();
        self.module_keys = Vec::new();
        self.modules = Vec::new();
        self.module_bytes = 0;
        self.forgot_at = Some(std::time::Instant::now());
        self.user = FxMap::default();
        self.ksym = FxMap::default();
        self.kaddr = FxMap::default();
        pool.reset();
        self.stats.forgotten += 1;
        stacks_stream::sys::release_free_memory();
    }

    /// Start a new stream: the distinct stacks seen so far and the output dictionaries are
    /// forgotten (resolved frames are kept).
    pub fn new_stream(&mut self) {
        self.stream = StreamState::default();
    }

    /// Symbolize one batch: find the raw stacks no earlier batch of the stream had, group
    /// their stack elements by distinct frame, resolve the frames not resolved yet, append
    /// the new stacks to the `stack` dictionary and give every row its stack's key.
    pub fn batch(
        &mut self,
        batch: &RecordBatch,
        layout: &Layout,
        pool: &Pool,
    ) -> Result<RecordBatch, ArrowError> {
        stacks_stream::sys::release_free_memory_now_and_then();
        let columns = StackColumns::new(batch, layout)?;
        let resolved = self.user.len() + self.ksym.len() + self.kaddr.len();
        let due = self
            .forgot_at
            .is_none_or(|t| t.elapsed() >= self.forget_every);
        let over = self.module_keys.len() > MAX_MODULES
            || self.module_bytes > MAX_MODULE_BYTES
            || resolved > self.max_frames
            || (due
                && (resolved > 0 || !self.module_keys.is_empty())
                && stacks_stream::sys::resident_anon_bytes() > self.max_resident);
        if over && due {
            self.forget_resolved(pool);
        }
        // Bounded dictionaries: a full one is replaced by a new, smaller one (only entries of
        // this batch, fewer than the rows), which readers take as a replacement.
        let (written, full) = self.stream.stack.as_ref().map_or((0, false), |d| {
            (d.len(), d.is_full() || d.len() >= self.max_stacks)
        });
        // A full dictionary starts over when this batch's stacks are fewer than it holds (the
        // new one must be shorter): counted, not bounded by the batch's rows, which would keep
        // a dictionary of fewer stacks than a batch has rows growing past its byte limit (a
        // symbolized stack is KiBs: 8,192-row batches let it reach tens of MiB, held again by
        // every reader of the stream).
        // So does one whose input dictionaries started over (the recorder's restart): every
        // stack of the batch is new to it then, and appended again it would grow by a whole
        // batch of stacks already in it, in one delta that every reader concatenates.
        let input_restarted = layout.by_entry
            && input_lens(&columns)
                .iter()
                .zip(&self.stream.entries)
                .any(|(now, before)| now < before);
        if (full || input_restarted)
            && written > 0
            && Self::batch_stacks(&columns, layout) < written
        {
            self.stream = StreamState {
                entries: self.stream.entries,
                ..StreamState::default()
            };
            self.stats.restarts += 1;
            stacks_stream::sys::release_free_memory();
        }
        let (keys, new) = self.distinct(&columns, layout);
        let grouping = self.group(&columns, &new);
        self.resolve(&grouping.groups, pool);
        if self.dropped_pages_at.elapsed() >= DROP_FILE_PAGES_EVERY {
            // Only while no worker runs: a mapping one unmapped could be replaced by memory
            // of another kind between reading the list of mappings and advising them.
            pool.while_idle(stacks_stream::sys::drop_mapped_file_pages);
            self.dropped_pages_at = std::time::Instant::now();
        }
        let entries = self.build(grouping)?;
        self.stats.rows += batch.num_rows() as u64;
        self.stats.stacks += new.len() as u64;
        let dict = self
            .stream
            .stack
            .get_or_insert_with(|| StackDictionary::new(&stacks_stream::stack_type()));
        dict.extend(entries.as_ref())?;
        let keys = Int32Array::from(keys);
        let stack = dict.stream_column(keys.clone())?;
        let mut out: Vec<ArrayRef> = Vec::with_capacity(layout.keep.len() + 1);
        for &i in &layout.keep {
            out.push(self.raw_column(batch, layout, i, &columns, &keys, &new)?);
        }
        out.push(stack);
        RecordBatch::try_new(layout.output.clone(), out)
    }

    /// The distinct raw stacks of a batch's rows (rows without a stack not counted).
    fn batch_stacks(c: &StackColumns, layout: &Layout) -> usize {
        let hashers = hash_lanes();
        let mut seen: crate::fx::FxSet<StackId> = Default::default();
        for row in 0..c.rows {
            let r = c.raw(row);
            if r.k.is_none() && r.u.is_none() && r.s.is_none() {
                continue;
            }
            seen.insert(if layout.by_entry {
                StackId::Entries(r)
            } else {
                let (a, b) = c.hash(&hashers, &r);
                StackId::Hash(a, b)
            });
        }
        seen.len()
    }

    /// Each row's key in the output dictionaries (null: no stack at all) and the raw stacks
    /// new to the stream, in key order.
    fn distinct(&mut self, c: &StackColumns, layout: &Layout) -> (Vec<Option<i32>>, Vec<RawStack>) {
        let st = &mut self.stream;
        let lens = input_lens(c);
        if layout.by_entry {
            if lens
                .iter()
                .zip(&st.entries)
                .any(|(now, before)| now < before)
            {
                st.keys.clear();
            }
            st.entries = lens;
        }
        let next = st.stack.as_ref().map_or(0, StackDictionary::len);
        let mut new: Vec<RawStack> = Vec::new();
        let mut keys = Vec::with_capacity(c.rows);
        let hashers = hash_lanes();
        for row in 0..c.rows {
            let r = c.raw(row);
            if r.k.is_none() && r.u.is_none() && r.s.is_none() {
                keys.push(None);
                continue;
            }
            let id = if layout.by_entry {
                StackId::Entries(r)
            } else {
                let (a, b) = c.hash(&hashers, &r);
                StackId::Hash(a, b)
            };
            let key = *st.keys.entry(id).or_insert_with(|| {
                new.push(r);
                // Past 2^31 entries the dictionary refuses to grow (an error below).
                i32::try_from(next + new.len() - 1).unwrap_or(i32::MAX)
            });
            keys.push(Some(key));
        }
        (keys, new)
    }

    /// Output column for input column `i`: as it is, or a raw stack column encoded anew with
    /// the rows' `keys` (new entries: the `new` stacks' entries of the column).
    fn raw_column(
        &mut self,
        batch: &RecordBatch,
        layout: &Layout,
        i: usize,
        c: &StackColumns,
        keys: &Int32Array,
        new: &[RawStack],
    ) -> Result<ArrayRef, ArrowError> {
        let (entries, pick): (&Entries, fn(&RawStack) -> Option<usize>) = match i {
            _ if layout.by_entry => return Ok(batch.column(i).clone()),
            _ if i == layout.kstack => (&c.kent, |r| r.k),
            _ if i == layout.ustack => (&c.uent, |r| r.u),
            _ if Some(i) == layout.kstack_symbols => match &c.sent {
                Some(s) => (s, |r| r.s),
                None => return Ok(batch.column(i).clone()),
            },
            _ => return Ok(batch.column(i).clone()),
        };
        let values = entries.values();
        let dict = self
            .stream
            .raw
            .entry(i)
            .or_insert_with(|| StackDictionary::new(values.data_type()));
        let take: UInt32Array = new
            .iter()
            .map(|r| pick(r).and_then(|e| u32::try_from(e).ok()))
            .collect();
        dict.extend(arrow_select::take::take(values.as_ref(), &take, None)?.as_ref())?;
        // A row's key where its entry of this column is not null.
        let keys: Int32Array = keys
            .iter()
            .enumerate()
            .map(|(row, k)| k.filter(|_| entries.entry(row).is_some()))
            .collect();
        dict.stream_column(keys)
    }

    /// The new stacks symbolized: the frame table of their groups (each group's frames, in
    /// group order), taken per element, with each frame's address and stack lengths set.
    fn build(&mut self, g: Grouping<'_>) -> Result<ArrayRef, ArrowError> {
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
        Ok(Arc::new(list))
    }

    fn frames(&self, res: &Res<'_>) -> Frames {
        let got = match res {
            Res::User(m, off) => self.user.get(&(*m, *off)).cloned(),
            Res::KSym(s, off) => self.ksym.get(&(Box::<str>::from(*s), *off)).cloned(),
            Res::KAddr(a) => self.kaddr.get(a).cloned(),
            Res::Fixed(f) => Some(Frames::from(vec![f.clone()])),
        };
        got.unwrap_or_else(|| {
            Frames::from(vec![SymFrame::unresolved(
                Unresolved::NoSymbol,
                "not looked up",
            )])
        })
    }
}

/// The entries of a batch's input stack dictionaries (kernel, user, kernel symbols): one that
/// shrinks was replaced.
fn input_lens(c: &StackColumns) -> [usize; 3] {
    [
        c.kent.values().len(),
        c.uent.values().len(),
        c.sent.as_ref().map_or(0, |s| s.values().len()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::Options;
    use stacks_testkit::{Ksym, Row};

    /// A row whose kernel stack is `n` frames, `f1` (leaf) to `fN` (recorded symbols: no
    /// files needed).
    fn row(n: u64) -> Row {
        Row {
            kind: "profile".into(),
            kstack: Some((1..=n).map(|i| 0xffff_ffff_8100_0000 + i).collect()),
            kstack_symbols: Some(
                (1..=n)
                    .map(|i| {
                        Some(Ksym {
                            symbol: format!("f{i}"),
                            offset: i,
                            module: None,
                        })
                    })
                    .collect(),
            ),
            ..Row::default()
        }
    }

    /// Symbolize `batches` of rows (stacks of `row`) with dictionaries of at most `max`
    /// entries, through an output stream and back: each batch's `stack` dictionary size and
    /// every row's root function.
    fn run(batches: &[Vec<u64>], max: usize) -> (Vec<usize>, Vec<String>) {
        run_with(batches, max, false).0
    }

    /// As [`run`], forgetting what was resolved before every batch when `forget`; also the
    /// times it was forgotten.
    fn run_with(
        batches: &[Vec<u64>],
        max: usize,
        forget: bool,
    ) -> ((Vec<usize>, Vec<String>), u64) {
        let schema = Arc::new(stacks_stream::raw_schema(Default::default()));
        let layout = Layout::new(&schema, "test", Default::default()).unwrap();
        // Tests run in parallel, some with the same arguments: each run its own directory.
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "stacks-sym-max-{}-{max}-{forget}-{run}",
            std::process::id()
        ));
        let mut forgotten = 0;
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.arrow");
        std::thread::scope(|s| {
            let opts = Options {
                lines: false,
                inlines: false,
            };
            let pool = Pool::start(s, 1, opts, vec![]);
            let finder = Finder::new(&[], &[], None).unwrap();
            let kernel = KernelConfig {
                vmlinux: None,
                fallback: Err("recorded symbols only".into()),
            };
            let mut sym = Symbolize::new(finder, kernel).with_max_stacks(max);
            if forget {
                sym = sym.forgetting_every_batch();
            }
            let mut out =
                stacks_stream::open_output_with(Some(&path), &layout.output, false).unwrap();
            for rows in batches {
                let rows: Vec<Row> = rows.iter().map(|&n| row(n)).collect();
                let b = stacks_testkit::batch(&schema, &rows);
                out.write(&sym.batch(&b, &layout, &pool).unwrap()).unwrap();
            }
            out.finish().unwrap();
            forgotten = sym.stats.forgotten;
        });
        let batches = stacks_testkit::read_stream(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        let sizes = batches
            .iter()
            .map(|b| {
                let e = Entries::new(b.column_by_name("stack").unwrap()).unwrap();
                e.values().len()
            })
            .collect();
        let roots = stacks_testkit::read_frames(&batches)
            .into_iter()
            .map(|f| f.unwrap().last().unwrap().function.clone().unwrap())
            .collect();
        ((sizes, roots), forgotten)
    }

    #[test]
    fn forgetting_what_was_resolved_changes_no_output() {
        let batches = [vec![1, 2, 3], vec![4, 5, 1], vec![6, 7, 1], vec![6, 2, 2]];
        let (kept, none) = run_with(&batches, usize::MAX, false);
        let (forgot, times) = run_with(&batches, usize::MAX, true);
        assert_eq!(none, 0);
        assert_eq!(times, 3, "before every batch but the first");
        assert_eq!(forgot, kept);
    }

    #[test]
    fn full_dictionaries_start_afresh_with_a_smaller_one() {
        let batches = [vec![1, 2, 3], vec![4, 5, 1], vec![6, 7, 1], vec![6, 2, 2]];
        let (sizes, roots) = run(&batches, usize::MAX);
        assert_eq!(sizes, [3, 5, 7, 7], "a dictionary that only grows");
        let expected: Vec<String> = batches.iter().flatten().map(|n| format!("f{n}")).collect();
        assert_eq!(roots, expected);
        let (capped, capped_roots) = run(&batches, 4);
        // Batch 3 starts afresh (5 entries >= 4, and more than its 3 rows): its 3 stacks are
        // new again, 3 < 5 entries; batch 4 adds stack 2 (3 < 4: no restart).
        assert_eq!(capped, [3, 5, 3, 4]);
        assert_eq!(capped_roots, expected, "every row keeps its own stack");
    }

    #[test]
    fn a_full_dictionary_starts_afresh_for_a_batch_of_more_rows_than_it_holds() {
        // Batches have more rows than the dictionary entries (symbolized stacks are large,
        // so the byte limit comes at a few thousand stacks, 8,192-row batches are common):
        // what decides is the batch's distinct stacks, 1 here, fewer than the 2 held.
        let batches = [
            vec![1, 2, 1, 2, 1, 2],
            vec![3, 3, 3, 3, 3, 3],
            vec![3, 4, 5, 4, 5, 3],
        ];
        let (sizes, roots) = run(&batches, 2);
        assert_eq!(
            sizes,
            [2, 1, 3],
            "1 entry is not full: the third batch adds its 2 new stacks"
        );
        let expected: Vec<String> = batches.iter().flatten().map(|n| format!("f{n}")).collect();
        assert_eq!(roots, expected);
    }
}
