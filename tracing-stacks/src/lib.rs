//! tracing-stacks: a `tracing-subscriber` layer that publishes each thread's current span where
//! stacks-record reads it at the moment of every OS event (CPU sample, switch-out, IO), so the
//! recording says which span each event happened in.
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//! tracing_subscriber::registry().with(tracing_stacks::layer()).init();
//! ```
//!
//! Each span gets an immutable record (the OpenTelemetry thread-context format, OTEP 4947:
//! trace id, span id, attributes) when it is created; entering and leaving a span store a
//! pointer to the current record in the thread-local `otel_thread_ctx_v1`. No recorder needs to
//! be attached; one that attaches later reads the span a thread is in at that moment. A future
//! instrumented with a span is entered on every poll, so whichever worker thread polls it
//! carries its span, and a parked worker carries none. docs/spans.md describes the layout.
//!
//! For a stripped executable, export the thread context from the application's build script
//! with [`build::export`]; otherwise the recorder finds it in `.symtab`.
//!
//! [`SampledAlloc`] wraps the global allocator for heap profiling (`stacks-record -e alloc`,
//! docs/heap.md).

#![warn(unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};

use tracing_core::Subscriber;
use tracing_core::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

mod alloc;
pub mod build;
mod record;

pub use alloc::SampledAlloc;
pub use record::{ATTR_NAME, ATTR_PARENT, HEADER_LEN, Record};

unsafe extern "C" {
    fn stacks_tracing_set(record: *const u8);
    fn stacks_tracing_get(canary: *mut u64) -> *const u8;
}

/// The canary's value (`stacks_tracing_canary`), which a reader checks its TLS offsets with.
pub const CANARY: u64 = 0x5354_414b_5354_5343;

/// The layer: `tracing_subscriber::registry().with(tracing_stacks::layer())`.
pub fn layer() -> StacksLayer {
    StacksLayer { _private: () }
}

/// Publishes the current span of each thread (see the crate documentation).
#[derive(Debug)]
pub struct StacksLayer {
    _private: (),
}

/// Span ids: unique in the process (tracing's own `Id`s are reused once a span closes).
static NEXT_SPAN: AtomicU64 = AtomicU64::new(1);

/// Point this thread's context at `record` (null: not in a span).
fn publish(record: *const u8) {
    // SAFETY: the C side stores the pointer into this thread's own TLS variable.
    unsafe { stacks_tracing_set(record) }
}

/// This thread's published record and canary, as a reader finds them (for tests).
pub fn current() -> (*const u8, u64) {
    let mut canary = 0;
    // SAFETY: reads this thread's TLS variables into a local.
    let p = unsafe { stacks_tracing_get(&mut canary) };
    (p, canary)
}

impl<S> Layer<S> for StacksLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let span_id = NEXT_SPAN.fetch_add(1, Ordering::Relaxed);
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Record>()
                .map(|r| (r.trace_id(), r.span_id()))
        });
        let (trace_id, parent_id) = match parent {
            Some((trace, parent)) => (trace, parent),
            // A root span starts a trace named after itself.
            None => (u128::from(span_id), 0),
        };
        let record = Record::new(trace_id, span_id, parent_id, attrs.metadata().name());
        span.extensions_mut().insert(record);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(r) = span.extensions().get::<Record>()
        {
            publish(r.as_ptr());
            // Span timelines (`stacks-record -e span`): a USDT probe without arguments, a
            // single `nop` unless a tracer attaches to it. The tracer reads the span from the
            // thread context, which points at the entered span here.
            probe::probe!(stacks_tracing, enter);
        }
    }

    fn on_exit(&self, _id: &Id, ctx: Context<'_, S>) {
        // Fired while the thread context still points at the span being left.
        probe::probe!(stacks_tracing, exit);
        // The registry has already popped the span: the current one is what the thread is
        // back in (its parent, another span entered earlier, or none).
        let current = ctx
            .lookup_current()
            .and_then(|s| s.extensions().get::<Record>().map(Record::as_ptr));
        publish(current.unwrap_or(std::ptr::null()));
    }
}
