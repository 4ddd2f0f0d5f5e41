//! OTLP/gRPC as both ends of this tool speak it: the `Export` method's path and a codec that
//! carries messages as their serialized bytes, so the receiver decodes a request with
//! [`crate::decode`] (a malformed one refused and counted like an OTLP/HTTP one) and the
//! pusher sends the very bytes it sized its batches by.

use bytes::{Buf, BufMut};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// The OTLP/gRPC method of profiles.
pub const GRPC_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// The codec of `Export` on both sides: a message's serialized bytes, as they are.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawCodec;

/// Bytes in and out of gRPC frames.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Raw;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Self::Encoder {
        Raw
    }

    fn decoder(&mut self) -> Self::Decoder {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        let mut out = vec![0; src.remaining()];
        src.copy_to_slice(&mut out);
        Ok(Some(out))
    }
}
