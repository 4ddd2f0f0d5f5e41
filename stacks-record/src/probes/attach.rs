//! Checking probes against this machine before anything is loaded (a missing tracepoint, file
//! or symbol is a one-line error naming it), and attaching them with their index as the BPF
//! cookie.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, anyhow, bail};
use libbpf_rs::btf::{Btf, BtfKind, BtfType, types::FuncProto};
use libbpf_rs::{Link, PrintLevel, RawTracepointOpts, UprobeOpts, UsdtOpts};

use super::semaphores::{self, Semaphore};
use crate::kernel::abi::StacksSkel;
use crate::process::maps;
use crate::spec::probe::{Probe, ProbeType};

/// A probe checked against this machine.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub probe: Probe,
    /// The file a uprobe, uretprobe or USDT probe attaches to.
    pub path: Option<PathBuf>,
    /// Arguments the probe has when known before it fires (a tracepoint's, from BTF; one for
    /// a return probe); `None`: as many as each hit reports.
    pub nargs: Option<usize>,
}

/// Check every probe: a tracepoint must be in the kernel's BTF, a file must exist (a bare
/// library name is looked up in `pids`' maps, then the loader's directories and PATH), a
/// symbol must be in its file's symbol tables.
pub(crate) fn resolve(probes: &[Probe], pids: &[u32]) -> Result<Vec<Resolved>> {
    let btf = if probes.iter().any(|p| p.ty == ProbeType::Tp) {
        Some(Btf::from_vmlinux().context("reading the kernel's BTF (/sys/kernel/btf/vmlinux)")?)
    } else {
        None
    };
    let inspector = blazesym::inspect::Inspector::new();
    let mut out = Vec::with_capacity(probes.len());
    for p in probes {
        let checked = || -> Result<Resolved> {
            let (path, nargs) = match p.ty {
                ProbeType::Tp => {
                    let btf = btf.as_ref().expect("read when a tracepoint is asked for");
                    (None, Some(tracepoint_args(btf, &p.fields[1])?))
                }
                ProbeType::Uprobe | ProbeType::Uretprobe => {
                    let path = find_file(&p.fields[0], pids)?;
                    check_symbol(&inspector, &path, &p.fields[1])?;
                    (Some(path), (p.ty == ProbeType::Uretprobe).then_some(1))
                }
                ProbeType::Usdt => (Some(find_file(&p.fields[0], pids)?), None),
            };
            Ok(Resolved {
                probe: p.clone(),
                path,
                nargs,
            })
        };
        out.push(checked().with_context(|| format!("-e {}", p.name()))?);
    }
    Ok(out)
}

/// How many fields tracepoint `name` passes (its BTF `btf_trace_NAME` prototype, less the
/// leading context pointer).
fn tracepoint_args(btf: &Btf<'_>, name: &str) -> Result<usize> {
    let missing = || {
        // The per-call syscalls:* events are made by the trace event layer from sys_enter and
        // sys_exit: they are not raw tracepoints.
        let hint = if name.starts_with("sys_enter_") || name.starts_with("sys_exit_") {
            "; per-call system call events are not raw tracepoints: use \
             tp:raw_syscalls:sys_enter or tp:raw_syscalls:sys_exit (args: regs, call number)"
        } else {
            "; module tracepoints are not supported"
        };
        anyhow!(
            "the kernel has no tracepoint `{name}` (no btf_trace_{name} in \
             /sys/kernel/btf/vmlinux{hint})"
        )
    };
    let ty = btf
        .type_by_name::<BtfType<'_>>(&format!("btf_trace_{name}"))
        .ok_or_else(missing)?
        .skip_mods_and_typedefs();
    let proto = match ty.kind() {
        BtfKind::Ptr => ty.next_type().ok_or_else(missing)?.skip_mods_and_typedefs(),
        _ => ty,
    };
    let proto = FuncProto::try_from(proto).map_err(|_| missing())?;
    Ok(proto.len().saturating_sub(1))
}

/// The file `name` stands for: a path (it must exist), or a bare file name (`libc.so.6`, or
/// `libc` for `libc.so.*` / `libc-*`) found among the files mapped by `pids`, then in
/// LD_LIBRARY_PATH, the loader's usual directories and PATH.
pub(crate) fn find_file(name: &str, pids: &[u32]) -> Result<PathBuf> {
    if name.contains('/') {
        let path = Path::new(name);
        if !path.is_file() {
            bail!("{name}: no such file");
        }
        return Ok(path.to_path_buf());
    }
    for &pid in pids {
        if let Some(p) = mapped_file(pid, name) {
            return Ok(p);
        }
    }
    let env_dirs = |var: &str| -> Vec<PathBuf> {
        std::env::var_os(var)
            .map(|v| std::env::split_paths(&v).collect())
            .unwrap_or_default()
    };
    let mut dirs = env_dirs("LD_LIBRARY_PATH");
    dirs.extend(LIBRARY_DIRS.iter().map(PathBuf::from));
    dirs.extend(env_dirs("PATH"));
    for dir in &dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "{name}: no such file among the files the targets map, in LD_LIBRARY_PATH, {} or PATH \
         (give its path)",
        LIBRARY_DIRS.join(", ")
    )
}

