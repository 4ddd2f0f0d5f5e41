//! Address → frames resolution with blazesym, cached so every distinct address is looked up
//! once per stream: user frames by (module, build id, file offset), kernel frames by address.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{CodeInfo, Input, Symbolized, Symbolizer};
use blazesym::{MaybeDefault, helper::read_elf_build_id};

/// The symbol part of one output frame (location identity comes from the input frame).
#[derive(Clone, Debug, PartialEq)]
pub struct SymFrame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub inlined: bool,
    pub module: Option<String>,
    pub error: Option<String>,
}

impl SymFrame {
    /// A frame that could not be resolved, with the reason.
    pub fn unresolved(why: impl Into<String>) -> Self {
        SymFrame {
            function: None,
            file: None,
            line: None,
            column: None,
            inlined: false,
            module: None,
            error: Some(why.into()),
        }
    }
}

/// Frames for one address: several when calls were inlined there, innermost first.
pub type Frames = Rc<Vec<SymFrame>>;

/// Identity of a user module: recorded path and build id.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct ModuleKey {
    pub path: String,
    pub build_id: Option<String>,
}

pub struct Resolver {
    symbolizer: Symbolizer,
    kernel: Result<Source<'static>, String>,
    kernel_cache: HashMap<u64, Frames>,
    user_cache: HashMap<(ModuleKey, u64), Frames>,
    modules: HashMap<ModuleKey, Result<PathBuf, String>>,
    pub lookups: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decide whether kernel frames of this recording can be resolved here: only against the
/// kallsyms of the very boot that recorded them (addresses move with every boot's KASLR).
pub fn kernel_source(
    recorded_boot_id: Option<&str>,
    kallsyms: &Path,
) -> Result<Source<'static>, String> {
    let live = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    match recorded_boot_id {
        None => return Err("the stream does not say which boot recorded it".into()),
        Some(b) if b != live => {
            return Err(format!(
                "recorded during another boot ({b}); this machine is {live}: kernel symbols would be wrong"
            ));
        }
        Some(_) => {}
    }
    let text = std::fs::read_to_string(kallsyms)
        .map_err(|e| format!("cannot read {}: {e}", kallsyms.display()))?;
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
    Ok(Source::Kernel(Kernel {
        kallsyms: MaybeDefault::Some(kallsyms.to_path_buf()),
        vmlinux: MaybeDefault::None,
        kaslr_offset: None,
        debug_syms: false,
        ..Default::default()
    }))
}

fn code_parts(ci: Option<&CodeInfo<'_>>) -> (Option<String>, Option<u32>, Option<u32>) {
    match ci {
        Some(ci) => (
            Some(ci.to_path().to_string_lossy().into_owned()),
            ci.line,
            ci.column.map(u32::from),
        ),
        None => (None, None, None),
    }
}

/// Expand one blazesym result into frames, innermost inlined function first.
fn expand(sym: Symbolized<'_>) -> Vec<SymFrame> {
    match sym {
        Symbolized::Unknown(reason) => vec![SymFrame::unresolved(reason.to_string())],
        Symbolized::Sym(s) => {
            let module = s.module.as_ref().map(|m| m.to_string_lossy().into_owned());
            let mut out = Vec::with_capacity(s.inlined.len() + 1);
            for f in s.inlined.iter().rev() {
                let (file, line, column) = code_parts(f.code_info.as_ref());
                out.push(SymFrame {
                    function: Some(f.name.to_string()),
                    file,
                    line,
                    column,
                    inlined: true,
                    module: module.clone(),
                    error: None,
                });
            }
            let (file, line, column) = code_parts(s.code_info.as_deref());
            out.push(SymFrame {
                function: Some(s.name.to_string()),
                file,
                line,
                column,
                inlined: false,
                module,
                error: None,
            });
            out
        }
    }
}

impl Resolver {
    pub fn new(kernel: Result<Source<'static>, String>) -> Self {
        Resolver {
            symbolizer: Symbolizer::builder()
                .enable_code_info(true)
                .enable_inlined_fns(true)
                .enable_demangling(true)
                .build(),
            kernel,
            kernel_cache: HashMap::new(),
            user_cache: HashMap::new(),
            modules: HashMap::new(),
            lookups: 0,
        }
    }

    /// Unique addresses resolved so far (kernel + user).
    pub fn unique_frames(&self) -> usize {
        self.kernel_cache.len() + self.user_cache.len()
    }

    /// Where to read a module's symbols from: the recorded path, if its build id still matches.
    fn module_file(&mut self, key: &ModuleKey) -> Result<PathBuf, String> {
        if let Some(r) = self.modules.get(key) {
            return r.clone();
        }
        let path = PathBuf::from(&key.path);
        let r = if !path.exists() {
            Err(format!("module {} not found on this machine", key.path))
        } else {
            match (&key.build_id, read_elf_build_id(&path)) {
                (Some(want), Ok(Some(have))) if hex(&have) != *want => Err(format!(
                    "build id mismatch: recorded {want}, {} has {}",
                    key.path,
                    hex(&have)
                )),
                (_, Err(e)) => Err(format!("cannot read {}: {e}", key.path)),
                _ => Ok(path),
            }
        };
        self.modules.insert(key.clone(), r.clone());
        r
    }

