//! The producer side of `-e alloc`: finding libstacks_alloc.so (next to the stacks-record
//! executable, as the workspace and packages install them, or `STACKS_ALLOC_LIB`), the
//! environment that preloads it into a `--` command, and attaching the `alloc` programs to the
//! USDT probes of a sampler: the library's (stacks:alloc, stacks:free) in every copy the
//! targets map, the executable's own where a Rust program samples with tracing-stacks'
//! `SampledAlloc`, and OpenTelemetry's memory-profiling contract (otel_memory:alloc (ptr, size,
//! weight), otel_memory:free (ptr)) in any file a target maps. A command whose executable has
//! either gets nothing preloaded (its allocations would be sampled twice).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use libbpf_rs::{Link, MapCore as _};

use crate::kernel::abi::StacksSkel;
use crate::spec::KindArgs;

/// The library's file name.
pub(crate) const LIBRARY: &str = "libstacks_alloc.so";
/// Overrides where the library is looked for.
pub(crate) const LIBRARY_ENV: &str = "STACKS_ALLOC_LIB";
/// The mean bytes between samples, read by the library at load.
pub(crate) const INTERVAL_ENV: &str = "STACKS_ALLOC_INTERVAL";
/// The library's USDT provider.
const PROVIDER: &str = "stacks";
/// OpenTelemetry's memory-profiling USDT provider (opentelemetry-ebpf-profiler's design
/// 00003: `alloc(ptr, size, weight)` on a sampled allocation, `free(ptr)` on the free of a
/// sampled pointer). Its arguments are the first of ours: the same programs serve both.
const OTEL_PROVIDER: &str = "otel_memory";
/// The providers attached to, in the order a file is checked for them.
const PROVIDERS: [&str; 2] = [PROVIDER, OTEL_PROVIDER];

/// The `alloc` programs attached, by library file.
pub(crate) struct AllocProbes {
    /// The library stacks-record preloads and attaches to (None: not found, `-p` only).
    library: Option<PathBuf>,
    /// Whether a `--` command gets the library preloaded (not when it has its own probes).
    preload: bool,
    /// `STACKS_ALLOC_INTERVAL` for a `--` command.
    interval: u64,
    links: Vec<Link>,
    /// The files attached to, by (device, inode).
    files: HashSet<(u64, u64)>,
    /// Files looked at that have no probes of ours, by (device, inode).
    without: HashSet<(u64, u64)>,
}

impl AllocProbes {
    /// `-e alloc` (`on`) started. For a `--` command the library must be found; it is
    /// attached to at once (uprobes follow the file: every process that maps it later fires
    /// them).
    pub(crate) fn start(
        skel: &StacksSkel<'_>,
        on: &KindArgs,
        command: Option<&[String]>,
    ) -> Result<Self> {
        let interval = on.arg.unwrap_or(512 << 10);
        // A command with its own probes (SampledAlloc, an otel_memory sampler): attached to,
        // nothing preloaded.
        if let Some((exe, providers)) = command
            .and_then(|c| c.first())
            .and_then(|c| executable(c))
            .map(|exe| {
                let p = providers_in(&exe);
                (exe, p)
            })
            .filter(|(_, p)| !p.is_empty())
        {
            let mut a = AllocProbes {
                library: None,
                preload: false,
                interval,
                links: Vec::new(),
                files: HashSet::new(),
                without: HashSet::new(),
            };
            a.attach(skel, &exe, &providers)?;
            return Ok(a);
        }
        let command = command.is_some();
        let library = locate();
        if command
            && library.is_none()
            && let Some(p) = std::env::var_os(LIBRARY_ENV).filter(|p| !p.is_empty())
        {
            bail!(
                "-e alloc: {LIBRARY_ENV}={}: not a file",
                p.to_string_lossy()
            );
        }
        if command && library.is_none() {
            bail!(
                "-e alloc: {LIBRARY} not found next to stacks-record ({}) and {LIBRARY_ENV} is not set: build it (cargo build -p stacks-alloc) or set {LIBRARY_ENV}=PATH",
                beside().map_or("?".into(), |p| p.display().to_string())
            );
        }
        let mut a = AllocProbes {
            library,
            preload: true,
            interval,
            links: Vec::new(),
            files: HashSet::new(),
            without: HashSet::new(),
        };
        if let Some(lib) = a.library.clone() {
            a.attach(skel, &lib, &[PROVIDER])?;
        }
        Ok(a)
    }

