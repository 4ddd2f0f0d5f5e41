//! Events the kernel side could not deliver, by cause: the per-CPU `drops` counters of the BPF
//! programs (`enum stacks_drop`), turned into `lost` rows with a `cause` and into the summary.
//! The kind a cause names is the registry's name of the recorder kind owning the record
//! (`kinds::ALL`), so a new kind is named without a line here.

use std::collections::BTreeMap;

use anyhow::Result;
use stacks_stream::kinds::Loss;
use stacks_stream::{kind, lost};

use crate::convert::Counts;
use crate::host;
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{stacks_drop as Drop, stacks_event_kind as Kind};
use crate::kernel::load as bpf;
use crate::kinds;
use crate::output::rows::{Extra, Row, RowBuilder};

/// The record kind of counter `index` when it is of cause `first` counted by kind.
fn by_kind(first: Drop, index: u32) -> Option<u32> {
    index
        .checked_sub(first.0)
        .filter(|record| *record < kinds::KIND_ROOM)
}

/// The `cause` of a `lost` row for counter `index` of `enum stacks_drop`: `WHY:KIND`, e.g.
/// `ring_buffer_full:vfs` or `map_full:block`.
pub(crate) fn cause_name(index: u32) -> String {
    if let Some(record) = by_kind(Drop::STACKS_DROP_RINGBUF, index) {
        return lost::ring_buffer_full(&kind_name(record));
    }
    if let Some(record) = by_kind(Drop::STACKS_DROP_MAP_FULL, index) {
        return lost::of(Loss::MapFull, &kind_name(record));
    }
    match Drop(index) {
        Drop::STACKS_DROP_SWITCH_STORAGE => lost::NO_TASK_STORAGE_SWITCH,
        Drop::STACKS_DROP_VFS_STORAGE => lost::NO_TASK_STORAGE_VFS,
        Drop::STACKS_DROP_PROBE_BUSY => lost::NO_FREE_SLOT_PROBE,
        Drop::STACKS_DROP_BLOCK_UNSEEN => lost::COMPLETION_UNSEEN_BLOCK,
        _ => return format!("unknown_{index}"),
    }
    .to_string()
}

/// The stream kind a record kind becomes: the registry name of the recorder kind that turns
/// the record into rows or sends it as a part of another ([`kinds::ALL`]), the process
/// lifecycle's records each their own kind; `record_N` for a record no kind owns.
fn kind_name(record: u32) -> String {
    stream_kind(record).map_or_else(|| format!("record_{record}"), str::to_string)
}

/// The registry kind of records of kind `record`, when a recorder kind owns them.
fn stream_kind(record: u32) -> Option<&'static str> {
    use stacks_stream::kind;
    let record = Kind(record);
    match record {
        // One recorder kind, three stream kinds.
        Kind::STACKS_EV_EXEC => return Some(kind::EXEC),
        Kind::STACKS_EV_EXIT => return Some(kind::EXIT),
        Kind::STACKS_EV_FORK => return Some(kind::FORK),
        _ => {}
    }
    let owner = kinds::ALL
        .iter()
        .find(|k| k.records().contains(&record) || k.parts().contains(&record))?;
    stacks_stream::kinds::get(owner.name()).map(|k| k.name)
}

/// A `lost` row of `n` events of `cause` on `cpu`, counted in `counts`.
fn push_lost(
    rows: &mut RowBuilder,
    counts: &mut Counts,
    time_ns: i64,
    cpu: i32,
    cause: String,
    n: u64,
) {
    counts.lost += n;
    rows.push(&Row {
        time_ns,
        kind: kind::LOST,
        pid: 0,
        tid: 0,
        comm: "",
        thread: "",
        cgroup: None,
        cpu,
        value: n as i64,
        stacks: Default::default(),
        kstack_error: None,
        ustack_error: None,
        ustack_unwind: None,
        ustack_truncated: None,
        extra: Extra {
            cause: Some(cause),
            ..Default::default()
        },
    });
}

