//! Each thread's countdown of bytes to its next sample: the one thread-local every allocation
//! touches. On x86_64 Linux it is a TLS variable of the initial-exec model, declared in assembly
//! (stable Rust has no `#[thread_local]` and no TLS model choice, and `thread_local!` in a
//! shared library such as libstacks_alloc.so goes through a call to `__tls_get_addr` on every
//! access): the fast path is one load of its offset from the GOT and an `fs`-relative
//! read-modify-write, inlined. The variable is zero-initialized (`.tbss`): 0 makes the first
//! allocation of a thread take the slow path, which seeds the thread. Elsewhere it is a
//! `thread_local!` cell.
//!
//! The initial-exec model needs the variable in the static TLS block: true of an executable and
//! of a preloaded library; a library dlopen'ed later holding it is served from glibc's static
//! TLS surplus (8 bytes of its few hundred).

/// The name of the countdown's TLS symbol (x86_64 Linux), for assembly that takes its bytes
/// itself (libstacks_alloc.so's `malloc`, a function with no frame):
/// `mov rax, qword ptr [rip + NAME@GOTTPOFF]`, then `sub qword ptr fs:[rax], SIZE`.
#[macro_export]
macro_rules! countdown_symbol {
    () => {
        "stacks_alloc_sampler_left"
    };
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    // The variable: global (the code of every codegen unit refers to it) but hidden (each
    // module that links this crate has its own, never interposed).
    std::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        concat!(".globl ", crate::countdown_symbol!()),
        concat!(".hidden ", crate::countdown_symbol!()),
        concat!(".type ", crate::countdown_symbol!(), ", @object"),
        concat!(".size ", crate::countdown_symbol!(), ", 8"),
        concat!(crate::countdown_symbol!(), ":"),
        ".zero 8",
        ".popsection",
    );

    /// Take `n` from this thread's countdown; what is left.
    #[inline(always)]
    pub(crate) fn sub(n: i64) -> i64 {
        let left: i64;
        // SAFETY: reads and writes this thread's own 8-byte TLS variable, at the offset the
        // dynamic linker put in the GOT (relaxed to a constant by the linker in an executable).
        unsafe {
            std::arch::asm!(
                concat!("mov {off}, qword ptr [rip + ", crate::countdown_symbol!(), "@GOTTPOFF]"),
                "neg {v}",
                "add {v}, qword ptr fs:[{off}]",
                "mov qword ptr fs:[{off}], {v}",
                off = out(reg) _,
                v = inout(reg) n => left,
                options(nostack),
            );
        }
        left
    }

    /// Set this thread's countdown.
    #[inline]
    pub(crate) fn set(v: i64) {
        // SAFETY: as in `sub`.
        unsafe {
            std::arch::asm!(
                concat!("mov {off}, qword ptr [rip + ", crate::countdown_symbol!(), "@GOTTPOFF]"),
                "mov qword ptr fs:[{off}], {v}",
                off = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use std::cell::Cell;

    thread_local! {
        static LEFT: Cell<i64> = const { Cell::new(0) };
    }

    /// Take `n` from this thread's countdown; what is left (a thread being torn down, its TLS
    /// gone, is never sampled).
    #[inline(always)]
    pub(crate) fn sub(n: i64) -> i64 {
        LEFT.try_with(|l| {
            let v = l.get().wrapping_sub(n);
            l.set(v);
            v
        })
        .unwrap_or(i64::MAX)
    }

    /// Set this thread's countdown.
    #[inline]
    pub(crate) fn set(v: i64) {
        let _ = LEFT.try_with(|l| l.set(v));
    }
}

pub(crate) use imp::{set, sub};

#[cfg(test)]
mod tests {
    /// Each thread has its own countdown, starting at 0.
    #[test]
    fn countdowns_are_per_thread() {
        super::set(100);
        assert_eq!(super::sub(30), 70);
        let other = std::thread::spawn(|| super::sub(5)).join().unwrap();
        assert_eq!(other, -5);
        assert_eq!(super::sub(70), 0);
    }
}
