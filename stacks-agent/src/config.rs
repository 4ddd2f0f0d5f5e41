//! The agent's configuration: a TOML file (`-c FILE`) whose every key is also a flag, flags
//! winning; checked whole before anything starts (an unknown key, a bad duration or size, an
//! unwritable store are one line naming the key or path). `--print-config` shows the result
//! as TOML.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where `/metrics` is served when nothing says otherwise.
pub(crate) const DEFAULT_METRICS: &str = "127.0.0.1:9464";

/// A configuration error: one line naming the key, flag or path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("{path}: cannot read: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {detail}")]
    Parse { path: String, detail: String },
    #[error("{key}: {detail}")]
    Value { key: &'static str, detail: String },
    #[error("store {path}: {detail}")]
    Store { path: String, detail: String },
}

/// The keys, as the file has them and as the flags give them (every one optional: a flag
/// overrides the file's value, the file the default).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Keys {
    /// stacks-record's `-e`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<String>,
    /// Record every process (`-a`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    /// Record processes with these names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// Record the processes of these cgroups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Vec<String>>,
    /// The store: a directory or a bucket URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// stacks-pack's rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// stacks-pack's retention.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_total: Option<String>,
    /// `HOST:PORT` of `/metrics`, or `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// The CPU budget, a percentage of the host's CPUs (`1%`), or `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_cpu: Option<String>,
    /// The budget's window: over budget on average this long sheds; a restore asks six
    /// windows (default [`BUDGET_WINDOW`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_window: Option<String>,
    /// stacks-record's `--ringbuf-mb` (default [`RINGBUF_MB`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ringbuf_mb: Option<u32>,
}

/// The budget's window when `budget_window` is not given.
pub(crate) const BUDGET_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// The agent's ring buffers, MiB each: half of stacks-record's default, for a recorder that
/// stays on (the kernel maps each ring twice, so its pages count twice in `VmRSS`); lost
/// events name `ring_buffer_full` when it is too small.
pub(crate) const RINGBUF_MB: u32 = 8;

impl Keys {
    /// `self` with every key `over` sets replaced.
    pub(crate) fn overridden_by(self, over: Keys) -> Keys {
        Keys {
            events: over.events.or(self.events),
            all: over.all.or(self.all),
            names: over.names.or(self.names),
            cgroups: over.cgroups.or(self.cgroups),
            store: over.store.or(self.store),
            max_age: over.max_age.or(self.max_age),
            max_bytes: over.max_bytes.or(self.max_bytes),
            max_rows: over.max_rows.or(self.max_rows),
            partition: over.partition.or(self.partition),
            retain: over.retain.or(self.retain),
            max_total: over.max_total.or(self.max_total),
            metrics: over.metrics.or(self.metrics),
            budget_cpu: over.budget_cpu.or(self.budget_cpu),
            budget_window: over.budget_window.or(self.budget_window),
            ringbuf_mb: over.ringbuf_mb.or(self.ringbuf_mb),
        }
    }
}

/// What to record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Targets {
    All,
    Names(Vec<String>),
    Cgroups(Vec<String>),
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The keys as given (for `--print-config` and the tools' arguments).
    pub keys: Keys,
    pub targets: Targets,
    pub store: String,
    pub metrics: Option<SocketAddr>,
    /// The CPU budget as a fraction of the host's CPUs.
    pub budget_cpu: Option<f64>,
    /// The budget's window.
    pub budget_window: std::time::Duration,
}

/// Read `file` (if any), apply `flags` over it, and check the result.
pub(crate) fn load(file: Option<&Path>, flags: Keys) -> Result<Config, ConfigError> {
    let from_file = match file {
        Some(path) => parse_file(path)?,
        None => Keys::default(),
    };
    check(from_file.overridden_by(flags))
}

/// The keys of the TOML file at `path`.
pub(crate) fn parse_file(path: &Path) -> Result<Keys, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
        path: shown.clone(),
        err,
    })?;
    parse_text(&text).map_err(|detail| ConfigError::Parse {
        path: shown,
        detail,
    })
}