/// Where the dynamic loader looks for libraries when nothing says otherwise.
const LIBRARY_DIRS: [&str; 6] = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// A file mapped by process `pid` named `name`, or `name.*` / `name-*`, reached through the
/// process's root (it may live in another mount namespace).
pub(crate) fn mapped_file(pid: u32, name: &str) -> Option<PathBuf> {
    let text = maps::read(pid).ok()?;
    maps::parse(&text)
        .map(|m| m.path)
        .filter(|path| path.starts_with('/'))
        .find(|path| {
            let file = path.rsplit('/').next().unwrap_or(path);
            file == name
                || file
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('-'))
        })
        .map(|path| {
            let direct = PathBuf::from(path);
            if direct.is_file() {
                direct
            } else {
                PathBuf::from(format!("/proc/{pid}/root{path}"))
            }
        })
}

/// Refuse a symbol that is in neither the symbol table nor the dynamic symbol table of `path`.
fn check_symbol(inspector: &blazesym::inspect::Inspector, path: &Path, symbol: &str) -> Result<()> {
    use blazesym::inspect::source::{Elf, Source};
    let mut elf = Elf::new(path);
    elf.debug_syms = false;
    let found = inspector
        .lookup(&Source::Elf(elf), &[symbol])
        .with_context(|| format!("reading the symbols of {}", path.display()))?;
    if found.iter().all(Vec::is_empty) {
        bail!(
            "no symbol `{symbol}` in {} (.symtab or .dynsym; C++ and Rust names are the mangled ones)",
            path.display()
        );
    }
    Ok(())
}

/// libbpf's messages while a probe is attached (warnings: its reason for a failure; debug:
/// what it found, such as a USDT probe's semaphore).
static LIBBPF_SAYS: Mutex<Vec<(bool, String)>> = Mutex::new(Vec::new());

fn keep_message(level: PrintLevel, msg: String) {
    if let Ok(mut v) = LIBBPF_SAYS.lock() {
        let warning = matches!(level, PrintLevel::Warn);
        v.push((
            warning,
            msg.trim().trim_start_matches("libbpf: ").to_string(),
        ));
    }
}

/// What libbpf said while the last probe was attached: its last warning, and the USDT
/// semaphore it found (virtual address, relocatable file).
fn libbpf_said() -> (Option<String>, Option<(u64, bool)>) {
    let said = LIBBPF_SAYS.lock().map(|v| v.clone()).unwrap_or_default();
    let warning = said.iter().rev().find(|(w, _)| *w).map(|(_, m)| m.clone());
    let semaphore = said
        .iter()
        .find_map(|(_, m)| semaphores::semaphore_in_libbpf_line(m));
    (warning, semaphore)
}

/// The probes attached.
pub(crate) struct Attached {
    pub links: Vec<Link>,
    /// The semaphores guarding USDT probes.
    pub semaphores: Vec<Semaphore>,
}

/// Attach every probe, its index in `probes` as the cookie the BPF side reads its settings
/// by. A failure names the probe and libbpf's reason.
pub(crate) fn attach(skel: &StacksSkel<'_>, probes: &[Resolved]) -> Result<Attached> {
    let previous = libbpf_rs::set_print(Some((PrintLevel::Debug, keep_message)));
    let attached = attach_all(skel, probes);
    libbpf_rs::set_print(previous);
    attached
}

fn attach_all(skel: &StacksSkel<'_>, probes: &[Resolved]) -> Result<Attached> {
    let mut links = Vec::with_capacity(probes.len());
    let mut sems = Vec::new();
    for (i, r) in probes.iter().enumerate() {
        LIBBPF_SAYS.lock().map(|mut v| v.clear()).ok();
        let cookie = i as u64;
        let p = &r.probe;
        let path = r.path.as_deref().unwrap_or(Path::new(""));
        let link = match p.ty {
            ProbeType::Tp => skel.progs.on_probe_tp.attach_raw_tracepoint_with_opts(
                &p.fields[1],
                RawTracepointOpts {
                    cookie,
                    ..Default::default()
                },
            ),
            ProbeType::Uprobe | ProbeType::Uretprobe => {
                let prog = if p.ty == ProbeType::Uprobe {
                    &skel.progs.on_probe_uprobe
                } else {
                    &skel.progs.on_probe_uretprobe
                };
                prog.attach_uprobe_with_opts(
                    -1,
                    path,
                    0,
                    UprobeOpts {
                        cookie,
                        retprobe: p.ty == ProbeType::Uretprobe,
                        func_name: Some(p.fields[1].clone()),
                        ..Default::default()
                    },
                )
            }
            ProbeType::Usdt => skel.progs.on_probe_usdt.attach_usdt_with_opts(
                -1,
                path,
                &p.fields[1],
                &p.fields[2],
                UsdtOpts {
                    cookie,
                    ..Default::default()
                },
            ),
        };
        let (warning, semaphore) = libbpf_said();
        let link = link.map_err(|e| {
            let said = warning.map(|m| format!(" ({m})")).unwrap_or_default();
            let hint = match (p.ty, e.kind()) {
                (ProbeType::Usdt, libbpf_rs::ErrorKind::NotFound) => format!(
                    ": no USDT probe {}:{} in {}",
                    p.fields[1],
                    p.fields[2],
                    path.display()
                ),
                _ => format!(": {e}"),
            };
            anyhow!("-e {}: attaching failed{hint}{said}", p.name())
        })?;
        if let (Some((vaddr, relocatable)), Some(path)) = (semaphore, &r.path) {
            sems.push(Semaphore {
                probe: p.name(),
                path: path.clone(),
                vaddr,
                relocatable,
            });
        }
        links.push(link);
    }
    Ok(Attached {
        links,
        semaphores: sems,
    })
}
