//! The event kinds, one module each behind [`EventKind`]: the BPF programs of its
//! `bpf/kinds/<kind>.bpf.h`, its tunables, how its records become rows, and its part in a
//! recording besides them ([`run::Run`]: probes to attach, a sampler to run). [`ALL`] is the
//! registry; the `-e` grammar and each kind's defaults come from `stacks_stream::kinds`.
//!
//! A kind's module is its file here: build.rs declares every file of this directory that has
//! `impl EventKind for TYPE` as a module and lists its `TYPE` in [`ALL`].

pub(crate) mod run;

// `mod KIND;` for each kind's file, and `KINDS`, every kind (build.rs).
include!(concat!(env!("OUT_DIR"), "/kinds.rs"));

use anyhow::{Context as _, Result, bail};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};

use crate::kernel::abi::types::{
    rodata, stacks_agg as AggSums, stacks_agg_key as AggKey, stacks_event_kind as RecordKind,
    stacks_ring as Ring,
};
use crate::kernel::abi::{OpenStacksMaps, OpenStacksSkel, StacksSkel, StacksSkelBuilder};
use crate::kernel::event::Header;
use crate::kernel::event::RawEvent;
use crate::output::rows::Extra;
use crate::process::exit_maps::ExitMaps;
use crate::process::fdnames::{FileNames, SockAddrs};
use crate::process::modules::ModuleIndex;
use crate::process::normalize::UserNormalizer;
use crate::process::unwind::Unwinders;
use crate::spec::{EventSpec, KindArgs};
pub(crate) use run::{KindData, Run, Runs, Setup};

/// What a record contributes to its row besides ids and stacks.
pub(crate) struct Decoded {
    pub(crate) kind: &'static str,
    pub(crate) value: i64,
    pub(crate) extra: Extra,
}

/// What a kind's kernel side still holds for a thread when the recording ends: a row without
/// stacks.
pub(crate) struct Remainder {
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) row: Decoded,
}

/// What decoding a record may read and change: the converter's per-process state.
pub(crate) struct Context<'a> {
    pub(crate) files: &'a mut FileNames,
    pub(crate) sockaddrs: &'a mut SockAddrs,
    pub(crate) modules: &'a mut ModuleIndex,
    pub(crate) norm: &'a mut UserNormalizer,
    pub(crate) unwinders: &'a mut Unwinders,
    /// Exit snapshots: an exit record's is kept here.
    pub(crate) exit_maps: &'a mut ExitMaps,
    /// What the kinds keep for decoding (put in by their [`EventKind::run`]).
    pub(crate) data: &'a KindData,
    /// The summary's counts of what the kinds saw besides their rows, by what it is.
    pub(crate) notes: &'a mut Notes,
}

/// What the kinds count for the summary line besides their rows (`; N what`), by what it is.
pub(crate) type Notes = std::collections::BTreeMap<&'static str, u64>;

/// A paired record's edge ([`Taken::Interval`]): it opens an interval on its thread, or closes
/// the innermost one open there with the same id.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Edge {
    Open(u64),
    Close(u64),
}

/// What the recorder does with a record besides decoding it ([`EventKind::effects`]): the
/// converter (`convert/mod.rs`) and the reading loop (`record/mod.rs`) apply each field at its
/// step, in the order its field's documentation gives. The default: a row of its own, nothing
/// else.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Effects {
    /// How the converter takes it.
    pub(crate) taken: Taken,
    /// What it says of its process's life.
    pub(crate) life: Life,
    /// Its stacks are its thread's latest, which the thread's later records may repeat
    /// (`STACKS_SAME_STACKS`): kept once its stacks are converted, before its row.
    pub(crate) latest_stacks: bool,
    /// Its header's count is of hits, a row standing for many: counted when it is decoded,
    /// and reported beside its kind's rows in the summary when they differ.
    pub(crate) hits: bool,
}

/// How the converter takes a record ([`Effects::taken`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) enum Taken {
    /// A row of its own, from [`EventKind::decode`].
    #[default]
    Row,
    /// An edge of an interval on its thread ([`EventKind::edge`]: a span entered or left): an
    /// open one is kept until its close, then the two make one row, from the open's time and
    /// stacks, lasting until the close ([`EventKind::interval`]; `convert/intervals.rs`); none
    /// is decoded.
    Interval,
    /// A `d` user stack sent apart from the record it is a part of ([`EventKind::parts`]):
    /// unwound now and kept for that record (`Converter::user_stack_apart`).
    StackApart,
}

