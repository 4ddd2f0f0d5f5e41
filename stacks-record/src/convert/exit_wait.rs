//! `d` records of processes gone before their memory map was read, held until their exit record
//! comes, with the exit snapshot of their mappings (bpf/kinds/lifecycle.bpf.h). The kernel sends
//! the exit record before it takes the map down, so an empty `/proc/PID/maps` means the record
//! is on its way; but it comes through the samples ring while the stacks come through any ring,
//! and a stack may be converted first. Such a process's records with `d` stacks (and a block
//! request's record whose `d` stack was sent apart) wait, and are converted when its exit
//! record is, so their rows come late, out of time order. The wait is bounded: once every ring
//! was read [`WAIT_DRAINS`] times since and [`WAIT_MIN_AGE`] has passed (the exit record was
//! lost, or the process's main thread exited while others run, so its map reads empty), or past
//! [`WAIT_MAX_BYTES`] in all, a process's records are converted as they are and it is not
//! waited for again. Counting reads, not only time, keeps a recorder starved of CPU from giving
//! up on an exit record that waits in its ring.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::Converter;
use crate::kernel::event::{RawEvent, USTACK_APART};
use crate::output::rows::RowBuilder;

/// Reads of every ring (drains) after which a process's exit record is not waited for any more:
/// the kernel sent it before the map read empty, so the next read takes it (unless it was
/// lost), and the one after converts it.
const WAIT_DRAINS: u64 = 2;
/// ... once this long has passed, too: a multithreaded process's map reads empty once its main
/// thread is out, a little before its last thread sends the exit record.
const WAIT_MIN_AGE: Duration = Duration::from_secs(1);
/// Bytes of waiting records at most, over every process.
const WAIT_MAX_BYTES: usize = 32 << 20;

/// One process waited for.
struct Waiting {
    since: Instant,
    /// [`ExitWaits::drains`] when it started.
    since_drain: u64,
    records: Vec<Box<[u8]>>,
}

/// The processes whose exit record is waited for, and their records.
#[derive(Default)]
pub(crate) struct ExitWaits {
    procs: HashMap<u32, Waiting, ahash::RandomState>,
    /// Processes given up on: not waited for again.
    given_up: HashSet<u32, ahash::RandomState>,
    bytes: usize,
    /// Drains so far ([`Converter::exit_waits_drained`]).
    drains: u64,
    /// Records that waited for their process's exit record.
    pub held: u64,
    /// Processes whose exit record did not come in time.
    pub given_up_procs: u64,
}

impl Converter {
    /// Hold record `e` (its bytes `bytes`) until its process's exit record when it has a `d`
    /// stack and the process's map is gone before it was read; true when held.
    pub(super) fn hold_for_exit(
        &mut self,
        e: &RawEvent<'_>,
        bytes: &[u8],
        rows: &mut RowBuilder,
    ) -> bool {
        let pid = e.h.pid;
        let apart = e.h.ustack_len == USTACK_APART;
        if e.h.uwindow == 0 && !apart {
            return false;
        }
        if !self.exit_waits.procs.contains_key(&pid) {
            // A record whose stack was sent apart waits only behind that stack.
            if e.h.uwindow == 0
                || pid == 0
                || self.exit_maps.exit_seen(pid)
                || self.exit_waits.given_up.contains(&pid)
                || self.unwinders.read_live(pid)
            {
                return false;
            }
            self.exit_waits.procs.insert(
                pid,
                Waiting {
                    since: Instant::now(),
                    since_drain: self.exit_waits.drains,
                    records: Vec::new(),
                },
            );
        }
        let w = self.exit_waits.procs.get_mut(&pid).expect("waited for");
        w.records.push(bytes.into());
        self.exit_waits.bytes += bytes.len();
        self.exit_waits.held += 1;
        self.release_excess_exit_waits(rows);
        true
    }

