//! Cgroup v2 ids, as the BPF side reads them (a cgroup's kernfs node id, which is its
//! directory's inode number in the cgroup2 file system), turned into the cgroup's path
//! (`/system.slice/nginx.service`): the systemd unit or container a row's thread ran in.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Unknown ids rescan the hierarchy at most this often.
const RESCAN_EVERY: Duration = Duration::from_secs(1);

/// Paths of cgroup ids, from a walk of the cgroup2 mount.
pub(crate) struct CgroupNames {
    /// Where cgroup2 is mounted; `None`: not mounted here (ids stay unnamed).
    root: Option<PathBuf>,
    names: HashMap<u64, Rc<str>, ahash::RandomState>,
    scanned: Option<Instant>,
}

impl CgroupNames {
    /// Names from the cgroup2 mount this process sees (`/proc/self/mountinfo`).
    pub(crate) fn new() -> Self {
        let root = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| cgroup2_mount(&m));
        Self::at(root)
    }

    fn at(root: Option<PathBuf>) -> Self {
        Self {
            root,
            names: HashMap::default(),
            scanned: None,
        }
    }

    /// The path of cgroup `id` (`/` for the root); `None` for 0 or an id not (or no longer)
    /// in the hierarchy.
    pub(crate) fn name(&mut self, id: u64) -> Option<Rc<str>> {
        if id == 0 {
            return None;
        }
        if let Some(n) = self.names.get(&id) {
            return Some(Rc::clone(n));
        }
        if self.scanned.is_some_and(|t| t.elapsed() < RESCAN_EVERY) {
            return None;
        }
        self.scan();
        self.names.get(&id).cloned()
    }

    /// Walk the hierarchy, naming every cgroup directory by its inode number; cgroups gone
    /// since the last walk are forgotten (a host starting a unit or container per job makes
    /// new cgroups for as long as it runs).
    fn scan(&mut self) {
        self.scanned = Some(Instant::now());
        let Some(root) = self.root.clone() else {
            return;
        };
        let mut before = std::mem::take(&mut self.names);
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else {
                continue;
            };
            let rel = dir.strip_prefix(&root).unwrap_or(Path::new(""));
            let name = before
                .remove(&meta.ino())
                .unwrap_or_else(|| Rc::from(format!("/{}", rel.display())));
            self.names.entry(meta.ino()).or_insert(name);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(e.path());
                }
            }
        }
    }
}

/// A cgroup a recording is limited to (`--cgroup`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupTarget {
    /// Its path below the cgroup2 root (`/system.slice/nginx.service`).
    pub(crate) path: String,
    /// Its id: the directory's inode number, as the BPF side reads it.
    pub(crate) id: u64,
    /// Its depth below the root (the root is 0).
    pub(crate) level: u32,
}

/// The cgroup `path` names: a path below the cgroup2 root (`/system.slice/x.service`), or the
/// directory itself (`/sys/fs/cgroup/system.slice/x.service`).
pub(crate) fn resolve_target(path: &str) -> anyhow::Result<CgroupTarget> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| anyhow::anyhow!("--cgroup {path}: reading /proc/self/mountinfo: {e}"))?;
    let root = cgroup2_mount(&mountinfo)
        .ok_or_else(|| anyhow::anyhow!("--cgroup {path}: no cgroup2 file system is mounted"))?;
    resolve_in(&root, path)
}

fn resolve_in(root: &Path, path: &str) -> anyhow::Result<CgroupTarget> {
    let given = Path::new(path);
    let rel = given.strip_prefix(root).unwrap_or(given);
    let rel: PathBuf = rel
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .collect();
    if Path::new(path)
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        anyhow::bail!("--cgroup {path}: `..` is not allowed");
    }
    let dir = root.join(&rel);
    let meta = std::fs::metadata(&dir)
        .map_err(|e| anyhow::anyhow!("--cgroup {path}: no such cgroup ({}: {e})", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!(
            "--cgroup {path}: {} is not a cgroup directory",
            dir.display()
        );
    }
    Ok(CgroupTarget {
        path: format!("/{}", rel.display()),
        id: meta.ino(),
        level: rel.components().count() as u32,
    })
}

/// Processes in `target` or below it now (their `/proc/PID/cgroup` v2 line).
pub(crate) fn pids_in(targets: &[CgroupTarget]) -> Vec<u32> {
    crate::process::target::all_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("0::"))
                    .is_some_and(|p| targets.iter().any(|t| within(p, &t.path)))
            })
        })
        .collect()
}

/// Whether cgroup path `p` is `dir` or below it.
fn within(p: &str, dir: &str) -> bool {
    dir == "/"
        || p == dir
        || p.strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl Default for CgroupNames {
    fn default() -> Self {
        Self::new()
    }
}

/// The mount point of the cgroup2 file system in a mountinfo text (its fifth field, on the
/// line whose file system type, after ` - `, is `cgroup2`).
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        if rest.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        fields.split_whitespace().nth(4).map(PathBuf::from)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount() {
        let info = "24 30 0:21 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    33 30 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("24 30 0:21 / /x rw - tmpfs tmpfs rw\n"), None);
    }

    #[test]
    fn resolves_targets_below_the_root() {
        let root = std::env::temp_dir().join(format!("stacks-cg-root-{}", std::process::id()));
        std::fs::create_dir_all(root.join("system.slice/app.service")).unwrap();
        let ino = std::fs::metadata(root.join("system.slice/app.service"))
            .unwrap()
            .ino();
        let want = CgroupTarget {
            path: "/system.slice/app.service".into(),
            id: ino,
            level: 2,
        };
        assert_eq!(
            resolve_in(&root, "/system.slice/app.service").unwrap(),
            want
        );
        assert_eq!(
            resolve_in(&root, "system.slice/app.service/").unwrap(),
            want
        );
        let full = root.join("system.slice/app.service");
        assert_eq!(resolve_in(&root, full.to_str().unwrap()).unwrap(), want);
        assert_eq!(resolve_in(&root, "/").unwrap().level, 0);
        let err = resolve_in(&root, "/nope.service").unwrap_err().to_string();
        assert!(
            err.starts_with("--cgroup /nope.service: no such cgroup"),
            "{err}"
        );
        assert!(resolve_in(&root, "/system.slice/../x").is_err());
        std::fs::remove_dir_all(&root).unwrap();
        assert!(within("/a/b", "/a") && within("/a", "/a") && within("/x", "/"));
        assert!(!within("/ab", "/a"));
    }

    #[test]
    fn names_directories_by_inode() {
        let dir = std::env::temp_dir().join(format!("stacks-cgroups-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let mut names = CgroupNames::at(Some(dir.clone()));
        assert_eq!(names.name(ino(&dir.join("a/b"))).as_deref(), Some("/a/b"));
        assert_eq!(names.name(ino(&dir)).as_deref(), Some("/"));
        assert_eq!(names.name(0), None);
        // Unknown ids do not rescan more than once a second.
        std::fs::create_dir(dir.join("c")).unwrap();
        assert_eq!(names.name(ino(&dir.join("c"))), None);
        // A rescan forgets cgroups that are gone.
        let gone = ino(&dir.join("a/b"));
        std::fs::remove_dir(dir.join("a/b")).unwrap();
        names.scan();
        assert!(
            !names.names.contains_key(&gone),
            "a removed cgroup is forgotten"
        );
        assert_eq!(names.name(ino(&dir.join("c"))).as_deref(), Some("/c"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(CgroupNames::at(None).name(7), None);
    }
}
