//! Sending a request to an OTLP receiver, over OTLP/HTTP (protobuf: `POST` to
//! `/v1development/profiles` of the endpoint) or OTLP/gRPC (`ProfilesService/Export`),
//! optionally gzipped, with extra headers (gRPC metadata); retried with exponential backoff
//! while the receiver says it is busy (HTTP 429, 502, 503, 504, honouring `Retry-After`; gRPC
//! `UNAVAILABLE` and the other codes OTLP says to retry, `RESOURCE_EXHAUSTED` when the status
//! carries a `RetryInfo`, whose delay is honoured) or cannot be reached; any other refusal is an
//! error quoting what the receiver said (the `google.rpc.Status` message OTLP answers with, or
//! the body's first line).

use std::io::Write;
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use crate::grpc::{GRPC_PATH, RawCodec};

/// The path of the profiles signal, appended to an HTTP endpoint given without one.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// The OTLP transport, named as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies.
    #[default]
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC.
    #[value(name = "grpc")]
    Grpc,
}

impl Protocol {
    /// The largest request sent by default, in bytes before compression: under the
    /// Collector's defaults, 20 MiB for OTLP/HTTP and 4 MiB (gRPC's own default) for OTLP/gRPC.
    pub fn default_max_bytes(self) -> usize {
        match self {
            Protocol::HttpProtobuf => 16 << 20,
            Protocol::Grpc => 4_000_000,
        }
    }
}

/// Errors of a push. Each is one line naming the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(
        "--endpoint {0}: only http:// endpoints are supported (put a Collector on loopback in front of a TLS receiver)"
    )]
    Scheme(String),
    #[error(
        "--endpoint {0}: a gRPC endpoint is http://HOST:PORT, without a path (the method is ProfilesService/Export)"
    )]
    GrpcPath(String),
    #[error("--header {0}: expected NAME=VALUE")]
    Header(String),
    #[error("{url}: the receiver answered {status}: {message}")]
    Refused {
        url: String,
        status: String,
        message: String,
    },
    #[error("{url}: gave up after {attempts} attempts: {last}")]
    GaveUp {
        url: String,
        attempts: u32,
        last: String,
    },
    #[error("{url}: {source}")]
    Http {
        url: String,
        #[source]
        source: ureq::Error,
    },
    #[error("{url}: starting the gRPC client: {message}")]
    Client { url: String, message: String },
}

