//! `stacks-otlp --endpoint`: the request pushed to a stand-in receiver on loopback (receiver.py,
//! which decodes it with OpenTelemetry's Python bindings) arrives whole — the same profiles and
//! values as the request written to a file — gzipped and with headers when asked, split by
//! process under --max-request-bytes, retried after a 503; a 400 is a one-line error quoting the
//! receiver. Over OTLP/gRPC (`--protocol grpc`) to the project's own receiver (`--listen`): the
//! rows it stores make the same totals, whole or split; a push started before the receiver is
//! retried until it is up; its RESOURCE_EXHAUSTED (a request over its limit) is one line, not
//! retried.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use prost::Message;
use stacks_testkit::events::{events_stream, every_kind};

/// The receiver, killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn receiver(mode: &str, dir: &Path) -> Receiver {
    let log = dir.join(format!("{mode}.jsonl"));
    let script = stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("tests/receiver.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(mode)
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().unwrap_or_else(|_| {
        panic!("receiver.py's port (pip install opentelemetry-proto): {line:?}")
    });
    Receiver { child, port, log }
}

fn received(r: &Receiver) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&r.log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn otlp(args: &[&str], stdin: &[u8]) -> Output {
    stacks_testkit::run_tool(
        env!("CARGO_BIN_EXE_stacks-otlp"),
        args,
        stdin,
        Duration::from_secs(60),
    )
}

/// (profiles, values, sum of values) of the request stacks-otlp writes for `stdin`.
fn written(stdin: &[u8]) -> (u64, u64, i64) {
    let out = otlp(&["--kind", "all"], stdin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = ExportProfilesServiceRequest::decode(out.stdout.as_slice()).unwrap();
    let profiles: Vec<_> = r
        .resource_profiles
        .iter()
        .flat_map(|rp| &rp.scope_profiles)
        .flat_map(|sp| &sp.profiles)
        .collect();
    let samples = profiles.iter().flat_map(|p| &p.samples);
    let values: u64 = samples.clone().map(|s| s.values.len() as u64).sum();
    let sum: i64 = samples.flat_map(|s| &s.values).sum();
    (profiles.len() as u64, values, sum)
}

fn totals(received: &[serde_json::Value]) -> (u64, u64, i64) {
    received.iter().fold((0, 0, 0), |(p, v, s), r| {
        (
            p + r["profiles"].as_u64().unwrap(),
            v + r["values"].as_u64().unwrap(),
            s + r["sum"].as_i64().unwrap(),
        )
    })
}

#[test]
fn pushed_requests_arrive_whole() {
    let dir = stacks_testkit::scratch("otlp-push");
    let input = events_stream(&every_kind());
    let expected = written(&input);
    assert!(expected.0 > 10, "{expected:?}");

    let r = receiver("ok", &dir);
    let url = format!("http://127.0.0.1:{}", r.port);
    let out = otlp(
        &[
            "--kind",
            "all",
            "--endpoint",
            &url,
            "--gzip",
            "--header",
            "Authorization=Bearer secret",
        ],
        &input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "stdout carries nothing when pushing");
    let got = received(&r);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["path"], "/v1development/profiles");
    assert_eq!(got[0]["content_type"], "application/x-protobuf");
    assert_eq!(got[0]["encoding"], "gzip");
    assert_eq!(got[0]["authorization"], "Bearer secret");
    assert_eq!(totals(&got), expected);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("sent {} profiles", expected.0)),
        "{stderr}"
    );

    // Split by process under a small limit: the lost row's process (pid 0) and the app's.
    std::fs::create_dir_all(dir.join("split")).unwrap();
    let r = receiver("ok", &dir.join("split"));
    let url = format!("http://127.0.0.1:{}", r.port);
    let out = otlp(
        &[
            "--kind",
            "all",
            "--endpoint",
            &url,
            "--max-request-bytes",
            "1000",
        ],
        &input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = received(&r);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(totals(&got), expected);
}

#[test]
fn a_busy_receiver_is_retried_and_a_refusal_quoted() {
    let dir = stacks_testkit::scratch("otlp-push-retry");
    let input = events_stream(&every_kind());
    let r = receiver("busy", &dir);
    let url = format!("http://127.0.0.1:{}", r.port);
    let out = otlp(&["--kind", "all", "--endpoint", &url], &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = received(&r);
    assert_eq!(got.len(), 1, "the 503 was retried once: {got:?}");
    assert_eq!(totals(&got), written(&input));

    let r = receiver("bad", &dir);
    let url = format!("http://127.0.0.1:{}", r.port);
    let out = otlp(&["--kind", "all", "--endpoint", &url], &input);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("stacks-otlp: error: ")
            && lines[0].contains("answered 400: index out of range"),
        "{stderr}"
    );
    assert!(received(&r).is_empty());
}

