//! Finding the files that describe a recorded module, by its build id, in this order: files
//! given with `-b`, files under `--debug-dir` (indexed by build id, recursively), the recorded
//! path (only while its build id still matches), `/usr/lib/debug/.build-id/xx/rest.debug`,
//! `.gnu_debuglink`, and debuginfod when `DEBUGINFOD_URLS` is set. A file whose build id differs
//! from the recorded one is never used; the frame says so instead.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use stacks_stream::Unresolved;

use crate::debuginfod::{Artifact, Debuginfod};
use crate::elf::{self, ElfInfo};

/// System directories holding separate debug files (`.build-id/` and debuglink targets).
pub(crate) const SYSTEM_DEBUG_DIRS: &[&str] = &["/usr/lib/debug", "/lib/debug"];

/// The files chosen for one module.
#[derive(Clone, Debug)]
pub struct ModuleFiles {
    /// The file symbols are read from (DWARF when there is any, else the symbol table).
    pub symbols: PathBuf,
    /// Its size when it was chosen.
    pub symbols_size: u64,
    /// Maps the recorded file offsets to ELF addresses: the module's own program headers when
    /// a file with its code was found, else the debug file's.
    layout: ElfInfo,
    /// The layout is the debug file's (the code file was not found): offsets are translated
    /// by the usual linker layout.
    guessed: bool,
}

impl ModuleFiles {
    /// ELF address to look up for a recorded file offset.
    pub fn vaddr(&self, offset: u64) -> Option<u64> {
        if self.guessed {
            self.layout.debug_file_offset_to_vaddr(offset)
        } else {
            self.layout.file_offset_to_vaddr(offset)
        }
    }
}

/// A candidate file with its ELF facts.
struct Found {
    path: PathBuf,
    info: ElfInfo,
}

/// The files chosen so far for one module: the first with code, with DWARF, with symbols.
#[derive(Default)]
struct Picks {
    code: Option<Found>,
    dwarf: Option<Found>,
    symtab: Option<Found>,
}

impl Picks {
    fn consider(&mut self, f: Found) {
        let (c, d, s) = (f.info.has_code, f.info.has_dwarf, f.info.has_symbols);
        if d && self.dwarf.is_none() {
            self.dwarf = Some(Found {
                path: f.path.clone(),
                info: f.info.clone(),
            });
        } else if s && !c && self.symtab.is_none() {
            self.symtab = Some(Found {
                path: f.path.clone(),
                info: f.info.clone(),
            });
        }
        if c && self.code.is_none() {
            self.code = Some(f);
        }
    }

    fn done(&self) -> bool {
        self.code.is_some() && self.dwarf.is_some()
    }
}

/// Where debug information is looked for; see the module documentation for the order.
pub struct Finder {
    /// `-b` files and their build ids (or why they could not be read).
    binaries: Vec<(PathBuf, Result<ElfInfo, String>)>,
    debug_dirs: Vec<PathBuf>,
    /// Build id → files, from `-b` files then `--debug-dir` trees; built on first use.
    index: Option<HashMap<String, Vec<PathBuf>>>,
    system_dirs: Vec<PathBuf>,
    debuginfod: Option<Debuginfod>,
    used_binaries: HashSet<PathBuf>,
    /// Images the stream carries (the vDSO), written to files of ours, found by build id.
    images: Vec<Image>,
}

