//! Bounding what a long-running symbolizer holds: the modules it located (by path and build
//! id) and every frame it resolved are forgotten, and its symbolizers started over, past the
//! limits of [`super::MAX_MODULES`] and the others; the pages of the files they map are
//! given back to the page cache now and then.

use std::collections::HashMap;
use std::sync::Arc;

use stacks_stream::Unresolved;

use super::{MAX_MODULE_BYTES, MAX_MODULES, Symbolize};
use crate::debuginfo::ModuleFiles;
use crate::recent::Recent;
use crate::resolve::{Frames, Pool, SymFrame};

/// How often the pages of the files the symbolizers map are taken out of the resident set
/// (`stacks_stream::sys::drop_mapped_file_pages`): they are the page cache's, read again from
/// it when next needed, and the process's RSS is what it holds itself plus the pages read in
/// the last seconds, not every page of every binary it read symbols from.
pub(super) const DROP_FILE_PAGES_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// How often the resolved frames age ([`Recent`]): a frame that no stack used for a whole
/// period is dropped (and resolved again if it recurs), so they follow the frames of recent
/// stacks. The files the workers parsed age with them: one given no lookup for a whole period
/// is dropped (`resolve::Worker::age`) and parsed again if it is needed again. Without it they grew with every
/// distinct address a host ever sampled (the long tail of large binaries, and the garbage
/// addresses of frame-pointer walks through code built without them, a new one at nearly
/// every sample of `/bin/sh`), about 1 MiB a minute on a churning host, until a limit forgot
/// everything at once.
pub(crate) const AGE_EVERY: std::time::Duration = std::time::Duration::from_secs(120);

/// Least time between two such starts over, so that a working set larger than the limits is
/// parsed again once a minute, not at every batch.
pub(super) const FORGET_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Symbolize {
    pub(super) fn module_id(&mut self, path: &str, build_id: Option<&str>) -> u32 {
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
                self.module_bytes += files.symbols_size;
                Ok(Arc::new(files))
            }
            Err((reason, why)) => {
                if reason == Unresolved::OnFuse && self.on_fuse.insert(path.clone()) {
                    self.stats.modules_on_fuse += 1;
                }
                Err(Frames::from(vec![SymFrame::unresolved(reason, why)]))
            }
        };
        self.modules[id as usize] = Some(m.clone());
        m
    }

    /// Forget everything located and resolved when past a limit (modules, their bytes,
    /// frames, or the process's resident memory) and the last time was long enough ago.
    pub(super) fn forget_if_over(&mut self, pool: &Pool) {
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
    }

    /// Forget every located module and resolved frame, and start the pool's symbolizers over.
    fn forget_resolved(&mut self, pool: &Pool) {
        self.module_ids = HashMap::new();
        self.module_keys = Vec::new();
        self.modules = Vec::new();
        self.module_bytes = 0;
        self.forgot_at = Some(std::time::Instant::now());
        self.user = Recent::default();
        self.ksym = Recent::default();
        self.kaddr = Recent::default();
        pool.reset();
        self.stats.forgotten += 1;
        stacks_stream::sys::release_free_memory();
    }

    /// Age the resolved frames, and the files the workers parsed, every [`AGE_EVERY`].
    pub(super) fn age_now_and_then(&mut self, pool: &Pool) {
        if self.aged_at.elapsed() >= self.age_every {
            self.user.age();
            self.ksym.age();
            self.kaddr.age();
            self.stats.files_dropped += pool.age() as u64;
            self.aged_at = std::time::Instant::now();
            stacks_stream::sys::release_free_memory();
        }
    }

    /// Take the mapped files' pages out of the resident set every
    /// [`DROP_FILE_PAGES_EVERY`].
    pub(super) fn drop_file_pages_now_and_then(&mut self, pool: &Pool) {
        if self.dropped_pages_at.elapsed() >= DROP_FILE_PAGES_EVERY {
            // Only while no worker runs: a mapping one unmapped could be replaced by memory
            // of another kind between reading the list of mappings and advising them.
            pool.while_idle(stacks_stream::sys::drop_mapped_file_pages);
            self.dropped_pages_at = std::time::Instant::now();
        }
    }
}
