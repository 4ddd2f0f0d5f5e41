//! Convert a stacks Arrow stream with a symbolized `stack` column into a gzipped pprof profile,
//! folded stacks or an SVG flame graph.
//!
//! Rows with identical (stack, labels) are aggregated while the stream is read batch by batch,
//! so memory grows with the number of unique stacks, not rows. The library also decodes
//! profiles and sums them per function, which end-to-end tests use to check results. The columns
//! a profile is made of, the interning of frames and the reading of rows are `stacks_profile`'s
//! (shared with stacks-otlp); frames are named by `stacks_stream::frames`, event kinds come from
//! `stacks_stream::kinds`.

#![warn(unreachable_pub)]

pub mod cli;
mod convert;
mod folded;
pub mod proto;
mod totals;

use std::io::Read;

use prost::Message;

pub(crate) use convert::write_profile;
pub use convert::{Converter, Options, convert, encode};
pub use folded::{default_index, folded, write_folded, write_svg};
pub use stacks_stream::frames::{NO_STACK_FRAME, SHORT_OFFCPU_FRAME};

pub use totals::{cumulative_function_totals, leaf_function_totals};

/// Errors of the conversion. Every message names the input and the column at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stream cannot be read as a profile (a column missing or of the wrong type, an
    /// unknown kind).
    #[error(transparent)]
    Profile(#[from] stacks_profile::Error),
    #[error(transparent)]
    Contract(#[from] stacks_stream::ContractError),
    #[error("no stack has a nonzero value: nothing to draw in a flame graph")]
    NothingToDraw,
    #[error("decompressing profile: {0}")]
    Gunzip(std::io::Error),
    #[error("decoding profile: {0}")]
    Decode(prost::DecodeError),
    /// The io error is the source (not repeated in the message) so a closed pipe is detectable.
    #[error("writing the profile to {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Decode a profile as written by [`encode`]: gzip-compressed (uncompressed bytes are accepted
/// too) serialized `perftools.profiles.Profile`.
pub fn decode(gzipped: &[u8]) -> Result<proto::Profile, Error> {
    if gzipped.starts_with(&[0x1f, 0x8b]) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gzipped)
            .read_to_end(&mut raw)
            .map_err(Error::Gunzip)?;
        proto::Profile::decode(raw.as_slice()).map_err(Error::Decode)
    } else {
        proto::Profile::decode(gzipped).map_err(Error::Decode)
    }
}
