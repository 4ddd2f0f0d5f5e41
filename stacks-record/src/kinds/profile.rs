//! `profile`: CPU samples from the cpu-clock perf event (bpf/kinds/profile.bpf.h), each
//! weighing its sampling period; its source is a cpu-clock perf event on every online CPU.

use std::os::fd::{AsRawFd, OwnedFd};

use anyhow::{Context as _, Result};
use stacks_stream::kind;

use super::{Context, Decoded, EventKind, Run, Setup};
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{rodata, stacks_profile};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::kernel::load as bpf;
use crate::output::rows::Extra;
use crate::spec::{EventSpec, KindArgs};

info_members!(stacks_profile);

pub(crate) struct Profile;

impl EventKind for Profile {
    fn retunes(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        kind::PROFILE
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_cpu_sample"]
    }

    fn kstack_cached(&self) -> bool {
        false
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.profile_stacks = on.map_or(0, |p| p.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_PROFILE]
    }

    fn samples(&self) -> bool {
        true
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        let p: stacks_profile = e.info();
        Some(Decoded {
            kind: kind::PROFILE,
            value: p.period_ns as i64,
            extra: Extra::default(),
        })
    }

    /// The CPU sampler: a cpu-clock perf event of the sampling period on every online CPU,
    /// running `on_cpu_sample`.
    fn run(&self, setup: &mut Setup<'_>) -> Result<Option<Box<dyn Run>>> {
        Ok(setup.on(self).map(|on| {
            Box::new(CpuSampler {
                period_ns: on.period_ns(),
                perf: Vec::new(),
            }) as Box<dyn Run>
        }))
    }
}

/// The CPU sampler: its perf events from the start of the recording; dropping them and their
/// links stops it.
struct CpuSampler {
    period_ns: u64,
    perf: Vec<(OwnedFd, libbpf_rs::Link)>,
}

impl Run for CpuSampler {
    fn started(&mut self, skel: &StacksSkel<'_>, _running: &[u32]) -> Result<()> {
        for cpu in bpf::online_cpus()? {
            let fd = bpf::open_cpu_clock(cpu, self.period_ns)?;
            let link = skel
                .progs
                .on_cpu_sample
                .attach_perf_event(fd.as_raw_fd())
                .with_context(|| format!("attaching the CPU sampler on cpu {cpu}"))?;
            self.perf.push((fd, link));
        }
        Ok(())
    }

    /// A new rate in place: each CPU's perf event takes the new period
    /// (`PERF_EVENT_IOC_PERIOD`), from its next sample on; each sample carries the period it
    /// was taken at.
    fn retune(&mut self, spec: &EventSpec) -> Result<()> {
        let Some(on) = spec.get(kind::PROFILE) else {
            return Ok(());
        };
        let period = on.period_ns();
        if period == self.period_ns {
            return Ok(());
        }
        for (fd, _) in &self.perf {
            bpf::set_period(fd, period).context("changing the CPU sampling period")?;
        }
        self.period_ns = period;
        Ok(())
    }

    fn stop(&mut self) -> Result<()> {
        self.perf.clear();
        Ok(())
    }
}
