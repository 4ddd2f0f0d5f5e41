//! Go binaries without a symbol table (`-ldflags='-s -w'`, Go 1.18+) named from the runtime's
//! own tables: `.gopclntab` gives each address its function, file and line, and the inline
//! trees (`FUNCDATA_InlTree`, indexed by `PCDATA_InlTreeIndex`) its inlined calls. Used only
//! for frames blazesym could not name in a file without `.symtab`, so a Go binary with symbols
//! is symbolized exactly as before.

mod find;
mod table;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stacks_stream::Unresolved;

use crate::frame::{Options, SymFrame};
pub use find::InlineTrees;
pub use find::Located;
pub use find::locate;
pub(crate) use table::FUNCDATA_INL_TREE;
pub use table::Func;
pub use table::{Table, Version};

/// Deepest chain of inlined calls followed at one address (a malformed tree could loop).
const MAX_INLINE_DEPTH: usize = 64;

/// Why a Go function table could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum GoError {
    #[error("{0}")]
    Io(#[source] std::io::Error),
    #[error("{0}")]
    Object(#[source] object::Error),
    #[error("pclntab magic {magic:#010x} is a layout before Go 1.18, which is not read")]
    Unsupported { magic: u32 },
    #[error("malformed .gopclntab: {0}")]
    Malformed(&'static str),
}

/// A Go binary's tables, ready for lookups.
pub struct GoBinary {
    table: Table,
    inline: Option<InlineTrees>,
}

impl GoBinary {
    /// The Go tables of the ELF file at `path`; `Ok(None)` when it has a symbol table or is
    /// not a Go 1.18+ binary.
    pub fn open(path: &Path) -> Result<Option<GoBinary>, GoError> {
        Ok(locate(path)?.map(|l| GoBinary {
            table: l.table,
            inline: l.inline,
        }))
    }

    /// The function table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Whether inline trees can be read (the runtime's `moduledata` was found).
    #[cfg(test)]
    pub(crate) fn has_inline_trees(&self) -> bool {
        self.inline.is_some()
    }

    /// Frames for ELF address `addr`, innermost inlined call first, as [`Options`] ask:
    /// names only, or with file and line, and with inlined calls. `Ok(None)`: no Go function
    /// holds the address.
    pub fn frames(&self, addr: u64, opts: Options) -> Result<Option<Vec<SymFrame>>, GoError> {
        let t = &self.table;
        let Some(f) = t.find(addr)? else {
            return Ok(None);
        };
        let name = t.name(&f)?;
        if !opts.lines {
            return Ok(Some(vec![frame(name, None, None, false)]));
        }
        // Inline trees that cannot be read leave the function's own frame, still right.
        let (mut out, pc) = match (&self.inline, opts.inlines) {
            (Some(trees), true) => self
                .inlined(&f, trees, addr)
                .unwrap_or_else(|_| (Vec::new(), addr)),
            _ => (Vec::new(), addr),
        };
        let (file, line) = t.file_line(&f, pc)?;
        out.push(frame(name, file, line, false));
        Ok(Some(out))
    }

    /// The inlined calls at `addr` in `f`, innermost first, and the address whose position is
    /// the outermost call's site (`addr` when nothing is inlined there).
    fn inlined(
        &self,
        f: &Func,
        trees: &InlineTrees,
        addr: u64,
    ) -> Result<(Vec<SymFrame>, u64), GoError> {
        let t = &self.table;
        let mut out = Vec::new();
        let mut pc = addr;
        let Some(tree) = t.funcdata(f, FUNCDATA_INL_TREE)? else {
            return Ok((out, pc));
        };
        let (size, name_at, parent_at) = t.inlined_call_layout();
        while let Some(ix) = t.inline_index(f, pc)? {
            if out.len() >= MAX_INLINE_DEPTH {
                return Err(GoError::Malformed("an inline tree deeper than 64 calls"));
            }
            let entry = trees.read(u64::from(tree) + u64::from(ix) * size as u64, size)?;
            let name = t.name_at(table::u32_at(&entry, name_at)?)?;
            let parent_pc = table::u32_at(&entry, parent_at)?;
            let (file, line) = t.file_line(f, pc)?;
            out.push(frame(name, file, line, true));
            pc = f
                .entry
                .checked_add(u64::from(parent_pc))
                .filter(|&p| p < f.end)
                .ok_or(GoError::Malformed(
                    "an inlined call's parent pc outside its function",
                ))?;
        }
        Ok((out, pc))
    }
}

fn frame(name: String, file: Option<String>, line: Option<u32>, inlined: bool) -> SymFrame {
    SymFrame {
        function: Some(name.clone()),
        symbol: Some(name),
        file,
        line,
        column: None,
        inlined,
        error: None,
        reason: None,
    }
}

/// Whether blazesym left the address without a name.
fn unnamed(frames: &[SymFrame]) -> bool {
    matches!(frames, [f] if f.reason == Some(Unresolved::NoSymbol))
}

/// The Go tables of the files a worker has looked at (`None`: not a stripped Go binary).
#[derive(Default)]
pub(crate) struct Cache {
    files: HashMap<PathBuf, Result<Option<Arc<GoBinary>>, String>>,
}

impl Cache {
    /// Drop what was read of `file`.
    pub(crate) fn forget(&mut self, file: &Path) {
        self.files.remove(file);
    }

    /// Name the frames of `out` (one per address of `addrs` in `file`) that blazesym left
    /// unnamed, from the file's Go tables when it is a Go binary without a symbol table.
    /// Frames no Go function holds stay unresolved, their error saying why.
    pub(crate) fn name_unnamed(
        &mut self,
        file: &Path,
        addrs: &[u64],
        out: &mut [Vec<SymFrame>],
        opts: Options,
    ) {
        if !out.iter().any(|f| unnamed(f)) {
            return;
        }
        let go = self
            .files
            .entry(file.to_path_buf())
            .or_insert_with(|| {
                GoBinary::open(file)
                    .map(|g| g.map(Arc::new))
                    .map_err(|e| e.to_string())
            })
            .clone();
        let go = match go {
            Ok(Some(go)) => go,
            Ok(None) => return,
            Err(why) => {
                let why = format!("(Go tables not read: {why})");
                out.iter_mut()
                    .filter(|f| unnamed(f))
                    .for_each(|f| note(f, &why));
                return;
            }
        };
        for (addr, frames) in addrs.iter().zip(out.iter_mut()) {
            if !unnamed(frames) {
                continue;
            }
            match go.frames(*addr, opts) {
                Ok(Some(named)) => *frames = named,
                Ok(None) => note(frames, "(no Go function in .gopclntab holds it either)"),
                Err(e) => note(frames, &format!("(.gopclntab: {e})")),
            }
        }
    }
}

/// Add `why` to an unresolved frame's error.
fn note(frames: &mut [SymFrame], why: &str) {
    if let Some(f) = frames.first_mut() {
        f.error = Some(match f.error.take() {
            Some(e) => format!("{e} {why}"),
            None => why.to_string(),
        });
    }
}
