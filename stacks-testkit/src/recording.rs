//! A synthetic recording with every row kind (profile, switch incl. folded rows, rss, block,
//! vfs, net, state, probe, exec/fork/exit, lost), as symbolized rows. Rows come from a seeded generator;
//! tests compute the answers they expect from the [`Row`]s, not from the tool (stacks-query's
//! tests and the end-to-end store tests, which pack the rows with stacks-pack).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use stacks_stream::meta;

use crate::rows::{Frame, Row, batch as rows_batch};

/// Recording start: 2023-11-14T22:13:20Z.
pub const T0: i64 = 1_700_000_000_000_000_000;
pub const SEC: i64 = 1_000_000_000;

fn text(s: &str) -> Option<String> {
    Some(s.to_string())
}

fn offset(depth: usize) -> u64 {
    0x1000 + depth as u64 * 0x10
}

/// A stack of `/usr/bin/app` frames named `names`, leaf first; an empty name is an unresolved
/// frame.
pub fn stack(names: &[&str]) -> Vec<Frame> {
    names
        .iter()
        .enumerate()
        .map(|(depth, f)| {
            let name = (!f.is_empty()).then(|| f.to_string());
            Frame {
                file: name.as_ref().map(|_| "src/main.rs".to_string()),
                line: name.as_ref().map(|_| 10 + depth as u32),
                module: text("/usr/bin/app"),
                build_id: text("abcd"),
                offset: Some(offset(depth)),
                addr: 0x5000 + offset(depth),
                error: name.is_none().then(|| "no symbol".to_string()),
                reason: name
                    .is_none()
                    .then(|| stacks_stream::Unresolved::NoSymbol.as_str().to_string()),
                symbol: name.clone(),
                function: name,
                ..Frame::default()
            }
        })
        .collect()
}

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.next(xs.len() as u64) as usize]
    }
}

const STACKS: &[&[&str]] = &[
    &["burn_heavy", "run", "main"],
    &["burn_light", "run", "main"],
    &["fib", "fib", "fib", "run", "main"],
    &["", "run", "main"],
    &["memcpy", "copy", "main"],
];

const WAIT_STACKS: &[&[&str]] = &[
    &["schedule", "futex_wait", "lock", "main"],
    &["schedule", "do_nanosleep", "sleep", "main"],
    &["schedule", "io_schedule", "read_file", "main"],
];