    /// The environment of a `--` command: the library first in `LD_PRELOAD`, and the interval.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let interval = (INTERVAL_ENV.to_string(), self.interval.to_string());
        let Some(lib) = self.library.as_ref().filter(|_| self.preload) else {
            return vec![interval];
        };
        let lib = lib.display().to_string();
        let preload = match std::env::var("LD_PRELOAD") {
            Ok(rest) if !rest.trim().is_empty() => format!("{lib}:{rest}"),
            _ => lib,
        };
        vec![("LD_PRELOAD".into(), preload), interval]
    }

    /// Processes already running (`-p`, names, `-a`, cgroups): attach to the probes of every
    /// file each maps (libstacks_alloc.so, an executable with SampledAlloc, anything with the
    /// otel_memory probes), and say once which of `named` (the pids asked for by pid or name)
    /// have none, so their allocations are not seen (the other events are recorded).
    pub(crate) fn running(&mut self, skel: &StacksSkel<'_>, pids: &[u32], named: &[u32]) {
        let mut without = Vec::new();
        for &pid in pids {
            let mut found = false;
            for path in mapped_files(pid) {
                match self.attach_file(skel, &path) {
                    Ok(f) => found |= f,
                    Err(e) => eprintln!("stacks-record: warning: -e alloc: pid {pid}: {e:#}"),
                }
            }
            if !found && named.contains(&pid) {
                without.push(pid);
            }
        }
        if !without.is_empty() {
            let which: Vec<String> = without.iter().map(|&p| describe(p)).collect();
            eprintln!(
                "stacks-record: warning: -e alloc: {} not started with {LIBRARY} (LD_PRELOAD), without tracing-stacks' SampledAlloc and without OpenTelemetry's otel_memory probes, so no allocations are sampled there; start it with LD_PRELOAD={} or under `stacks-record -e alloc -- CMD`; the other events are recorded, and a sampler it loads later is attached to",
                which.join(", "),
                self.library
                    .as_ref()
                    .map_or(format!("/path/to/{LIBRARY}"), |p| p.display().to_string())
            );
        }
    }

    /// The target processes that mapped something since the last look (`alloc_remapped`,
    /// bpf/kinds/alloc.bpf.h): attach to the probes of the files they map now (a library
    /// loaded with dlopen, a new process's libraries), saying which. Called about once a
    /// second.
    pub(crate) fn look_again(&mut self, skel: &StacksSkel<'_>) {
        let map = &skel.maps.alloc_remapped;
        let keys: Vec<Vec<u8>> = map.keys().collect();
        for key in keys {
            let _ = map.delete(&key);
            let Ok(pid) = <[u8; 4]>::try_from(key.as_slice()).map(u32::from_ne_bytes) else {
                continue;
            };
            self.look_at(skel, pid);
        }
    }

    /// Attach to the probes of the files process `pid` maps that were not looked at yet.
    fn look_at(&mut self, skel: &StacksSkel<'_>, pid: u32) {
        let files: Vec<_> = mapped_files(pid)
            .into_iter()
            .filter_map(|f| Some((file_id(&f)?, f)))
            .collect();
        let library = self.library.as_deref().and_then(file_id);
        let preloaded = files.iter().any(|(id, _)| Some(*id) == library);
        for (id, path) in files {
            if self.files.contains(&id) || self.without.contains(&id) {
                continue;
            }
            match self.attach_file(skel, &path) {
                Ok(true) => eprintln!(
                    "stacks-record: -e alloc: attached to the allocation probes of {} ({} maps it){}",
                    path.display(),
                    describe(pid),
                    if preloaded {
                        format!(
                            "; warning: it has {LIBRARY} preloaded too, so what that file's sampler samples is counted twice"
                        )
                    } else {
                        String::new()
                    }
                ),
                Ok(false) => {}
                Err(e) => eprintln!("stacks-record: warning: -e alloc: pid {pid}: {e:#}"),
            }
        }
    }

    /// Attach to the probes of the file at `path`, if it has any (each file is read once);
    /// whether it has.
    fn attach_file(&mut self, skel: &StacksSkel<'_>, path: &Path) -> Result<bool> {
        let Some(id) = file_id(path) else {
            return Ok(false);
        };
        if self.files.contains(&id) {
            return Ok(true);
        }
        if self.without.contains(&id) {
            return Ok(false);
        }
        let providers = providers_in(path);
        if providers.is_empty() {
            self.without.insert(id);
            return Ok(false);
        }
        self.attach(skel, path, &providers)?;
        Ok(true)
    }

    /// Attach both programs to the probes of `providers` in the file at `path` (once per
    /// file).
    fn attach(&mut self, skel: &StacksSkel<'_>, path: &Path, providers: &[&str]) -> Result<()> {
        let meta =
            std::fs::metadata(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if !self.files.insert((meta.dev(), meta.ino())) {
            return Ok(());
        }
        let previous = libbpf_rs::set_print(None);
        let mut attached = Vec::new();
        let mut failed = None;
        'all: for provider in providers {
            for (prog, name) in [
                (&skel.progs.on_alloc, "alloc"),
                (&skel.progs.on_alloc_free, "free"),
            ] {
                match prog.attach_usdt(-1, path, provider, name) {
                    Ok(l) => attached.push(l),
                    Err(e) => {
                        failed = Some(format!(
                            "attaching to USDT probe {provider}:{name} of {}: {e}",
                            path.display()
                        ));
                        break 'all;
                    }
                }
            }
        }
        libbpf_rs::set_print(previous);
        if let Some(f) = failed {
            bail!(f);
        }
        self.links.extend(attached);
        Ok(())
    }

    /// Detach (the end of the recording).
    pub(crate) fn detach(&mut self) {
        self.links.clear();
    }
}