/// The drop counters seen so far, to turn new totals into deltas.
#[derive(Default)]
pub(crate) struct Drops {
    seen: Vec<Vec<u64>>,
    /// Totals by cause name over the recording.
    pub by_cause: BTreeMap<String, u64>,
    /// Switches the tracepoint did not report, whose off-CPU time was accounted from the
    /// threads' CPU time (not lost: see `STACKS_DROP_END_INFERRED`).
    pub inferred_ends: u64,
    /// Hits of counting probes sent as single rows (table full or stack slot taken; not
    /// lost: see `STACKS_DROP_PROBE_UNCOUNTED`).
    pub uncounted_hits: u64,
    /// `d` stacks taken by frame pointers while the ring buffer was over half full (not lost:
    /// see `STACKS_DROP_DWARF_FP`).
    pub dwarf_as_fp: u64,
    /// Kernel stacks served from the cache of checked unwinds (not lost: see
    /// `STACKS_DROP_KSTACK_CACHED` and bpf/kstack.bpf.h).
    pub kstacks_cached: u64,
    /// Served kernel stacks that a re-check found different from the kernel's unwind
    /// (`STACKS_DROP_KSTACK_WRONG`): each retires its cache key.
    pub kstacks_wrong: u64,
    /// Re-checks of served kernel stacks that agreed (`STACKS_DROP_KSTACK_AGREED`).
    pub kstacks_agreed: u64,
    /// Kernel stacks of kept off-CPU intervals served from the cache at their switch-in
    /// (`STACKS_DROP_KSTACK_LATE`).
    pub kstacks_late: u64,
    /// Kernel stacks of kept off-CPU intervals unwound at their switch-in, without the frames
    /// in `.sched.text` (`STACKS_DROP_KSTACK_LATE_UNWOUND`).
    pub kstacks_late_unwound: u64,
    /// With every use re-checked: switch-ins whose entry agreed with the switch-out's unwind
    /// (`STACKS_DROP_KSTACK_LATE_AGREED`).
    pub kstacks_late_agreed: u64,
    /// `block:n` requests kept in the in-flight table, their slot held by another (not lost:
    /// see `STACKS_DROP_BLOCK_TABLED`).
    pub block_tabled: u64,
    /// Events aggregated in the kernel while their ring buffer was backed up, by kind name
    /// (not lost: rows stand for them, see `STACKS_DROP_AGGREGATED`).
    pub aggregated: BTreeMap<String, u64>,
    /// Events that found the aggregation table full, by kind name (then sent as records, or
    /// lost as `ring_buffer_full` when their ring was full too).
    pub agg_full: BTreeMap<String, u64>,
}

impl Drops {
    /// Append a `lost` row per CPU and cause whose drop counter grew since the last look.
    pub(crate) fn push_rows(
        &mut self,
        skel: &StacksSkel<'_>,
        rows: &mut RowBuilder,
        counts: &mut Counts,
    ) -> Result<()> {
        let now = bpf::drops_per_cpu(skel)?;
        let time_ns = host::realtime_ns();
        for (cpu, cause, n) in self.update(&now) {
            push_lost(rows, counts, time_ns, cpu, cause, n);
        }
        Ok(())
    }

    /// Append a `lost` row of `n` events of `cause` found in user space (not by a BPF
    /// counter), on no CPU (`cpu` -1).
    pub(crate) fn push_found(
        &mut self,
        cause: &str,
        n: u64,
        rows: &mut RowBuilder,
        counts: &mut Counts,
    ) {
        if n == 0 {
            return;
        }
        *self.by_cause.entry(cause.to_string()).or_default() += n;
        push_lost(rows, counts, host::realtime_ns(), -1, cause.to_string(), n);
    }

    /// New drops since the last call, as (cpu, cause name, count), from per-CPU totals indexed
    /// by cause.
    pub(crate) fn update(&mut self, now: &[Vec<u64>]) -> Vec<(i32, String, u64)> {
        let mut out = Vec::new();
        let mut seen_all = std::mem::take(&mut self.seen);
        seen_all.resize(now.len(), Vec::new());
        for (cpu, (totals, seen)) in now.iter().zip(seen_all.iter_mut()).enumerate() {
            seen.resize(totals.len(), 0);
            for (cause, (&total, prev)) in totals.iter().zip(seen.iter_mut()).enumerate() {
                let aggregated = by_kind(Drop::STACKS_DROP_AGGREGATED, cause as u32);
                let agg_full = by_kind(Drop::STACKS_DROP_AGG_FULL, cause as u32);
                if let Some(record) = aggregated.filter(|_| total > *prev) {
                    *self.aggregated.entry(kind_name(record)).or_default() += total - *prev;
                    *prev = total;
                } else if let Some(record) = agg_full.filter(|_| total > *prev) {
                    *self.agg_full.entry(kind_name(record)).or_default() += total - *prev;
                    *prev = total;
                } else if let Some(count) = self.note_of(cause as u32).filter(|_| total > *prev) {
                    *count += total - *prev;
                    *prev = total;
                } else if total > *prev {
                    let name = cause_name(cause as u32);
                    *self.by_cause.entry(name.clone()).or_default() += total - *prev;
                    out.push((cpu as i32, name, total - *prev));
                    *prev = total;
                }
            }
        }
        self.seen = seen_all;
        out
    }