/// What a record says of its process's life ([`Effects::life`]), which the recorder's
/// per-process state follows.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) enum Life {
    /// Nothing: it goes on.
    #[default]
    Runs,
    /// It runs a new image (an exec). When the reading loop takes it, the process's spans are
    /// registered and its Python state is forgotten and looked at anew. Converting it lets
    /// the command held at the gate through; then, before the row's stacks, its records held
    /// for its perf map are converted (the map read once more), then those waiting for its
    /// exit snapshot, with what can be read now.
    Execs,
    /// It ended (an exit). Before the reading loop takes it, the counting probes' table is
    /// drained (their hits converted while the process's maps are still known); when it
    /// takes it, its Python state is forgotten. Converting it, before the row's stacks: its
    /// held records are converted (its perf map read once more) and none is held again, then
    /// those that waited for its exit snapshot; after the stacks, before the row: its spans
    /// still entered end, and its address caches are dropped a little later.
    Exits,
}

/// One event kind of the recorder.
pub(crate) trait EventKind: Sync {
    /// What messages call it: its registry entry's name (`stacks_stream::kind`).
    fn name(&self) -> &'static str;

    /// The `-e` name that turns it on; `None`: always on, or on by other means.
    fn event(&self) -> Option<&'static str> {
        Some(self.name())
    }

    /// The programs of its `bpf/kinds/<kind>.bpf.h`, by name.
    fn programs(&self) -> &'static [&'static str];

    /// Whether `program` is loaded for `spec`: by default, when `-e` names the kind.
    fn loads(&self, _program: &str, spec: &EventSpec) -> bool {
        self.event().is_none_or(|e| spec.get(e).is_some())
    }

    /// Set its tunables (`on`: its `-e` entry, when given).
    fn configure(&self, _rodata: &mut rodata, _on: Option<&KindArgs>) {}

    /// Size its maps before load (`on`: its `-e` entry, when given): a preallocated table it
    /// does not use can shrink to one entry.
    fn size_maps(&self, _maps: &mut OpenStacksMaps<'_>, _on: Option<&KindArgs>) -> Result<()> {
        Ok(())
    }

    /// The kernel records it turns into rows.
    fn records(&self) -> &'static [RecordKind];

    /// Records it sends besides [`Self::records`] (parts of another record).
    fn parts(&self) -> &'static [RecordKind] {
        &[]
    }

    /// The ring buffer its records go through: its class of kinds, as the registry declares
    /// it (`stacks_stream::kinds::Kind::ring`).
    fn ring(&self) -> Ring {
        registry_ring(self.name())
    }

    /// Whether its kernel stacks are taken in tracepoint programs (ctx is the tracepoint's
    /// arguments on the thread's stack), so they may be served from the cache of the kernel's
    /// unwinds (bpf/kstack.bpf.h, `kstack_kinds`). Every kind says.
    fn kstack_cached(&self) -> bool;

    /// Whether the kernel aggregates its events while its ring buffer is backed up.
    fn aggregates(&self) -> bool {
        false
    }

    /// Why the kernel aggregated its events, as the summary line says it.
    fn aggregated_why(&self) -> &'static str {
        "ring buffer backed up"
    }

    /// Whether its `-e` argument (a rate, a MIN) changes while recording (`--control`): its
    /// [`Run::retune`] takes the new one.
    fn retunes(&self) -> bool {
        false
    }

    /// For a kind the kernel aggregates while its ring buffer is backed up
    /// (bpf/aggregate.bpf.h): the record of aggregation entry (`key`, `sums`) into `out`, with
    /// header `h` and the entry's kernel and user frames. False for the other kinds.
    fn aggregated(
        &self,
        _key: &AggKey,
        _sums: &AggSums,
        _h: Header,
        _frames: [&[u8]; 2],
        _out: &mut Vec<u8>,
    ) -> bool {
        false
    }

    /// For one of its records whose `d` user stack was sent apart (`STACKS_USTACK_APART`, a
    /// [`Taken::StackApart`] part): the request that names that part (`stacks_uwindow`'s).
    fn apart_request(&self, _e: &RawEvent<'_>) -> Option<u64> {
        None
    }

    /// What the recorder does with a record of `record` (one of its records, or a part)
    /// besides decoding it; by default, nothing ([`Effects::default`]).
    fn effects(&self, _record: RecordKind) -> Effects {
        Effects::default()
    }

    /// Whether its rows are the summary line's samples (`N samples from M processes`).
    fn samples(&self) -> bool {
        false
    }

    /// The row of record `e` (one of [`Self::records`]); `None` when it makes none.
    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded>;

    /// For a record it takes as [`Taken::Interval`]: which edge it is; `None`: neither (it is
    /// counted as malformed).
    fn edge(&self, _e: &RawEvent<'_>) -> Option<Edge> {
        None
    }

    /// For a kind whose records are [`Taken::Interval`]: the row of an interval lasting `ns`
    /// (`None`: not closed, when its process exits or the recording ends first).
    fn interval(&self, _ns: Option<u64>) -> Option<Decoded> {
        None
    }

    /// Its part in a recording besides its programs and records ([`Run`]), for `setup`;
    /// `None` when it has none there (by default: none).
    fn run(&self, _setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(None)
    }

    /// What its kernel side still holds when the recording ends, each a row without stacks of
    /// a thread, taken out of the kernel's tables.
    fn remainders(&self, _skel: &StacksSkel<'_>) -> Vec<Remainder> {
        Vec::new()
    }
}

