//! `stacks-otlp --endpoint`: the request pushed to a stand-in receiver on loopback (receiver.py,
//! which decodes it with OpenTelemetry's Python bindings) arrives whole — the same profiles and
//! values as the request written to a file — gzipped and with headers when asked, split by
//! process under --max-request-bytes, retried after a 503; a 400 is a one-line error quoting the
//! receiver.

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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/receiver.py");
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
