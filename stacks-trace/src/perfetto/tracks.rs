//! The tracks of a Perfetto trace: a process track per process, a thread track per thread
//! (its on/off-CPU slices and instants), and under each thread lanes of its own (`io`,
//! `block`, `spans`, `state`); a counter track per process and counter; global tracks. Each
//! gets a uuid when first used, and the descriptors to write (before any event on it) are
//! returned to the writer, again when a name changes.

use std::collections::HashMap;

use super::protos::{CounterDescriptor, ProcessDescriptor, ThreadDescriptor, TrackDescriptor};

struct Process {
    uuid: u64,
    name: Option<String>,
}

struct Thread {
    uuid: u64,
    name: String,
}

/// A lane: a child track of a thread, and when it is busy until (slices on one track must
/// not overlap, so overlapping operations take further lanes of the same name).
struct Lane {
    uuid: u64,
    busy_until: i64,
}

#[derive(Default)]
pub(crate) struct Tracks {
    next_uuid: u64,
    processes: HashMap<i64, Process>,
    threads: HashMap<i64, Thread>,
    lanes: HashMap<(i64, &'static str), Vec<Lane>>,
    counters: HashMap<(i64, &'static str), u64>,
    globals: HashMap<&'static str, u64>,
}

impl Tracks {
    fn uuid(&mut self) -> u64 {
        self.next_uuid += 1;
        self.next_uuid
    }

    /// The track of process `pid`, named `name` (`host` as a label), with the descriptor to
    /// write when it is new or renamed.
    pub(crate) fn process(
        &mut self,
        pid: i64,
        name: Option<&str>,
        host: Option<&str>,
        out: &mut Vec<TrackDescriptor>,
    ) -> u64 {
        let uuid = match self.processes.get(&pid) {
            Some(p) if name.is_none() || p.name.as_deref() == name => return p.uuid,
            Some(p) => p.uuid,
            None => self.uuid(),
        };
        self.processes.insert(
            pid,
            Process {
                uuid,
                name: name.map(str::to_string),
            },
        );
        out.push(TrackDescriptor {
            uuid: Some(uuid),
            process: Some(ProcessDescriptor {
                pid: i32::try_from(pid).ok(),
                process_name: name.map(str::to_string),
                process_labels: host.map(|h| format!("host={h}")).into_iter().collect(),
            }),
            ..Default::default()
        });
        uuid
    }

    /// The track of thread `tid` of `pid`, named `name` (its tid when it has none), with the
    /// descriptors to write (its process's first) when new or renamed.
    pub(crate) fn thread(
        &mut self,
        pid: i64,
        tid: i64,
        name: Option<&str>,
        out: &mut Vec<TrackDescriptor>,
    ) -> u64 {
        let uuid = match self.threads.get(&tid) {
            Some(t) if name.is_none_or(|n| n == t.name) => return t.uuid,
            Some(t) => t.uuid,
            None => self.uuid(),
        };
        let name = name.map_or_else(|| tid.to_string(), str::to_string);
        self.threads.insert(
            tid,
            Thread {
                uuid,
                name: name.clone(),
            },
        );
        out.push(TrackDescriptor {
            uuid: Some(uuid),
            thread: Some(ThreadDescriptor {
                pid: i32::try_from(pid).ok(),
                tid: Some(tid),
                thread_name: Some(name),
            }),
            ..Default::default()
        });
        uuid
    }

    /// The thread track of `tid`, when it has one.
    pub(crate) fn thread_uuid(&self, tid: i64) -> Option<u64> {
        self.threads.get(&tid).map(|t| t.uuid)
    }

    /// A lane `what` of thread `tid` free over `[start, end]` (the first one free at `start`,
    /// or a new one), marked busy until `end`. `nested`: one lane whose slices nest (spans).
    pub(crate) fn lane(
        &mut self,
        tid: i64,
        what: &'static str,
        start: i64,
        end: i64,
        nested: bool,
        out: &mut Vec<TrackDescriptor>,
    ) -> u64 {
        let lanes = self.lanes.entry((tid, what)).or_default();
        if let Some(lane) = lanes.iter_mut().find(|l| nested || l.busy_until <= start) {
            lane.busy_until = lane.busy_until.max(end);
            return lane.uuid;
        }
        let n = lanes.len();
        self.next_uuid += 1;
        let uuid = self.next_uuid;
        let (parent, base) = match self.threads.get(&tid) {
            Some(t) => (Some(t.uuid), t.name.clone()),
            None => (None, tid.to_string()),
        };
        self.lanes.entry((tid, what)).or_default().push(Lane {
            uuid,
            busy_until: end,
        });
        let name = if n == 0 {
            format!("{base} {what}")
        } else {
            format!("{base} {what} {}", n + 1)
        };
        out.push(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name),
            parent_uuid: parent,
            ..Default::default()
        });
        uuid
    }

    /// The counter track `name` of process `pid` (whose track must exist), in `unit`.
    pub(crate) fn counter(
        &mut self,
        pid: i64,
        name: &'static str,
        unit: i32,
        out: &mut Vec<TrackDescriptor>,
    ) -> u64 {
        if let Some(&uuid) = self.counters.get(&(pid, name)) {
            return uuid;
        }
        let uuid = self.uuid();
        self.counters.insert((pid, name), uuid);
        out.push(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.into()),
            parent_uuid: self.processes.get(&pid).map(|p| p.uuid),
            counter: Some(CounterDescriptor { unit: Some(unit) }),
            ..Default::default()
        });
        uuid
    }

    /// A global track named `name`.
    pub(crate) fn global(&mut self, name: &'static str, out: &mut Vec<TrackDescriptor>) -> u64 {
        if let Some(&uuid) = self.globals.get(name) {
            return uuid;
        }
        let uuid = self.uuid();
        self.globals.insert(name, uuid);
        out.push(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.into()),
            ..Default::default()
        });
        uuid
    }
}
