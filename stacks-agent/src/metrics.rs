//! `/metrics` in the Prometheus text format (version 0.0.4): the agent's counters per stage
//! and stacks-pack's (rows by kind, lost events by cause, the store), served over HTTP by a
//! small thread. The names are listed in docs/agent.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stacks_store::packstats::{Field, stack};

use crate::packstats::PackTotals;
use crate::stage::{Cause, Which};

/// What one stage has done and costs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StageMetrics {
    pub up: bool,
    pub restarts: u64,
    pub rss_bytes: u64,
    /// CPU seconds of every run of the stage (the ended ones from wait4, the running one from
    /// /proc).
    pub cpu_seconds: f64,
    /// Its restarts by why it ended ([`Cause`]'s order).
    pub failures: [u64; Cause::ALL.len()],
}

/// The CPU budget's state (docs/agent.md#the-cpu-budget).
#[derive(Debug, Clone, Default)]
pub(crate) struct BudgetMetrics {
    /// The budget, a fraction of the host's CPUs.
    pub limit_ratio: f64,
    /// The cost over the last 10 s, a fraction of the host's CPUs.
    pub used_ratio: f64,
    /// The ladder's level taken (0: as configured) and its number of levels.
    pub level: usize,
    pub levels: usize,
    /// How long the level before must be estimated to fit before it is restored.
    pub hold_seconds: f64,
    /// What the level before is estimated to cost now (none at level 0).
    pub restore_estimate_ratio: Option<f64>,
    /// Levels shed and restored.
    pub shed: u64,
    pub restored: u64,
}

/// Everything `/metrics` shows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub stages: [StageMetrics; 3],
    pub pipeline_starts: u64,
    pub pack: PackTotals,
    /// The recorder's `-e` now (the configured one, or a budget level's).
    pub events: String,
    /// Run time of the recorder's BPF programs, every run (counted while the kernel's BPF
    /// statistics are on).
    pub bpf_run_seconds: f64,
    pub budget: Option<BudgetMetrics>,
    /// The wait before the pipeline starts again after a stage died (0 while it runs).
    pub backoff_seconds: f64,
    /// The agent waits for the store to be writable before starting the pipeline again.
    pub store_unwritable: bool,
}

/// The snapshot the supervisor updates and the server reads.
pub(crate) type Shared = Arc<Mutex<Snapshot>>;

/// Lock `shared`, even if a thread panicked while holding it.
pub(crate) fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Snapshot> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// The text format of `s`.
pub(crate) fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    stage_families(&mut out, s);
    pack_families(&mut out, &s.pack, s.store_unwritable);
    agent_families(&mut out, s);
    out
}

/// One metric family: its help, type and samples (labels, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{labels} {v}");
    }
}

