//! `--control FILE`: new `-e` specifications taken while recording, without stopping (the
//! agent's CPU budget degrading in place, docs/agent.md). A thread reads FILE's lines; the
//! recording loop takes the latest at each poll when it differs from the recording's only in
//! the argument of a kind that changes in place (`kinds::EventKind::retunes`: `profile`'s and
//! `state`'s HZ, each sample and row carrying its period; `switch`'s and `uring`'s MIN, the
//! shorter events folded with their count and time kept) — and refuses any other with a
//! warning, recording on as it was.

use std::io::BufRead;
use std::path::Path;
use std::sync::mpsc;

use anyhow::{Context, Result};

use crate::spec::EventSpec;

/// The lines read from `--control`.
pub(crate) struct Control {
    lines: mpsc::Receiver<String>,
}

impl Control {
    /// Read `path` on a thread, line by line, until its end.
    pub(crate) fn open(path: &Path) -> Result<Control> {
        let file =
            std::fs::File::open(path).with_context(|| format!("--control {}", path.display()))?;
        let (tx, lines) = mpsc::channel();
        let name = path.display().to_string();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                for line in std::io::BufReader::new(file).lines() {
                    match line {
                        Ok(l) if l.trim().is_empty() => {}
                        Ok(l) => {
                            if tx.send(l.trim().to_string()).is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            eprintln!("stacks-record: warning: --control {name}: {e}");
                            return;
                        }
                    }
                }
            })
            .context("starting the --control thread")?;
        Ok(Control { lines })
    }

    /// The lines read since the last call, oldest first.
    pub(crate) fn take(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

/// `line` parsed, when it differs from `now` only in the arguments of the kinds that change in
/// place (`kinds::retuned`, by `EventSpec::takes_in_place`); else why not.
pub(crate) fn in_place(now: &EventSpec, line: &str) -> Result<EventSpec, String> {
    let new = EventSpec::parse(line).map_err(|e| e.to_string())?;
    now.takes_in_place(&new, |name| crate::kinds::retuned().any(|k| k == name))?;
    Ok(new)
}

#[cfg(test)]
mod tests {
    use stacks_stream::kind;

    use super::*;

    #[test]
    fn rates_and_min_change_in_place_nothing_else() {
        let now = EventSpec::parse("profile:u:49,state:uk:5,switch:uk,wake:u").unwrap();
        let new = in_place(&now, "profile:u:12,state:uk:1,switch:uk:50ms,wake:u").unwrap();
        assert_eq!(new.get(kind::PROFILE).unwrap().arg, Some(12));
        assert_eq!(new.get(kind::SWITCH).unwrap().arg, Some(50_000_000));
        for (line, why) in [
            ("profile:u:12,state:uk:1,switch:uk", "other kinds"),
            (
                "profile:uk:49,state:uk:5,switch:uk,wake:u",
                "profile: other stacks",
            ),
            (
                "profile:u:49,state:uk:5,switch:uk,wake:u,vfs:u",
                "other kinds",
            ),
            (
                "profile:u:49,state:uk:5,switch:uk,wake:u,tp:sched:sched_process_exec",
                "probes",
            ),
            ("nonsense", ""),
        ] {
            let e = in_place(&now, line).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
        let io = EventSpec::parse("vfs:u").unwrap();
        assert!(in_place(&io, "vfs:n").unwrap_err().contains("other stacks"));
    }
}