    /// Resolve any of `offsets` (already return-address adjusted) not yet cached for `module`.
    pub fn prefetch_user(&mut self, module: &ModuleKey, offsets: &mut Vec<u64>) {
        offsets.retain(|o| !self.user_cache.contains_key(&(module.clone(), *o)));
        offsets.sort_unstable();
        offsets.dedup();
        if offsets.is_empty() {
            return;
        }
        self.lookups += offsets.len() as u64;
        let results: Vec<Vec<SymFrame>> = match self.module_file(module) {
            Err(why) => vec![vec![SymFrame::unresolved(why)]; offsets.len()],
            Ok(path) => {
                let src = Source::Elf(Elf::new(path));
                match self.symbolizer.symbolize(&src, Input::FileOffset(offsets)) {
                    Ok(syms) => syms.into_iter().map(expand).collect(),
                    Err(e) => {
                        let why = format!("symbolizing {}: {e}", module.path);
                        vec![vec![SymFrame::unresolved(why)]; offsets.len()]
                    }
                }
            }
        };
        for (o, frames) in offsets.iter().zip(results) {
            self.user_cache
                .insert((module.clone(), *o), Rc::new(frames));
        }
    }

    pub fn user(&self, module: &ModuleKey, offset: u64) -> Frames {
        self.user_cache
            .get(&(module.clone(), offset))
            .cloned()
            .unwrap_or_else(|| Rc::new(vec![SymFrame::unresolved("not looked up")]))
    }

    /// Resolve any kernel addresses (already adjusted) not yet cached.
    pub fn prefetch_kernel(&mut self, addrs: &mut Vec<u64>) {
        addrs.retain(|a| !self.kernel_cache.contains_key(a));
        addrs.sort_unstable();
        addrs.dedup();
        if addrs.is_empty() {
            return;
        }
        self.lookups += addrs.len() as u64;
        let results: Vec<Vec<SymFrame>> = match &self.kernel {
            Err(why) => vec![vec![SymFrame::unresolved(why.clone())]; addrs.len()],
            Ok(src) => match self.symbolizer.symbolize(src, Input::AbsAddr(addrs)) {
                Ok(syms) => syms.into_iter().map(expand).collect(),
                Err(e) => vec![vec![SymFrame::unresolved(format!("kallsyms: {e}"))]; addrs.len()],
            },
        };
        for (a, frames) in addrs.iter().zip(results) {
            self.kernel_cache.insert(*a, Rc::new(frames));
        }
    }

    pub fn kernel(&self, addr: u64) -> Frames {
        self.kernel_cache
            .get(&addr)
            .cloned()
            .unwrap_or_else(|| Rc::new(vec![SymFrame::unresolved("not looked up")]))
    }
}

/// Adjust a return address so it points into the call instruction (not the leaf frame).
pub fn lookup_addr(index_in_stack: usize, addr: u64) -> u64 {
    if index_in_stack == 0 {
        addr
    } else {
        addr.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn known_function() -> u64 {
        std::hint::black_box(7)
    }

    fn own_module() -> (ModuleKey, u64) {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let build_id = read_elf_build_id(&exe).unwrap().map(|b| hex(&b));
        let n = blazesym::normalize::Normalizer::new();
        let out = n
            .normalize_user_addrs(blazesym::Pid::Slf, &[known_function as *const () as u64])
            .unwrap();
        (
            ModuleKey {
                path: exe.to_string_lossy().into_owned(),
                build_id,
            },
            out.outputs[0].0,
        )
    }

    #[test]
    fn resolves_a_known_function_with_file_and_line() {
        let (module, offset) = own_module();
        let mut r = Resolver::new(Err("no kernel".into()));
        r.prefetch_user(&module, &mut vec![offset]);
        let frames = r.user(&module, offset);
        let last = frames.last().unwrap();
        assert!(
            last.function
                .as_deref()
                .unwrap()
                .ends_with("known_function"),
            "{frames:?}"
        );
        assert!(
            last.file.as_deref().unwrap().ends_with("resolve.rs"),
            "{frames:?}"
        );
        assert!(last.line.unwrap() > 0);
        // A second lookup is served from the cache.
        let before = r.lookups;
        r.prefetch_user(&module, &mut vec![offset]);
        assert_eq!(r.lookups, before);
    }

    #[test]
    fn build_id_mismatch_is_reported_not_trusted() {
        let (mut module, offset) = own_module();
        module.build_id = Some("00112233445566778899aabbccddeeff00112233".into());
        let mut r = Resolver::new(Err("no kernel".into()));
        r.prefetch_user(&module, &mut vec![offset]);
        let frames = r.user(&module, offset);
        assert_eq!(frames.len(), 1);
        assert!(frames[0].function.is_none());
        assert!(
            frames[0]
                .error
                .as_deref()
                .unwrap()
                .contains("build id mismatch")
        );
    }

    #[test]
    fn missing_module_is_reported() {
        let module = ModuleKey {
            path: "/nonexistent/lib.so".into(),
            build_id: None,
        };
        let mut r = Resolver::new(Err("no kernel".into()));
        r.prefetch_user(&module, &mut vec![0x1000]);
        assert!(
            r.user(&module, 0x1000)[0]
                .error
                .as_deref()
                .unwrap()
                .contains("not found")
        );
    }

    #[test]
    fn kernel_refused_for_another_boot() {
        let e = kernel_source(Some("not-this-boot"), Path::new("/proc/kallsyms")).unwrap_err();
        assert!(e.contains("another boot"), "{e}");
        assert!(kernel_source(None, Path::new("/proc/kallsyms")).is_err());
    }

    #[test]
    fn return_addresses_point_into_the_call() {
        assert_eq!(lookup_addr(0, 100), 100);
        assert_eq!(lookup_addr(1, 100), 99);
    }
}