/// The room for record kinds on the kernel side (bpf/stacks.h's `STACKS_EV_ROOM`): the drop
/// causes counted by kind have this many counters each (the cause's first plus the record
/// kind), `kind_ring` this many entries, `kstack_kinds` this many bits.
pub(crate) const KIND_ROOM: u32 = crate::kernel::abi::types::stacks_drop::STACKS_DROP_AGGREGATED.0
    - crate::kernel::abi::types::stacks_drop::STACKS_DROP_RINGBUF.0;

/// The ring buffer of registry kind `name` (`stacks_stream::kinds::Kind::ring`). A recorder
/// kind without one is a bug the tests catch (`every_kind_has_its_ring_from_the_registry`).
fn registry_ring(name: &str) -> Ring {
    use stacks_stream::kinds::Ring as R;
    match stacks_stream::kinds::get(name).and_then(|k| k.ring) {
        Some(R::Samples) => Ring::STACKS_RING_SAMPLES,
        Some(R::Io) => Ring::STACKS_RING_IO,
        Some(R::Probes) => Ring::STACKS_RING_PROBES,
        None => panic!("kind {name} declares no ring in stacks-stream's kinds table"),
    }
}

/// Every event kind, in the order of their kinds in the registry (`stacks_stream::kinds::ALL`),
/// after the process lifecycle (its records are several kinds of the registry).
pub(crate) static ALL: std::sync::LazyLock<Vec<&'static dyn EventKind>> =
    std::sync::LazyLock::new(|| {
        let mut all = KINDS.to_vec();
        all.sort_by_key(|k| {
            stacks_stream::kinds::ALL
                .iter()
                .position(|r| r.name == k.name())
                .map_or(0, |at| at + 1)
        });
        all
    });

/// The kind that turns records of `kind` into rows.
pub(crate) fn for_record(kind: RecordKind) -> Option<&'static dyn EventKind> {
    ALL.iter().copied().find(|k| k.records().contains(&kind))
}

/// The kind that sends records of `kind` as parts of its rows ([`EventKind::parts`]).
pub(crate) fn for_part(kind: RecordKind) -> Option<&'static dyn EventKind> {
    ALL.iter().copied().find(|k| k.parts().contains(&kind))
}

/// The request naming the `d` user stack record `e` had sent apart
/// ([`EventKind::apart_request`]).
pub(crate) fn apart_request(e: &RawEvent<'_>) -> Option<u64> {
    for_record(e.h.kind)?.apart_request(e)
}

