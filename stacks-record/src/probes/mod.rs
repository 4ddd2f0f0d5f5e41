//! Probes named in `-e`: kernel tracepoints, uprobes, uretprobes and USDT probes
//! (bpf/kinds/probe.bpf.h). Their grammar is in [`crate::spec::probe`]; here: the checks and
//! attaching ([`attach`]), the BPF side's settings ([`configure`]), their rows
//! ([`ProbeRows`]), the counting table's records ([`counts`]), the USDT semaphores set in
//! the command the recorder starts ([`semaphores`]) and which USDT probes a file declares
//! ([`notes`]); `-e alloc`'s producers ([`alloc`]).

pub(crate) mod alloc;
pub(crate) mod attach;
pub(crate) mod counts;
pub(crate) mod notes;
pub(crate) mod semaphores;

use std::rc::Rc;

use anyhow::{Context, Result};
use libbpf_rs::Link;

use crate::kernel::abi::types::stacks_probe_conf;
use crate::kernel::abi::{OpenStacksSkel, StacksSkel};
use crate::output::rows::Extra;
use crate::process::target::Child;
use crate::spec::probe::Probe;
use attach::{Attached, Resolved};
use semaphores::Enabled;

/// Entries of the counting table, when a probe counts: distinct (probe, thread, stacks) per
/// second (a full table sends further hits as rows, counted in the summary).
const COUNT_ENTRIES: u32 = 16_384;
/// Slots of the counting probes' stack tables (the user one holds 4 KiB per stack).
const KSTACK_SLOTS: u32 = 16_384;
const USTACK_SLOTS: u32 = 4_096;
/// Slots of the second user stack table (another size, so a stack lands in another slot).
const USTACK2_SLOTS: u32 = 2_048;

/// Set each probe's settings (rodata `probe_conf`, by index) and size the counting tables,
/// which stay at one entry when no probe counts.
pub(crate) fn configure(open: &mut OpenStacksSkel<'_>, probes: &[Probe]) -> Result<()> {
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("BPF object has no read-only data section")?;
    for (conf, p) in rodata.probe_conf.iter_mut().zip(probes) {
        *conf = stacks_probe_conf {
            stacks: p.stacks.mask(),
            counting: u32::from(p.counting),
        };
    }
    let counting = || probes.iter().filter(|p| p.counting);
    let sizes = [
        (
            &mut open.maps.probe_counts,
            counting().next().is_some(),
            COUNT_ENTRIES,
        ),
        (
            &mut open.maps.probe_kstacks,
            counting().any(|p| p.stacks.kernel()),
            KSTACK_SLOTS,
        ),
        (
            &mut open.maps.probe_ustacks,
            counting().any(|p| p.stacks.user()),
            USTACK_SLOTS,
        ),
        (
            &mut open.maps.probe_ustacks2,
            counting().any(|p| p.stacks.user()),
            USTACK2_SLOTS,
        ),
    ];
    for (map, used, entries) in sizes {
        if used {
            map.set_max_entries(entries)
                .context("sizing the probe counting tables")?;
        }
    }
    Ok(())
}

/// What the converter needs to know of each probe, by index: the `probe` column's text and
/// how many of the arguments the BPF side read are real.
#[derive(Default)]
pub(crate) struct ProbeRows {
    probes: Vec<(Rc<str>, Option<usize>)>,
}

impl ProbeRows {
    pub(crate) fn new(resolved: &[Resolved]) -> Self {
        Self {
            probes: resolved
                .iter()
                .map(|r| (Rc::from(r.probe.name()), r.nargs))
                .collect(),
        }
    }

    /// The value and columns of a record of probe `index` standing for `hits` hits, with the
    /// arguments the BPF side read (`None` for a counting-table entry: many hits, no
    /// arguments). `None` for an index this recording did not attach.
    pub(crate) fn row(&self, index: u32, hits: u32, args: Option<&[u64]>) -> Option<(i64, Extra)> {
        let (name, known) = self.probes.get(index as usize)?;
        let args = args.map(|a| {
            let n = known.unwrap_or(a.len()).min(a.len());
            a[..n].iter().map(|&v| v as i64).collect()
        });
        Some((
            i64::from(hits),
            Extra {
                count: Some(i64::from(hits)),
                probe: Some(Rc::clone(name)),
                args,
                ..Extra::default()
            },
        ))
    }
}

/// The probes of a recording, attached, and the semaphores set for them.
pub(crate) struct Running {
    links: Vec<Link>,
    enabled: Enabled,
}

impl Running {
    /// The probes running: `early` when they were attached before the targets started, else
    /// attached now. A command `held` at its exec gets its executable's semaphores set and is
    /// let run; semaphores left to the kernel are warned about (it sets them only in the
    /// processes running now).
    pub(crate) fn start(
        skel: &StacksSkel<'_>,
        probes: &[Resolved],
        early: Option<Attached>,
        held: Option<&mut Child>,
    ) -> Result<Self> {
        let Attached { links, semaphores } = match early {
            Some(attached) => attached,
            None => attach::attach(skel, probes)?,
        };
        let mut enabled = Enabled::default();
        let unset = match held {
            Some(c) => {
                let set = enabled.enable(c.pid, &semaphores);
                c.resume()?;
                set?
            }
            None => semaphores.iter().collect(),
        };
        for s in unset {
            eprintln!(
                "stacks-record: warning: -e {}: the probe is guarded by a semaphore, which the \
                 kernel sets in processes running now (and stacks-record in the executable of a \
                 command it starts); processes started later may not fire it",
                s.probe
            );
        }
        Ok(Self { links, enabled })
    }

    /// Detach the probes, after clearing the semaphores set for them.
    pub(crate) fn stop(&mut self) {
        self.enabled.disable();
        self.links.clear();
    }
}
