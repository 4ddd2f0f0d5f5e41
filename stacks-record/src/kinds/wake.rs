//! `wake`: the waker of each off-CPU interval kept by `switch` (bpf/kinds/switch.bpf.h's
//! `on_wakeup`, at sched_waking in the waker's context): who (a task, or the interrupt,
//! softirq or timer callback that ran it), its stacks then, and the thread it woke.

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
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

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_WAKE]
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        let w: stacks_wake = e.info();
        Some(Decoded {
            kind: kind::WAKE,
            value: w.waited_ns as i64,
            extra: Extra {
                duration: Some(w.waited_ns as i64),
                count: Some(1),
                wakee: Some(w.wakee_tid as i32),
                ..Extra::default()
            },
        })
    }
}
