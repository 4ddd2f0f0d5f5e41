//! `switch`: off-CPU intervals with the switch-out stack, state and waker, and the short ones
//! folded per thread and state (bpf/kinds/switch.bpf.h); with `switch:STACKS:MIN:N`, stacks
//! taken at 1 switch-out in N at random, the kept intervals of those taken standing for N. The
//! user stack of a thread that returns to user mode through rseq is taken only if its interval
//! is kept, at that return (`on_user_return`, at `rseq_update`, loaded only with user stacks);
//! with `d`, that of a thread without rseq blocked in a system call at the call's return
//! (`on_sys_exit`).

use std::sync::OnceLock;

use stacks_stream::kind;

use anyhow::Result;

use super::state::state_name;
use super::{Context, Decoded, EventKind, Run, Setup};
use crate::kernel::abi::types::{rodata, stacks_folded, stacks_off_cpu};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::spec::{EventSpec, KindArgs};

info_members!(stacks_off_cpu, stacks_folded);

pub(crate) struct Switch;

/// Whether the kernel has the tracepoint at a thread's return to user mode after a switch
/// (`rseq_update`, with `CONFIG_RSEQ`): without it every user stack is taken at the switch-out.
fn user_return() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| super::kernel_has_tracepoint("rseq_update"))
}

impl EventKind for Switch {
    fn retunes(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        kind::SWITCH
    }

    fn programs(&self) -> &'static [&'static str] {
        &[
            "on_switch",
            "on_wakeup",
            "on_user_return",
            "on_sys_exit",
            "flush_tasks",
            "wake_hrtimer_entry",
            "wake_hrtimer_exit",
            "wake_timer_entry",
            "wake_timer_exit",
            "wake_irq_entry",
            "wake_irq_exit",
            "wake_softirq_entry",
            "wake_softirq_exit",
        ]
    }

    /// Its kernel stacks are taken in tracepoint programs: served from the cache of unwinds.
    fn kstack_cached(&self) -> bool {
        true
    }

    /// The timer, interrupt and softirq programs tell which context ran a `wake` record's
    /// wakeup: only with `wake`. The program at the returns to user mode takes the user
    /// stacks left for it: only with user stacks, on a kernel with its tracepoint; the one
    /// at every system call's return, `d` stacks of threads without rseq: only with `d`.
    fn loads(&self, program: &str, spec: &EventSpec) -> bool {
        let Some(on) = spec.get(kind::SWITCH) else {
            return false;
        };
        match program {
            "on_user_return" => on.stacks.user() && user_return(),
            "on_sys_exit" => on.stacks.dwarf(),
            _ => !program.starts_with("wake_") || spec.get(kind::WAKE).is_some(),
        }
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.switch_stacks = on.map_or(0, |s| s.stacks.mask());
        rodata.switch_user_return = on.is_some_and(|s| s.stacks.user()) && user_return();
    }

    /// MIN and N, written in the BPF object's .bss (control.bpf.h) once loaded and again when
    /// they change in place (`--control`).
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup.on(self).map(|on| {
            super::run::ArgGlobals::boxed(
                &on,
                &[
                    (super::run::arg, |b| &mut b.switch_min_ns),
                    (super::run::one_in, |b| &mut b.switch_one_in),
                ],
            )
        }))
    }

    fn records(&self) -> &'static [RecordKind] {
        &[
            RecordKind::STACKS_EV_SWITCH,
            RecordKind::STACKS_EV_SWITCH_FOLDED,
        ]
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        Some(if e.h.kind == RecordKind::STACKS_EV_SWITCH {
            // One off-CPU interval, standing for N (`switch:STACKS:MIN:N`, 1 in N taken):
            // their time is N times its own, its duration its own.
            let s: stacks_off_cpu = e.info();
            let n = i64::from(e.h.count.max(1));
            Decoded {
                kind: kind::SWITCH,
                value: (s.off_ns as i64).saturating_mul(n),
                extra: Extra {
                    duration: Some(s.off_ns as i64),
                    count: Some(n),
                    state: Some(state_name(s.state)),
                    waker: (s.waker > 0).then_some(s.waker as i32),
                    ..Extra::default()
                },
            }
        } else {
            // Short off-CPU intervals folded into one row (no duration: they were many).
            let f: stacks_folded = e.info();
            Decoded {
                kind: kind::SWITCH,
                value: f.off_ns as i64,
                extra: Extra {
                    count: Some(i64::from(e.h.count)),
                    state: Some(state_name(f.state)),
                    ..Extra::default()
                },
            }
        })
    }
}