/// A module image written out from the stream: a file of ours, removed when dropped.
struct Image {
    path: PathBuf,
    build_id: String,
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Finder {
    /// `binaries`: `-b` files; `debug_dirs`: `--debug-dir` trees. Unreadable `-b` files are
    /// an error (they were asked for by name); debug dirs must be directories.
    pub fn new(
        binaries: &[PathBuf],
        debug_dirs: &[PathBuf],
        debuginfod: Option<Debuginfod>,
    ) -> Result<Self, String> {
        let mut bins = Vec::new();
        for b in binaries {
            let info = elf::read(b).map_err(|e| format!("-b {e}"))?;
            if info.build_id.is_none() {
                return Err(format!(
                    "-b {}: the file has no GNU build id, so it cannot be matched to recorded modules",
                    b.display()
                ));
            }
            bins.push((b.clone(), Ok(info)));
        }
        for d in debug_dirs {
            // Not walked on FUSE (asked before any lookup in it): a tree there is copied off
            // it first (docs/threat-model.md).
            if let Err(elf::ElfError::OnFuse(why)) = elf::open(d) {
                return Err(format!("--debug-dir {why}"));
            }
            if !d.is_dir() {
                return Err(format!("--debug-dir {}: not a directory", d.display()));
            }
        }
        Ok(Finder {
            binaries: bins,
            debug_dirs: debug_dirs.to_vec(),
            index: None,
            system_dirs: SYSTEM_DEBUG_DIRS.iter().map(PathBuf::from).collect(),
            debuginfod,
            used_binaries: HashSet::new(),
            images: Vec::new(),
        })
    }

    /// Add a module image the stream carries (`stacks.vdso`), to be found by its build id;
    /// written to a file in the temporary directory while the finder lives. Returns its build
    /// id.
    pub(crate) fn add_image(&mut self, name: &str, bytes: &[u8]) -> Result<String, String> {
        let path = std::env::temp_dir().join(format!(
            "stacks-symbolize-{}-{}-{name}",
            std::process::id(),
            self.images.len()
        ));
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let build_id = elf::read(&path).ok().and_then(|info| info.build_id);
        let Some(build_id) = build_id else {
            let _ = std::fs::remove_file(&path);
            return Err(format!(
                "the stream's {name} image is not an ELF file with a build id"
            ));
        };
        self.images.push(Image {
            path,
            build_id: build_id.clone(),
        });
        self.index = None;
        Ok(build_id)
    }

    /// Replace the system debug directories (tests).
    pub fn with_system_dirs(mut self, dirs: Vec<PathBuf>) -> Self {
        self.system_dirs = dirs;
        self
    }

    /// Directories blazesym searches for debug links of the files it is given.
    pub(crate) fn blazesym_debug_dirs(&self) -> Vec<PathBuf> {
        self.debug_dirs
            .iter()
            .chain(&self.system_dirs)
            .cloned()
            .collect()
    }

    /// `-b` files whose build id matched no module looked up so far, with their build ids.
    pub(crate) fn unused_binaries(&self) -> Vec<(PathBuf, String)> {
        self.binaries
            .iter()
            .filter(|(p, _)| !self.used_binaries.contains(p))
            .filter_map(|(p, i)| Some((p.clone(), i.as_ref().ok()?.build_id.clone()?)))
            .collect()
    }

    fn index(&mut self) -> &HashMap<String, Vec<PathBuf>> {
        if self.index.is_none() {
            let mut index: HashMap<String, Vec<PathBuf>> = HashMap::new();
            for i in &self.images {
                index
                    .entry(i.build_id.clone())
                    .or_default()
                    .push(i.path.clone());
            }
            for (p, info) in &self.binaries {
                if let Some(id) = info.as_ref().ok().and_then(|i| i.build_id.clone()) {
                    index.entry(id).or_default().push(p.clone());
                }
            }
            for d in &self.debug_dirs {
                let mut files = Vec::new();
                walk(d, &mut files, 0);
                files.sort();
                for f in files {
                    if let Ok(ElfInfo {
                        build_id: Some(id), ..
                    }) = elf::read(&f)
                    {
                        index.entry(id).or_default().push(f);
                    }
                }
            }
            self.index = Some(index);
        }
        self.index.as_ref().expect("just built")
    }

    /// Candidates that `.gnu_debuglink` name `link` of a module at `module` may refer to.
    fn debuglink_candidates(&self, module: &Path, link: &str) -> Vec<PathBuf> {
        let dir = module.parent().unwrap_or(Path::new("/"));
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        let mut out = vec![dir.join(link), dir.join(".debug").join(link)];
        for g in &self.debug_dirs {
            out.push(g.join(link));
            out.push(g.join(rel).join(link));
        }
        for g in &self.system_dirs {
            out.push(g.join(rel).join(link));
        }
        out
    }

    /// Choose the files to symbolize the module recorded at `path` with build id `build_id`;
    /// else why not, in a closed value and in words.
    pub fn locate(
        &mut self,
        path: &str,
        build_id: Option<&str>,
    ) -> Result<ModuleFiles, (Unresolved, String)> {
        let Some(want) = build_id else {
            return self.locate_without_build_id(path);
        };
        let mut picks = Picks::default();
        // 1, 2: -b files and --debug-dir trees, by build id.
        let indexed = self.index().get(want).cloned().unwrap_or_default();
        for p in indexed {
            if picks.done() {
                break;
            }
            if self.binaries.iter().any(|(b, _)| *b == p) {
                self.used_binaries.insert(p.clone());
            }
            if let Ok(info) = elf::read(&p) {
                picks.consider(Found { path: p, info });
            }
        }
        // 3: the recorded path, if it is still the same file.
        let recorded = Path::new(path);
        let recorded_info = elf::read(recorded);
        if !picks.done()
            && let Ok(info) = &recorded_info
            && info.build_id.as_deref() == Some(want)
        {
            picks.consider(Found {
                path: recorded.to_path_buf(),
                info: info.clone(),
            });
        }
        // 4: system debug directories by build id.
        if !picks.done() && want.len() > 2 {
            for g in self.system_dirs.clone() {
                let p = g
                    .join(".build-id")
                    .join(&want[..2])
                    .join(format!("{}.debug", &want[2..]));
                if let Ok(info) = elf::read(&p)
                    && info.build_id.as_deref() == Some(want)
                {
                    picks.consider(Found { path: p, info });
                    break;
                }
            }
        }
        // 5: .gnu_debuglink of the code file.
        if picks.dwarf.is_none()
            && let Some(c) = &picks.code
            && let Some(link) = c.info.debuglink.clone()
        {
            let code_path = c.path.clone();
            for p in self.debuglink_candidates(&code_path, &link) {
                if p == code_path {
                    continue;
                }
                if let Ok(info) = elf::read(&p)
                    && info.build_id.as_deref() == Some(want)
                    && info.has_dwarf
                {
                    picks.consider(Found { path: p, info });
                    break;
                }
            }
        }
        // 6: debuginfod.
        let mut debuginfod_why = None;
        if let Some(d) = self.debuginfod.as_mut() {
            let mut wanted = Vec::new();
            if picks.dwarf.is_none() {
                wanted.push(Artifact::DebugInfo);
            }
            if picks.code.is_none() {
                wanted.push(Artifact::Executable);
            }
            for what in wanted {
                match d.fetch(want, what) {
                    Ok(p) => match elf::read(&p) {
                        Ok(info) if info.build_id.as_deref() == Some(want) => {
                            picks.consider(Found { path: p, info })
                        }
                        Ok(info) => {
                            debuginfod_why = Some(format!(
                                "debuginfod sent {} with build id {}",
                                p.display(),
                                info.build_id.as_deref().unwrap_or("(none)")
                            ))
                        }
                        Err(e) => debuginfod_why = Some(format!("debuginfod: {e}")),
                    },
                    Err(e) => debuginfod_why = Some(e),
                }
            }
        }

        let symbols = picks
            .dwarf
            .as_ref()
            .or(picks.symtab.as_ref())
            .or(picks.code.as_ref());
        match (symbols, &picks.code) {
            (Some(s), Some(c)) => Ok(ModuleFiles {
                symbols: s.path.clone(),
                symbols_size: s.info.size,
                layout: c.info.clone(),
                guessed: false,
            }),
            (Some(s), None) => Ok(ModuleFiles {
                symbols: s.path.clone(),
                symbols_size: s.info.size,
                layout: s.info.clone(),
                guessed: !s.info.has_code,
            }),
            (None, _) => Err(self.not_found(path, want, &recorded_info, debuginfod_why)),
        }
    }

    fn not_found(
        &self,
        path: &str,
        want: &str,
        recorded: &Result<ElfInfo, elf::ElfError>,
        debuginfod: Option<String>,
    ) -> (Unresolved, String) {
        let mut places = vec!["-b", "--debug-dir"];
        places.push("/usr/lib/debug/.build-id");
        let name = Path::new(path).file_name();
        let b_mismatch = self
            .binaries
            .iter()
            .find(|(b, _)| b.file_name() == name)
            .and_then(|(b, i)| Some((b, i.as_ref().ok()?.build_id.clone()?)));
        let mut reason = Unresolved::ModuleNotFound;
        let mut why = match (recorded, b_mismatch) {
            (_, Some((b, have))) => format!(
                "build id mismatch: recorded {want}, -b {} has {have}",
                b.display()
            ),
            (Ok(info), None) => format!(
                "build id mismatch: recorded {want}, {path} now has {}",
                info.build_id.as_deref().unwrap_or("none")
            ),
            (Err(elf::ElfError::Io { source, .. }), None)
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                format!("module {path} not found on this machine")
            }
            (Err(e @ elf::ElfError::OnFuse(_)), None) => {
                reason = Unresolved::OnFuse;
                e.to_string()
            }
            (Err(e), None) => format!("cannot read {e}"),
        };
        why.push_str(&format!(
            "; no file with build id {want} in {}",
            places.join(", ")
        ));
        if let Some(d) = debuginfod {
            why.push_str(&format!(" ({d})"));
        } else if self.debuginfod.is_none() {
            why.push_str(" (DEBUGINFOD_URLS is not set)");
        }
        (reason, why)
    }

