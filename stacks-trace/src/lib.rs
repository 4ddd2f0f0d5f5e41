//! Convert a stacks Arrow stream (symbolized rows or a stacks-query result with `time`, `pid`,
//! `tid` and `kind`) into a trace: Chrome Trace Event JSON, which Perfetto UI, chrome://tracing
//! and speedscope open, or a native Perfetto protobuf trace ([`perfetto`]): a timeline per
//! thread with on-CPU and off-CPU slices, IO operations, RSS counters, CPU samples with their
//! stacks, sampled thread states, process events.
//!
//! The trace is written while the stream is read, so memory holds one batch, per-thread state
//! and the tables of distinct stack frames (and names), never the rows.

#![warn(unreachable_pub)]

pub mod cli;
mod columns;
mod json;
pub mod perfetto;
mod stack_frames;
mod trace;
pub mod window;

use stacks_stream::InputStream;

pub(crate) use trace::Tracer;
pub use trace::{Format, IO_LANE, Options, STATE_LANE};
pub use window::{Bound, Window};

/// Errors of the conversion. Every message names the input, column, flag or output at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Contract(#[from] stacks_stream::ContractError),
    #[error(
        "{flag} `{value}`: expected an RFC 3339 time (2023-11-14T22:13:20Z) or an offset from the stream start (+2s, +1.5s, +250ms, +10us)"
    )]
    Window { flag: String, value: String },
    /// The io error is the source (not repeated in the message) so a closed pipe is detectable.
    #[error("writing the trace to {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Read the whole stream and write its trace to `out` (named `output` in errors). Returns the
/// number of trace events (JSON) or packets (Perfetto) written.
pub fn convert(
    input: &mut InputStream,
    out: impl std::io::Write,
    output: &str,
    options: &Options,
) -> Result<u64, Error> {
    let schema = input.schema();
    stacks_stream::check_version(&schema, input.name())?;
    match options.format {
        Format::Json => {
            let mut tracer = Tracer::new(&schema, input.name(), out, output, options)?;
            while let Some(batch) = input.next_batch()? {
                tracer.push(&batch)?;
            }
            tracer.finish()
        }
        Format::Perfetto => {
            let mut writer = perfetto::Writer::new(&schema, input.name(), out, output, options)?;
            while let Some(batch) = input.next_batch()? {
                writer.push(&batch)?;
            }
            writer.finish()
        }
    }
}
