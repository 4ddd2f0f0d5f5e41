//! While a query runs on a cluster: the executors the scheduler lists (its REST API,
//! `GET /api/executors` on its gRPC port), and a line on stderr when one it listed is gone
//! (taken for dead: the scheduler runs its tasks, and the stages whose output it held, again
//! on the others). A query that failed because an executor died under it, before the
//! scheduler took it for dead, is run again once it has (stacks-query).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How often the scheduler's executors are read.
const EVERY: Duration = Duration::from_millis(500);

/// An executor the scheduler lists: its id and `host:port`.
type Executors = BTreeMap<String, String>;

/// The executors in the scheduler's answer (a JSON array of objects with `id`, `host` and
/// `port`); `None` when it is not that.
fn parse(body: &str) -> Option<Executors> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.as_array()?
        .iter()
        .map(|e| {
            let id = e.get("id")?.as_str()?.to_string();
            let host = e.get("host").and_then(|h| h.as_str()).unwrap_or("?");
            let port = e.get("port").and_then(|p| p.as_u64()).unwrap_or(0);
            Some((id, format!("{host}:{port}")))
        })
        .collect()
}

/// What to say of executors that were in `before` and are not in `now`.
fn lost_lines(tool: &str, before: &Executors, now: &Executors) -> Vec<String> {
    before
        .iter()
        .filter(|(id, _)| !now.contains_key(*id))
        .map(|(id, addr)| {
            format!(
                "{tool}: executor {addr} ({id}) lost: the scheduler runs its tasks again on the \
                 {} left",
                now.len()
            )
        })
        .collect()
}

/// The executors of a scheduler watched while a query runs; the watching ends when it is
/// dropped.
pub struct Watch {
    task: tokio::task::JoinHandle<()>,
    lost: Arc<AtomicUsize>,
}

impl Watch {
    /// Watch the executors of the scheduler at `df_url` (`df://HOST:PORT`), saying on stderr
    /// when one is lost. A scheduler without the REST API (a stock Ballista scheduler built
    /// without it) is not watched.
    pub fn start(df_url: &str, tool: &'static str) -> Watch {
        let url = format!(
            "http://{}/api/executors",
            df_url.strip_prefix("df://").unwrap_or(df_url)
        );
        let lost = Arc::new(AtomicUsize::new(0));
        let counter = lost.clone();
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let read = async |client: &reqwest::Client| -> Option<Executors> {
                let r = client.get(&url).timeout(EVERY * 4).send().await.ok()?;
                parse(&r.error_for_status().ok()?.text().await.ok()?)
            };
            let Some(mut known) = read(&client).await else {
                return;
            };
            loop {
                tokio::time::sleep(EVERY).await;
                let Some(now) = read(&client).await else {
                    continue;
                };
                let lines = lost_lines(tool, &known, &now);
                for line in &lines {
                    eprintln!("{line}");
                }
                counter.fetch_add(lines.len(), Ordering::Relaxed);
                known = now;
            }
        });
        Watch { task, lost }
    }

    /// Whether an executor was lost since the watch started, waiting up to `patience` for the
    /// scheduler to take one for dead (it does so some seconds after the executor went silent:
    /// `--executor-timeout-seconds`).
    pub async fn lost_one(&self, patience: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        while self.lost.load(Ordering::Relaxed) == 0 {
            if self.task.is_finished() || tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(EVERY / 5).await;
        }
        true
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether query error `e` is one of an executor that could not be reached (its connection
/// broke or was refused while a task read another's output or was sent to it): the error a
/// task meets when an executor dies under it, before the scheduler takes it for dead.
pub fn unreachable(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}").to_ascii_lowercase();
    [
        "broken pipe",
        "connection refused",
        "connection reset",
        "error reading a body from connection",
        "transport error",
        "fetchpartitionerror",
    ]
    .iter()
    .any(|t| text.contains(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_executor_is_said_once_with_its_address() {
        let two = parse(
            r#"[{"id":"a1","host":"10.0.0.1","port":50051,"last_seen":5},
                {"id":"b2","host":"10.0.0.2","port":50051}]"#,
        )
        .unwrap();
        let one = parse(r#"[{"id":"a1","host":"10.0.0.1","port":50051}]"#).unwrap();
        assert_eq!(
            lost_lines("stacks-query", &two, &one),
            [
                "stacks-query: executor 10.0.0.2:50051 (b2) lost: the scheduler runs its tasks \
              again on the 1 left"
            ]
        );
        assert!(lost_lines("stacks-query", &one, &one).is_empty());
        assert!(lost_lines("stacks-query", &one, &two).is_empty());
        assert_eq!(parse("not json"), None);
        let e = anyhow::anyhow!(
            "Job failed due to stage 4 failed: h2 protocol error: error reading a body from \
             connection: stream closed because of a broken pipe"
        );
        assert!(unreachable(&e));
        assert!(!unreachable(&anyhow::anyhow!("column \"x\" not found")));
        assert_eq!(parse(r#"{"id":"a"}"#), None);
    }
}
