//! The `span-bench` workload: the cost of entering and leaving a `tracing` span under each
//! subscriber (none, a plain registry, the registry with the tracing-stacks layer), and a burst
//! of small writes inside a span for the recorder's cost per labelled event.

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tracing_subscriber::prelude::*;

use crate::sys;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Layer {
    /// No subscriber: tracing's spans are disabled.
    None,
    /// `tracing_subscriber::registry()` alone.
    Registry,
    /// The registry with `tracing_stacks::layer()`.
    Stacks,
}

#[derive(clap::Args)]
pub(crate) struct SpanBenchArgs {
    /// The subscriber.
    #[arg(long, value_enum, default_value = "stacks")]
    layer: Layer,
    /// Enter+exit pairs timed (one span, entered and left again and again).
    #[arg(long, default_value_t = 10_000_000)]
    pairs: u64,
    /// Then, inside one span, this many one-byte writes to /dev/null (function
    /// `write_devnull`): events a recorder labels with the span.
    #[arg(long, default_value_t = 0)]
    writes: u64,
    /// Sleep this long first (a tracer attaches its probes once it has seen the exec).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
}

/// One-byte writes to /dev/null, `n` of them.
#[inline(never)]
fn write_devnull(n: u64) -> Result<()> {
    let fd = sys::open(c"/dev/null", libc::O_WRONLY, 0).context("opening /dev/null")?;
    for _ in 0..n {
        sys::write(fd, b"x").context("write")?;
    }
    sys::close(fd).context("close")
}

pub(crate) fn run(a: &SpanBenchArgs) -> Result<Value> {
    match a.layer {
        Layer::None => {}
        Layer::Registry => tracing_subscriber::registry()
            .try_init()
            .context("installing the tracing subscriber")?,
        Layer::Stacks => tracing_subscriber::registry()
            .with(tracing_stacks::layer())
            .try_init()
            .context("installing the tracing subscriber")?,
    }
    std::thread::sleep(std::time::Duration::from_millis(a.delay_ms));
    let span = tracing::info_span!("bench");
    let t0 = Instant::now();
    for i in 0..a.pairs {
        span.in_scope(|| std::hint::black_box(i));
    }
    let ns = t0.elapsed().as_nanos() as f64;
    span.in_scope(|| write_devnull(a.writes))?;
    Ok(json!({
        "workload": "span-bench",
        "pairs": a.pairs,
        "ns_per_pair": if a.pairs > 0 { ns / a.pairs as f64 } else { 0.0 },
        "writes": a.writes,
    }))
}
