//! `probe`: hits of the probes named in `-e` (bpf/kinds/probe.bpf.h: one program per probe
//! type, loaded when a probe of that type is asked for), or a counting table's entries. Their
//! grammar is [`crate::spec::probe`], their attaching and tables [`crate::probes`].

use anyhow::Result;
use stacks_stream::kind;

use super::{Context, Decoded, Effects, EventKind, Run, Setup};
use crate::kernel::abi::types::stacks_probe;
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::probes::counts::COUNTED;
use crate::probes::{ProbeRows, Probes, attach};
use crate::spec::EventSpec;
use crate::spec::probe::ProbeType;

info_members!(stacks_probe);

pub(crate) struct Probe;

/// Each probe type's program.
const PROGRAMS: [(&str, ProbeType); 4] = [
    ("on_probe_tp", ProbeType::Tp),
    ("on_probe_uprobe", ProbeType::Uprobe),
    ("on_probe_uretprobe", ProbeType::Uretprobe),
    ("on_probe_usdt", ProbeType::Usdt),
];

impl EventKind for Probe {
    fn name(&self) -> &'static str {
        kind::PROBE
    }

    /// Probes are named by their own forms in `-e`, not by this kind's name.
    fn event(&self) -> Option<&'static str> {
        None
    }

    fn programs(&self) -> &'static [&'static str] {
        &[PROGRAMS[0].0, PROGRAMS[1].0, PROGRAMS[2].0, PROGRAMS[3].0]
    }

    fn kstack_cached(&self) -> bool {
        false
    }

    fn loads(&self, program: &str, spec: &EventSpec) -> bool {
        PROGRAMS
            .iter()
            .find(|(p, _)| *p == program)
            .is_some_and(|(_, ty)| spec.probes.iter().any(|p| p.ty == *ty))
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_PROBE]
    }

    /// A counting table's row stands for many hits.
    fn effects(&self, record: RecordKind) -> Effects {
        Effects {
            hits: record == RecordKind::STACKS_EV_PROBE,
            ..Effects::default()
        }
    }

    /// A probe hit, or a counting-table entry (many hits, no arguments).
    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let p: stacks_probe = e.info();
        let args = (p.nargs != COUNTED).then(|| &p.args[..(p.nargs as usize).min(p.args.len())]);
        let (value, extra) = cx.data.get::<ProbeRows>()?.row(p.probe, e.h.count, args)?;
        Some(Decoded {
            kind: kind::PROBE,
            value,
            extra,
        })
    }

    /// The probes of `-e`, resolved now (a missing file, symbol or tracepoint is refused
    /// before anything loads); their names and arguments kept for decoding. A `--` command
    /// with a USDT probe is held at its exec, for its semaphores.
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        let probes = &setup.spec.probes;
        if probes.is_empty() {
            return Ok(None);
        }
        let resolved = attach::resolve(probes, setup.named)?;
        setup.data.insert(ProbeRows::new(&resolved));
        let hold = setup.command().is_some() && probes.iter().any(|p| p.ty == ProbeType::Usdt);
        Ok(Some(Box::new(Probes::new(resolved, hold))))
    }
}
