//! Byte sampling: each thread's countdown of bytes to the next sample, drawn from an
//! exponential distribution of mean [`interval`], and the weight of a sampled allocation.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

mod left;

/// Mean bytes between samples when `STACKS_ALLOC_INTERVAL` is not set (jemalloc's
/// `lg_prof_sample` 19 and the OpenTelemetry design use the same).
pub(crate) const DEFAULT_INTERVAL: u64 = 512 << 10;

/// [`INTERVAL`] before [`configure`] ran: the first slow path configures.
const UNSET: u64 = u64::MAX;
/// The mean bytes between samples (0: nothing is sampled).
static INTERVAL: AtomicU64 = AtomicU64::new(UNSET);
/// Mixed into each thread's seed, so threads draw different sequences.
static SEEDS: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

thread_local! {
    /// The thread's xorshift64* state; 0: not seeded yet.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// Read the interval from the environment (`STACKS_ALLOC_INTERVAL`: bytes, or with a K, M or G
/// suffix, powers of 1024); a bad or missing value gives the default, 0 turns sampling off.
/// Uses getenv only: no allocation.
pub fn configure() {
    // SAFETY: getenv with a NUL-terminated name; the result is read before anything can
    // change the environment (this runs at load time, or in the first allocation).
    let v = unsafe { libc::getenv(c"STACKS_ALLOC_INTERVAL".as_ptr()) };
    let interval = if v.is_null() {
        DEFAULT_INTERVAL
    } else {
        // SAFETY: getenv returned a valid NUL-terminated string.
        let bytes = unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes();
        parse_interval(bytes).unwrap_or(DEFAULT_INTERVAL)
    };
    INTERVAL.store(interval, Ordering::Relaxed);
}

/// The mean bytes between samples in effect (read from the environment the first time).
pub fn interval() -> u64 {
    match INTERVAL.load(Ordering::Relaxed) {
        UNSET => {
            configure();
            INTERVAL.load(Ordering::Relaxed)
        }
        n => n,
    }
}

/// `524288`, `512K`, `1M`, `4g`: bytes; `None` for anything else.
pub(crate) fn parse_interval(s: &[u8]) -> Option<u64> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 15 {
        return None;
    }
    let mut n = 0u64;
    for b in &s[..digits] {
        n = n * 10 + u64::from(b - b'0');
    }
    let shift = match &s[digits..] {
        b"" => 0,
        b"k" | b"K" => 10,
        b"m" | b"M" => 20,
        b"g" | b"G" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// Whether an allocation of `size` bytes is sampled: the fast path, a thread-local subtract
/// and compare. Returns the weight of a sampled one.
#[inline(always)]
pub fn sample(size: usize) -> Option<u64> {
    if counts_down(size) { None } else { due(size) }
}

/// The fast path alone: take `size` bytes from this thread's countdown; false when it crossed
/// zero, and [`due`] must then be asked whether the allocation is sampled.
#[inline(always)]
pub fn counts_down(size: usize) -> bool {
    left::sub(size as i64) >= 0
}

/// The countdown crossed zero in an allocation of `size` bytes: a sample (unless the thread
/// was not seeded yet, or sampling is off), and the next countdown.
#[cold]
#[inline(never)]
pub fn due(size: usize) -> Option<u64> {
    let mean = interval();
    if mean == 0 {
        left::set(i64::MAX);
        return None;
    }
    if RNG.get() == 0 {
        // First allocation of this thread: no sample yet, the countdown starts from its end
        // … unless this allocation already crosses the first sampling point.
        RNG.set(seed());
        let first = draw(mean) as i64 - size as i64;
        left::set(first);
        if first >= 0 {
            return None;
        }
    }
    // The exponential distribution is memoryless: the next point is drawn from here.
    left::set(draw(mean) as i64);
    Some(weight(size as u64, mean))
}

/// Bytes a sampled allocation of `size` stands for, at mean interval `mean`: the inverse of its
/// probability of being sampled, `1 - exp(-size / mean)`.
pub fn weight(size: u64, mean: u64) -> u64 {
    if mean == 0 || size == 0 {
        return size;
    }
    let s = size as f64;
    let p = -(-s / mean as f64).exp_m1();
    (s / p).round() as u64
}

/// An exponential draw of mean `mean` bytes, at least 1.
fn draw(mean: u64) -> u64 {
    let mut x = RNG.get();
    // xorshift64* (Vigna): a full-period generator good enough to place sampling points.
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    RNG.set(x);
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    // Uniform in (0, 1]: 53 random bits, never 0, so ln is finite.
    let u = ((r >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
    let d = -u.ln() * mean as f64;
    (d as u64).clamp(1, i64::MAX as u64 / 2)
}

/// A thread's seed: no system call (the time stamp counter, the thread's TLS address and a
/// process-wide sequence), never 0.
fn seed() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions.
    let tsc = unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    let tsc = 0u64;
    let here = RNG.with(|r| r as *const Cell<u64> as u64);
    let n = SEEDS.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    let mut z = tsc ^ here.rotate_left(32) ^ n;
    // splitmix64's finalizer.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_like_sizes() {
        assert_eq!(parse_interval(b"524288"), Some(524_288));
        assert_eq!(parse_interval(b"64K"), Some(65_536));
        assert_eq!(parse_interval(b"1m"), Some(1 << 20));
        assert_eq!(parse_interval(b"0"), Some(0));
        assert_eq!(parse_interval(b""), None);
        assert_eq!(parse_interval(b"64KB"), None);
        assert_eq!(parse_interval(b"-1"), None);
    }

    #[test]
    fn weights_are_inverse_probabilities() {
        // Small allocations stand for about the interval, large ones for themselves.
        assert_eq!(weight(1, 1 << 19), 524_289);
        assert_eq!(weight(64 << 20, 64 << 10), 64 << 20);
        let p = 1.0 - (-1.0f64).exp();
        assert_eq!(weight(4096, 4096), (4096.0 / p).round() as u64);
    }

    /// Summed weights estimate the bytes allocated within a few percent, for small, medium and
    /// large sizes alike (the estimator is unbiased whatever the size).
    #[test]
    fn summed_weights_estimate_the_bytes() {
        INTERVAL.store(64 << 10, Ordering::Relaxed);
        for size in [24usize, 4096, 1 << 20] {
            let n = (512usize << 20) / size; // 512 MiB of each size
            let mut est = 0u64;
            let mut samples = 0;
            for _ in 0..n {
                if let Some(w) = sample(size) {
                    est += w;
                    samples += 1;
                }
            }
            let truth = (n * size) as f64;
            let err = (est as f64 - truth).abs() / truth;
            assert!(
                err < 0.05,
                "size {size}: {samples} samples estimate {est} bytes of {truth}"
            );
        }
    }
}