/// `google.rpc.Status`, what an OTLP receiver answers a refused request with (an OTLP/HTTP
/// body; gRPC's `grpc-status-details-bin`).
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`: how long the receiver asks to wait before sending again.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The delay a `google.rpc.Status`'s `RetryInfo` asks for, if it carries one.
fn retry_delay(status_bytes: &[u8]) -> Option<Duration> {
    let status = Status::decode(status_bytes).ok()?;
    let info = status.details.iter().find(|a| a.type_url == RETRY_INFO)?;
    let delay = RetryInfo::decode(info.value.as_slice()).ok()?.retry_delay?;
    Some(Duration::new(
        u64::try_from(delay.seconds).ok()?,
        u32::try_from(delay.nanos).ok()?,
    ))
}

/// The gRPC side of a push: its runtime, the channel (connected on first use, again after a
/// failure) and the headers as metadata.
#[derive(Debug)]
struct GrpcClient {
    runtime: tokio::runtime::Runtime,
    channel: tonic::transport::Channel,
    metadata: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
}

/// Where and how to push.
#[derive(Debug)]
pub struct Push {
    /// Where requests go, as messages name it: the URL posted to, or the gRPC endpoint.
    pub url: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, String)>,
    pub gzip: bool,
    /// Attempts before giving up on a busy or unreachable receiver.
    pub attempts: u32,
    /// The first wait between attempts (doubled each time, at most 30 s).
    pub backoff: Duration,
    /// Timeout of one attempt.
    pub timeout: Duration,
    grpc: Option<GrpcClient>,
}

/// What the receiver said to an accepted request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Attempts it took.
    pub attempts: u32,
    /// Profiles the receiver rejected (partial success), and why.
    pub rejected: i64,
    pub message: String,
}

/// The outcome of one attempt.
enum Attempt {
    /// Taken: the response's bytes.
    Taken(Vec<u8>),
    /// Worth sending again (after the receiver's delay, when it gave one).
    Again {
        why: String,
        after: Option<Duration>,
    },
    Failed(PushError),
}

impl Push {
    /// A push to `endpoint` (`http://HOST:PORT`; for OTLP/HTTP also with a path, without one
    /// the profiles path is appended) over `protocol` with `headers` (`NAME=VALUE` each).
    pub fn new(
        endpoint: &str,
        headers: &[String],
        gzip: bool,
        protocol: Protocol,
    ) -> Result<Self, PushError> {
        let Some(rest) = endpoint.strip_prefix("http://") else {
            return Err(PushError::Scheme(endpoint.into()));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let url = match protocol {
            Protocol::HttpProtobuf if path.len() > 1 => endpoint.to_string(),
            Protocol::HttpProtobuf => format!("http://{authority}{PROFILES_PATH}"),
            Protocol::Grpc if path.len() > 1 => return Err(PushError::GrpcPath(endpoint.into())),
            Protocol::Grpc => format!("http://{authority}"),
        };
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|h| match h.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().into(), v.trim().into())),
                _ => Err(PushError::Header(h.clone())),
            })
            .collect::<Result<_, _>>()?;
        let mut push = Self {
            url,
            protocol,
            headers,
            gzip,
            attempts: 5,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(30),
            grpc: None,
        };
        if protocol == Protocol::Grpc {
            push.grpc = Some(push.grpc_client()?);
        }
        Ok(push)
    }

    fn grpc_client(&self) -> Result<GrpcClient, PushError> {
        let client_error = |message: String| PushError::Client {
            url: self.url.clone(),
            message,
        };
        let metadata = self
            .headers
            .iter()
            .map(|(k, v)| {
                let key = k.to_ascii_lowercase().parse::<AsciiMetadataKey>();
                let value = v.parse::<AsciiMetadataValue>();
                match (key, value) {
                    (Ok(key), Ok(value)) => Ok((key, value)),
                    _ => Err(PushError::Header(format!("{k}={v}"))),
                }
            })
            .collect::<Result<_, _>>()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| client_error(e.to_string()))?;
        let endpoint = tonic::transport::Endpoint::from_shared(self.url.clone())
            .map_err(|e| client_error(e.to_string()))?
            .connect_timeout(Duration::from_secs(10));
        // The channel's worker is spawned on the runtime.
        let channel = {
            let _entered = runtime.enter();
            endpoint.connect_lazy()
        };
        Ok(GrpcClient {
            runtime,
            channel,
            metadata,
        })
    }

    /// Send `body` (a serialized request), retrying while the receiver is busy or unreachable.
    pub fn send(&self, body: &[u8]) -> Result<Accepted, PushError> {
        let http_body;
        let body = if self.gzip && self.protocol == Protocol::HttpProtobuf {
            let mut gz = GzEncoder::new(Vec::new(), Compression::default());
            http_body = gz
                .write_all(body)
                .and_then(|()| gz.finish())
                .map_err(|e| self.http(ureq::Error::Io(e)))?;
            &http_body[..]
        } else {
            body
        };
        let agent: Option<ureq::Agent> = (self.protocol == Protocol::HttpProtobuf).then(|| {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(self.timeout))
                .build()
                .into()
        });
        let mut wait = self.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = match (&agent, &self.grpc) {
                (Some(agent), _) => self.attempt_http(agent, body),
                (None, Some(client)) => self.attempt_grpc(client, body),
                (None, None) => unreachable!("a gRPC push has its client"),
            };
            let why = match outcome {
                Attempt::Taken(answer) => return Ok(accepted(&answer, attempt)),
                Attempt::Failed(e) => return Err(e),
                Attempt::Again { why, after } => {
                    if let Some(after) = after {
                        wait = after;
                    }
                    why
                }
            };
            if attempt >= self.attempts {
                return Err(PushError::GaveUp {
                    url: self.url.clone(),
                    attempts: attempt,
                    last: why,
                });
            }
            std::thread::sleep(wait.min(Duration::from_secs(30)));
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }

    /// One `POST`.
    fn attempt_http(&self, agent: &ureq::Agent, body: &[u8]) -> Attempt {
        let mut request = agent
            .post(&self.url)
            .header("Content-Type", "application/x-protobuf");
        if self.gzip {
            request = request.header("Content-Encoding", "gzip");
        }
        for (k, v) in &self.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        match request.send(body) {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let text = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|t| !t.contains("protobuf"));
                let answer = response
                    .body_mut()
                    .with_config()
                    .limit(1 << 20)
                    .read_to_vec()
                    .unwrap_or_default();
                if (200..300).contains(&status) {
                    return Attempt::Taken(answer);
                }
                let message = refusal(&answer, text);
                if !matches!(status, 429 | 502 | 503 | 504) {
                    return Attempt::Failed(PushError::Refused {
                        url: self.url.clone(),
                        status: status.to_string(),
                        message,
                    });
                }
                let after = retry_after.or_else(|| (!text).then(|| retry_delay(&answer)).flatten());
                Attempt::Again {
                    why: format!("{status}: {message}"),
                    after,
                }
            }
            Err(
                e @ (ureq::Error::Io(_)
                | ureq::Error::Timeout(_)
                | ureq::Error::ConnectionFailed
                | ureq::Error::HostNotFound),
            ) => Attempt::Again {
                why: e.to_string(),
                after: None,
            },
            Err(e) => Attempt::Failed(self.http(e)),
        }
    }

    /// One `Export` call.
    fn attempt_grpc(&self, client: &GrpcClient, body: &[u8]) -> Attempt {
        let result = client.runtime.block_on(async {
            let mut grpc = tonic::client::Grpc::new(client.channel.clone())
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(1 << 20);
            if self.gzip {
                grpc = grpc.send_compressed(CompressionEncoding::Gzip);
            }
            grpc.ready()
                .await
                .map_err(|e| tonic::Status::unavailable(causes(&e)))?;
            let mut request = tonic::Request::new(body.to_vec());
            request.set_timeout(self.timeout);
            for (k, v) in &client.metadata {
                request.metadata_mut().insert(k.clone(), v.clone());
            }
            let path = axum::http::uri::PathAndQuery::from_static(GRPC_PATH);
            grpc.unary(request, path, RawCodec).await
        });
        let status = match result {
            Ok(response) => return Attempt::Taken(response.into_inner()),
            Err(status) => status,
        };
        use tonic::Code;
        let mut message = match status.message().lines().find(|l| !l.trim().is_empty()) {
            Some(l) => l.trim().to_string(),
            None => "(no message)".to_string(),
        };
        // A transport failure says why in its source (`tcp connect error: Connection refused`).
        let mut source = std::error::Error::source(&status);
        while let Some(s) = source {
            let why = s.to_string();
            if !message.contains(&why) && why != "transport error" {
                message = format!("{message}: {why}");
            }
            source = s.source();
        }
        let message: String = message.chars().take(300).collect();
        let code = status.code();
        let delay = retry_delay(status.details());
        // OTLP/gRPC's retryable codes; RESOURCE_EXHAUSTED only when the receiver says when.
        let again = matches!(
            code,
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::OutOfRange
                | Code::Unavailable
                | Code::DataLoss
        ) || (code == Code::ResourceExhausted && delay.is_some());
        let status = format!("gRPC {}", code_name(code));
        if again {
            Attempt::Again {
                why: format!("{status}: {message}"),
                after: delay,
            }
        } else {
            Attempt::Failed(PushError::Refused {
                url: self.url.clone(),
                status,
                message,
            })
        }
    }

    fn http(&self, source: ureq::Error) -> PushError {
        PushError::Http {
            url: self.url.clone(),
            source,
        }
    }
}

