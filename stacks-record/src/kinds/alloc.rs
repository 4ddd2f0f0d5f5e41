//! `alloc`: allocations sampled by bytes inside the traced processes (libstacks_alloc.so,
//! docs/heap.md) and the frees of the sampled pointers, from the library's USDT probes
//! (bpf/kinds/alloc.bpf.h, attached by [`crate::probes::alloc`]).

use anyhow::Result;
use stacks_stream::kind;

use super::{Context, Decoded, EventKind, Run, Setup};
use crate::cli::Target;
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{rodata, stacks_alloc, stacks_alloc_op};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::probes::alloc::AllocProbes;
use crate::spec::KindArgs;

/// The summary's note of sampled allocations whose free will not be seen.
const UNTRACKED: &str = "sampled allocations whose free cannot be seen (libstacks_alloc.so's table of sampled pointers was full: heap-inuse counts them as live)";

info_members!(stacks_alloc);

pub(crate) struct Alloc;

impl EventKind for Alloc {
    fn name(&self) -> &'static str {
        kind::ALLOC
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_alloc", "on_alloc_free", "alloc_new_mapping"]
    }

    fn kstack_cached(&self) -> bool {
        false
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.alloc_stacks = on.map_or(0, |s| s.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_ALLOC]
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let a: stacks_alloc = e.info();
        if a.op == stacks_alloc_op::STACKS_ALLOC_ALLOC && a.untracked != 0 {
            *cx.notes.entry(UNTRACKED).or_default() += 1;
        }
        let (op, value) = match a.op {
            stacks_alloc_op::STACKS_ALLOC_ALLOC => ("alloc", i64::try_from(a.weight).ok()?),
            stacks_alloc_op::STACKS_ALLOC_FREE => ("free", 0),
            _ => return None,
        };
        Some(Decoded {
            kind: kind::ALLOC,
            value,
            extra: Extra {
                count: Some(1),
                op: Some(op),
                args: Some(vec![a.ptr as i64, a.size as i64]),
                ..Default::default()
            },
        })
    }

    /// The samplers' probes: the library preloaded into a `--` command (or the command's own
    /// probes), and those of the files the targets map, attached as they are found.
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup.on(self).map(|on| {
            Box::new(Sampling {
                on,
                command: setup.command().map(<[String]>::to_vec),
                named: match setup.target {
                    Target::Select { .. } => setup.named.to_vec(),
                    _ => Vec::new(),
                },
                probes: None,
            }) as Box<dyn Run>
        }))
    }
}

/// `-e alloc` in a recording: its probes from the start, looked for again in the processes
/// that map something new at each flush.
struct Sampling {
    on: KindArgs,
    command: Option<Vec<String>>,
    /// The processes asked for by pid or name, warned about when they have no sampler.
    named: Vec<u32>,
    probes: Option<AllocProbes>,
}

impl Run for Sampling {
    fn loaded(&mut self, skel: &mut StacksSkel<'_>) -> Result<()> {
        self.probes = Some(AllocProbes::start(skel, &self.on, self.command.as_deref())?);
        Ok(())
    }

    fn env(&self) -> Vec<(String, String)> {
        self.probes
            .as_ref()
            .map(AllocProbes::env)
            .unwrap_or_default()
    }

    fn started(&mut self, skel: &StacksSkel<'_>, running: &[u32]) -> Result<()> {
        if let Some(p) = self.probes.as_mut() {
            p.running(skel, running, &self.named);
        }
        Ok(())
    }

    fn flushed(&mut self, skel: &StacksSkel<'_>) {
        if let Some(p) = self.probes.as_mut() {
            p.look_again(skel);
        }
    }

    fn stop(&mut self) -> Result<()> {
        if let Some(p) = self.probes.as_mut() {
            p.detach();
        }
        Ok(())
    }
}