/// The keys of TOML `text`; an error is one line with its line number.
pub(crate) fn parse_text(text: &str) -> Result<Keys, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| {
        let line = e.span().map(|s| {
            text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|b| **b == b'\n')
                .count()
                + 1
        });
        let msg = e.message().replace('\n', " ");
        match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        }
    })
}

/// Check every key; the store is created if missing and must be writable.
pub(crate) fn check(keys: Keys) -> Result<Config, ConfigError> {
    let value = |key: &'static str, detail: String| ConfigError::Value { key, detail };
    for (key, text) in [("max_age", &keys.max_age), ("retain", &keys.retain)] {
        if let Some(t) = text {
            stacks_stream::cli::parse_positive_duration(t).map_err(|e| value(key, e))?;
        }
    }
    for (key, text) in [
        ("max_bytes", &keys.max_bytes),
        ("max_total", &keys.max_total),
    ] {
        if let Some(t) = text {
            stacks_stream::cli::parse_size(t).map_err(|e| value(key, e))?;
        }
    }
    if let Some(mb) = keys.ringbuf_mb
        && !(mb.is_power_of_two() && (1..=4096).contains(&mb))
    {
        return Err(value(
            "ringbuf_mb",
            format!("{mb}: must be a power of two from 1 to 4096"),
        ));
    }
    if keys.max_rows == Some(0) {
        return Err(value("max_rows", "must be at least 1".into()));
    }
    if let Some(p) = &keys.partition
        && p != "date"
        && p != "hour"
    {
        return Err(value("partition", format!("`{p}`: date or hour")));
    }
    if let Some(e) = &keys.events
        && e.trim().is_empty()
    {
        return Err(value("events", "empty".into()));
    }
    let all = keys.all.unwrap_or(false);
    let names = keys.names.clone().unwrap_or_default();
    let cgroups = keys.cgroups.clone().unwrap_or_default();
    if names.iter().any(|n| n.is_empty()) {
        return Err(value("names", "an empty process name".into()));
    }
    let targets = match (all, names.is_empty(), cgroups.is_empty()) {
        (true, true, true) => Targets::All,
        (false, false, true) => Targets::Names(names),
        (false, true, false) => Targets::Cgroups(cgroups),
        (false, true, true) => {
            return Err(value(
                "all",
                "nothing to record: set all = true (-a), names or cgroups".into(),
            ));
        }
        _ => {
            return Err(value(
                "all",
                "give one of all (-a), names and cgroups, not several".into(),
            ));
        }
    };
    let metrics = match keys.metrics.as_deref().unwrap_or(DEFAULT_METRICS) {
        "off" => None,
        addr => Some(
            addr.parse::<SocketAddr>()
                .map_err(|e| value("metrics", format!("`{addr}`: {e} (IP:PORT or off)")))?,
        ),
    };
    let budget_cpu = match keys.budget_cpu.as_deref() {
        None | Some("off") => None,
        Some(b) => Some(crate::budget::parse_percent(b).map_err(|e| value("budget_cpu", e))?),
    };
    let budget_window = match keys.budget_window.as_deref() {
        None => BUDGET_WINDOW,
        Some(w) => stacks_stream::cli::parse_positive_duration(w)
            .map_err(|e| value("budget_window", e))
            .and_then(|d| {
                if d < std::time::Duration::from_secs(1) {
                    Err(value("budget_window", format!("`{w}`: at least 1s")))
                } else {
                    Ok(d)
                }
            })?,
    };
    if budget_cpu.is_some() && keys.events.is_none() {
        return Err(value(
            "budget_cpu",
            "needs events (-e): the budget sheds from the events named there".into(),
        ));
    }
    let store = keys.store.clone().ok_or_else(|| {
        value(
            "store",
            "missing: where to write (a directory or a bucket URL)".into(),
        )
    })?;
    if stacks_store::objstore::is_url(&store) {
        if keys.retain.is_some() || keys.max_total.is_some() {
            return Err(value(
                if keys.retain.is_some() {
                    "retain"
                } else {
                    "max_total"
                },
                "retention is for a directory store, not a bucket URL".into(),
            ));
        }
    } else {
        check_writable(&PathBuf::from(&store))?;
    }
    Ok(Config {
        keys,
        targets,
        store,
        metrics,
        budget_cpu,
        budget_window,
    })
}

