//! The `cpu` workload: two functions burn CPU in a known ratio of iterations, and the CPU time
//! each actually took (the thread's CPU clock, so time preempted counts for neither) is measured
//! so tests compare a profile against what really happened.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

#[derive(clap::Args)]
pub(crate) struct CpuArgs {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Iterations of burn_heavy per iteration of burn_light.
    #[arg(long, default_value_t = 3)]
    heavy: u64,
    /// Iterations of burn_light per slice.
    #[arg(long, default_value_t = 1)]
    light: u64,
    /// Loop iterations in one unit of work (one unit takes roughly 50-200 µs).
    #[arg(long, default_value_t = 40_000)]
    unit: u64,
}

impl CpuArgs {
    /// Settings for `burn_heavy` alone (no `burn_light` units) for `seconds`, the others at
    /// their defaults: the CPU part of the `mixed` workload.
    pub(crate) fn heavy_only(seconds: f64) -> Result<Self> {
        use clap::{Args, FromArgMatches};
        let seconds = seconds.to_string();
        let matches = Self::augment_args(clap::Command::new("cpu")).try_get_matches_from([
            "cpu",
            "--seconds",
            &seconds,
            "--light",
            "0",
        ])?;
        Ok(Self::from_arg_matches(&matches)?)
    }
}

/// One step of an xorshift generator: cheap work the optimizer cannot remove.
#[inline(always)]
fn mix(x: u64) -> u64 {
    let mut x = x ^ (x << 13);
    x ^= x >> 7;
    x ^ (x << 17)
}

/// Burns `units` units of work. Kept out of line so it is its own frame.
#[inline(never)]
pub(crate) fn burn_heavy(units: u64, unit: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..units * unit {
        x = mix(black_box(x));
    }
    x
}

/// Same work as [`burn_heavy`], in a distinct function.
#[inline(never)]
pub(crate) fn burn_light(units: u64, unit: u64) -> u64 {
    let mut x = black_box(0x2545_f491_4f6c_dd1du64);
    for _ in 0..units * unit {
        x = mix(black_box(x));
    }
    x
}

/// CPU time the calling thread has used so far, ns (first field of its schedstat); the whole
/// process's when it is single-threaded, as the `cpu` workload is.
fn own_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(crate) fn run(a: &CpuArgs) -> Result<Value> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) || a.unit == 0 || a.heavy + a.light == 0 {
        bail!("--seconds, --unit and --heavy + --light must be positive");
    }
    let budget = Duration::from_secs_f64(a.seconds);
    let start = Instant::now();
    let (mut heavy_ns, mut light_ns) = (0u128, 0u128);
    let (mut heavy_units, mut light_units) = (0u64, 0u64);
    let mut sink = 0u64;
    // Each round's length varies (1 to 4 times the units, in the same ratio), so a sampler
    // whose period comes close to a round's length cannot stay in step with the rounds and
    // see one function only.
    let mut lcg = 0x853c_49e6_748f_ea9bu64;
    while start.elapsed() < budget {
        lcg = lcg
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let k = 1 + (lcg >> 33) % 4;
        let t0 = crate::sys::thread_cpu_ns();
        sink ^= burn_heavy(a.heavy * k, a.unit);
        let t1 = crate::sys::thread_cpu_ns();
        sink ^= burn_light(a.light * k, a.unit);
        let t2 = crate::sys::thread_cpu_ns();
        heavy_ns += u128::from(t1 - t0);
        light_ns += u128::from(t2 - t1);
        heavy_units += a.heavy * k;
        light_units += a.light * k;
    }
    black_box(sink);
    let cpu_ns = own_cpu_ns();
    let total = (heavy_ns + light_ns).max(1) as f64;
    Ok(serde_json::json!({
        "workload": "cpu",
        "pid": std::process::id(),
        "tid": crate::sys::tid(),
        "wall_ns": start.elapsed().as_nanos() as u64,
        "cpu_ns": cpu_ns,
        "heavy_ns": heavy_ns as u64,
        "light_ns": light_ns as u64,
        "heavy_units": heavy_units,
        "light_units": light_units,
        "heavy_fraction": heavy_ns as f64 / total,
        "light_fraction": light_ns as f64 / total,
    }))
}
