//! `net`: TCP and UDP sends and receives, IPv4 and IPv6: bytes, protocol, local and remote
//! address (bpf/kinds/net.bpf.h).

use stacks_stream::kind;

use super::{Context, Decoded, EventKind};
use crate::kernel::abi::types::{rodata, stacks_net};
use crate::kernel::event::{Kind as RecordKind, NetDirection, RawEvent, info_members};
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

    fn configure(&self, rodata: &mut rodata, on: Option<&KindArgs>) {
        rodata.net_stacks = on.map_or(0, |n| n.stacks.mask());
    }

    fn records(&self) -> &'static [RecordKind] {
        &[RecordKind::STACKS_EV_NET]
    }

    fn decode(&self, e: &RawEvent<'_>, cx: &mut Context<'_>) -> Option<Decoded> {
        let n: stacks_net = e.info();
        let (protocol, local, remote) = socket_ends(n.family, n.protocol, &n.addrs, cx.sockaddrs);
        Some(Decoded {
            kind: kind::NET,
            value: n.bytes as i64,
            extra: Extra {
                count: Some(1),
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
