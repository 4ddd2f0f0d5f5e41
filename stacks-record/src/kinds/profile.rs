//! `profile`: CPU samples from the cpu-clock perf event (bpf/kinds/profile.bpf.h), each
//! weighing its sampling period. The perf events are opened per CPU by the recording loop.

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
use crate::kernel::abi::types::{rodata, stacks_profile};
use crate::kernel::event::{Kind as RecordKind, RawEvent, info_members};
use crate::output::rows::Extra;
use crate::spec::KindArgs;

info_members!(stacks_profile);

pub(crate) struct Profile;

impl EventKind for Profile {
    fn name(&self) -> &'static str {
        kind::PROFILE
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_cpu_sample"]
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.profile_stacks = on.map_or(0, |p| p.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_PROFILE]
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        let p: stacks_profile = e.info();
        Some(Decoded {
            kind: kind::PROFILE,
            value: p.period_ns as i64,
            extra: Extra::default(),
        })
    }
}