/// What the recorder does with records of each kind (`stacks_event_kind`), by its number:
/// what the one kind that says something of it says ([`EventKind::effects`]).
static EFFECTS: std::sync::LazyLock<[Effects; 32]> = std::sync::LazyLock::new(|| {
    std::array::from_fn(|i| {
        ALL.iter()
            .map(|k| k.effects(RecordKind(i as u32)))
            .find(|e| *e != Effects::default())
            .unwrap_or_default()
    })
});

/// What the recorder does with a record of `record` besides decoding it
/// ([`EventKind::effects`]).
pub(crate) fn effects(record: RecordKind) -> Effects {
    EFFECTS.get(record.0 as usize).copied().unwrap_or_default()
}

/// The summary line's samples among rows counted by kind (`by_kind`): the rows of the kinds
/// whose rows are samples ([`EventKind::samples`]).
pub(crate) fn samples(by_kind: &std::collections::BTreeMap<&'static str, u64>) -> u64 {
    ALL.iter()
        .filter(|k| k.samples())
        .filter_map(|k| by_kind.get(k.name()))
        .sum()
}

/// Whether a kind that goes through `ring` is recorded (then the ring is sized; else it is a
/// page): named by `-e`, or (no event of its own) one of its programs loads. A program one kind
/// owns may load for another's sake (`state`'s at the return from system calls, for `switch`)
/// and sends nothing of its owner's then.
fn ring_used(ring: Ring, spec: &EventSpec) -> bool {
    ALL.iter().any(|k| {
        k.ring() == ring
            && match k.event() {
                Some(e) => spec.get(e).is_some(),
                None => k.programs().iter().any(|p| k.loads(p, spec)),
            }
    })
}

/// Whether each ring buffer is used ([`ring_used`]), in the order of
/// `kernel::load::RING_NAMES`.
pub(crate) fn rings_used(spec: &EventSpec) -> [bool; crate::kernel::load::RINGS] {
    [
        Ring::STACKS_RING_SAMPLES,
        Ring::STACKS_RING_IO,
        Ring::STACKS_RING_PROBES,
    ]
    .map(|r| ring_used(r, spec))
}

/// The stacks (`STACKS_WANT_*`) the recorded kinds that the kernel aggregates want; `None` when
/// no such kind is recorded.
pub(crate) fn aggregated_stacks(spec: &EventSpec) -> Option<u32> {
    ALL.iter()
        .filter(|k| k.aggregates())
        .filter_map(|k| spec.get(k.event()?))
        .map(|a| a.stacks.mask())
        .reduce(|a, b| a | b)
}

/// The `-e` names of the kinds whose argument changes while recording ([`EventKind::retunes`]).
pub(crate) fn retuned() -> impl Iterator<Item = &'static str> {
    ALL.iter().filter(|k| k.retunes()).filter_map(|k| k.event())
}

/// Why the kernel aggregated events of stream kind `name` ([`EventKind::aggregated_why`]).
pub(crate) fn aggregated_why(name: &str) -> &'static str {
    ALL.iter()
        .find(|k| k.name() == name)
        .map_or("ring buffer backed up", |k| k.aggregated_why())
}

/// What every kind's kernel side still holds at the end ([`EventKind::remainders`]).
pub(crate) fn remainders(skel: &StacksSkel<'_>) -> Vec<Remainder> {
    ALL.iter().flat_map(|k| k.remainders(skel)).collect()
}

/// The kind a program of the BPF object belongs to.
fn owner(program: &str) -> Option<&'static dyn EventKind> {
    ALL.iter()
        .copied()
        .find(|k| k.programs().contains(&program))
}

/// Before load: every kind's tunables and map sizes, and which programs load. Refuses a program of the BPF
/// object that no kind lists, and a listed program the object lacks.
pub(crate) fn configure(open: &mut OpenStacksSkel<'_>, spec: &EventSpec) -> Result<()> {
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("BPF object has no read-only data section")?;
    rodata.kstack_kinds = 0;
    for k in ALL.iter() {
        k.configure(rodata, k.event().and_then(|e| spec.get(e)));
        for r in k.records().iter().chain(k.parts()) {
            rodata.kind_ring[r.0 as usize] = k.ring();
            if k.kstack_cached() {
                rodata.kstack_kinds |= 1 << r.0;
            }
        }
    }
    for k in ALL.iter() {
        k.size_maps(&mut open.maps, k.event().and_then(|e| spec.get(e)))?;
    }
    let mut seen = Vec::new();
    for mut prog in open.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let Some(kind) = owner(&name) else {
            bail!(
                "BPF program {name} of bpf/ is in no event kind's programs() (stacks-record/src/kinds/)"
            );
        };
        prog.set_autoload(kind.loads(&name, spec));
        seen.push(name);
    }
    for k in ALL.iter() {
        if let Some(p) = k.programs().iter().find(|p| !seen.iter().any(|s| s == *p)) {
            bail!(
                "the BPF object has no program {p}, listed by kind {}",
                k.name()
            );
        }
    }
    Ok(())
}