/// Create `dir` if missing and make sure files can be created in it.
fn check_writable(dir: &Path) -> Result<(), ConfigError> {
    let err = |detail: String| ConfigError::Store {
        path: dir.display().to_string(),
        detail,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create: {e}")))?;
    let probe = dir.join(format!(".stacks-agent-check-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(|e| err(format!("cannot write: {e}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

impl Config {
    /// The effective configuration as TOML (every key set, defaults shown).
    pub(crate) fn to_toml(&self) -> String {
        let mut keys = self.keys.clone();
        keys.metrics = Some(match self.metrics {
            Some(a) => a.to_string(),
            None => "off".into(),
        });
        keys.all = Some(self.targets == Targets::All);
        let mut out = String::from("# stacks-agent: the effective configuration\n");
        let body = toml::to_string(&keys).unwrap_or_default();
        let _ = write!(out, "{body}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("stacks-agent-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn flags_win_over_the_file() {
        let store = dir("flags").join("store");
        let file = parse_text(&format!(
            "all = true\nstore = \"{}\"\nmax_age = \"1m\"\nretain = \"7d\"\nmetrics = \"off\"\n",
            store.display()
        ))
        .unwrap();
        let flags = Keys {
            max_age: Some("5s".into()),
            metrics: Some("127.0.0.1:9999".into()),
            ..Default::default()
        };
        let c = check(file.overridden_by(flags)).unwrap();
        assert_eq!(c.keys.max_age.as_deref(), Some("5s"));
        assert_eq!(c.keys.retain.as_deref(), Some("7d"));
        assert_eq!(c.metrics, Some("127.0.0.1:9999".parse().unwrap()));
        assert_eq!(c.targets, Targets::All);
        assert!(store.is_dir(), "created");
        let shown = c.to_toml();
        assert!(
            shown.contains("max_age = \"5s\"") && shown.contains("all = true"),
            "{shown}"
        );
        // What --print-config prints reads back as the same configuration.
        let again = check(parse_text(&shown).unwrap()).unwrap();
        assert_eq!(again.to_toml(), shown);
        std::fs::remove_dir_all(dir("flags")).unwrap();
    }

    #[test]
    fn bad_keys_are_named() {
        let e = parse_text("all = true\nretian = \"7d\"\n").unwrap_err();
        assert!(e.starts_with("line 2: unknown field `retian`"), "{e}");
        assert!(!e.contains('\n'));
        let store = dir("bad").join("s2").display().to_string();
        let keys = |k: Keys| Keys {
            all: Some(true),
            store: Some(store.clone()),
            ..k
        };
        for (k, key) in [
            (
                Keys {
                    retain: Some("7 days".into()),
                    ..Default::default()
                },
                "retain: ",
            ),
            (
                Keys {
                    max_total: Some("lots".into()),
                    ..Default::default()
                },
                "max_total: ",
            ),
            (
                Keys {
                    metrics: Some("localhost".into()),
                    ..Default::default()
                },
                "metrics: ",
            ),
            (
                Keys {
                    partition: Some("week".into()),
                    ..Default::default()
                },
                "partition: ",
            ),
            (
                Keys {
                    ringbuf_mb: Some(12),
                    ..Default::default()
                },
                "ringbuf_mb: 12: must be a power of two",
            ),
        ] {
            let e = check(keys(k)).unwrap_err().to_string();
            assert!(e.starts_with(key), "{e}");
        }
        let e = check(Keys {
            store: Some(store.clone()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("nothing to record"), "{e}");
        let e = check(Keys {
            all: Some(true),
            store: Some("/proc/stacks-store".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("store /proc/stacks-store: cannot create"),
            "{e}"
        );
        std::fs::remove_dir_all(dir("bad")).unwrap();
    }
}
