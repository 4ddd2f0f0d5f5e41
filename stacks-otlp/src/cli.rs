//! The `stacks-otlp` command line: read a stream from stdin or a file, write the serialized
//! export request to stdout (never a terminal) or `-o FILE`, or push it to a receiver; or be a
//! receiver (`--listen`), or decode a request (`--decode`), writing rows.

use std::path::PathBuf;
use std::process::ExitCode;

use std::io::Read;

use anyhow::{Context, bail};
use clap::Parser;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use stacks_stream::io::{open_text_sink, stdout_sink};

use crate::listen::Listen;
use crate::push::{Protocol, Push};
use crate::{Options, batches, convert, encode, write_request};

/// Convert a stacks Arrow stream with symbolized stacks into OpenTelemetry profiles: an OTLP
/// `ExportProfilesServiceRequest` (profiles v1development, protobuf), as POSTed to a Collector's
/// `/v1development/profiles`.
///
/// One profile per process and sample type (the kind's event count and its value in its unit,
/// as stacks-pprof names them); each sample keeps one timestamp and one value per row. Host,
/// pid, process name and container become resource attributes; tid, thread, cpu, cgroup, span
/// name and other string columns sample attributes; trace_id and span_id a link.
///
/// With --listen, a receiver instead (OTLP/HTTP and gRPC), writing what arrives as symbolized
/// rows; with --decode, a request read back into rows.
#[derive(Debug, Parser)]
#[command(name = "stacks-otlp", version)]
pub struct Args {
    /// Arrow IPC stream to read; stdin when absent or `-`.
    pub input: Option<PathBuf>,

    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Column holding the stacks [default: `stack`, else the first column of symbolized stacks].
    #[arg(long, value_name = "COL")]
    pub stack: Option<String>,

    /// Column whose values a profile holds (repeatable) [default: every integer and float
    /// column except pid, tid, cpu and *_error; a count of rows when there is none]. `*_ns`
    /// columns are nanoseconds, `bytes`/`*_bytes` bytes, others counts.
    #[arg(long = "value", value_name = "COL")]
    pub values: Vec<String>,

    /// For a stream of event rows (stacks-symbolize output): convert rows of KIND
    /// [default: profile]; repeatable or comma-separated, `all` for every kind. Each kind makes
    /// a profile of its event count and one of its `value` in the kind's unit (as stacks-pprof).
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,

    /// Push the request to an OTLP receiver instead of writing it: `http://HOST:PORT` (OTLP/HTTP:
    /// POST to /v1development/profiles, or give the full URL; OTLP/gRPC: ProfilesService/Export,
    /// see --protocol). Retried with backoff while the receiver answers 429/502/503/504 (gRPC
    /// UNAVAILABLE and OTLP's other retryable codes) or cannot be reached; a request larger than
    /// --max-request-bytes is sent in several, by process.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,

    /// The transport of --endpoint, as OTEL_EXPORTER_OTLP_PROTOCOL names it.
    #[arg(
        long,
        value_enum,
        value_name = "PROTOCOL",
        default_value = "http/protobuf"
    )]
    pub protocol: Protocol,

    /// A header to send with --endpoint, e.g. `Authorization=Bearer TOKEN` (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,

    /// Gzip what is sent to --endpoint (`Content-Encoding: gzip`; gRPC's `grpc-encoding: gzip`).
    #[arg(long)]
    pub gzip: bool,

    /// The largest request sent to --endpoint, in bytes before compression (the Collector
    /// takes 20 MiB over OTLP/HTTP and 4 MiB over gRPC by default) [default: 16 MiB, with
    /// --protocol grpc 4,000,000]; with --listen, the largest request taken, after inflating
    /// [default: 64 MiB].
    #[arg(long, value_name = "BYTES")]
    pub max_request_bytes: Option<usize>,

    /// Receive profiles instead: serve OTLP/HTTP (`POST /v1development/profiles`, protobuf,
    /// gzip) and OTLP/gRPC (`ProfilesService/Export`) on ADDR (e.g. 127.0.0.1:4318; port 0
    /// picks one, printed on stderr) and write what arrives as symbolized rows, one per event
    /// (a kind per sample type: `profile` for CPU), until SIGINT/SIGTERM. A malformed request
    /// is answered 400 (gRPC INVALID_ARGUMENT) with the reason and leaves nothing.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["input", "endpoint", "decode", "kind", "values", "stack", "gzip", "headers", "protocol"])]
    pub listen: Option<String>,

    /// Read an OTLP request (what stacks-otlp writes, gzipped or not) and write it back as
    /// symbolized rows, as --listen does.
    #[arg(long, conflicts_with_all = ["endpoint", "kind", "values", "stack", "gzip", "headers", "max_request_bytes", "protocol"])]
    pub decode: bool,
}

/// Entry point of the binary: parse the arguments and convert.
pub fn run() -> anyhow::Result<ExitCode> {
    run_with(stacks_stream::cli::parse_args::<Args>("stacks-otlp"))
}

