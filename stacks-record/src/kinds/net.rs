//! `net`: TCP and UDP sends and receives, IPv4 and IPv6: bytes, protocol, local and remote
//! address (bpf/kinds/net.bpf.h); summed in the kernel while the IO ring buffer is backed up
//! (a row then stands for `count` calls).

use stacks_stream::kind;

use super::{AggKey, AggSums, Context, Decoded, EventKind};
use crate::kernel::abi::types::{rodata, stacks_net};
use crate::kernel::event::{
    Header, Kind as RecordKind, NetDirection, NetFamily, NetProtocol, RawEvent, info_members,
};
use crate::kernel::tables;
use crate::output::rows::Extra;
use crate::process::fdnames::socket_ends;
use crate::spec::KindArgs;

info_members!(stacks_net);

pub(crate) struct Net;

impl EventKind for Net {
    fn name(&self) -> &'static str {
        kind::NET
    }

    fn programs(&self) -> &'static [&'static str] {
        &["on_sock_send", "on_sock_recv"]
    }

    /// Its kernel stacks are taken in tracepoint programs: served from the cache of unwinds.
    fn kstack_cached(&self) -> bool {
        true
    }

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.net_stacks = on.map_or(0, |n| n.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_NET]
    }

    fn aggregates(&self) -> bool {
        true
    }

    fn aggregated(
        &self,
        key: &AggKey,
        sums: &AggSums,
        h: Header,
        frames: [&[u8]; 2],
        out: &mut Vec<u8>,
    ) -> bool {
        let info = stacks_net {
            bytes: sums.bytes,
            error: key.error,
            family: NetFamily(key.family),
            protocol: NetProtocol(key.protocol),
            direction: NetDirection(key.op),
            addrs: key.addrs,
            ..stacks_net::default()
        };
        tables::assemble(out, h, info, frames[0], frames[1]);
        true
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let n: stacks_net = e.info();
        let (protocol, local, remote) = socket_ends(n.family, n.protocol, &n.addrs, cx.sockaddrs);
        Some(Decoded {
            kind: kind::NET,
            value: n.bytes as i64,
            extra: Extra {
                count: Some(i64::from(e.h.count)),
                op: Some(if n.direction == NetDirection::STACKS_NET_SEND {
                    "send"
                } else {
                    "recv"
                }),
                protocol,
                local,
                remote,
                errno: (n.error != 0).then_some(n.error),
                ..Extra::default()
            },
        })
    }
}
