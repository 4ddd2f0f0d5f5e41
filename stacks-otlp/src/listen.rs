//! The receiver (`--listen ADDR`): OTLP/HTTP (`POST /v1development/profiles`, protobuf, gzip
//! accepted) and OTLP/gRPC (`ProfilesService/Export`, gzip accepted) on one port, HTTP/1.1 and
//! HTTP/2 alike. Each request is decoded whole ([`crate::decode`]) into a batch of rows and
//! handed to one writer thread, which writes the stacks stream; a refused request is answered
//! (400 with a `google.rpc.Status`, gRPC `INVALID_ARGUMENT`) with the reason, counted by cause,
//! and leaves nothing in the stream. SIGINT or SIGTERM stop taking requests, let those under
//! way finish and end the stream; so does the stream's reader going away.

use std::io::Read;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;
use prost::Message;
use stacks_stream::OutputStream;
use tokio::sync::{Notify, mpsc};
use tonic::codec::CompressionEncoding;

use crate::decode::{self, Cause, Malformed};
use crate::grpc::RawCodec;

/// The OTLP/HTTP path of profiles.
pub const HTTP_PATH: &str = "/v1development/profiles";
pub use crate::grpc::GRPC_PATH;

/// How long requests under way may take to finish once asked to stop.
const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Rows of one written batch at most (a large request is written in several).
const BATCH_ROWS: usize = 65_536;

/// What the receiver counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub rows: AtomicU64,
    pub bytes: AtomicU64,
    pub refused: [AtomicU64; Cause::ALL.len()],
}

impl Counts {
    fn refuse(&self, cause: Cause) {
        if let Some(i) = Cause::ALL.iter().position(|&c| c == cause) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The summary line.
    pub fn summary(&self) -> String {
        let refused: Vec<String> = Cause::ALL
            .iter()
            .zip(&self.refused)
            .map(|(c, n)| (c, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{} {n}", c.as_str()))
            .collect();
        let total: u64 = self.refused.iter().map(|n| n.load(Ordering::Relaxed)).sum();
        format!(
            "received {} requests ({} bytes), {} rows written; refused {total}{}",
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.rows.load(Ordering::Relaxed),
            if refused.is_empty() {
                String::new()
            } else {
                format!(" ({})", refused.join(", "))
            }
        )
    }
}

/// A request not taken.
enum Refusal {
    Malformed(Malformed),
    /// The stream's writer is gone (its reader closed it, or the receiver is stopping).
    Unavailable,
}

/// What every request handler shares.
struct Shared {
    tx: mpsc::Sender<RecordBatch>,
    schema: SchemaRef,
    counts: Arc<Counts>,
    max_bytes: usize,
}

impl Shared {
    /// Decode a serialized request and hand its rows to the writer.
    async fn take(self: &Arc<Self>, body: Vec<u8>) -> Result<(), Refusal> {
        let me = Arc::clone(self);
        let decoded = tokio::task::spawn_blocking(move || {
            let request = decode::parse(&body)?;
            decode::decode(&request, &me.schema).map(|b| (b, body.len()))
        })
        .await
        .map_err(|_| Refusal::Unavailable)?;
        let (batch, bytes) = match decoded {
            Ok(d) => d,
            Err(m) => {
                self.counts.refuse(m.cause);
                return Err(Refusal::Malformed(m));
            }
        };
        let rows = batch.num_rows() as u64;
        if rows > 0 {
            self.tx
                .send(batch)
                .await
                .map_err(|_| Refusal::Unavailable)?;
        }
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        self.counts.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.counts.rows.fetch_add(rows, Ordering::Relaxed);
        Ok(())
    }

    fn refuse(&self, m: Malformed) -> Refusal {
        self.counts.refuse(m.cause);
        Refusal::Malformed(m)
    }
}

/// `google.rpc.Status`, the body of an OTLP/HTTP refusal.
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn protobuf_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    r
}

impl Refusal {
    fn http(self) -> Response {
        let (status, code, message) = match self {
            Refusal::Malformed(m) => {
                let status = match m.cause {
                    Cause::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    Cause::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                    _ => StatusCode::BAD_REQUEST,
                };
                (status, tonic::Code::InvalidArgument, m.detail)
            }
            Refusal::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                tonic::Code::Unavailable,
                "the receiver is stopping".to_string(),
            ),
        };
        let body = Status {
            code: code as i32,
            message,
        }
        .encode_to_vec();
        protobuf_response(status, body)
    }

    fn grpc(self) -> tonic::Status {
        match self {
            Refusal::Malformed(m) => tonic::Status::invalid_argument(m.detail),
            Refusal::Unavailable => tonic::Status::unavailable("the receiver is stopping"),
        }
    }
}

/// `POST /v1development/profiles`.
async fn http_export(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let headers = request.headers().clone();
    match http_body(&shared, &headers, request.into_body()).await {
        Ok(body) => match shared.take(body).await {
            Ok(()) => protobuf_response(
                StatusCode::OK,
                ExportProfilesServiceResponse::default().encode_to_vec(),
            ),
            Err(r) => r.http(),
        },
        Err(r) => r.http(),
    }
}

/// The body of an OTLP/HTTP request, inflated, or why it is refused.
async fn http_body(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Refusal> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/x-protobuf") {
        return Err(shared.refuse(Malformed::new(
            Cause::ContentType,
            format!(
                "Content-Type `{content_type}`: this receiver takes application/x-protobuf (OTLP/HTTP binary), not JSON or other"
            ),
        )));
    }
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity")
        .trim()
        .to_ascii_lowercase();
    let max = shared.max_bytes;
    let too_large = |what: &str| {
        Malformed::new(
            Cause::TooLarge,
            format!("the {what} is larger than {max} bytes (--max-request-bytes)"),
        )
    };
    let raw = axum::body::to_bytes(body, max)
        .await
        .map_err(|_| shared.refuse(too_large("body")))?;
    match encoding.as_str() {
        "identity" | "" => Ok(raw.to_vec()),
        "gzip" => {
            let mut out = Vec::new();
            let mut d = flate2::read::GzDecoder::new(&raw[..]).take(max as u64 + 1);
            d.read_to_end(&mut out).map_err(|e| {
                shared.refuse(Malformed::new(
                    Cause::Encoding,
                    format!("the gzip body does not inflate: {e}"),
                ))
            })?;
            if out.len() > max {
                return Err(shared.refuse(too_large("inflated body")));
            }
            Ok(out)
        }
        other => Err(shared.refuse(Malformed::new(
            Cause::ContentType,
            format!("Content-Encoding `{other}`: this receiver takes gzip or none"),
        ))),
    }
}

