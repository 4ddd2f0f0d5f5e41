//! Leftovers of killed packers: a packer killed with SIGKILL (or a machine that lost power)
//! leaves its unfinished `.stacks-…-<host>-<pid>-<seq>.parquet.tmp`. Readers never see it (the
//! leading dot), and the next packer on the same host removes those whose process is gone.
//! Files of other hosts (a shared directory) and of live processes are left alone.

use std::fs;
use std::path::Path;

/// The (host, pid) a temporary file name belongs to, if it is one of ours.
fn owner(name: &str) -> Option<(&str, i32)> {
    let body = name
        .strip_prefix(".stacks-")?
        .strip_suffix(".parquet.tmp")?;
    let mut right = body.rsplitn(3, '-');
    let _seq = right.next()?;
    let pid: i32 = right.next()?.parse().ok()?;
    let (_stamp, host) = right.next()?.split_once('-')?;
    Some((host, pid))
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Remove this host's temporary files of dead packers in `dir` and its partition directories
/// (`key=value/…`). Returns how many were removed; failures are ignored (they are only
/// hidden leftovers).
pub fn clean(dir: &Path, host: &str) -> usize {
    let mut removed = 0;
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && !name.starts_with('.') && name.contains('=') {
            removed += clean(&entry.path(), host);
        } else if kind.is_file()
            && let Some((h, pid)) = owner(&name)
            && h == host
            && pid > 0
            && !alive(pid)
            && fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_from_the_right() {
        assert_eq!(
            owner(".stacks-20240229T123456Z-web-01.example-4242-000007.parquet.tmp"),
            Some(("web-01.example", 4242))
        );
        assert_eq!(owner("stacks-20240229T123456Z-h-1-000001.parquet"), None);
        assert_eq!(owner(".stacks-x.parquet.tmp"), None);
        assert_eq!(owner(".other.parquet.tmp"), None);
    }

    #[test]
    fn only_dead_packers_of_this_host_are_cleaned() {
        let dir = std::env::temp_dir().join(format!("stacks-pack-stale-{}", std::process::id()));
        let part = dir.join("date=2024-02-29");
        fs::create_dir_all(&part).unwrap();
        let me = std::process::id();
        let dead = ".stacks-20240229T123456Z-box-999999999-000001.parquet.tmp";
        let live = format!(".stacks-20240229T123456Z-box-{me}-000001.parquet.tmp");
        let other = ".stacks-20240229T123456Z-elsewhere-999999999-000001.parquet.tmp";
        for name in [dead, live.as_str(), other] {
            fs::write(dir.join(name), b"x").unwrap();
        }
        fs::write(part.join(dead), b"x").unwrap();
        assert_eq!(clean(&dir, "box"), 2);
        assert!(!dir.join(dead).exists() && !part.join(dead).exists());
        assert!(dir.join(&live).exists() && dir.join(other).exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