/// The providers of [`PROVIDERS`] whose `alloc` probe the file at `path` declares (the
/// library's or SampledAlloc's `stacks`, an OpenTelemetry sampler's `otel_memory`).
fn providers_in(path: &Path) -> Vec<&'static str> {
    PROVIDERS
        .into_iter()
        .filter(|p| crate::process::notes::file_has_usdt(path, p, Some("alloc")))
        .collect()
}

/// The (device, inode) of the file at `path`.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Every file process `pid` maps executable (its executable, its libraries), each once
/// (through /proc/PID/root when its path is not this mount namespace's).
fn mapped_files(pid: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(text) = crate::process::maps::read(pid) else {
        return out;
    };
    let mut seen = HashSet::new();
    for m in crate::process::maps::parse(&text) {
        if !m.executable() || !m.path.starts_with('/') || !seen.insert(m.inode) {
            continue;
        }
        let direct = PathBuf::from(m.path);
        out.push(if direct.is_file() {
            direct
        } else {
            PathBuf::from(format!("/proc/{pid}/root{}", m.path))
        });
    }
    out
}

/// The executable a command names: a path, or a name looked for in PATH.
fn executable(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return std::fs::canonicalize(name).ok().filter(|p| p.is_file());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `pid 1234 (name)`.
fn describe(pid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("pid {pid} ({})", comm.trim_end())
}

/// The library next to this executable.
fn beside() -> Option<PathBuf> {
    Some(std::env::current_exe().ok()?.parent()?.join(LIBRARY))
}

/// Where the library is: `STACKS_ALLOC_LIB`, else next to this executable; absolute (a
/// preloaded path is opened by the command, from its own working directory).
pub(crate) fn locate() -> Option<PathBuf> {
    let path = match std::env::var_os(LIBRARY_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => beside()?,
    };
    std::fs::canonicalize(path).ok().filter(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_is_used_and_must_exist() {
        // SAFETY: this test alone reads or writes STACKS_ALLOC_LIB in this test binary.
        unsafe { std::env::set_var(LIBRARY_ENV, "/bin/sh") };
        assert_eq!(locate(), std::fs::canonicalize("/bin/sh").ok());
        // SAFETY: as above.
        unsafe { std::env::set_var(LIBRARY_ENV, "/nonexistent/libstacks_alloc.so") };
        assert_eq!(locate(), None);
        // SAFETY: as above.
        unsafe { std::env::remove_var(LIBRARY_ENV) };
    }
}
