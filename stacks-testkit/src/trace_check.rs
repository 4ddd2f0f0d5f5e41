//! A structural check of Chrome Trace Event Format JSON, as viewers rely on it: required fields
//! per phase, complete (`X`) slices that nest properly on each thread, begin/end pairs that
//! match, stack frame references that resolve and parent chains that end at a root. Tests run
//! it on everything stacks-trace writes; it returns what it counted, for checking totals.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

/// What a valid trace holds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Summary {
    /// Events per phase.
    pub phases: BTreeMap<String, u64>,
    /// Events per name (`M` events by their `args.name`).
    pub names: BTreeMap<String, u64>,
    /// Summed `dur` of `X` events per name, in ns (rounded).
    pub durations_ns: BTreeMap<String, i64>,
    /// Names of processes and threads from metadata events, by (pid, tid); tid 0 for processes.
    pub tracks: BTreeMap<(i64, i64), String>,
    /// Number of `stackFrames` entries.
    pub frames: usize,
}

/// (pid, tid).
type Track = (i64, i64);
/// (ts, dur, event index).
type Slice = (f64, f64, usize);

fn ns(v: f64) -> i64 {
    (v * 1000.0).round() as i64
}

/// Check `trace` (a parsed JSON document); the error lists what is wrong (at most 20 items).
pub fn check(trace: &Value) -> Result<Summary, Vec<String>> {
    let mut errors = Vec::new();
    let mut s = Summary::default();
    let Some(events) = trace.get("traceEvents").and_then(Value::as_array) else {
        return Err(vec!["no `traceEvents` array".into()]);
    };
    let frames = match trace.get("stackFrames") {
        None => serde_json::Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(vec!["`stackFrames` is not an object".into()]),
    };
    s.frames = frames.len();
    check_frames(&frames, &mut errors);
    let mut state = Events::default();
    for (i, e) in events.iter().enumerate() {
        state.check(i, e, &frames, &mut s, &mut errors);
    }
    state.check_ends(&mut errors);
    if errors.is_empty() {
        Ok(s)
    } else {
        errors.truncate(20);
        Err(errors)
    }
}

/// Every stack frame has a name and a parent chain that ends at a root.
fn check_frames(frames: &serde_json::Map<String, Value>, errors: &mut Vec<String>) {
    for (id, f) in frames {
        if f.get("name").and_then(Value::as_str).is_none() {
            errors.push(format!("stack frame {id} has no name"));
        }
        // Walk to the root; more steps than frames means a cycle.
        let mut at = f;
        for step in 0..=frames.len() {
            match at.get("parent") {
                None => break,
                Some(Value::String(p)) => match frames.get(p) {
                    Some(next) => at = next,
                    None => {
                        errors.push(format!("stack frame {id}: parent {p} does not exist"));
                        break;
                    }
                },
                Some(other) => {
                    errors.push(format!(
                        "stack frame {id}: parent {other} is not a string id"
                    ));
                    break;
                }
            }
            if step == frames.len() {
                errors.push(format!("stack frame {id}: parent chain has a cycle"));
            }
        }
    }
}

/// What the events so far leave to check: complete slices per thread (their nesting), open
/// `B` events per thread, begun async events and their begin times.
#[derive(Default)]
struct Events {
    slices: HashMap<Track, Vec<Slice>>,
    open: HashMap<Track, Vec<String>>,
    asyncs: HashMap<(String, String), f64>,
}

