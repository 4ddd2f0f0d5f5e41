//! Raw batches → symbolized ones, each distinct raw stack once per stream. A row's raw stack
//! (its kernel and user stacks, recorded kernel symbols and capture errors) is told apart by
//! its dictionary entries when the input's stack columns are dictionary-encoded, else by a
//! 128-bit hash of its contents; a stack not seen before in the stream is symbolized and
//! appended to the `stack` dictionary, and every row holds its stack's key. Symbolizing the new
//! stacks of a batch: every stack element is reduced to a key (module + offset, kernel symbol +
//! offset, …); each distinct key of the stream is resolved once (on the worker pool) and kept;
//! the new entries are a `take` from a small table of their distinct frames, with the
//! per-element addresses set afterwards. Reading a batch's stack columns is in `columns.rs`,
//! telling the stream's raw stacks apart and keying them in `stream.rs`, grouping stack
//! elements by distinct frame in `group.rs`, building the new stacks from their resolved
//! frames in `build.rs`, and bounding what is located and resolved in `memory.rs`.

mod build;
mod columns;
mod group;
mod memory;
mod stream;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int32Array, RecordBatch};
use arrow_schema::ArrowError;
use stacks_stream::dict::StackDictionary;

use columns::StackColumns;
pub(crate) use group::{Group, Res};
use memory::{AGE_EVERY, FORGET_EVERY};
use stream::{RawStack, StreamState};

/// Entries of the output dictionaries past which they start afresh (a replacement dictionary
/// in the stream, see `stacks_stream::dict`; they also start afresh past
/// `stacks_stream::dict::MAX_BYTES`). A stack seen again after a restart is written again (its
/// frames stay resolved).
pub(crate) const MAX_STACKS: usize = stacks_stream::dict::MAX_ENTRIES;

/// Modules located, bytes of the files symbols are read from (the symbolizers map and parse
/// them), and frames resolved (user, kernel symbol and kernel address lookups), past which
/// everything resolved is forgotten and the symbolizers start over (their parsed files
/// dropped) before the next batch: on a host where new binaries keep being run (builds, test
/// runs, deployments), memory follows the modules of the recent stacks, not every module ever
/// seen. Recurring frames are resolved again after that, once.
pub(crate) const MAX_MODULES: usize = 256;
pub(crate) const MAX_MODULE_BYTES: u64 = 512 << 20;
pub(crate) const MAX_FRAMES: usize = 1 << 18;
/// And past this much of the process's own resident memory, measured (`RssAnon`): what the
/// symbolizers hold of the files they parsed (their parsed debug information: lazily, more of
/// a file's DWARF with each new address, so it grows on a quiet host whose binaries do not
/// change) is not known from the file sizes above. The first time at once. 128 MiB is about
/// 1.3 times what a system-wide recording of a host with process churn holds after its first
/// minutes (about 90-110 MiB), so it is reached by growth, not by the usual working set.
pub const MAX_RESIDENT: u64 = 128 << 20;

/// Stand-in path of a module recorded by build id only (looked up by build id; a path that
/// names no file, so the recorded-path step finds nothing).
const UNNAMED_MODULE: &str = "(module path not recorded)";

use crate::debuginfo::{Finder, ModuleFiles};
pub use crate::layout::Layout;
use crate::recent::Recent;
use crate::resolve::{Frames, Pool};

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
    /// Files whose parsed symbols and debug information were dropped after a whole period
    /// without a lookup ([`crate::resolve::Worker::age`]).
    pub files_dropped: u64,
    /// Frames of the distinct stacks: stack elements in, symbolized frames out.
    pub frames_in: u64,
    pub frames_out: u64,
    /// Distinct frames resolved (user (module, offset), kernel symbol + offset, kernel address).
    pub unique: u64,
    /// Distinct module paths not opened because they lie on FUSE (their frames `on_fuse`).
    pub modules_on_fuse: u64,
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
    /// Frames resolved, by module and file offset, kernel symbol and offset, kernel address:
    /// what the last [`AGE_EVERY`] or two used.
    pub(crate) user: Recent<(u32, u64), Frames>,
    pub(crate) ksym: Recent<(Box<str>, u64), Frames>,
    pub(crate) kaddr: Recent<u64, Frames>,
    /// When the resolved frames last aged, and how often they do ([`AGE_EVERY`]; tests
    /// lower it).
    aged_at: std::time::Instant,
    age_every: std::time::Duration,
    /// Threads copying the stack columns of a batch.
    pub(crate) copiers: usize,
    /// The stream's distinct raw stacks and the dictionaries written so far.
    stream: StreamState,
    /// Entries past which the output dictionaries start afresh (see [`MAX_STACKS`]).
    max_stacks: usize,
    pub stats: Stats,
    /// The module paths refused as on FUSE so far (counted once each).
    on_fuse: std::collections::HashSet<String>,
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
            user: Recent::default(),
            ksym: Recent::default(),
            kaddr: Recent::default(),
            aged_at: std::time::Instant::now(),
            age_every: AGE_EVERY,
            copiers: 1,
            stream: StreamState::default(),
            max_stacks: MAX_STACKS,
            stats: Stats::default(),
            on_fuse: Default::default(),
        }
    }

    /// Start the output dictionaries afresh once they hold `max` entries (default
    /// [`MAX_STACKS`]).
    #[cfg(test)]
    pub(crate) fn with_max_stacks(mut self, max: usize) -> Self {
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

    /// Age the resolved frames before every batch (tests: results must not change).
    #[cfg(test)]
    fn aging_every_batch(mut self) -> Self {
        self.age_every = std::time::Duration::ZERO;
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
        self.forget_if_over(pool);
        self.age_now_and_then(pool);
        self.start_over_if_full(&columns, layout);
        let (keys, new) = self.distinct(&columns, layout);
        let grouping = self.group(&columns, &new);
        self.resolve(&grouping.groups, pool);
        self.drop_file_pages_now_and_then(pool);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::Options;
    use stacks_stream::dict::Entries;
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
        run_with(batches, max, Forget::No).0
    }

    /// As [`run`], forgetting what was resolved before every batch when `forget`; also the
    /// times it was forgotten.
    /// What a run drops of what it resolved: nothing, everything before every batch, or
    /// (aging) what the batch before did not use.
    #[derive(Debug, Clone, Copy)]
    enum Forget {
        No,
        All,
        Aged,
    }

    fn run_with(
        batches: &[Vec<u64>],
        max: usize,
        forget: Forget,
    ) -> ((Vec<usize>, Vec<String>), u64) {
        let schema = Arc::new(stacks_stream::raw_schema(Default::default()));
        let layout = Layout::new(&schema, "test", Default::default()).unwrap();
        // Tests run in parallel, some with the same arguments: each run its own directory.
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "stacks-sym-max-{}-{max}-{forget:?}-{run}",
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
            sym = match forget {
                Forget::No => sym,
                Forget::All => sym.forgetting_every_batch(),
                Forget::Aged => sym.aging_every_batch(),
            };
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
        let (kept, none) = run_with(&batches, usize::MAX, Forget::No);
        let (forgot, times) = run_with(&batches, usize::MAX, Forget::All);
        assert_eq!(none, 0);
        assert_eq!(times, 3, "before every batch but the first");
        assert_eq!(forgot, kept);
        let (aged, times) = run_with(&batches, usize::MAX, Forget::Aged);
        assert_eq!(times, 0, "aging is not forgetting everything");
        assert_eq!(aged, kept);
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