    /// The counter of a cause that is not a loss, counted for the summary only.
    fn note_of(&mut self, cause: u32) -> Option<&mut u64> {
        Some(match Drop(cause) {
            Drop::STACKS_DROP_END_INFERRED => &mut self.inferred_ends,
            Drop::STACKS_DROP_PROBE_UNCOUNTED => &mut self.uncounted_hits,
            Drop::STACKS_DROP_DWARF_FP => &mut self.dwarf_as_fp,
            Drop::STACKS_DROP_KSTACK_CACHED => &mut self.kstacks_cached,
            Drop::STACKS_DROP_KSTACK_WRONG => &mut self.kstacks_wrong,
            Drop::STACKS_DROP_KSTACK_AGREED => &mut self.kstacks_agreed,
            Drop::STACKS_DROP_KSTACK_LATE => &mut self.kstacks_late,
            Drop::STACKS_DROP_KSTACK_LATE_UNWOUND => &mut self.kstacks_late_unwound,
            Drop::STACKS_DROP_KSTACK_LATE_AGREED => &mut self.kstacks_late_agreed,
            Drop::STACKS_DROP_BLOCK_TABLED => &mut self.block_tabled,
            _ => return None,
        })
    }

    /// All causes' total.
    pub(crate) fn total(&self) -> u64 {
        self.by_cause.values().sum()
    }

