//! Kernel frames of streams without record-time symbols: live kallsyms, only for the boot
//! that recorded them (KASLR moves the kernel every boot), never a guess.

use std::path::{Path, PathBuf};

/// Module name of kernel frames outside loadable modules (as perf names it).
pub use stacks_stream::frames::KERNEL_MODULE;

/// Whether kernel addresses recorded during `recorded_boot_id` can be resolved with
/// `kallsyms` here: only during the same boot, and only if the file shows addresses.
pub(crate) fn fallback_kallsyms(
    recorded_boot_id: Option<&str>,
    live_boot_id: &str,
    kallsyms: &Path,
) -> Result<PathBuf, String> {
    match recorded_boot_id {
        None => {
            return Err(
                "no kernel symbols recorded, and the stream does not say which boot recorded it"
                    .into(),
            );
        }
        Some(b) if b != live_boot_id => {
            return Err(format!(
                "no kernel symbols recorded, and the stream was recorded during another boot ({b}; this machine is {live_boot_id}): kernel symbols would be wrong"
            ));
        }
        Some(_) => {}
    }
    let text = std::fs::read_to_string(kallsyms)
        .map_err(|e| format!("--kallsyms {}: {e}", kallsyms.display()))?;
    let hidden = text.lines().take(100).all(|l| {
        l.split(' ')
            .next()
            .is_some_and(|a| a.bytes().all(|b| b == b'0'))
    });
    if hidden {
        return Err(format!(
            "{} hides addresses (kptr_restrict): run as root",
            kallsyms.display()
        ));
    }
    Ok(kallsyms.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_for_another_boot_or_unknown_boot() {
        let e = fallback_kallsyms(Some("other"), "this", Path::new("/proc/kallsyms")).unwrap_err();
        assert!(e.contains("another boot"), "{e}");
        assert!(fallback_kallsyms(None, "this", Path::new("/proc/kallsyms")).is_err());
    }

    #[test]
    fn hidden_addresses_refused() {
        let dir = std::env::temp_dir().join(format!("stacks-kernel-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("kallsyms");
        std::fs::write(&f, "0000000000000000 T a\n0000000000000000 T b\n").unwrap();
        let e = fallback_kallsyms(Some("b"), "b", &f).unwrap_err();
        assert!(e.contains("kptr_restrict"), "{e}");
        std::fs::write(&f, "ffffffff81000000 T a\n").unwrap();
        assert_eq!(fallback_kallsyms(Some("b"), "b", &f).unwrap(), f);
        assert!(fallback_kallsyms(Some("b"), "b", &dir.join("none")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
