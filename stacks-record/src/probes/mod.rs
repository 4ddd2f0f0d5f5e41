//! Probes named in `-e`: kernel tracepoints, uprobes, uretprobes and USDT probes
//! (bpf/kinds/probe.bpf.h). Their grammar is in [`crate::spec::probe`]; here: the checks and
//! attaching ([`attach`]), the BPF side's settings ([`configure`]), their rows
//! ([`ProbeRows`]), the counting table's records ([`counts`]), the USDT semaphores set in
//! the command the recorder starts ([`semaphores`]); `-e alloc`'s producers ([`alloc`]).

pub(crate) mod alloc;
pub(crate) mod attach;
pub(crate) mod counts;
pub(crate) mod semaphores;

use std::rc::Rc;

use anyhow::{Context, Result};
use libbpf_rs::Link;

use crate::kernel::abi::types::stacks_probe_conf;
use crate::kernel::abi::{OpenStacksSkel, StacksSkel};
use crate::output::rows::Extra;
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

/// The probes of a recording (the probe kind's part, [`crate::kinds::Run`]): resolved before
/// the BPF object loads, their tables sized while it is open, attached once it is loaded, or
/// once a `--` command they are in has exec'ed (`hold`: a USDT probe's semaphore is set in its
/// new image before it runs); the counting table drained into records; detached at the end,
/// after their semaphores are cleared.
pub(crate) struct Probes {
    resolved: Vec<Resolved>,
    hold: bool,
    /// Attached before the targets start (not `hold`).
    early: Option<Attached>,
    links: Vec<Link>,
    enabled: Enabled,
}

impl Probes {
    pub(crate) fn new(resolved: Vec<Resolved>, hold: bool) -> Self {
        Self {
            resolved,
            hold,
            early: None,
            links: Vec::new(),
            enabled: Enabled::default(),
        }
    }
}

impl crate::kinds::Run for Probes {
    fn configure(&mut self, open: &mut OpenStacksSkel<'_>) -> Result<()> {
        let probes: Vec<Probe> = self.resolved.iter().map(|r| r.probe.clone()).collect();
        configure(open, &probes)
    }

    fn loaded(&mut self, skel: &mut StacksSkel<'_>) -> Result<()> {
        if !self.hold {
            self.early = Some(attach::attach(skel, &self.resolved)?);
        }
        Ok(())
    }

    fn holds_exec(&self) -> bool {
        self.hold
    }

    /// The probes running: attached now unless they were before the targets started. A
    /// command `held` at its exec gets its executable's semaphores set; semaphores left to
    /// the kernel are warned about (it sets them only in the processes running now).
    fn released(&mut self, skel: &StacksSkel<'_>, held: Option<u32>) -> Result<()> {
        let Attached { links, semaphores } = match self.early.take() {
            Some(attached) => attached,
            None => attach::attach(skel, &self.resolved)?,
        };
        self.links = links;
        let unset = match held {
            Some(pid) => self.enabled.enable(pid, &semaphores)?,
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
        Ok(())
    }

    /// The counting table's entries (nothing when no probe counts).
    fn records(&mut self, skel: &StacksSkel<'_>, each: &mut dyn FnMut(&[u8])) {
        counts::drain(skel, each);
    }

    /// Detach the probes, after clearing the semaphores set for them.
    fn stop(&mut self) -> Result<()> {
        self.enabled.disable();
        self.links.clear();
        Ok(())
    }
}
