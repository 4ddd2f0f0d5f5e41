//! The `callers` workload: one function, `burn_shared`, called from two known callers in a
//! known ratio of iterations (`caller_a` three units for each of `caller_b`'s by default), the
//! CPU time spent through each caller measured by the thread's CPU clock, so a sandwich view
//! of `burn_shared` can be checked against what really happened.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::Value;

#[derive(clap::Args)]
pub(crate) struct CallersArgs {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Units of burn_shared through caller_a per round.
    #[arg(long, default_value_t = 3)]
    a: u64,
    /// Units of burn_shared through caller_b per round.
    #[arg(long, default_value_t = 1)]
    b: u64,
    /// Loop iterations in one unit of work.
    #[arg(long, default_value_t = 40_000)]
    unit: u64,
}

/// The work both callers share. Kept out of line so it is its own frame under each caller.
#[inline(never)]
pub(crate) fn burn_shared(units: u64, unit: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..units * unit {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = black_box(x);
    }
    x
}

/// The first caller of [`burn_shared`].
#[inline(never)]
pub(crate) fn caller_a(units: u64, unit: u64) -> u64 {
    black_box(burn_shared(black_box(units), unit))
}

/// The second caller of [`burn_shared`].
#[inline(never)]
pub(crate) fn caller_b(units: u64, unit: u64) -> u64 {
    black_box(burn_shared(black_box(units), unit))
}

pub(crate) fn run(args: &CallersArgs) -> Result<Value> {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) || args.unit == 0 || args.a + args.b == 0 {
        bail!("--seconds, --unit and --a + --b must be positive");
    }
    let budget = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let (mut a_ns, mut b_ns) = (0u64, 0u64);
    let mut sink = 0u64;
    // Rounds of varying length (1 to 4 times the units, same ratio), as in the `cpu`
    // workload, so a sampler cannot stay in step with them.
    let mut lcg = 0x853c_49e6_748f_ea9bu64;
    while start.elapsed() < budget {
        lcg = lcg
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let k = 1 + (lcg >> 33) % 4;
        let t0 = crate::sys::thread_cpu_ns();
        sink ^= caller_a(args.a * k, args.unit);
        let t1 = crate::sys::thread_cpu_ns();
        sink ^= caller_b(args.b * k, args.unit);
        let t2 = crate::sys::thread_cpu_ns();
        a_ns += t1 - t0;
        b_ns += t2 - t1;
    }
    black_box(sink);
    let total = (a_ns + b_ns).max(1) as f64;
    Ok(serde_json::json!({
        "workload": "callers",
        "pid": std::process::id(),
        "tid": crate::sys::tid(),
        "wall_ns": start.elapsed().as_nanos() as u64,
        "a_ns": a_ns,
        "b_ns": b_ns,
        "a_fraction": a_ns as f64 / total,
        "b_fraction": b_ns as f64 / total,
    }))
}