    /// Every ring was read and what was read converted: give up on the exit records that did
    /// not come (see [`WAIT_DRAINS`]).
    pub(crate) fn exit_waits_drained(&mut self, rows: &mut RowBuilder) {
        let w = &mut self.exit_waits;
        w.drains += 1;
        let overdue: Vec<u32> = w
            .procs
            .iter()
            .filter(|(_, p)| {
                w.drains - p.since_drain >= WAIT_DRAINS && p.since.elapsed() >= WAIT_MIN_AGE
            })
            .map(|(&pid, _)| pid)
            .collect();
        for pid in overdue {
            self.give_up_exit_wait(pid, rows);
        }
    }

    /// Past the byte bound, convert the records of the processes waited for longest.
    fn release_excess_exit_waits(&mut self, rows: &mut RowBuilder) {
        while self.exit_waits.bytes > WAIT_MAX_BYTES {
            let oldest = self
                .exit_waits
                .procs
                .iter()
                .min_by_key(|(_, w)| w.since)
                .map(|(&pid, _)| pid);
            match oldest {
                Some(pid) => self.give_up_exit_wait(pid, rows),
                None => break,
            }
        }
    }

    /// Convert `pid`'s waiting records as they are, and wait for it no more.
    fn give_up_exit_wait(&mut self, pid: u32, rows: &mut RowBuilder) {
        self.exit_waits.given_up.insert(pid);
        self.exit_waits.given_up_procs += 1;
        self.release_exit_wait(pid, rows);
    }

    /// Convert what `pid` has waiting (its exit record came, or it is given up on).
    pub(super) fn release_exit_wait(&mut self, pid: u32, rows: &mut RowBuilder) {
        let Some(w) = self.exit_waits.procs.remove(&pid) else {
            return;
        };
        for bytes in w.records {
            self.exit_waits.bytes -= bytes.len();
            match RawEvent::from_bytes(&bytes) {
                Ok(e) => self.push(&e, rows),
                Err(_) => self.counts.malformed += 1,
            }
        }
    }

    /// The recording ends: what still waits is converted.
    pub(super) fn release_all_exit_waits(&mut self, rows: &mut RowBuilder) {
        let pids: Vec<u32> = self.exit_waits.procs.keys().copied().collect();
        for pid in pids {
            self.release_exit_wait(pid, rows);
        }
    }

    /// Forget a process gone (its exit record converted what it held).
    pub(super) fn forget_exit_wait(&mut self, pid: u32) {
        self.exit_waits.given_up.remove(&pid);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::kernel::abi::types::{stacks_exit, stacks_exit_map, stacks_uregs};
    use crate::kernel::event::{HEADER_SIZE, Header, INFO_OFFSET, Kind, NOT_REQUESTED};

    /// A pid above the kernel's limit (PID_MAX_LIMIT, 4M): no /proc entry, as a process gone.
    const GONE: u32 = 4_194_400;

    /// The bytes of a plain #[repr(C)] struct of integers.
    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: `v` is a live T; the generated ABI types are plain integers.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    /// A record of `h` with the per-kind bytes `info` and `tail` after the header.
    fn record(h: Header, info: &[u8], tail: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_SIZE];
        out[..size_of::<Header>()].copy_from_slice(&bytes_of(&h));
        out[INFO_OFFSET..INFO_OFFSET + info.len()].copy_from_slice(info);
        out.extend_from_slice(tail);
        out
    }

    /// A CPU sample of process `pid` with a `d` stack (one frame-pointer address, the
    /// registers, no stack copy).
    fn d_sample(pid: u32) -> Vec<u8> {
        let regs = stacks_uregs {
            ip: 0x1010,
            sp: 0x7000_0000,
            ..stacks_uregs::default()
        };
        let mut tail = 0x1010u64.to_ne_bytes().to_vec();
        tail.extend(bytes_of(&regs));
        let h = Header {
            kind: Kind::STACKS_EV_PROFILE,
            pid,
            tid: pid,
            kstack_len: NOT_REQUESTED,
            ustack_len: 1,
            uwindow: size_of::<stacks_uregs>() as u32,
            count: 1,
            ..Header::default()
        };
        record(h, &[], &tail)
    }

