//! `rss`: RSS growth (kmem:rss_stat) in the thread whose memory grew, every Nth growth event
//! per process (bpf/kinds/rss.bpf.h); value = bytes grown since the process's previous row.

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
use crate::kernel::abi::StacksSkel;
use crate::kernel::abi::types::{rodata, stacks_rss};
use crate::kernel::event::{Kind as RecordKind, RawEvent, RssCounter, info_members};
use crate::kernel::load as bpf;
use crate::output::rows::Extra;
use crate::spec::KindArgs;

info_members!(stacks_rss);

pub(crate) struct Rss;

impl EventKind for Rss {
    fn name(&self) -> &'static str {
        kind::RSS
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_rss_stat"]
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.rss_stacks = on.map_or(0, |r| r.stacks.mask());
        rodata.rss_every = on
            .and_then(|r| r.arg)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1);
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_RSS]
    }

    fn ring(&self) -> super::Ring {
        super::Ring::STACKS_RING_IO
    }

    fn decode(&self, e: &RawEvent<'_>, _: &mut Context<'_>) -> Option<Decoded> {
        let r: stacks_rss = e.info();
        Some(Decoded {
            kind: kind::RSS,
            value: r.growth_bytes as i64,
            extra: Extra {
                count: Some(i64::from(e.h.count)),
                op: Some(rss_counter(r.counter)),
                rss: (r.resident_bytes > 0).then_some(r.resident_bytes as i64),
                ..Extra::default()
            },
        })
    }

    /// Each process's growth since its last row, fewer than every-Nth events.
    fn remainders(&self, skel: &StacksSkel<'_>) -> Vec<(u32, Decoded)> {
        bpf::take_rss_remainders(skel)
            .into_iter()
            .map(|(tgid, rest)| {
                let row = Decoded {
                    kind: kind::RSS,
                    value: rest.growth as i64,
                    extra: Extra {
                        count: Some(i64::from(rest.events)),
                        op: Some(rss_counter(rest.member)),
                        ..Extra::default()
                    },
                };
                (tgid, row)
            })
            .collect()
    }
}

/// The `op` of an RSS row: the memory counter that grew.
fn rss_counter(counter: RssCounter) -> &'static str {
    match counter {
        RssCounter::STACKS_RSS_FILE => "file",
        RssCounter::STACKS_RSS_ANON => "anon",
        RssCounter::STACKS_RSS_SWAP => "swap",
        RssCounter::STACKS_RSS_SHMEM => "shmem",
        _ => "other",
    }
}
