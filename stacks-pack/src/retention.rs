//! Retention of a directory store (`--retain DURATION`, `--max-total SIZE`): whole file sets
//! are deleted, oldest first (by the time their samples file was finished), until none is
//! older than the retention and the finished sets together fit in the total, except that the
//! total never takes the newest finished set (a set larger than the total would otherwise
//! leave the store empty for readers between sets: the store holds at most the total plus
//! one set). The set being
//! written is never among them (it is a hidden `.NAME.tmp` until finished). A set is deleted
//! samples file first, so a reader listing the store never sees a samples file without its
//! stacks and frames (stacks and frames files left alone are ignored by readers and removed
//! by the next packer, see `stale.rs`); a reader that opened the set before keeps reading it
//! (stacks-sql holds the files of the sets it reads open). Every finished set of the
//! directory counts, whichever packer wrote it. The census taken at each pass (sets and
//! bytes in the store) is what `--stats` reports.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use stacks_store::FileKind;

use crate::TOOL;

/// What retention keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Sets finished longer ago than this are deleted.
    pub retain: Option<Duration>,
    /// The finished sets together may hold at most this many bytes.
    pub max_total: Option<u64>,
}

impl Policy {
    /// Whether anything is ever deleted.
    pub fn is_active(&self) -> bool {
        self.retain.is_some() || self.max_total.is_some()
    }
}

/// The finished file sets of a store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    pub sets: u64,
    pub bytes: u64,
}

/// What one pass deleted, and what it left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    pub deleted_sets: u64,
    pub deleted_bytes: u64,
    pub left: Census,
}

/// A finished file set on disk.
#[derive(Debug)]
struct Set {
    /// Its files, samples file first (the order they are deleted in).
    files: Vec<PathBuf>,
    bytes: u64,
    finished: SystemTime,
}

/// The finished sets under `dir` (and its `key=value` partition directories), oldest first:
/// each samples file with its stacks and frames files, and first-layout files alone.
fn sets(dir: &Path) -> Vec<Set> {
    let mut found = Vec::new();
    walk(dir, &mut found);
    found.sort_by(|a, b| {
        a.finished
            .cmp(&b.finished)
            .then_with(|| a.files[0].cmp(&b.files[0]))
    });
    found
}