/// Refuse events the running kernel cannot record, naming what is missing: the tracepoint of
/// every program they load that attaches as `tp_btf/NAME` (its section), by name through the
/// kernel's BTF, so nothing needs tracefs (not mounted on a fresh boot nor in most
/// containers).
pub(crate) fn check_kernel(spec: &EventSpec) -> Result<()> {
    let btf = libbpf_rs::btf::Btf::from_vmlinux()
        .context("reading the kernel's BTF (/sys/kernel/btf/vmlinux): stacks-record needs a kernel built with BTF")?;
    let mut obj = std::mem::MaybeUninit::uninit();
    let open = StacksSkelBuilder::default()
        .open(&mut obj)
        .context("opening the BPF object")?;
    let mut missing = Vec::new();
    for prog in open.open_object().progs() {
        let name = prog.name().to_string_lossy();
        let Some(kind) = owner(&name).filter(|k| k.loads(&name, spec)) else {
            continue;
        };
        let section = prog.section().to_string_lossy();
        let Some(tp) = section.strip_prefix("tp_btf/") else {
            continue;
        };
        let line = format!(
            "{} (the kernel's BTF has no tracepoint {tp}: no btf_trace_{tp})",
            kind.event().unwrap_or("process lifecycle")
        );
        if !has_tracepoint(&btf, tp) && !missing.contains(&line) {
            missing.push(line);
        }
    }
    if !missing.is_empty() {
        bail!(
            "this kernel ({}) cannot record: {}",
            crate::host::kernel_release(),
            missing.join(", ")
        );
    }
    Ok(())
}

/// Whether `btf` (the kernel's) has tracepoint `tp`: its `btf_trace_TP` type.
fn has_tracepoint(btf: &libbpf_rs::btf::Btf<'_>, tp: &str) -> bool {
    btf.type_by_name::<libbpf_rs::btf::BtfType<'_>>(&format!("btf_trace_{tp}"))
        .is_some()
}