/// Per sample type (`type/unit`) of a serialized request, the sum of its values.
fn request_totals(request: &[u8]) -> std::collections::BTreeMap<String, i64> {
    let r = ExportProfilesServiceRequest::decode(request).unwrap();
    let d = r.dictionary.unwrap();
    let mut out = std::collections::BTreeMap::new();
    for p in r
        .resource_profiles
        .iter()
        .flat_map(|rp| &rp.scope_profiles)
        .flat_map(|sp| &sp.profiles)
    {
        let t = p.sample_type.unwrap();
        let key = format!(
            "{}/{}",
            d.string_table[t.type_strindex as usize], d.string_table[t.unit_strindex as usize]
        );
        let sum: i64 = p.samples.iter().flat_map(|s| &s.values).sum();
        *out.entry(key).or_default() += sum;
    }
    out
}

/// `stacks-otlp --listen` on `port` (0: any) writing to `out`: the child and the port bound.
fn listen(port: u16, out: &Path, extra: &[&str]) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stacks-otlp"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "-o"])
        .arg(out)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let bound = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    child.stderr = Some(stderr.into_inner());
    (child, bound)
}

/// SIGTERM to a receiver: its exit status and stderr.
fn stop(mut child: Child) -> (std::process::ExitStatus, String) {
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (child.wait().unwrap(), err)
}

#[test]
fn grpc_pushes_arrive_whole_at_the_receiver() {
    let dir = stacks_testkit::scratch("otlp-push-grpc");
    let input = events_stream(&every_kind());
    let request = otlp(&["--kind", "all"], &input).stdout;
    let expected = request_totals(&request);
    assert!(expected.len() > 10, "{expected:?}");

    // Whole, gzipped, with a header; then split by process under a small limit.
    let out = dir.join("rows.arrow");
    let (receiver, port) = listen(0, &out, &[]);
    let url = format!("http://127.0.0.1:{port}");
    for extra in [
        &["--gzip", "--header", "Authorization=Bearer secret"][..],
        &["--max-request-bytes", "1000"][..],
    ] {
        let mut args = vec!["--kind", "all", "--endpoint", &url, "--protocol", "grpc"];
        args.extend(extra);
        let out = otlp(&args, &input);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "stdout carries nothing when pushing");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("over gRPC, 0 rejected"), "{stderr}");
    }
    let (status, err) = stop(receiver);
    assert!(status.success(), "{err}");
    assert!(
        err.contains("received 3 requests") && err.contains("refused 0"),
        "one request, then two: {err}"
    );
    // What arrived, converted again, holds each sample type's total twice.
    let again = request_totals(&otlp(&["--kind", "all", out.to_str().unwrap()], &[]).stdout);
    let doubled: std::collections::BTreeMap<String, i64> =
        expected.iter().map(|(k, v)| (k.clone(), 2 * v)).collect();
    assert_eq!(again, doubled);
}

#[test]
fn grpc_retries_an_unreachable_receiver_and_quotes_a_refusal() {
    let dir = stacks_testkit::scratch("otlp-push-grpc-retry");
    let input = events_stream(&every_kind());
    let expected = request_totals(&otlp(&["--kind", "all"], &input).stdout);

    // Nothing listens on the port yet: the push is retried (0.5 s, 1 s, 2 s, 4 s) until the
    // receiver, started a second later, takes it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut pusher = Command::new(env!("CARGO_BIN_EXE_stacks-otlp"))
        .args(["--kind", "all", "--endpoint", &url, "--protocol", "grpc"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = pusher.stdin.take().unwrap();
        stdin.write_all(&input).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1000));
    let out = dir.join("rows.arrow");
    let (receiver, _) = listen(port, &out, &[]);
    let pushed = pusher.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&pushed.stderr);
    assert!(pushed.status.success(), "{stderr}");
    let attempt: u32 = stderr
        .split("taken at attempt ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no retry said: {stderr}"));
    assert!((2..=5).contains(&attempt), "{stderr}");
    let (status, err) = stop(receiver);
    assert!(status.success(), "{err}");
    assert!(err.contains("received 1 requests"), "{err}");
    let again = request_totals(&otlp(&["--kind", "all", out.to_str().unwrap()], &[]).stdout);
    assert_eq!(again, expected);

    // A receiver taking at most 1,000 bytes refuses the request (RESOURCE_EXHAUSTED, not
    // retried): one line quoting it, and nothing stored.
    let out = dir.join("small.arrow");
    let (receiver, port) = listen(0, &out, &["--max-request-bytes", "1000"]);
    let url = format!("http://127.0.0.1:{port}");
    let pushed = otlp(
        &["--kind", "all", "--endpoint", &url, "--protocol", "grpc"],
        &input,
    );
    assert_eq!(pushed.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&pushed.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!("stacks-otlp: error: {url}: the receiver answered gRPC RESOURCE_EXHAUSTED: the request is larger than 1000 bytes")),
        "{stderr}"
    );
    let (status, err) = stop(receiver);
    assert!(status.success(), "{err}");
    assert!(
        err.contains("received 0 requests") && err.contains("refused 1 (too_large 1)"),
        "{err}"
    );
}
