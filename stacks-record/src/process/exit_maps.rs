//! Exit snapshots: the mappings a traced process's exit record carries when it had `d` stacks
//! the recorder may not have unwound yet (`struct stacks_exit`, bpf/kinds/lifecycle.bpf.h), kept
//! for unwinding and normalizing those stacks once `/proc/PID/maps` is empty; and the files they
//! name, opened by their path and checked by device and inode, so a file deleted or replaced
//! since is never read for another.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;

/// What a mapping of a snapshot is (`enum stacks_exit_map_what`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum What {
    /// An executable mapping of a file.
    File,
    /// The vdso.
    Vdso,
    /// The main thread's stack (where unwinding ends).
    Stack,
}

/// One mapping of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SnapMapping {
    pub range: Range<u64>,
    /// The file offset of the range's start.
    pub offset: u64,
    pub what: What,
    /// `major:minor` of the file's device, as `/proc/PID/maps` writes it.
    pub dev: String,
    pub inode: u64,
    /// The file's path as the kernel walked it; `None` when the walk stopped short of the root.
    pub path: Option<String>,
}

impl SnapMapping {
    /// A mapping from the kernel's fields: the device as the kernel numbers it
    /// (`major << 20 | minor`).
    pub(crate) fn new(
        range: Range<u64>,
        offset: u64,
        what: What,
        kernel_dev: u32,
        inode: u64,
        path: Option<String>,
    ) -> Self {
        Self {
            range,
            offset,
            what,
            dev: format!("{:02x}:{:02x}", kernel_dev >> 20, kernel_dev & 0xf_ffff),
            inode,
            path,
        }
    }
}

/// A snapshot's file that cannot be read: deleted, replaced by another at its path, or its path
/// unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileGone;

/// The file of a snapshot's mapping, opened by its path when that is still the same file (the
/// device and inode the kernel saw).
pub(crate) fn open(m: &SnapMapping) -> Result<File, FileGone> {
    open_file(m.path.as_deref().ok_or(FileGone)?, &m.dev, m.inode)
}

/// The file at `path` when it is the one on device `dev` (`major:minor`, as in
/// `/proc/PID/maps`) with inode `inode`.
pub(crate) fn open_file(path: &str, dev: &str, inode: u64) -> Result<File, FileGone> {
    // Without blocking: a FIFO put at the path since is refused, not waited on.
    let (file, _) = crate::process::untrusted::open_plain(path, u64::MAX).map_err(|_| FileGone)?;
    let meta = file.metadata().map_err(|_| FileGone)?;
    let d = meta.dev();
    let same =
        meta.ino() == inode && format!("{:02x}:{:02x}", libc::major(d), libc::minor(d)) == dev;
    same.then_some(file).ok_or(FileGone)
}

/// One process's snapshot, from its exit record.
struct Snapshot {
    maps: Rc<[SnapMapping]>,
}

/// The exit snapshots of processes whose exit was converted (empty for those that sent none),
/// until [`ExitMaps::forget`]; and the build ids of their files.
#[derive(Default)]
pub(crate) struct ExitMaps {
    procs: HashMap<u32, Snapshot, ahash::RandomState>,
    /// Build ids (hex; `None`: the file has none) by device and inode.
    build_ids: HashMap<(String, u64), Result<Option<String>, FileGone>, ahash::RandomState>,
}

impl ExitMaps {
    /// `pid`'s exit record was converted, with these mappings (none when it sent no snapshot).
    pub(crate) fn exited(&mut self, pid: u32, maps: Vec<SnapMapping>) {
        self.procs.insert(pid, Snapshot { maps: maps.into() });
    }

    /// Whether `pid`'s exit record was converted (and not forgotten since).
    pub(crate) fn exit_seen(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// `pid`'s snapshot, when its exit record carried one.
    pub(crate) fn maps(&self, pid: u32) -> Option<Rc<[SnapMapping]>> {
        self.procs
            .get(&pid)
            .filter(|s| !s.maps.is_empty())
            .map(|s| Rc::clone(&s.maps))
    }

    /// Forget a process (its address caches go: see `Converter::forget_exited`).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// The build id of a snapshot file, read once per file.
    pub(crate) fn build_id(&mut self, m: &SnapMapping) -> Result<Option<String>, FileGone> {
        let key = (m.dev.clone(), m.inode);
        if let Some(known) = self.build_ids.get(&key) {
            return known.clone();
        }
        let found = open(m).map(|f| crate::process::modules::build_id_of(&f));
        // A file gone is not remembered: a later snapshot may name one that is there.
        if found.is_ok() {
            self.build_ids.insert(key, found.clone());
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorder's own executable as a snapshot would name it.
    fn own_exe(inode_delta: u64) -> SnapMapping {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
        SnapMapping::new(
            0x1000..0x2000,
            0,
            What::File,
            (major << 20) | minor,
            meta.ino() + inode_delta,
            Some(exe.to_string_lossy().into_owned()),
        )
    }

    #[test]
    fn files_are_opened_only_when_still_the_same() {
        assert!(open(&own_exe(0)).is_ok());
        assert_eq!(open(&own_exe(1)).err(), Some(FileGone), "another inode");
        let mut unknown = own_exe(0);
        unknown.path = None;
        assert_eq!(open(&unknown).err(), Some(FileGone), "no path");
        let mut maps = ExitMaps::default();
        assert!(maps.build_id(&own_exe(0)).is_ok());
        assert_eq!(maps.build_id(&own_exe(1)), Err(FileGone));
    }

    #[test]
    fn devices_are_written_as_proc_writes_them() {
        let m = SnapMapping::new(0..1, 0, What::File, (0xfe << 20) | 1, 7, None);
        assert_eq!(m.dev, "fe:01");
        let m = SnapMapping::new(0..1, 0, What::File, (259 << 20) | 0x12345, 7, None);
        assert_eq!(m.dev, "103:12345");
    }

    #[test]
    fn exits_are_seen_with_or_without_a_snapshot() {
        let mut maps = ExitMaps::default();
        assert!(!maps.exit_seen(5));
        maps.exited(5, Vec::new());
        assert!(maps.exit_seen(5) && maps.maps(5).is_none());
        maps.exited(6, vec![own_exe(0)]);
        assert_eq!(maps.maps(6).map(|m| m.len()), Some(1));
        maps.forget(6);
        assert!(!maps.exit_seen(6));
    }
}