/// A process: pid, comm, and its threads (tid, name).
type Proc = (i32, &'static str, &'static [(i32, &'static str)]);

const PROCS: &[Proc] = &[
    (100, "alpha", &[(100, "alpha"), (101, "alpha-w1")]),
    (200, "beta", &[(200, "beta")]),
    (300, "o'brien", &[(300, "o'brien")]),
];

/// The fixture rows: `n` per resource kind, times spread over 5 seconds, in time order.
pub fn rows(n: usize) -> Vec<Row> {
    let mut g = Lcg(42);
    let mut out = Vec::new();
    let kinds = ["profile", "switch", "rss", "block", "vfs", "net"];
    for i in 0..n * kinds.len() {
        let kind = kinds[i % kinds.len()];
        let (pid, comm, threads) = g.pick(PROCS);
        let (tid, thread) = g.pick(threads);
        let mut r = Row {
            time: T0 + (i as i64) * 5 * SEC / (n * kinds.len()) as i64,
            kind: kind.into(),
            pid,
            tid,
            comm: comm.into(),
            thread: thread.into(),
            ..Default::default()
        };
        match kind {
            "profile" => {
                r.value = 10_101_010;
                r.stack = Some(stack(g.pick(STACKS)));
            }
            "switch" => {
                r.state = text(g.pick(&["sleeping", "runnable", "uninterruptible"]));
                if g.next(4) == 0 {
                    let c = 2 + g.next(50) as i64;
                    r.count = Some(c);
                    r.value = c * (1000 + g.next(5000) as i64);
                } else {
                    r.count = Some(1);
                    r.value = 10_000 + g.next(5_000_000) as i64;
                    r.duration = Some(r.value);
                    r.stack = Some(stack(g.pick(WAIT_STACKS)));
                }
            }
            "rss" => {
                r.op = text(g.pick(&["anon", "file"]));
                r.count = Some(1 + g.next(64) as i64);
                r.value = if g.next(8) == 0 {
                    0
                } else {
                    4096 * (1 + g.next(100) as i64)
                };
                r.stack = Some(stack(g.pick(STACKS)));
            }
            "block" => {
                r.op = text(g.pick(&["read", "write", "flush"]));
                r.dev = text(g.pick(&["8:0", "259:1"]));
                r.value = 4096 * g.next(256) as i64;
                r.duration = (g.next(10) != 0).then(|| 50_000 + g.next(9_000_000) as i64);
                r.stack = (g.next(6) != 0).then(|| stack(g.pick(WAIT_STACKS)));
            }
            "vfs" => {
                r.op = text(g.pick(&["read", "write"]));
                if g.next(7) == 0 {
                    r.errno = Some(9);
                    r.value = 0;
                } else {
                    r.value = 1 + g.next(1 << 20) as i64;
                }
                r.duration = Some(1000 + g.next(100_000) as i64);
                r.stack = Some(stack(g.pick(STACKS)));
            }
            "net" => {
                r.op = text(g.pick(&["send", "recv"]));
                r.protocol = text(g.pick(&["tcp", "udp"]));
                r.value = 1 + g.next(65_536) as i64;
                r.stack = Some(stack(g.pick(STACKS)));
            }
            other => unreachable!("kind {other}"),
        }
        // Process alpha uses tracing-stacks: most of its rows are in a span.
        if pid == 100 && i % 4 != 0 {
            label_span(&mut r, (i / 12) as u64);
        }
        out.push(r);
    }
    out.extend(state_and_probe_rows(n));
    out.extend(span_rows(n));
    // Lifecycle and lost rows, which the resource queries must leave alone.
    for (k, kind) in ["exec", "fork", "exit"].iter().enumerate() {
        out.push(Row {
            time: T0 + k as i64 * SEC,
            kind: kind.to_string(),
            pid: 200,
            tid: 200,
            comm: "beta".into(),
            thread: "beta".into(),
            value: 1,
            ..Default::default()
        });
    }
    out.push(Row {
        time: T0 + 2 * SEC,
        kind: "lost".into(),
        value: 17,
        ..Default::default()
    });
    out.sort_by_key(|r| r.time);
    out
}

/// Span `k` of process alpha: `handle_request` (even) or its child `db_query` (odd).
fn label_span(r: &mut Row, k: u64) {
    let id = 1 + k;
    r.span_id = Some(id);
    r.span_name = text(if k.is_multiple_of(2) {
        "handle_request"
    } else {
        "db_query"
    });
    r.parent_span_id = (k % 2 == 1).then_some(id - 1);
    let root = if k.is_multiple_of(2) { id } else { id - 1 };
    r.trace_id = Some(format!("{root:032x}"));
}

/// `n / 4` `span` rows of process alpha's main thread (one stay in a span each, the last
/// one never left).
fn span_rows(n: usize) -> Vec<Row> {
    let m = (n / 4).max(2);
    (0..m)
        .map(|k| {
            let mut r = Row {
                time: T0 + (k as i64) * 5 * SEC / m as i64,
                kind: "span".into(),
                pid: 100,
                tid: 100,
                comm: "alpha".into(),
                thread: "alpha".into(),
                stack: Some(stack(STACKS[k % STACKS.len()])),
                ..Default::default()
            };
            label_span(&mut r, k as u64);
            if k + 1 < m {
                r.value = 1_000_000 + 1000 * k as i64;
                r.duration = Some(r.value);
            }
            r
        })
        .collect()
}

/// `n` `state` rows (20 Hz samples: running, or off CPU in a system call for some time, on a
/// file for `read`) and `n / 2` `probe` rows (single hits with arguments, and counting rows),
/// spread over the same 5 seconds, from their own generator so the other rows stay the same.
fn state_and_probe_rows(n: usize) -> Vec<Row> {
    let mut g = Lcg(7);
    let mut out = Vec::new();
    let at = |i: usize, of: usize| T0 + (i as i64) * 5 * SEC / of.max(1) as i64;
    for i in 0..n {
        let (pid, comm, threads) = g.pick(PROCS);
        let (tid, thread) = g.pick(threads);
        let mut r = Row {
            time: at(i, n),
            kind: "state".into(),
            pid,
            tid,
            comm: comm.into(),
            thread: thread.into(),
            value: 50_000_000,
            count: Some(1),
            state: text(g.pick(&["running", "runnable", "sleeping", "uninterruptible"])),
            ..Default::default()
        };
        if r.state.as_deref() != Some("running") {
            let call = g.pick(&["read", "nanosleep", "futex", "fsync"]);
            r.syscall = text(call);
            r.duration = Some(g.next(3_000) as i64 * 1_000_000);
            if call == "read" || call == "fsync" {
                r.fd = Some(3 + g.next(4) as i32);
                r.path = text(g.pick(&["/var/lib/app/data", "pipe:[4242]"]));
            }
            r.stack = Some(stack(g.pick(WAIT_STACKS)));
        }
        out.push(r);
    }
    for i in 0..n / 2 {
        let (pid, comm, threads) = g.pick(PROCS);
        let (tid, thread) = g.pick(threads);
        let counted = g.next(3) == 0;
        let hits = if counted { 2 + g.next(100) as i64 } else { 1 };
        out.push(Row {
            time: at(i, n / 2),
            kind: "probe".into(),
            pid,
            tid,
            comm: comm.into(),
            thread: thread.into(),
            value: hits,
            count: Some(hits),
            probe: text(g.pick(&["uprobe:/usr/bin/app:parse", "tp:sched:sched_process_fork"])),
            args: (!counted).then(|| vec![g.next(1000) as i64, -1]),
            stack: Some(stack(g.pick(STACKS))),
            ..Default::default()
        });
    }
    out
}

/// The recording's stream metadata, as stacks-record and stacks-symbolize stamp it.
pub fn metadata() -> HashMap<String, String> {
    let mut md = HashMap::new();
    md.insert(meta::HOST.to_string(), "fixturehost".to_string());
    md.insert(
        meta::EVENTS.to_string(),
        "profile:u:99,switch:ku,rss:u:1,block:u,vfs:u,net:u,state:uk:20,\
         span:u,uprobe:/usr/bin/app:parse:u,tp:sched:sched_process_fork:uk:count"
            .to_string(),
    );
    stacks_stream::stamp(&mut md, "stacks-record", "0.1.0", stacks_stream::stage::RAW);
    stacks_stream::stamp(
        &mut md,
        "stacks-symbolize",
        "0.1.0",
        stacks_stream::stage::SYMBOLIZED,
    );
    md
}

/// The rows as one symbolized-schema batch with [`metadata`].
pub fn batch(rows: &[Row]) -> RecordBatch {
    let schema = Arc::new(stacks_stream::symbolized_schema(metadata()));
    rows_batch(&schema, rows)
}
