//! Why a frame is unresolved ([`Unresolved`]): the closed values of a frame's `reason` field.

/// Why a frame is unresolved: the closed values of a frame's `reason` (its `error` says it in
/// words, with the details).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unresolved {
    /// The frame stands for a stack that could not be captured.
    MissedStack,
    /// The recorder could not turn the user address into a file offset (process gone,
    /// anonymous or JIT memory, the idle task…).
    NotNormalized,
    /// The file (or debug file) of the frame's module was not found, or not with its build id.
    ModuleNotFound,
    /// The module's file was found but could not be read.
    UnreadableFile,
    /// The module's path lies on a FUSE file system (or leads into one): not opened, since its
    /// server (maybe the traced program) may never answer.
    OnFuse,
    /// The file offset is outside the file's loaded segments.
    OutsideSegments,
    /// No symbol of the file covers the address.
    NoSymbol,
    /// The kernel address was not in the recording kernel's kallsyms.
    NotInKallsyms,
    /// No kernel symbols of the recording boot are available.
    NoKernelSymbols,
}

impl Unresolved {
    /// Every value.
    pub const ALL: [Unresolved; 9] = [
        Unresolved::MissedStack,
        Unresolved::NotNormalized,
        Unresolved::ModuleNotFound,
        Unresolved::UnreadableFile,
        Unresolved::OnFuse,
        Unresolved::OutsideSegments,
        Unresolved::NoSymbol,
        Unresolved::NotInKallsyms,
        Unresolved::NoKernelSymbols,
    ];

    /// The `reason` text.
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::MissedStack => "missed_stack",
            Unresolved::NotNormalized => "not_normalized",
            Unresolved::ModuleNotFound => "module_not_found",
            Unresolved::UnreadableFile => "unreadable_file",
            Unresolved::OnFuse => "on_fuse",
            Unresolved::OutsideSegments => "outside_segments",
            Unresolved::NoSymbol => "no_symbol",
            Unresolved::NotInKallsyms => "not_in_kallsyms",
            Unresolved::NoKernelSymbols => "no_kernel_symbols",
        }
    }
}