/// An error and its causes on one line (a transport error says little without them).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text
}

/// A gRPC status code as the spec names it (`UNAVAILABLE`, `INVALID_ARGUMENT`, …).
fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// The partial success of an accepted request's response, if it says any.
fn accepted(answer: &[u8], attempts: u32) -> Accepted {
    let partial = ExportProfilesServiceResponse::decode(answer)
        .ok()
        .and_then(|r| r.partial_success)
        .unwrap_or_default();
    Accepted {
        attempts,
        rejected: partial.rejected_profiles,
        message: partial.error_message,
    }
}

/// What a refusal says, on one line: the `Status` message of a protobuf answer, else the
/// body's first line.
fn refusal(answer: &[u8], text: bool) -> String {
    let status = (!text)
        .then(|| Status::decode(answer).ok())
        .flatten()
        .filter(|s| !s.message.is_empty());
    let message = match status {
        Some(s) => s.message,
        None => String::from_utf8_lossy(answer)
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no message)")
            .trim()
            .to_string(),
    };
    message.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let url = |e: &str| Push::new(e, &[], false, Protocol::HttpProtobuf).map(|p| p.url);
        assert_eq!(
            url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1development/profiles"
        );
        assert_eq!(
            url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1development/profiles"
        );
        assert_eq!(url("http://h:1/custom").unwrap(), "http://h:1/custom");
        let err = url("https://h:1").unwrap_err().to_string();
        assert!(
            err.starts_with("--endpoint https://h:1: only http://"),
            "{err}"
        );
        let err = Push::new(
            "http://h:1",
            &["nokey".into()],
            false,
            Protocol::HttpProtobuf,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--header nokey"), "{err}");
        let p = Push::new(
            "http://h:1",
            &["Authorization = Bearer x".into()],
            false,
            Protocol::HttpProtobuf,
        )
        .unwrap();
        assert_eq!(p.headers, [("Authorization".into(), "Bearer x".into())]);
    }

    #[test]
    fn grpc_endpoints() {
        let grpc = |e: &str, h: &[String]| Push::new(e, h, false, Protocol::Grpc);
        assert_eq!(
            grpc("http://127.0.0.1:4317", &[]).unwrap().url,
            "http://127.0.0.1:4317"
        );
        assert_eq!(
            grpc("http://127.0.0.1:4317/", &[]).unwrap().url,
            "http://127.0.0.1:4317"
        );
        let err = grpc("http://h:1/v1development/profiles", &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("without a path"), "{err}");
        let err = grpc("http://h:1", &["bad key=v".into()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--header bad key=v"), "{err}");
        let p = grpc("http://h:1", &["Authorization=Bearer x".into()]).unwrap();
        assert_eq!(p.grpc.unwrap().metadata[0].0.as_str(), "authorization");
    }

    #[test]
    fn retry_info_and_code_names() {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: 2,
                nanos: 500_000_000,
            }),
        };
        let status = Status {
            code: 8,
            message: "slow down".into(),
            details: vec![Any {
                type_url: RETRY_INFO.into(),
                value: info.encode_to_vec(),
            }],
        };
        assert_eq!(
            retry_delay(&status.encode_to_vec()),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(retry_delay(&[]), None);
        assert_eq!(code_name(tonic::Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(tonic::Code::Unavailable), "UNAVAILABLE");
    }

    #[test]
    fn refusals_on_one_line() {
        let status = Status {
            code: 3,
            message: "index out of range".into(),
            details: Vec::new(),
        };
        assert_eq!(
            refusal(&status.encode_to_vec(), false),
            "index out of range"
        );
        assert_eq!(refusal(b"\n bad request \nmore", true), "bad request");
        assert_eq!(refusal(b"", true), "(no message)");
    }
}