/// The stages' own families: up, restarts, memory, CPU, pipeline starts.
fn stage_families(out: &mut String, s: &Snapshot) {
    let per_stage = |f: &dyn Fn(&StageMetrics) -> f64| {
        Which::ALL
            .iter()
            .map(|w| {
                (
                    format!("{{stage=\"{}\"}}", w.label()),
                    f(&s.stages[w.index()]),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        out,
        "stacks_agent_stage_up",
        "gauge",
        "Whether the stage's process is running.",
        per_stage(&|m| f64::from(u8::from(m.up))),
    );
    family(
        out,
        "stacks_agent_stage_restarts_total",
        "counter",
        "Times the stage died and the pipeline was restarted for it.",
        per_stage(&|m| m.restarts as f64),
    );
    let failures = Which::ALL
        .iter()
        .flat_map(|w| {
            Cause::ALL.iter().map(move |c| {
                (
                    format!("{{stage=\"{}\",cause=\"{}\"}}", w.label(), c.label()),
                    s.stages[w.index()].failures[c.index()] as f64,
                )
            })
        })
        .collect();
    family(
        out,
        "stacks_agent_stage_failures_total",
        "counter",
        "Times the stage ended while the pipeline ran (each a restart), by why: oom_kill, signal, exit_status, exited, spawn.",
        failures,
    );
    family(
        out,
        "stacks_agent_restart_backoff_seconds",
        "gauge",
        "The wait before the pipeline starts again after a stage ended (0 while it runs).",
        vec![(String::new(), s.backoff_seconds)],
    );
    family(
        out,
        "stacks_agent_stage_resident_memory_bytes",
        "gauge",
        "Resident memory of the stage's process.",
        per_stage(&|m| m.rss_bytes as f64),
    );
    family(
        out,
        "stacks_agent_stage_cpu_seconds_total",
        "counter",
        "User and system CPU time of the stage, every run of it.",
        per_stage(&|m| m.cpu_seconds),
    );
    family(
        out,
        "stacks_agent_pipeline_starts_total",
        "counter",
        "Times the pipeline was started (the first start included).",
        vec![(String::new(), s.pipeline_starts as f64)],
    );
}

/// What stacks-pack reported: rows, events and losses by kind or cause, the store (`agent_waits`:
/// the agent is waiting for the store to be writable). One family per field of its `--stats`
/// (`time` aside), in the file's order: a field added there does not compile until it is here.
fn pack_families(out: &mut String, p: &PackTotals, agent_waits: bool) {
    // Every label value known in advance is shown from the start, at 0 until counted, so that
    // `rate()` and alerts on a cause or kind work before its first event; a value counted but
    // not known here (a newer recorder's cause) is shown too.
    let labelled = |label: &str, known: &[String], map: &BTreeMap<String, u64>| {
        let mut all: BTreeMap<&str, u64> = known.iter().map(|k| (k.as_str(), 0)).collect();
        all.extend(map.iter().map(|(k, v)| (k.as_str(), *v)));
        all.into_iter()
            .map(|(k, v)| (format!("{{{label}=\"{}\"}}", escape(k)), v as f64))
            .collect::<Vec<_>>()
    };
    let one = |v: u64| vec![(String::new(), v as f64)];
    let kinds: Vec<String> = stacks_stream::kinds::names().map(str::to_string).collect();
    let mut lost_causes = stacks_stream::lost::known();
    lost_causes.extend(stacks_stream::lost::stage_died_all());
    for field in p.fields() {
        match field {
            // When the packer last wrote: nothing to export.
            Field::Time(_) => {}
            Field::Rows(rows) => family(
                out,
                "stacks_rows_total",
                "counter",
                "Rows stored, by kind.",
                labelled("kind", &kinds, rows),
            ),
            Field::Lost(lost) => family(
                out,
                "stacks_lost_events_total",
                "counter",
                "Events lost, by cause: the recorder's lost rows, the packer's (store_full, store_read_only) and the agent's (stage_died: left the recorder, reached no file set).",
                labelled("cause", &lost_causes, lost),
            ),
            Field::Events(events) => family(
                out,
                "stacks_events_total",
                "counter",
                "Events the stored rows stand for (their count: several for rows the kernel aggregated, folded or counted), by kind.",
                labelled("kind", &kinds, events),
            ),
            Field::StackErrors(errors) => family(
                out,
                "stacks_stack_capture_errors_total",
                "counter",
                "Rows whose kernel or user stack could not be captured, by stack.",
                labelled("stack", &stack::ALL.map(str::to_string), errors),
            ),
            Field::UnfinishedRows(rows) => family(
                out,
                "stacks_unfinished_rows",
                "gauge",
                "Rows the packer has taken that are in no finished file set yet (the set being written), by kind.",
                labelled("kind", &kinds, rows),
            ),
            Field::UnfinishedEvents(events) => family(
                out,
                "stacks_unfinished_events",
                "gauge",
                "Events those unfinished rows stand for, by kind.",
                labelled("kind", &kinds, events),
            ),
            Field::SetsWritten(n) => family(
                out,
                "stacks_store_written_file_sets_total",
                "counter",
                "File sets written.",
                one(n),
            ),
            Field::BytesWritten(n) => family(
                out,
                "stacks_store_written_bytes_total",
                "counter",
                "Bytes of the file sets written.",
                one(n),
            ),
            Field::StoreSets(n) => family(
                out,
                "stacks_store_file_sets",
                "gauge",
                "Finished file sets in the store.",
                one(n),
            ),
            Field::StoreBytes(n) => family(
                out,
                "stacks_store_bytes",
                "gauge",
                "Bytes of the finished file sets in the store.",
                one(n),
            ),
            Field::DeletedSets(n) => family(
                out,
                "stacks_store_deleted_file_sets_total",
                "counter",
                "File sets deleted by retention.",
                one(n),
            ),
            Field::DeletedBytes(n) => family(
                out,
                "stacks_store_deleted_bytes_total",
                "counter",
                "Bytes of the file sets deleted by retention.",
                one(n),
            ),
            Field::Unwritable(why) => family(
                out,
                "stacks_store_writable",
                "gauge",
                "0 while the store cannot be written (full or read-only: the packer drops rows, counted as lost, or the agent waits to start it), else 1.",
                vec![(
                    String::new(),
                    f64::from(u8::from(!agent_waits && why.is_none())),
                )],
            ),
        }
    }
}

/// The agent's own: BPF run time, what it records now, its CPU budget.
fn agent_families(out: &mut String, s: &Snapshot) {
    family(
        out,
        "stacks_agent_bpf_run_seconds_total",
        "counter",
        "Run time of the recorder's BPF programs (in the threads they ran in), every run.",
        vec![(String::new(), s.bpf_run_seconds)],
    );
    if !s.events.is_empty() {
        family(
            out,
            "stacks_agent_recording_info",
            "gauge",
            "What the recorder records now: its -e (the configured one or a budget level's).",
            vec![(format!("{{events=\"{}\"}}", escape(&s.events)), 1.0)],
        );
    }
    if let Some(b) = &s.budget {
        family(
            out,
            "stacks_agent_budget_cpu_ratio",
            "gauge",
            "The CPU budget, a fraction of the host's CPUs.",
            vec![(String::new(), b.limit_ratio)],
        );
        family(
            out,
            "stacks_agent_budget_used_cpu_ratio",
            "gauge",
            "CPU of the three stages and the BPF programs over the last 10 s, a fraction of the host's CPUs.",
            vec![(String::new(), b.used_ratio)],
        );
        family(
            out,
            "stacks_agent_budget_level",
            "gauge",
            "The budget's level taken: 0 records as configured, each level more sheds one more step.",
            vec![(String::new(), b.level as f64)],
        );
        family(
            out,
            "stacks_agent_budget_levels",
            "gauge",
            "Levels of the budget's ladder for the configured events (the highest level is this minus 1).",
            vec![(String::new(), b.levels as f64)],
        );
        if let Some(e) = b.restore_estimate_ratio {
            family(
                out,
                "stacks_agent_budget_restore_estimate_cpu_ratio",
                "gauge",
                "What the level before the one taken is estimated to cost now, a fraction of the host's CPUs (it is restored when under 3/4 of the budget).",
                vec![(String::new(), e)],
            );
        }
        family(
            out,
            "stacks_agent_budget_restore_hold_seconds",
            "gauge",
            "How long the level before must be estimated to fit the budget before it is restored.",
            vec![(String::new(), b.hold_seconds)],
        );
        family(
            out,
            "stacks_agent_budget_changes_total",
            "counter",
            "Budget levels taken: shed (over budget for a window) and restore (the level before estimated to fit).",
            vec![
                ("{direction=\"shed\"}".to_string(), b.shed as f64),
                ("{direction=\"restore\"}".to_string(), b.restored as f64),
            ],
        );
    }
}

/// A label value escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Listen on `addr` (bound now, so a taken port is an error before anything starts) and
/// serve `/metrics` from `shared` on a thread.
pub(crate) fn serve(addr: SocketAddr, shared: Shared) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = answer(conn, &shared);
            }
        })?;
    Ok(bound)
}

