//! Sending a request to an OTLP receiver over OTLP/HTTP (protobuf): `POST` to
//! `/v1development/profiles` of the endpoint, optionally gzipped, with extra headers; retried
//! with exponential backoff while the receiver says it is busy (429, 502, 503, 504, or honours
//! `Retry-After`) or cannot be reached; any other refusal is an error quoting what the receiver
//! said (the `google.rpc.Status` message OTLP answers with, or the body's first line).

use std::io::Write;
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;
use prost::Message;

/// The path of the profiles signal, appended to an endpoint given without one.
pub const PROFILES_PATH: &str = "/v1development/profiles";

/// Errors of a push. Each is one line naming the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(
        "--endpoint {0}: only http:// endpoints are supported (put a Collector on loopback in front of a TLS receiver)"
    )]
    Scheme(String),
    #[error("--header {0}: expected NAME=VALUE")]
    Header(String),
    #[error("{url}: the receiver answered {status}: {message}")]
    Refused {
        url: String,
        status: u16,
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
}

/// `google.rpc.Status`, what an OTLP/HTTP receiver answers a refused request with (its
/// `details` are left out).
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// Where and how to push.
#[derive(Debug, Clone)]
pub struct Push {
    /// The URL posted to.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub gzip: bool,
    /// Attempts before giving up on a busy or unreachable receiver.
    pub attempts: u32,
    /// The first wait between attempts (doubled each time, at most 30 s).
    pub backoff: Duration,
    /// Timeout of one attempt.
    pub timeout: Duration,
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

impl Push {
    /// A push to `endpoint` (`http://HOST:PORT`, with or without a path: without, the profiles
    /// path is appended) with `headers` (`NAME=VALUE` each).
    pub fn new(endpoint: &str, headers: &[String], gzip: bool) -> Result<Self, PushError> {
        let Some(rest) = endpoint.strip_prefix("http://") else {
            return Err(PushError::Scheme(endpoint.into()));
        };
        let url = match rest.find('/') {
            Some(i) if rest.len() > i + 1 => endpoint.to_string(),
            Some(i) => format!("http://{}{PROFILES_PATH}", &rest[..i]),
            None => format!("{endpoint}{PROFILES_PATH}"),
        };
        let headers = headers
            .iter()
            .map(|h| match h.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().into(), v.trim().into())),
                _ => Err(PushError::Header(h.clone())),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            url,
            headers,
            gzip,
            attempts: 5,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(30),
        })
    }

    /// Send `body` (a serialized request), retrying while the receiver is busy or unreachable.
    pub fn send(&self, body: &[u8]) -> Result<Accepted, PushError> {
        let body = if self.gzip {
            let mut gz = GzEncoder::new(Vec::new(), Compression::default());
            gz.write_all(body)
                .and_then(|()| gz.finish())
                .map_err(|e| self.http(ureq::Error::Io(e)))?
        } else {
            body.to_vec()
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(self.timeout))
            .build()
            .into();
        let mut wait = self.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = agent
                .post(&self.url)
                .header("Content-Type", "application/x-protobuf");
            if self.gzip {
                request = request.header("Content-Encoding", "gzip");
            }
            for (k, v) in &self.headers {
                request = request.header(k.as_str(), v.as_str());
            }
            let outcome = request.send(&body[..]);
            let retry = match outcome {
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
                        return Ok(accepted(&answer, attempt));
                    }
                    let message = refusal(&answer, text);
                    if !matches!(status, 429 | 502 | 503 | 504) {
                        return Err(PushError::Refused {
                            url: self.url.clone(),
                            status,
                            message,
                        });
                    }
                    if let Some(after) = retry_after {
                        wait = after;
                    }
                    format!("{status}: {message}")
                }
                Err(
                    e @ (ureq::Error::Io(_)
                    | ureq::Error::Timeout(_)
                    | ureq::Error::ConnectionFailed
                    | ureq::Error::HostNotFound),
                ) => e.to_string(),
                Err(e) => return Err(self.http(e)),
            };
            if attempt >= self.attempts {
                return Err(PushError::GaveUp {
                    url: self.url.clone(),
                    attempts: attempt,
                    last: retry,
                });
            }
            std::thread::sleep(wait.min(Duration::from_secs(30)));
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }

    fn http(&self, source: ureq::Error) -> PushError {
        PushError::Http {
            url: self.url.clone(),
            source,
        }
    }
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
        let url = |e: &str| Push::new(e, &[], false).map(|p| p.url);
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
        let err = Push::new("http://h:1", &["nokey".into()], false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--header nokey"), "{err}");
        let p = Push::new("http://h:1", &["Authorization = Bearer x".into()], false).unwrap();
        assert_eq!(p.headers, [("Authorization".into(), "Bearer x".into())]);
    }

    #[test]
    fn refusals_on_one_line() {
        let status = Status {
            code: 3,
            message: "index out of range".into(),
        };
        assert_eq!(
            refusal(&status.encode_to_vec(), false),
            "index out of range"
        );
        assert_eq!(refusal(b"\n bad request \nmore", true), "bad request");
        assert_eq!(refusal(b"", true), "(no message)");
    }
}