/// The unary `Export` method.
#[derive(Clone)]
struct Export(Arc<Shared>);

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl tonic::server::UnaryService<Vec<u8>> for Export {
    type Response = Vec<u8>;
    type Future = BoxFuture<Result<tonic::Response<Self::Response>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Vec<u8>>) -> Self::Future {
        let shared = Arc::clone(&self.0);
        Box::pin(async move {
            shared
                .take(request.into_inner())
                .await
                .map(|()| {
                    tonic::Response::new(ExportProfilesServiceResponse::default().encode_to_vec())
                })
                .map_err(Refusal::grpc)
        })
    }
}

/// `ProfilesService/Export` over gRPC.
async fn grpc_export(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let max = shared.max_bytes;
    let mut grpc = tonic::server::Grpc::new(RawCodec)
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max);
    let response = grpc
        .unary(Export(Arc::clone(&shared)), request)
        .await
        .into_response();
    // tonic refuses a message over the limit before the handler, as OUT_OF_RANGE, a code OTLP
    // says to retry: answer RESOURCE_EXHAUSTED, as gRPC's own servers do (and the Collector),
    // which a client does not retry without a RetryInfo, and count it.
    if tonic::Status::from_header_map(response.headers())
        .is_some_and(|s| s.code() == tonic::Code::OutOfRange && s.message().contains("too large"))
    {
        let m = Malformed::new(
            Cause::TooLarge,
            format!("the request is larger than {max} bytes (--max-request-bytes)"),
        );
        shared.counts.refuse(m.cause);
        return tonic::Status::resource_exhausted(m.detail)
            .into_http::<axum::body::Body>()
            .into_response();
    }
    response
}

/// Where the receiver listens and what it takes.
#[derive(Debug, Clone)]
pub struct Listen {
    pub addr: String,
    /// The largest request taken, in bytes after inflating.
    pub max_bytes: usize,
}

/// Serve until SIGINT/SIGTERM or until `out`'s reader goes away, writing every request taken
/// to `out`; returns what was counted. `ready` is told the address bound (for a port 0).
pub fn serve(
    listen: &Listen,
    out: OutputStream,
    schema: SchemaRef,
    ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<Arc<Counts>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the receiver's runtime")?;
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(Notify::new());
    let (tx, mut rx) = mpsc::channel::<RecordBatch>(16);

    // The writer: every batch taken, in the order taken.
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("otlp-writer".into())
            .spawn(move || -> anyhow::Result<()> {
                let mut out = out;
                let result = (|| {
                    while let Some(batch) = rx.blocking_recv() {
                        let mut at = 0;
                        while at < batch.num_rows() {
                            let n = BATCH_ROWS.min(batch.num_rows() - at);
                            out.write(&batch.slice(at, n))?;
                            at += n;
                        }
                    }
                    anyhow::Ok(())
                })();
                match result {
                    Ok(()) => {
                        out.finish()?;
                        Ok(())
                    }
                    Err(e) => {
                        // The reader went away (or the disk filled): stop taking requests.
                        stop.notify_one();
                        drop(rx);
                        Err(e)
                    }
                }
            })
            .context("starting the writer thread")?
    };

    let served: anyhow::Result<()> = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&listen.addr)
            .await
            .with_context(|| format!("--listen {}", listen.addr))?;
        let local = listener.local_addr()?;
        ready(local);
        let shared = Arc::new(Shared {
            tx,
            schema,
            counts: Arc::clone(&counts),
            max_bytes: listen.max_bytes,
        });
        let app = axum::Router::new()
            .route(HTTP_PATH, post(http_export))
            .route(GRPC_PATH, post(grpc_export))
            .with_state(shared);
        let stop = Arc::clone(&stop);
        let signalled = Arc::new(Notify::new());
        let graceful = {
            let signalled = Arc::clone(&signalled);
            axum::serve(listener, app).with_graceful_shutdown(async move {
                use tokio::signal::unix::{SignalKind, signal};
                match (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) {
                    (Ok(mut int), Ok(mut term)) => {
                        tokio::select! {
                            _ = int.recv() => {}
                            _ = term.recv() => {}
                            _ = stop.notified() => {}
                        }
                    }
                    _ => stop.notified().await,
                }
                signalled.notify_one();
            })
        };
        // Requests under way get GRACE to finish; a client that keeps its connection open
        // past that does not hold the stream back.
        tokio::select! {
            served = graceful => served.context("serving")?,
            _ = async {
                signalled.notified().await;
                tokio::time::sleep(GRACE).await;
            } => eprintln!(
                "stacks-otlp: connections still open {} s after the signal: closed",
                GRACE.as_secs()
            ),
        }
        Ok(())
    });
    // Every handler (and its sender) is gone once the runtime is: the writer ends.
    drop(runtime);
    let written = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
    served?;
    written?;
    Ok(counts)
}
