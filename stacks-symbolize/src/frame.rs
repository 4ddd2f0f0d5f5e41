//! One output frame's symbol part ([`SymFrame`]): its names (demangled with [`demangle`]),
//! file and line, or why it is unresolved; and what symbolization produces ([`Options`]).
//! Shared by the blazesym resolver ([`crate::resolve`]) and the Go table reader
//! ([`crate::gopclntab`]).

use std::sync::Arc;

use stacks_stream::Unresolved;

/// The symbol part of one output frame (where it is comes from the input frame).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymFrame {
    /// Demangled function name.
    pub function: Option<String>,
    /// The symbol as the file names it (mangled).
    pub symbol: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub inlined: bool,
    pub error: Option<String>,
    /// Why it is unresolved (the closed value of `error`'s words).
    pub reason: Option<Unresolved>,
}

impl SymFrame {
    /// A frame that could not be resolved: why, as a closed value and in words.
    pub fn unresolved(reason: Unresolved, why: impl Into<String>) -> Self {
        SymFrame {
            function: None,
            symbol: None,
            file: None,
            line: None,
            column: None,
            inlined: false,
            error: Some(why.into()),
            reason: Some(reason),
        }
    }

    /// A frame named `raw` (demangled) at `file`:`line` when known (an interpreted frame).
    pub(crate) fn named_at(raw: &str, file: Option<&str>, line: Option<u32>) -> Self {
        SymFrame {
            file: file.map(str::to_string),
            line,
            ..Self::named(raw)
        }
    }

    /// A function known by name only (no line information).
    pub fn named(raw: &str) -> Self {
        SymFrame {
            function: Some(demangle(raw)),
            symbol: Some(raw.to_string()),
            file: None,
            line: None,
            column: None,
            inlined: false,
            error: None,
            reason: None,
        }
    }
}

/// Frames for one address: several when calls were inlined there, innermost first.
pub type Frames = Arc<[SymFrame]>;

/// Demangle a Rust (legacy or v0) or C++ symbol; other names are returned as they are.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(raw)
        && let Ok(d) = sym.demangle()
    {
        return d;
    }
    raw.to_string()
}

/// What symbolization produces.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub lines: bool,
    pub inlines: bool,
}