fn walk(dir: &Path, found: &mut Vec<Set>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if name.to_string_lossy().contains('=') {
                walk(&path, found);
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let files = match stacks_store::file_kind(&path) {
            Some(FileKind::Samples) => {
                vec![
                    path.clone(),
                    stacks_store::stacks_path(&path),
                    stacks_store::frames_path(&path),
                ]
            }
            Some(FileKind::Inline) => vec![path.clone()],
            _ => continue,
        };
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        let finished = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let bytes = files
            .iter()
            .filter_map(|f| fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        found.push(Set {
            files,
            bytes,
            finished,
        });
    }
}

/// Count the finished sets under `dir`.
pub fn census(dir: &Path) -> Census {
    let all = sets(dir);
    Census {
        sets: all.len() as u64,
        bytes: all.iter().map(|s| s.bytes).sum(),
    }
}

/// Delete what `policy` does not keep under `dir` at `now`, oldest first. Deletions are
/// logged (one line a pass that deleted something); a file that cannot be deleted is
/// warned about and its set counted as still there.
pub fn enforce(dir: &Path, policy: &Policy, now: SystemTime) -> Pass {
    let all = sets(dir);
    let mut left = Census {
        sets: all.len() as u64,
        bytes: all.iter().map(|s| s.bytes).sum(),
    };
    let mut pass = Pass::default();
    let mut touched: Vec<PathBuf> = Vec::new();
    for (i, set) in all.iter().enumerate() {
        let expired = policy
            .retain
            .is_some_and(|r| now.duration_since(set.finished).is_ok_and(|age| age > r));
        let newest = i + 1 == all.len();
        let over = !newest && policy.max_total.is_some_and(|m| left.bytes > m);
        if !expired && !over {
            // Oldest first: every later set is younger, and the total already fits.
            break;
        }
        match delete(set) {
            Ok(()) => {
                pass.deleted_sets += 1;
                pass.deleted_bytes += set.bytes;
                left.sets -= 1;
                left.bytes -= set.bytes;
                if let Some(parent) = set.files[0].parent()
                    && parent != dir
                    && !touched.iter().any(|t| t == parent)
                {
                    touched.push(parent.to_path_buf());
                }
            }
            Err((file, e)) => {
                eprintln!(
                    "{TOOL}: warning: retention: cannot delete {}: {e}",
                    file.display()
                );
                break;
            }
        }
    }
    // Partition directories left empty go too (a packer writing into one recreates it).
    for part in touched {
        let mut cur = Some(part.as_path());
        while let Some(p) = cur.filter(|p| *p != dir && p.starts_with(dir)) {
            if fs::remove_dir(p).is_err() {
                break;
            }
            cur = p.parent();
        }
    }
    pass.left = left;
    if pass.deleted_sets > 0 {
        eprintln!("{TOOL}: {}", describe(&pass, policy));
    }
    pass
}

/// Delete `set`'s files, samples first; a file already gone is fine.
fn delete(set: &Set) -> Result<(), (&Path, io::Error)> {
    for file in &set.files {
        match fs::remove_file(file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err((file, e)),
        }
    }
    Ok(())
}

/// The log line of a pass that deleted sets.
pub fn describe(pass: &Pass, policy: &Policy) -> String {
    let mut why = Vec::new();
    if let Some(r) = policy.retain {
        why.push(format!("older than {}s", r.as_secs()));
    }
    if let Some(m) = policy.max_total {
        why.push(format!("over {m} bytes in total"));
    }
    format!(
        "retention: deleted {} file set(s) ({} bytes), oldest first ({}); {} set(s), {} bytes left",
        pass.deleted_sets,
        pass.deleted_bytes,
        why.join(", "),
        pass.left.sets,
        pass.left.bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("stacks-pack-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A set of three files of `bytes` each, finished `age` before `now`.
    fn set(dir: &Path, base: &str, bytes: usize, age: Duration, now: SystemTime) {
        fs::create_dir_all(dir).unwrap();
        for suffix in [
            stacks_store::SAMPLES_SUFFIX,
            stacks_store::STACKS_SUFFIX,
            stacks_store::FRAMES_SUFFIX,
        ] {
            let path = dir.join(format!("{base}{suffix}"));
            fs::write(&path, vec![0u8; bytes]).unwrap();
            let f = fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(now - age).unwrap();
        }
    }

    fn left(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = sets(dir)
            .iter()
            .map(|s| stacks_store::base_name(&s.files[0]).to_string())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn retain_deletes_whole_sets_older_than_the_duration() {
        let dir = scratch("retain");
        let now = SystemTime::now();
        set(&dir, "stacks-a", 10, Duration::from_secs(300), now);
        set(
            &dir.join("date=2024-01-01"),
            "stacks-b",
            10,
            Duration::from_secs(200),
            now,
        );
        set(&dir, "stacks-c", 10, Duration::from_secs(5), now);
        // The set being written: hidden, never counted nor deleted.
        fs::write(dir.join(".stacks-d.samples.parquet.tmp"), b"xx").unwrap();
        let policy = Policy {
            retain: Some(Duration::from_secs(60)),
            max_total: None,
        };
        let pass = enforce(&dir, &policy, now);
        assert_eq!((pass.deleted_sets, pass.deleted_bytes), (2, 60));
        assert_eq!(pass.left, Census { sets: 1, bytes: 30 });
        assert_eq!(left(&dir), ["stacks-c"]);
        assert!(
            !dir.join("date=2024-01-01").exists(),
            "empty partition removed"
        );
        assert!(dir.join(".stacks-d.samples.parquet.tmp").exists());
        assert!(!dir.join("stacks-a.frames.parquet").exists(), "whole set");
        assert_eq!(enforce(&dir, &policy, now).deleted_sets, 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn max_total_deletes_oldest_first_until_the_rest_fits() {
        let dir = scratch("max-total");
        let now = SystemTime::now();
        for (i, base) in ["stacks-1", "stacks-2", "stacks-3", "stacks-4"]
            .iter()
            .enumerate()
        {
            set(
                &dir,
                base,
                100,
                Duration::from_secs(100 - i as u64 * 10),
                now,
            );
        }
        let policy = Policy {
            retain: None,
            max_total: Some(700),
        };
        assert_eq!(
            census(&dir),
            Census {
                sets: 4,
                bytes: 1200
            }
        );
        let pass = enforce(&dir, &policy, now);
        assert_eq!((pass.deleted_sets, pass.deleted_bytes), (2, 600));
        assert_eq!(left(&dir), ["stacks-3", "stacks-4"]);
        assert!(describe(&pass, &policy).contains("deleted 2 file set(s) (600 bytes)"));
        // Under the limit: nothing more goes.
        assert_eq!(enforce(&dir, &policy, now).deleted_sets, 0);
        // A total smaller than a set keeps the newest set: readers never find the store empty.
        let tiny = Policy {
            retain: None,
            max_total: Some(1),
        };
        assert_eq!(
            enforce(&dir, &tiny, now).left,
            Census {
                sets: 1,
                bytes: 300
            }
        );
        assert_eq!(left(&dir), ["stacks-4"]);
        // Age still takes it.
        let aged = Policy {
            retain: Some(Duration::from_secs(1)),
            max_total: Some(1),
        };
        assert_eq!(enforce(&dir, &aged, now).left, Census::default());
        fs::remove_dir_all(&dir).unwrap();
    }
}
