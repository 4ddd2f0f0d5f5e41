//! Leftovers of killed packers: a packer killed with SIGKILL (or a machine that lost power)
//! leaves its unfinished `.stacks-…-<host>-<pid>-<seq>.{samples,stacks,frames}.parquet.tmp`,
//! or, if killed between the renames of a file set, a complete `NAME.frames.parquet` or
//! `NAME.stacks.parquet` whose `NAME.samples.parquet` never appeared. Readers never see the
//! temporary files (the leading dot) and ignore stacks and frames files without samples; the
//! next packer on the same host removes both kinds when their process is gone. Files of other hosts (a shared directory) and of
//! live processes are left alone.

use std::fs;
use std::path::Path;

use stacks_store::FileKind;

/// The (host, pid) of a packer's file base name `stacks-<stamp>-<host>-<pid>-<seq>`.
pub(crate) fn owner_of_base(base: &str) -> Option<(&str, i32)> {
    let body = base.strip_prefix("stacks-")?;
    let mut right = body.rsplitn(3, '-');
    let seq = right.next()?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let pid: i32 = right.next()?.parse().ok()?;
    let (_stamp, host) = right.next()?.split_once('-')?;
    Some((host, pid))
}

/// The (host, pid) a temporary file name belongs to, if it is one of ours (any file of a file
/// set, or a first-layout file of an older packer).
fn owner(name: &str) -> Option<(&str, i32)> {
    let body = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let base = body
        .strip_suffix(stacks_store::SAMPLES_SUFFIX)
        .or_else(|| body.strip_suffix(stacks_store::STACKS_SUFFIX))
        .or_else(|| body.strip_suffix(stacks_store::FRAMES_SUFFIX))
        .or_else(|| body.strip_suffix(stacks_store::PARQUET_SUFFIX))?;
    owner_of_base(base)
}

/// The (host, pid) of a completed stacks or frames file of ours, `stacks-….stacks.parquet`
/// or `stacks-….frames.parquet`.
fn level_owner(name: &str) -> Option<(&str, i32)> {
    owner_of_base(
        name.strip_suffix(stacks_store::STACKS_SUFFIX)
            .or_else(|| name.strip_suffix(stacks_store::FRAMES_SUFFIX))?,
    )
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Remove, in `dir` and its partition directories (`key=value/…`), this host's temporary
/// files of dead packers and their stacks and frames files left without samples. Returns how many were
/// removed; failures are ignored (they are only leftovers no reader uses).
pub(crate) fn clean(dir: &Path, host: &str) -> usize {
    let mut removed = 0;
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let dead =
        |who: Option<(&str, i32)>| who.is_some_and(|(h, pid)| h == host && pid > 0 && !alive(pid));
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() && !name.starts_with('.') && name.contains('=') {
            removed += clean(&path, host);
        } else if kind.is_file() {
            let unpaired = || {
                matches!(
                    stacks_store::file_kind(&path),
                    Some(FileKind::Stacks | FileKind::Frames)
                ) && dead(level_owner(&name))
                    && fs::symlink_metadata(stacks_store::samples_path(&path)).is_err()
            };
            if dead(owner(&name)) || unpaired() {
                removed += usize::from(fs::remove_file(&path).is_ok());
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_from_the_right() {
        let base = "stacks-20240229T123456Z-web-01.example-4242-000007";
        for suffix in [
            ".samples.parquet",
            ".stacks.parquet",
            ".frames.parquet",
            ".parquet",
        ] {
            assert_eq!(
                owner(&format!(".{base}{suffix}.tmp")),
                Some(("web-01.example", 4242)),
                "{suffix}"
            );
        }
        for suffix in [".stacks.parquet", ".frames.parquet"] {
            assert_eq!(
                level_owner(&format!("{base}{suffix}")),
                Some(("web-01.example", 4242))
            );
        }
        assert_eq!(level_owner(&format!("{base}.samples.parquet")), None);
        assert_eq!(owner(&format!("{base}.samples.parquet")), None);
        assert_eq!(owner(".stacks-x.parquet.tmp"), None);
        assert_eq!(owner(".other.parquet.tmp"), None);
        assert_eq!(
            owner(".stacks-1-h-2-x.parquet.tmp"),
            None,
            "seq not a number"
        );
    }

    #[test]
    fn only_dead_packers_of_this_host_are_cleaned() {
        let dir = std::env::temp_dir().join(format!("stacks-pack-stale-{}", std::process::id()));
        let part = dir.join("date=2024-02-29");
        fs::create_dir_all(&part).unwrap();
        let me = std::process::id();
        let dead = "stacks-20240229T123456Z-box-999999999-000001";
        let dead_tmp = format!(".{dead}.samples.parquet.tmp");
        let dead_stacks_tmp = format!(".{dead}.stacks.parquet.tmp");
        let live = format!(".stacks-20240229T123456Z-box-{me}-000001.stacks.parquet.tmp");
        let other = ".stacks-20240229T123456Z-elsewhere-999999999-000001.samples.parquet.tmp";
        // A dead packer's complete pair stays; its stacks file without samples goes.
        let paired = "stacks-20240229T123456Z-box-999999999-000002";
        let orphan = format!("{dead}.stacks.parquet");
        let orphan_frames = format!("{dead}.frames.parquet");
        let dead_frames_tmp = format!(".{dead}.frames.parquet.tmp");
        let live_orphan = format!("stacks-20240229T123456Z-box-{me}-000009.stacks.parquet");
        for name in [
            dead_tmp.as_str(),
            &dead_stacks_tmp,
            &live,
            other,
            &format!("{paired}.samples.parquet"),
            &format!("{paired}.stacks.parquet"),
            &format!("{paired}.frames.parquet"),
            &orphan,
            &orphan_frames,
            &dead_frames_tmp,
            &live_orphan,
        ] {
            fs::write(dir.join(name), b"x").unwrap();
        }
        fs::write(part.join(&dead_tmp), b"x").unwrap();
        fs::write(part.join(&orphan), b"x").unwrap();
        assert_eq!(clean(&dir, "box"), 7);
        for gone in [
            &dead_tmp,
            &dead_stacks_tmp,
            &orphan,
            &orphan_frames,
            &dead_frames_tmp,
        ] {
            assert!(!dir.join(gone).exists(), "{gone}");
        }
        assert!(!part.join(&dead_tmp).exists() && !part.join(&orphan).exists());
        for kept in [
            live.as_str(),
            other,
            &format!("{paired}.samples.parquet"),
            &format!("{paired}.stacks.parquet"),
            &format!("{paired}.frames.parquet"),
            &live_orphan,
        ] {
            assert!(dir.join(kept).exists(), "{kept}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