/// Convert as `args` say.
pub fn run_with(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(addr) = &args.listen {
        return listen(&args, addr);
    }
    if args.decode {
        return decode(&args);
    }
    if let Some(endpoint) = &args.endpoint {
        return push(&args, endpoint);
    }
    if args.gzip
        || !args.headers.is_empty()
        || args.max_request_bytes.is_some()
        || args.protocol != Protocol::default()
    {
        stacks_stream::cli::usage_error(
            "stacks-otlp",
            "--gzip, --header, --protocol and --max-request-bytes go with --endpoint",
        );
    }
    let to_stdout = stacks_stream::cli::is_std(args.output.as_deref());
    // Refuse a terminal before reading anything; a file is only created once the input
    // converted, so a bad input does not clobber it.
    let early_sink = if to_stdout {
        if stacks_stream::cli::stdout_is_tty() {
            bail!(
                "refusing to write binary OTLP profiles to a terminal: redirect it to a file or give -o FILE"
            );
        }
        Some(stdout_sink()?)
    } else {
        None
    };
    let request = read(&args)?;
    let sink = match early_sink {
        Some(s) => s,
        None => open_text_sink(args.output.as_deref())?,
    };
    write_request(&request, sink.writer, &sink.name)?;
    Ok(ExitCode::SUCCESS)
}

/// The request made of the input `args` name.
fn read(args: &Args) -> anyhow::Result<ExportProfilesServiceRequest> {
    let mut input = stacks_stream::cli::open_tool_input("stacks-otlp", args.input.as_deref())?;
    let options = Options {
        stack: args.stack.clone(),
        values: args.values.clone(),
        kinds: args.kind.clone(),
        ..Options::default()
    };
    Ok(convert(&mut input, &options)?)
}

/// Convert and push to `endpoint`, in requests of at most --max-request-bytes.
fn push(args: &Args, endpoint: &str) -> anyhow::Result<ExitCode> {
    let push = Push::new(endpoint, &args.headers, args.gzip, args.protocol)?;
    let request = read(args)?;
    let profiles = |r: &ExportProfilesServiceRequest| -> usize {
        r.resource_profiles
            .iter()
            .flat_map(|rp| &rp.scope_profiles)
            .map(|sp| sp.profiles.len())
            .sum()
    };
    let (mut sent, mut bytes, mut rejected) = (0, 0, 0);
    let max = args
        .max_request_bytes
        .unwrap_or(args.protocol.default_max_bytes());
    let parts = batches(request, max);
    let n = parts.len();
    for part in parts {
        let body = encode(&part);
        let accepted = push.send(&body)?;
        if accepted.attempts > 1 {
            eprintln!(
                "stacks-otlp: {}: taken at attempt {} (busy or unreachable before)",
                push.url, accepted.attempts
            );
        }
        if accepted.rejected > 0 || !accepted.message.is_empty() {
            eprintln!(
                "stacks-otlp: {}: the receiver rejected {} profiles: {}",
                push.url, accepted.rejected, accepted.message
            );
        }
        sent += profiles(&part);
        bytes += body.len();
        rejected += accepted.rejected.max(0) as usize;
    }
    eprintln!(
        "stacks-otlp: sent {sent} profiles ({bytes} bytes in {n} requests) to {}{}, {rejected} rejected",
        push.url,
        match args.protocol {
            Protocol::Grpc => " over gRPC",
            Protocol::HttpProtobuf => "",
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Serve as a receiver on `addr`, writing rows to stdout or -o.
fn listen(args: &Args, addr: &str) -> anyhow::Result<ExitCode> {
    let schema = crate::decode::schema();
    // Refuse a terminal, and open the stream, before taking anything.
    let out = stacks_stream::open_output(args.output.as_deref(), &schema)?;
    let listen = Listen {
        addr: addr.to_string(),
        max_bytes: args.max_request_bytes.unwrap_or(64 << 20),
    };
    let counts = crate::listen::serve(&listen, out, schema, |local| {
        eprintln!(
            "stacks-otlp: listening on {local}: OTLP/HTTP POST {} and OTLP/gRPC ProfilesService/Export",
            crate::listen::HTTP_PATH
        );
    })?;
    eprintln!("stacks-otlp: {}", counts.summary());
    Ok(ExitCode::SUCCESS)
}

/// Decode a serialized request (gzipped or not) from the input into rows.
fn decode(args: &Args) -> anyhow::Result<ExitCode> {
    let name = match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => p.display().to_string(),
        _ => "stdin".to_string(),
    };
    let mut body = Vec::new();
    match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => {
            body = std::fs::read(p).with_context(|| format!("reading {name}"))?;
        }
        _ => {
            if stacks_stream::cli::stdin_is_tty() {
                bail!("stdin is a terminal: give an OTLP request on stdin or as a file");
            }
            std::io::stdin()
                .read_to_end(&mut body)
                .with_context(|| format!("reading {name}"))?;
        }
    }
    if body.starts_with(&[0x1f, 0x8b]) {
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut inflated)
            .with_context(|| format!("{name}: inflating"))?;
        body = inflated;
    }
    let schema = crate::decode::schema();
    let batch = crate::decode::parse(&body)
        .and_then(|request| crate::decode::decode(&request, &schema))
        .with_context(|| name.clone())?;
    let mut out = stacks_stream::open_output(args.output.as_deref(), &schema)?;
    out.write(&batch)?;
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