    /// `lost N events (CAUSE n, …)` for the summary, and the inferred interval ends.
    pub(crate) fn describe(&self) -> String {
        let inferred = if self.inferred_ends > 0 {
            format!(
                "; off-CPU time of {} switches the tracepoint did not report taken from the threads' CPU time",
                self.inferred_ends
            )
        } else {
            String::new()
        };
        let inferred = if self.uncounted_hits > 0 {
            format!(
                "{inferred}; {} hits of counting probes sent as rows (count table full or stack slot taken)",
                self.uncounted_hits
            )
        } else {
            inferred
        };
        let inferred = if self.dwarf_as_fp > 0 {
            format!(
                "{inferred}; {} d stacks taken by frame pointers (ring buffer over half full)",
                self.dwarf_as_fp
            )
        } else {
            inferred
        };
        let mut inferred = inferred;
        if self.kstacks_cached + self.kstacks_agreed + self.kstacks_wrong > 0 {
            inferred.push_str(&format!(
                "; {} kernel stacks from the cache of checked unwinds, re-checks: {} agreed, {} found different",
                self.kstacks_cached, self.kstacks_agreed, self.kstacks_wrong
            ));
        }
        if self.kstacks_late + self.kstacks_late_unwound + self.kstacks_late_agreed > 0 {
            inferred.push_str(&format!(
                "; kernel stacks of kept off-CPU intervals at their switch-in: {} from the cache, {} unwound without the scheduler's frames, {} checked against the switch-out's unwind",
                self.kstacks_late, self.kstacks_late_unwound, self.kstacks_late_agreed
            ));
        }
        if self.block_tabled > 0 {
            inferred.push_str(&format!(
                "; {} block requests kept in the in-flight table (their slot held by another)",
                self.block_tabled
            ));
        }
        for (kind, n) in &self.aggregated {
            let why = kinds::aggregated_why(kind);
            inferred.push_str(&format!(
                "; {n} {kind} events aggregated in the kernel ({why})"
            ));
        }
        for (kind, n) in &self.agg_full {
            inferred.push_str(&format!(
                "; {n} {kind} events found the aggregation table full"
            ));
        }
        if self.by_cause.is_empty() {
            return format!("lost 0 events{inferred}");
        }
        let parts: Vec<String> = self
            .by_cause
            .iter()
            .map(|(cause, n)| format!("{cause} {n}"))
            .collect();
        format!(
            "lost {} events ({}){inferred}",
            self.total(),
            parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of `enum stacks_event_kind` in bpf/stacks.h.
    fn record_kinds_of_stacks_h() -> Vec<(String, u32)> {
        let path = stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("../bpf/stacks.h");
        let text = std::fs::read_to_string(&path).expect("bpf/stacks.h");
        let body = text
            .split("enum stacks_event_kind {")
            .nth(1)
            .and_then(|t| t.split("};").next())
            .expect("enum stacks_event_kind in bpf/stacks.h");
        body.lines()
            .filter_map(|l| {
                let (name, value) = l.trim().strip_prefix("STACKS_EV_")?.split_once('=')?;
                let value = value.trim().trim_end_matches(',').parse().ok()?;
                Some((name.trim().to_string(), value))
            })
            .collect()
    }

    /// Every record kind of bpf/stacks.h names a kind of the registry in `lost` causes.
    #[test]
    fn every_record_kind_names_a_registry_kind() {
        let records = record_kinds_of_stacks_h();
        assert!(records.len() >= 14, "{records:?}");
        for (what, record) in records {
            let name = stream_kind(record);
            assert!(
                name.is_some_and(|n| stacks_stream::kinds::get(n).is_some()),
                "STACKS_EV_{what} ({record}): no registry kind ({name:?}): \
                 no recorder kind lists it in records() or parts()"
            );
            assert_eq!(
                cause_name(Drop::STACKS_DROP_RINGBUF.0 + record),
                format!("ring_buffer_full:{}", name.unwrap_or_default())
            );
        }
        assert_eq!(stream_kind(Kind::STACKS_EV_SWITCH_FOLDED.0), Some("switch"));
        assert_eq!(stream_kind(Kind::STACKS_EV_UWINDOW.0), Some("block"));
        assert_eq!(stream_kind(Kind::STACKS_EV_SPAN.0), Some("span"));
        assert_eq!(kind_name(99), "record_99");
    }

    /// Every cause a loss can be counted under is one stacks_stream::lost lists (consumers
    /// export them at 0 before anything is lost): the ring of each record kind, and every
    /// counter past the per-kind ones that is not a note.
    #[test]
    fn every_cause_is_a_known_one() {
        let known = lost::known();
        for (what, record) in record_kinds_of_stacks_h() {
            let cause = cause_name(Drop::STACKS_DROP_RINGBUF.0 + record);
            assert!(
                known.contains(&cause),
                "STACKS_EV_{what}: {cause} not in {known:?}"
            );
        }
        let mut drops = Drops::default();
        for index in Drop::STACKS_DROP_SWITCH_STORAGE.0..Drop::STACKS_DROP_COUNT.0 {
            if drops.note_of(index).is_some() {
                continue;
            }
            let cause = cause_name(index);
            if cause.starts_with("unknown_") {
                continue;
            }
            assert!(
                known.contains(&cause),
                "counter {index}: {cause} not in {known:?}"
            );
        }
        // A kind's own causes are named by its records' counters.
        for k in stacks_stream::kinds::ALL {
            for loss in k.losses {
                let Loss::MapFull = loss;
                assert!(
                    record_kinds_of_stacks_h().iter().any(|(_, r)| {
                        cause_name(Drop::STACKS_DROP_MAP_FULL.0 + r) == lost::of(*loss, k.name)
                    }),
                    "{}: no record counts {}",
                    k.name,
                    lost::of(*loss, k.name)
                );
            }
        }
        for fixed in lost::FIXED {
            assert!(
                (0..Drop::STACKS_DROP_COUNT.0).any(|i| cause_name(i) == fixed),
                "{fixed} is named by no counter"
            );
        }
    }

    /// A record kind anywhere in the room for kinds has counters of its own: `uring` (17, the
    /// first kind past the old layout's 16, whose ring losses would have counted as
    /// `no_task_storage:switch_out`) and a made-up kind at the room's last place, its ring
    /// losses, aggregated events and aggregation-table misses each under its own name.
    #[test]
    fn a_new_kind_counts_its_drops_as_its_own() {
        let uring = Kind::STACKS_EV_URING.0;
        assert_eq!(
            cause_name(Drop::STACKS_DROP_RINGBUF.0 + uring),
            "ring_buffer_full:uring"
        );
        assert_eq!(
            cause_name(Drop::STACKS_DROP_MAP_FULL.0 + uring),
            "map_full:uring"
        );
        let last = kinds::KIND_ROOM - 1;
        let n = Drop::STACKS_DROP_COUNT.0 as usize;
        let mut cpu = vec![0; n];
        cpu[(Drop::STACKS_DROP_RINGBUF.0 + last) as usize] = 2;
        cpu[(Drop::STACKS_DROP_AGGREGATED.0 + last) as usize] = 3;
        cpu[(Drop::STACKS_DROP_AGG_FULL.0 + last) as usize] = 4;
        cpu[(Drop::STACKS_DROP_MAP_FULL.0 + last) as usize] = 6;
        cpu[(Drop::STACKS_DROP_RINGBUF.0 + uring) as usize] = 5;
        let mut d = Drops::default();
        let mut rows = d.update(&[cpu]);
        rows.sort();
        assert_eq!(
            rows,
            [
                (0, format!("map_full:record_{last}"), 6),
                (0, format!("ring_buffer_full:record_{last}"), 2),
                (0, "ring_buffer_full:uring".to_string(), 5)
            ]
        );
        assert_eq!(d.aggregated.get(&format!("record_{last}")), Some(&3));
        assert_eq!(d.agg_full.get(&format!("record_{last}")), Some(&4));
        // No counter is named as another: each index is its own cause.
        let mut names: Vec<String> = (0..Drop::STACKS_DROP_COUNT.0)
            .filter(|&i| {
                by_kind(Drop::STACKS_DROP_RINGBUF, i).is_some()
                    || by_kind(Drop::STACKS_DROP_MAP_FULL, i).is_some()
            })
            .map(cause_name)
            .chain(
                (Drop::STACKS_DROP_SWITCH_STORAGE.0..Drop::STACKS_DROP_COUNT.0)
                    .map(cause_name)
                    .filter(|c| !c.starts_with("unknown_")),
            )
            .collect();
        let all = names.len();
        names.sort();
        names.dedup();
        // Three records are parts of another kind's rows and named as it, in each of the two
        // causes: SWITCH_FOLDED as switch, UWINDOW as block, URING_USTACK as its kind.
        assert_eq!(all - names.len(), 6, "{names:?}");
    }

    #[test]
    fn causes_are_named_and_counted_as_deltas() {
        let ring_vfs = Drop::STACKS_DROP_RINGBUF.0 + Kind::STACKS_EV_VFS.0;
        assert_eq!(cause_name(ring_vfs), "ring_buffer_full:vfs");
        assert_eq!(
            cause_name(Drop::STACKS_DROP_MAP_FULL.0 + Kind::STACKS_EV_BLOCK.0),
            "map_full:block"
        );
        let n = Drop::STACKS_DROP_COUNT.0 as usize;
        let mut d = Drops::default();
        let mut cpu0 = vec![0; n];
        cpu0[ring_vfs as usize] = 3;
        let cpu1 = vec![0; n];
        assert_eq!(
            d.update(&[cpu0.clone(), cpu1.clone()]),
            vec![(0, "ring_buffer_full:vfs".to_string(), 3)]
        );
        assert!(d.update(&[cpu0.clone(), cpu1.clone()]).is_empty());
        cpu0[(Drop::STACKS_DROP_MAP_FULL.0 + Kind::STACKS_EV_BLOCK.0) as usize] = 1;
        cpu0[ring_vfs as usize] = 5;
        cpu0[Drop::STACKS_DROP_END_INFERRED.0 as usize] = 4;
        cpu0[Drop::STACKS_DROP_KSTACK_CACHED.0 as usize] = 7;
        assert_eq!(d.update(&[cpu0.clone(), cpu1.clone()]).len(), 2);
        assert_eq!(d.kstacks_cached, 7);
        cpu0[Drop::STACKS_DROP_KSTACK_CACHED.0 as usize] = 9;
        assert!(d.update(&[cpu0, cpu1]).is_empty());
        assert_eq!(d.kstacks_cached, 9);
        assert_eq!(d.total(), 6);
        assert_eq!(d.inferred_ends, 4);
        assert_eq!(
            d.describe(),
            "lost 6 events (map_full:block 1, ring_buffer_full:vfs 5); off-CPU time of 4 switches the tracepoint did not report taken from the threads' CPU time; 9 kernel stacks from the cache of checked unwinds, re-checks: 0 agreed, 0 found different"
        );
    }
}