impl Events {
    /// Check event `i`, `e`, and count it in `s`.
    fn check(
        &mut self,
        i: usize,
        e: &Value,
        frames: &serde_json::Map<String, Value>,
        s: &mut Summary,
        errors: &mut Vec<String>,
    ) {
        let mut bad = |what: &str| errors.push(format!("event {i}: {what}: {e}"));
        let Some(ph) = e.get("ph").and_then(Value::as_str) else {
            bad("no `ph`");
            return;
        };
        *s.phases.entry(ph.into()).or_default() += 1;
        let pid = e.get("pid").and_then(Value::as_i64);
        let tid = e.get("tid").and_then(Value::as_i64);
        let ts = e.get("ts").and_then(Value::as_f64);
        let name = e.get("name").and_then(Value::as_str);
        let (Some(pid), Some(tid)) = (pid, tid) else {
            bad("`pid` and `tid` must be integers");
            return;
        };
        if ph != "M" && ts.is_none() {
            bad("no numeric `ts`");
            return;
        }
        let Some(name) = name else {
            bad("no `name`");
            return;
        };
        let ts = ts.unwrap_or(0.0);
        if let Some(sf) = e.get("sf") {
            let key = match sf {
                Value::String(k) => k.clone(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            if !frames.contains_key(&key) {
                bad("`sf` names no stack frame");
            }
        }
        match ph {
            "M" => {
                let label = e
                    .get("args")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str);
                match (name, label) {
                    ("process_name", Some(l)) => {
                        s.tracks.insert((pid, 0), l.into());
                    }
                    ("thread_name", Some(l)) => {
                        s.tracks.insert((pid, tid), l.into());
                    }
                    ("process_name" | "thread_name", None) => bad("no `args.name`"),
                    _ => {}
                }
                *s.names.entry(label.unwrap_or(name).into()).or_default() += 1;
                return;
            }
            "X" => match e.get("dur").and_then(Value::as_f64) {
                Some(d) if d >= 0.0 => {
                    self.slices.entry((pid, tid)).or_default().push((ts, d, i));
                    *s.durations_ns.entry(name.into()).or_default() += ns(d);
                }
                _ => bad("`X` needs a `dur` ≥ 0"),
            },
            "B" => self.open.entry((pid, tid)).or_default().push(name.into()),
            "E" => {
                if self.open.entry((pid, tid)).or_default().pop().is_none() {
                    bad("`E` without a `B`");
                }
            }
            "i" | "I" | "n" => {
                if let Some(scope) = e.get("s")
                    && !matches!(scope.as_str(), Some("g" | "p" | "t"))
                {
                    bad("instant scope `s` must be g, p or t");
                }
            }
            "C" => {
                let ok = e
                    .get("args")
                    .and_then(Value::as_object)
                    .is_some_and(|a| !a.is_empty() && a.values().all(Value::is_number));
                if !ok {
                    bad("`C` needs numeric `args`");
                }
            }
            "b" | "e" => {
                let (Some(cat), Some(id)) = (
                    e.get("cat").and_then(Value::as_str),
                    e.get("id").and_then(Value::as_str),
                ) else {
                    bad("async events need `cat` and a string `id`");
                    return;
                };
                let key = (cat.to_string(), id.to_string());
                if ph == "b" {
                    if self.asyncs.insert(key, ts).is_some() {
                        bad("async id begun twice");
                    }
                } else {
                    match self.asyncs.remove(&key) {
                        Some(begin) if begin <= ts => {}
                        Some(_) => bad("async end before its begin"),
                        None => bad("async end without a begin"),
                    }
                }
            }
            other => bad(&format!("unknown phase `{other}`")),
        }
        *s.names.entry(name.into()).or_default() += 1;
    }

    /// After the last event: every `B` ended, every async event ended, and the slices of each
    /// thread nest (each one inside the enclosing one, or after it).
    fn check_ends(self, errors: &mut Vec<String>) {
        for ((pid, tid), names) in &self.open {
            if !names.is_empty() {
                errors.push(format!("pid {pid} tid {tid}: `B` without `E`: {names:?}"));
            }
        }
        for (cat, id) in self.asyncs.keys() {
            errors.push(format!("async {cat} {id} never ends"));
        }
        for ((pid, tid), mut list) in self.slices {
            list.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
            let mut stack: Vec<(f64, usize)> = Vec::new();
            for (ts, dur, i) in list {
                let end = ts + dur;
                while stack.last().is_some_and(|&(e, _)| e <= ts) {
                    stack.pop();
                }
                if let Some(&(outer_end, j)) = stack.last()
                    && end > outer_end + 1e-6
                {
                    errors.push(format!(
                        "pid {pid} tid {tid}: slice of event {i} overlaps event {j} without nesting"
                    ));
                }
                stack.push((end, i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_a_good_trace() {
        let t = json!({
            "traceEvents": [
                {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "app"}},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 0.0, "dur": 10.0, "name": "outer"},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 1.0, "dur": 2.5, "name": "inner", "sf": "2"},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 10.0, "dur": 1.0, "name": "after"},
                {"ph": "b", "pid": 1, "tid": 2, "ts": 1.0, "name": "io", "cat": "block", "id": "0x1"},
                {"ph": "e", "pid": 1, "tid": 2, "ts": 4.0, "name": "io", "cat": "block", "id": "0x1"},
                {"ph": "C", "pid": 1, "tid": 2, "ts": 4.0, "name": "rss", "args": {"rss_bytes": 5}},
                {"ph": "i", "pid": 1, "tid": 2, "ts": 4.0, "name": "x", "s": "t"},
            ],
            "stackFrames": {"1": {"name": "main"}, "2": {"name": "f", "parent": "1"}},
        });
        let s = check(&t).expect("valid");
        assert_eq!(s.durations_ns["inner"], 2500);
        assert_eq!(s.phases["X"], 3);
        assert_eq!(s.tracks[&(1, 0)], "app");
        assert_eq!(s.frames, 2);
    }

    #[test]
    fn finds_the_faults() {
        let t = json!({
            "traceEvents": [
                {"ph": "X", "pid": 1, "tid": 2, "ts": 0.0, "dur": 10.0, "name": "a"},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 5.0, "dur": 10.0, "name": "overlaps"},
                {"ph": "X", "pid": 1, "tid": 2, "ts": 5.0, "name": "no dur"},
                {"ph": "e", "pid": 1, "tid": 2, "ts": 1.0, "name": "io", "cat": "c", "id": "0x9"},
                {"ph": "i", "pid": 1, "tid": 2, "ts": 1.0, "name": "x", "sf": "7"},
                {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name"},
                {"ph": "Q", "pid": 1, "tid": 2, "ts": 1.0, "name": "q"},
                {"ph": "B", "pid": 1, "tid": 3, "ts": 1.0, "name": "open"},
            ],
            "stackFrames": {"1": {"name": "a", "parent": "2"}, "2": {"name": "b", "parent": "1"}},
        });
        let errors = check(&t).unwrap_err().join("\n");
        for needle in [
            "overlaps event 0",
            "`dur`",
            "async end without a begin",
            "`sf` names no stack frame",
            "no `args.name`",
            "unknown phase `Q`",
            "`B` without `E`",
            "cycle",
        ] {
            assert!(errors.contains(needle), "{needle} not in:\n{errors}");
        }
    }
}