    fn locate_without_build_id(&mut self, path: &str) -> Result<ModuleFiles, (Unresolved, String)> {
        let p = Path::new(path);
        let info = match elf::read(p) {
            Ok(i) => i,
            Err(elf::ElfError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err((
                    Unresolved::ModuleNotFound,
                    format!(
                        "module {path} not found on this machine (no build id was recorded to find it elsewhere)"
                    ),
                ));
            }
            Err(e @ elf::ElfError::OnFuse(_)) => return Err((Unresolved::OnFuse, e.to_string())),
            Err(e) => return Err((Unresolved::ModuleNotFound, format!("cannot read {e}"))),
        };
        let mut symbols = (p.to_path_buf(), info.size);
        if !info.has_dwarf
            && let Some(link) = &info.debuglink
            && let Some(d) = self
                .debuglink_candidates(p, link)
                .into_iter()
                .filter(|c| c != p)
                .find_map(|c| Some((c.clone(), elf::read(&c).ok().filter(|i| i.has_dwarf)?.size)))
        {
            symbols = d;
        }
        Ok(ModuleFiles {
            symbols: symbols.0,
            symbols_size: symbols.1,
            guessed: !info.has_code,
            layout: info,
        })
    }
}

/// Regular files (symlinks to files included) under `dir`; directories are not followed
/// through symlinks, so a link cycle cannot loop. Nothing on FUSE is listed or asked about
/// (a directory mounted there, a link into it: [`elf::open`]).
fn walk(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 32 || elf::open(dir).is_err() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            walk(&p, out, depth + 1);
        } else if elf::open(&p)
            .and_then(|f| {
                f.metadata().map_err(|source| elf::ElfError::Io {
                    path: p.display().to_string(),
                    source,
                })
            })
            .is_ok_and(|m| m.is_file() && m.len() >= 64)
        {
            out.push(p);
        }
    }
}