    /// The exit record of process `pid` with a snapshot of one executable mapping.
    fn exit(pid: u32) -> Vec<u8> {
        let map = stacks_exit_map {
            start: 0x1000,
            end: 0x2000,
            dev: 1,
            ..stacks_exit_map::default()
        };
        let info = stacks_exit {
            maps: 1,
            ..stacks_exit::default()
        };
        let h = Header {
            kind: Kind::STACKS_EV_EXIT,
            pid,
            tid: pid,
            kstack_len: NOT_REQUESTED,
            ustack_len: NOT_REQUESTED,
            count: 1,
            ..Header::default()
        };
        record(h, &bytes_of(&info), &bytes_of(&map))
    }

    fn hold_or_push(conv: &mut Converter, bytes: &[u8], rows: &mut RowBuilder) -> bool {
        let e = RawEvent::from_bytes(bytes).expect("a well-formed record");
        let held = conv.hold(&e, bytes, rows);
        if !held {
            conv.push(&e, rows);
        }
        held
    }

    #[test]
    fn d_stacks_of_a_process_gone_wait_for_its_exit_snapshot() {
        let schema = Arc::new(stacks_stream::raw_schema(HashMap::new()));
        let mut rows = RowBuilder::new(schema).unwrap();
        let mut conv = Converter::new(0, None);
        assert!(hold_or_push(&mut conv, &d_sample(GONE), &mut rows), "held");
        assert!(hold_or_push(&mut conv, &d_sample(GONE), &mut rows), "held");
        assert_eq!(rows.len(), 0);
        // The exit record brings the snapshot: both stacks are unwound with it, before its row.
        assert!(!hold_or_push(&mut conv, &exit(GONE), &mut rows));
        assert_eq!(rows.len(), 3);
        let u = &conv.unwinders.counts;
        assert_eq!((u.stacks, u.from_snapshot, u.no_map), (2, 1, 0));
        assert_eq!(u.snapshot_files_gone, 1, "the snapshot's file is not there");
        assert_eq!(conv.exit_waits.held, 2);
        // A stack read after the exit record (another ring) is unwound at once.
        assert!(!hold_or_push(&mut conv, &d_sample(GONE), &mut rows));
        assert_eq!((rows.len(), conv.unwinders.counts.from_snapshot), (4, 1));
        // A live process's stacks never wait.
        assert!(!hold_or_push(
            &mut conv,
            &d_sample(std::process::id()),
            &mut rows
        ));
    }

    #[test]
    fn the_wait_is_bounded() {
        let schema = Arc::new(stacks_stream::raw_schema(HashMap::new()));
        let mut rows = RowBuilder::new(schema).unwrap();
        let mut conv = Converter::new(0, None);
        assert!(hold_or_push(&mut conv, &d_sample(GONE), &mut rows));
        // Not given up on while the rings were not read twice since, nor a second passed.
        conv.exit_waits_drained(&mut rows);
        conv.exit_waits_drained(&mut rows);
        assert_eq!(rows.len(), 0, "waits for a second");
        conv.exit_waits.procs.get_mut(&GONE).unwrap().since -= WAIT_MIN_AGE;
        conv.exit_waits_drained(&mut rows);
        assert_eq!(rows.len(), 1, "converted without a map");
        assert_eq!(conv.exit_waits.given_up_procs, 1);
        assert_eq!(conv.unwinders.counts.no_map, 1);
        // Not waited for again.
        assert!(!hold_or_push(&mut conv, &d_sample(GONE), &mut rows));
        // The recording's end converts what waits.
        assert!(hold_or_push(&mut conv, &d_sample(GONE - 1), &mut rows));
        conv.release_all(&mut rows);
        assert_eq!(rows.len(), 3);
    }
}
