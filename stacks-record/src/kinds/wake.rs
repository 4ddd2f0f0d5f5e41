//! `wake`: the waker of each off-CPU interval kept by `switch` (bpf/kinds/switch.bpf.h's
//! `on_wakeup`, at sched_waking in the waker's context): who (a task, or the interrupt,
//! softirq or timer callback that ran it), its stacks then, and the thread it woke; 1 wakeup
//! in N (`wake:STACKS:N`, at random in the kernel, N changed in place by `--control`), each
//! row standing for N: its `count`, and its `value` and `duration` N times the one taken.

use stacks_stream::kind;

use anyhow::Result;

use super::{Context, Decoded, EventKind, Run, Setup};
use crate::kernel::abi::types::{rodata, stacks_wake};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::spec::KindArgs;

info_members!(stacks_wake);

pub(crate) struct Wake;

impl EventKind for Wake {
    fn name(&self) -> &'static str {
        kind::WAKE
    }

    /// Its program is `switch`'s `on_wakeup` (one program per wakeup): it only sets tunables.
    fn programs(&self) -> &'static [&'static str] {
        &[]
    }

    /// Its kernel stacks are taken in tracepoint programs: served from the cache of unwinds.
    fn kstack_cached(&self) -> bool {
        true
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.wake_on = u32::from(on.is_some());
        rodata.wake_stacks = on.map_or(0, |s| s.stacks.mask());
    }

    /// N changes in place (`--control`).
    fn retunes(&self) -> bool {
        true
    }

    /// N, written in the BPF object's .bss (`wake_one_in`) once loaded and again when it
    /// changes in place.
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup
            .on(self)
            .map(|on| super::run::ArgGlobals::boxed(&on, &[(super::run::arg, |b| &mut b.wake_one_in)])))
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_WAKE]
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        let w: stacks_wake = e.info();
        // The wakeups it stands for (1 in N taken): their waits are N times this one's.
        let n = i64::from(e.h.count.max(1));
        let waited = (w.waited_ns as i64).saturating_mul(n);
        Some(Decoded {
            kind: kind::WAKE,
            value: waited,
            extra: Extra {
                duration: Some(waited),
                count: Some(n),
                wakee: Some(w.wakee_tid as i32),
                ..Extra::default()
            },
        })
    }
}
