//! Convert a stacks Arrow stream with a symbolized `stack` column (a query result, or the rows of
//! stacks-symbolize) into OpenTelemetry profiles: an `ExportProfilesServiceRequest` of the
//! profiles signal (`opentelemetry.proto.profiles.v1development`, proto 1.10), as a Collector's
//! OTLP receiver, Pyroscope or any OTLP profiles backend takes it.
//!
//! One `Profile` per resource (host, process, container) and sample type (kind and unit, the
//! sample types stacks-pprof makes); each sample keeps its events, one timestamp and one value
//! per row, rather than their sum. The columns read, the interning of frames and the reading of
//! rows are `stacks_profile`'s, shared with stacks-pprof, so both formats of one stream hold the
//! same stacks and totals. [`semconv`] says where each column goes in OpenTelemetry's terms.
//!
//! The other way, [`decode`] turns a request (any sender's) back into symbolized rows, and
//! [`listen`] serves OTLP/HTTP and OTLP/gRPC, writing what it receives as a stacks stream;
//! [`push`] sends a request to such a receiver over either.

#![warn(unreachable_pub)]

pub mod cli;
mod convert;
pub mod decode;
mod grpc;
pub mod listen;
pub mod push;
pub mod semconv;

use std::io::Write;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;

pub use convert::{Converter, convert};
pub use stacks_profile::Options;

/// Errors of the conversion. Every message names the input and the column at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The stream cannot be read as a profile (a column missing or of the wrong type, an
    /// unknown kind).
    #[error(transparent)]
    Profile(#[from] stacks_profile::Error),
    #[error(transparent)]
    Contract(#[from] stacks_stream::ContractError),
    /// The io error is the source (not repeated in the message) so a closed pipe is detectable.
    #[error("writing the profiles to {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The serialized request (protobuf, as OTLP/HTTP sends it with `application/x-protobuf`).
pub fn encode(request: &ExportProfilesServiceRequest) -> Vec<u8> {
    request.encode_to_vec()
}

/// Write the serialized `request` to `out`; `name` names the destination in errors.
pub fn write_request(
    request: &ExportProfilesServiceRequest,
    mut out: impl Write,
    name: &str,
) -> Result<(), Error> {
    let err = |source| Error::Write {
        path: name.into(),
        source,
    };
    out.write_all(&encode(request)).map_err(err)?;
    out.flush().map_err(err)
}

/// `request` split into requests of at most `max_bytes` each (serialized), by resource: each
/// part holds some of the resources' profiles and the whole dictionary (so its indexes stay
/// valid). A request that fits, or holds one resource, is returned whole.
pub fn batches(
    request: ExportProfilesServiceRequest,
    max_bytes: usize,
) -> Vec<ExportProfilesServiceRequest> {
    if request.encoded_len() <= max_bytes || request.resource_profiles.len() < 2 {
        return vec![request];
    }
    let dictionary = request.dictionary;
    let base = ExportProfilesServiceRequest {
        resource_profiles: Vec::new(),
        dictionary: dictionary.clone(),
    }
    .encoded_len();
    let mut parts = Vec::new();
    let mut part = Vec::new();
    let mut size = base;
    for rp in request.resource_profiles {
        // A repeated message field costs its length, its tag and the length's varint.
        let len = rp.encoded_len();
        let cost = len + 1 + prost::length_delimiter_len(len);
        if !part.is_empty() && size + cost > max_bytes {
            parts.push(std::mem::take(&mut part));
            size = base;
        }
        size += cost;
        part.push(rp);
    }
    parts.push(part);
    parts
        .into_iter()
        .map(|resource_profiles| ExportProfilesServiceRequest {
            resource_profiles,
            dictionary: dictionary.clone(),
        })
        .collect()
}
