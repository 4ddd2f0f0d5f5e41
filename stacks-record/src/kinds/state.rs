//! `state`: every live thread of the targets HZ times a second (bpf/kinds/state.bpf.h, a
//! sleepable task iterator run by [`crate::kernel::sampler`]): its state, the system call it
//! is in and for how long, its file or socket; value = the period, so sums are thread-seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, Result};
use stacks_stream::{kind, state};

use super::{Context, Decoded, Effects, EventKind, Run, Setup};
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{rodata, stacks_state_sample};
use crate::kernel::event::{Kind as RecordKind, RawEvent, State as Code, info_members};
use crate::kernel::globals::Global64;
use crate::kernel::sampler::StateSampler;
use crate::output::rows::Extra;
use crate::process::fdnames::{file_name, socket_ends};
use crate::spec::{EventSpec, KindArgs};

info_members!(stacks_state_sample);

pub(crate) struct State;

impl EventKind for State {
    fn retunes(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        kind::STATE
    }

    fn programs(&self) -> &'static [&'static str] {
        &["state_switch", "sample_states"]
    }

    /// `state_switch` records each thread's switch-out only where `switch`'s `on_switch`,
    /// which records it too, is off.
    fn loads(&self, program: &str, spec: &EventSpec) -> bool {
        spec.get(kind::STATE).is_some()
            && (program != "state_switch" || spec.get(kind::SWITCH).is_none())
    }

    fn kstack_cached(&self) -> bool {
        false
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.state_stacks = on.map_or(0, |s| s.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_STATE]
    }

    /// A thread that has not run since its previous row repeats that row's stacks.
    fn effects(&self, record: RecordKind) -> Effects {
        Effects {
            latest_stacks: record == RecordKind::STACKS_EV_STATE,
            ..Effects::default()
        }
    }

    /// A thread's state at a sampling pass: stands for the sampling period. A call on a
    /// descriptor names its file, or its socket and addresses.
    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let s: stacks_state_sample = e.info();
        let syscall = usize::try_from(s.syscall)
            .ok()
            .and_then(syscalls::Sysno::new)
            .map(|nr| nr.name());
        let has_fd = syscall.is_some() && s.fd >= 0;
        let path = (has_fd && s.file.inode != 0)
            .then(|| file_name(cx.files, e.h.pid, s.fd, &s.file))
            .flatten();
        let (protocol, local, remote) = if has_fd && s.family.0 != 0 {
            socket_ends(s.family, s.protocol, &s.addrs, cx.sockaddrs)
        } else {
            (None, None, None)
        };
        Some(Decoded {
            kind: kind::STATE,
            value: s.period_ns as i64,
            extra: Extra {
                count: Some(1),
                state: Some(state_name(s.state)),
                syscall,
                duration: (syscall.is_some() && s.syscall_ns > 0).then_some(s.syscall_ns as i64),
                fd: has_fd.then_some(s.fd),
                path,
                protocol,
                local,
                remote,
                // Boot time here; the converter puts it on the recording's clock.
                offcpu_since: (s.off_since != 0).then_some(s.off_since as i64),
                ..Extra::default()
            },
        })
    }

    /// The thread that runs the task iterator once a period.
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup.on(self).map(|on| {
            Box::new(Passes {
                period_ns: Arc::new(AtomicU64::new(on.period_ns())),
                stamp: None,
                sampler: None,
            }) as Box<dyn Run>
        }))
    }
}

/// The thread-state passes: their thread runs from the start of the recording to its end,
/// one pass a period; the period the rows carry (`state_period_ns` of control.bpf.h) is the
/// one the passes are run at, both changed together in place (`--control`).
struct Passes {
    period_ns: Arc<AtomicU64>,
    stamp: Option<Global64>,
    sampler: Option<StateSampler>,
}

impl Run for Passes {
    fn loaded(&mut self, skel: &mut StacksSkel<'_>) -> Result<()> {
        let stamp = Global64::new(skel, |b| &mut b.state_period_ns)
            .context("the BPF object has no .bss for state_period_ns")?;
        stamp.set(self.period_ns.load(Ordering::Relaxed));
        self.stamp = Some(stamp);
        Ok(())
    }

    fn started(&mut self, skel: &StacksSkel<'_>, _running: &[u32]) -> Result<()> {
        self.sampler = Some(StateSampler::start(skel, Arc::clone(&self.period_ns))?);
        Ok(())
    }

    fn retune(&mut self, spec: &EventSpec) -> Result<()> {
        if let Some(on) = spec.get(kind::STATE) {
            let period = on.period_ns();
            // The rows' period first: a pass in progress then stamps the new one, at most one
            // pass early.
            if let Some(g) = &self.stamp {
                g.set(period);
            }
            self.period_ns.store(period, Ordering::Relaxed);
        }
        Ok(())
    }

    fn stop(&mut self) -> Result<()> {
        self.sampler.take().map_or(Ok(()), StateSampler::stop)
    }
}

/// The `state` column's name of a kernel thread state (`enum stacks_state`).
pub(crate) fn state_name(code: Code) -> &'static str {
    match code {
        Code::STACKS_STATE_RUNNABLE => state::RUNNABLE,
        Code::STACKS_STATE_SLEEPING => state::SLEEPING,
        Code::STACKS_STATE_UNINTERRUPTIBLE => state::UNINTERRUPTIBLE,
        Code::STACKS_STATE_IDLE => state::IDLE,
        Code::STACKS_STATE_STOPPED => state::STOPPED,
        Code::STACKS_STATE_RUNNING => state::RUNNING,
        _ => state::OTHER,
    }
}