/// Answer one HTTP request: `GET /metrics`, else 404.
fn answer(conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // The headers, up to the empty line.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("");
    let (status, kind, body) =
        if request.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
            let body = render(&lock(shared));
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body)
        } else {
            (
                "404 Not Found",
                "text/plain; charset=utf-8",
                "stacks-agent serves /metrics\n".to_string(),
            )
        };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn serves_the_text_format() {
        let shared: Shared = Arc::default();
        {
            let mut s = lock(&shared);
            s.stages[Which::Symbolize.index()].restarts = 1;
            s.pack.rows.insert("profile".into(), 42);
            s.pack.lost.insert("ring \"full\"".into(), 3);
        }
        let addr = serve("127.0.0.1:0".parse().unwrap(), Arc::clone(&shared)).unwrap();
        let get = |path: &str| {
            let mut c = TcpStream::connect(addr).unwrap();
            write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut text = String::new();
            c.read_to_string(&mut text).unwrap();
            text
        };
        let text = get("/metrics");
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        for line in [
            "stacks_agent_stage_restarts_total{stage=\"symbolize\"} 1",
            "stacks_agent_stage_restarts_total{stage=\"record\"} 0",
            "stacks_rows_total{kind=\"profile\"} 42",
            "stacks_lost_events_total{cause=\"ring \\\"full\\\"\"} 3",
            "# TYPE stacks_agent_stage_cpu_seconds_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        assert!(get("/").starts_with("HTTP/1.1 404"));
    }

    /// Known label values are there before anything is counted: every cause of loss, kind
    /// and stack at 0, so `rate()` and alerts work from the first scrape.
    #[test]
    fn known_label_values_start_at_zero() {
        let text = render(&Snapshot::default());
        for line in [
            "stacks_lost_events_total{cause=\"ring_buffer_full:switch\"} 0",
            "stacks_lost_events_total{cause=\"no_task_storage:switch_out\"} 0",
            "stacks_lost_events_total{cause=\"map_full:block\"} 0",
            "stacks_lost_events_total{cause=\"stage_died:switch\"} 0",
            "stacks_unfinished_events{kind=\"switch\"} 0",
            "stacks_rows_total{kind=\"wake\"} 0",
            "stacks_events_total{kind=\"switch\"} 0",
            "stacks_stack_capture_errors_total{stack=\"user\"} 0",
            "stacks_agent_stage_restarts_total{stage=\"pack\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
        let mut s = Snapshot::default();
        s.pack.lost.insert("ring_buffer_full:switch".into(), 7);
        s.pack.lost.insert("from_the_future:x".into(), 1);
        let text = render(&s);
        let lost: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("stacks_lost_events_total{"))
            .collect();
        assert_eq!(
            lost.len(),
            stacks_stream::lost::known().len() + stacks_stream::lost::stage_died_all().len() + 1,
            "{lost:?}"
        );
        assert!(lost.contains(&"stacks_lost_events_total{cause=\"ring_buffer_full:switch\"} 7"));
        assert!(lost.contains(&"stacks_lost_events_total{cause=\"from_the_future:x\"} 1"));
    }

    /// docs/agent.md's metric tables name every family `/metrics` can show, with its type, and
    /// no other: a field added to stacks-pack's `--stats` is exported and documented.
    #[test]
    fn every_family_is_documented() {
        let snapshot = Snapshot {
            events: "profile".into(),
            budget: Some(BudgetMetrics {
                restore_estimate_ratio: Some(0.1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let shown: BTreeMap<String, String> = render(&snapshot)
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(name, kind)| (name.to_string(), kind.to_string()))
            .collect();
        let dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        let doc = std::fs::read_to_string(dir.join("../docs/agent.md")).unwrap();
        let section = doc
            .split("\n## Metrics\n")
            .nth(1)
            .and_then(|s| s.split("\n#").next())
            .expect("docs/agent.md: no `## Metrics`");
        // Rows `| `name{labels}`, `name` | type | meaning |`.
        let mut documented = BTreeMap::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            for name in cells[1].split('`').skip(1).step_by(2) {
                let name = name.split('{').next().unwrap_or(name);
                documented.insert(name.to_string(), cells[2].to_string());
            }
        }
        let lacking: Vec<_> = shown
            .iter()
            .filter(|(name, kind)| documented.get(*name) != Some(kind))
            .collect();
        let extra: Vec<_> = documented
            .keys()
            .filter(|name| !shown.contains_key(*name))
            .collect();
        assert!(
            lacking.is_empty() && extra.is_empty(),
            "docs/agent.md's metric tables lack (or give another type to) {lacking:?} and list \
             {extra:?}, which /metrics does not show"
        );
    }
}