/// Whether the running kernel has tracepoint `tp` (false when its BTF cannot be read:
/// check_kernel says why).
pub(crate) fn kernel_has_tracepoint(tp: &str) -> bool {
    libbpf_rs::btf::Btf::from_vmlinux().is_ok_and(|btf| has_tracepoint(&btf, tp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_and_program_has_one_kind() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert!(
                    !a.records().iter().any(|r| b.records().contains(r)),
                    "{} and {} decode the same record",
                    a.name(),
                    b.name()
                );
                assert!(
                    !a.programs().iter().any(|p| b.programs().contains(p)),
                    "{} and {} list the same program",
                    a.name(),
                    b.name()
                );
            }
        }
    }

    /// The always-on configuration (#65) loads no program at the entry or return of system
    /// calls: any such program makes every call of every process on the host take the
    /// kernel's slower path, a cost no program's run time shows (docs/cost.md). `switch`'s
    /// late user stacks wait for the return to user mode (`rseq_update`) instead.
    #[test]
    fn the_always_on_events_load_nothing_at_system_calls() {
        let spec = EventSpec::parse("profile:u:49,state:uk:5,switch:uk,wake:u").unwrap();
        let mut obj = std::mem::MaybeUninit::uninit();
        let open = StacksSkelBuilder::default().open(&mut obj).unwrap();
        let mut loaded = Vec::new();
        for prog in open.open_object().progs() {
            let name = prog.name().to_string_lossy().into_owned();
            if owner(&name).is_some_and(|k| k.loads(&name, &spec)) {
                loaded.push((name, prog.section().to_string_lossy().into_owned()));
            }
        }
        assert!(loaded.iter().any(|(n, _)| n == "on_switch"), "{loaded:?}");
        let at_calls: Vec<_> = loaded
            .iter()
            .filter(|(_, section)| section.contains("sys_enter") || section.contains("sys_exit"))
            .collect();
        assert!(
            at_calls.is_empty(),
            "programs at system calls: {at_calls:?}"
        );
    }

    #[test]
    fn each_record_has_its_effects_from_one_kind() {
        let mut said = 0;
        for r in (0..32).map(RecordKind) {
            let saying: Vec<_> = ALL
                .iter()
                .filter(|k| k.effects(r) != Effects::default())
                .collect();
            assert!(
                saying.len() <= 1,
                "several kinds say what record {r:?} does: {:?}",
                saying.iter().map(|k| k.name()).collect::<Vec<_>>()
            );
            let Some(k) = saying.first() else {
                assert_eq!(effects(r), Effects::default());
                continue;
            };
            assert_eq!(effects(r), k.effects(r), "record {r:?}");
            said += 1;
            // A record decoded into a row is one of its kind's records; one taken otherwise
            // is not (it would be decoded too).
            assert_eq!(
                k.effects(r).taken == Taken::Row,
                k.records().contains(&r),
                "{} and record {r:?}",
                k.name()
            );
            // One taken otherwise is a part of its rows, and found as one.
            if k.effects(r).taken != Taken::Row {
                assert!(k.parts().contains(&r), "{} and record {r:?}", k.name());
                assert_eq!(for_part(r).map(|p| p.name()), Some(k.name()));
            }
            // An interval's kind says which edge and what row.
            if k.effects(r).taken == Taken::Interval {
                assert!(k.interval(Some(1)).is_some(), "{}", k.name());
            }
        }
        assert!(said > 0, "no kind says what its records do");
        assert_eq!(effects(RecordKind(1000)), Effects::default());
    }

    /// Every record kind fits the kernel side's room for kinds (the drop counters counted by
    /// kind, `kind_ring`, `kstack_kinds`): a kind past it fails here, not by counting its
    /// losses under another cause.
    #[test]
    fn every_record_fits_the_room_for_kinds() {
        let room = KIND_ROOM;
        for k in ALL.iter() {
            for r in k.records().iter().chain(k.parts()) {
                assert!(r.0 < room, "{}: record {r:?} past STACKS_EV_ROOM", k.name());
            }
        }
        assert!(RecordKind::STACKS_EV_COUNT.0 <= room);
        assert!(room <= 32, "kstack_kinds has a bit per record kind");
    }

    /// Each kind's ring comes from its registry entry (a kind missing there panics here).
    #[test]
    fn every_kind_has_its_ring_from_the_registry() {
        for k in ALL.iter() {
            let ring = k.ring();
            assert!(ring.0 < Ring::STACKS_RING_COUNT.0, "{}", k.name());
        }
        assert_eq!(uring::Uring.ring(), Ring::STACKS_RING_IO);
        assert_eq!(profile::Profile.ring(), Ring::STACKS_RING_SAMPLES);
        assert_eq!(alloc::Alloc.ring(), Ring::STACKS_RING_PROBES);
    }

    /// What a kind says of its argument changing in place is what the registry says of it
    /// (`Kind::arg_in_place`, by which the agent's budget decides what it changes in place).
    #[test]
    fn kinds_retune_as_the_registry_says() {
        for k in ALL.iter() {
            let Some(entry) = k.event().and_then(stacks_stream::kinds::get) else {
                assert!(!k.retunes(), "{}", k.name());
                continue;
            };
            assert_eq!(k.retunes(), entry.arg_in_place(), "{}", k.name());
        }
        let mut retuned: Vec<_> = retuned().collect();
        retuned.sort_unstable();
        assert_eq!(retuned, ["profile", "state", "switch", "uring", "wake"]);
    }

    #[test]
    fn every_recordable_kind_has_a_module() {
        for k in stacks_stream::kinds::recordable() {
            assert!(
                ALL.iter().any(|m| m.event() == Some(k.name)),
                "no module in stacks-record/src/kinds/ for {}",
                k.name
            );
        }
    }
}
