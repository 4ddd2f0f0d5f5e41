//! `rss`: RSS growth (kmem:rss_stat) in the thread whose memory grew, every Nth growth event
//! of a thread's counter (bpf/kinds/rss.bpf.h); value = bytes that counter grew since the
//! thread's previous row of it.

use stacks_stream::kind;

use super::{Context, Decoded, EventKind, Remainder};
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

    /// Its kernel stacks are taken in tracepoint programs: served from the cache of unwinds.
    fn kstack_cached(&self) -> bool {
        true
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

    /// Each thread's growth of each counter since its last row, fewer than every-Nth events.
    fn remainders(&self, skel: &StacksSkel<'_>) -> Vec<Remainder> {
        let mut out = Vec::new();
        for (tid, rest) in bpf::take_rss_remainders(skel) {
            for (m, (&growth, &events)) in rest.growth.iter().zip(&rest.events).enumerate() {
                if events == 0 {
                    continue;
                }
                let row = Decoded {
                    kind: kind::RSS,
                    value: growth as i64,
                    extra: Extra {
                        count: Some(i64::from(events)),
                        op: Some(rss_counter(RssCounter(m as u32))),
                        ..Extra::default()
                    },
                };
                out.push(Remainder {
                    pid: rest.tgid,
                    tid,
                    row,
                });
            }
        }
        out
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
