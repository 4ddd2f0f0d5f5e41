//! The `udp` workload: two connected loopback UDP sockets, one served by thread `udp-server`,
//! exchange an exact number of bytes each way in datagrams of a fixed size (`udp_send` /
//! `udp_recv`). Flow control between the threads (not on the network) keeps the sender at
//! most one window ahead, so nothing is dropped and the byte counts stay exact.

use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::sys;
use crate::tcp::{family, loopback};

/// The name of the server thread (its `comm`).
pub(crate) const SERVER_THREAD: &str = "udp-server";
/// Datagrams the sender may send before the receiver has acknowledged them all.
pub(crate) const WINDOW: u64 = 64;
/// Largest datagram payload accepted (the IPv4 UDP maximum).
pub(crate) const MAX_DATAGRAM: usize = 65_507;
/// Receive buffer asked for on both sockets.
const RCVBUF: libc::c_int = 4 << 20;
/// How long a receiver or a waiting sender waits before calling the datagrams lost.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub(crate) struct UdpArgs {
    /// MiB to carry in each direction.
    #[arg(long, default_value_t = 10)]
    mib: u64,
    /// Use ::1 instead of 127.0.0.1.
    #[arg(long)]
    ipv6: bool,
    /// Payload bytes per datagram (the last one of a direction may be smaller).
    #[arg(long, default_value_t = 1024)]
    datagram: usize,
}

/// Sends exactly `bytes` bytes on the connected socket `fd` as datagrams of `datagram` bytes (the
/// last one smaller if needed) with `send` (`sendto`). After each window of [`WINDOW`] datagrams it
/// waits until the receiver has acknowledged all of them on `acks`. Returns (bytes sent, datagrams
/// sent).
#[inline(never)]
pub(crate) fn udp_send(
    fd: RawFd,
    bytes: u64,
    datagram: usize,
    acks: &Receiver<u64>,
) -> Result<(u64, u64)> {
    let mut buf = vec![0u8; datagram];
    let mut state = 0x6a09_e667_f3bc_c909u64;
    let (mut sent, mut datagrams) = (0u64, 0u64);
    while sent < bytes {
        let len = datagram.min((bytes - sent) as usize);
        sys::fill_nonzero(&mut buf[..len], &mut state);
        let n = match sys::send(fd, &buf[..len], libc::MSG_NOSIGNAL) {
            Ok(n) => n,
            Err(e) if sys::interrupted(&e) => continue,
            Err(e) => bail!("udp send after {sent} bytes: {e}"),
        };
        if n != len {
            bail!("udp send of {len} bytes sent {n}");
        }
        sent += len as u64;
        datagrams += 1;
        if datagrams % WINDOW == 0 || sent == bytes {
            wait_for_ack(acks, datagrams)?;
        }
    }
    Ok((sent, datagrams))
}

/// Waits until the receiver acknowledges `datagrams` datagrams.
fn wait_for_ack(acks: &Receiver<u64>, datagrams: u64) -> Result<()> {
    loop {
        match acks.recv_timeout(TIMEOUT) {
            Ok(n) if n >= datagrams => return Ok(()),
            Ok(_) => continue,
            Err(RecvTimeoutError::Timeout) => {
                bail!(
                    "udp receiver acknowledged none of datagrams up to {datagrams} in {TIMEOUT:?}"
                )
            }
            Err(RecvTimeoutError::Disconnected) => {
                bail!("udp receiver stopped before datagram {datagrams}")
            }
        }
    }
}

/// Receives exactly `bytes` bytes from the connected socket `fd` with `recv` (`recvfrom`), checking
/// each datagram's size, and acknowledges on `acks` after each window. A datagram that does not
/// arrive in time (the socket's receive timeout) is an error: nothing may be lost. Returns (bytes
/// received, datagrams received).
#[inline(never)]
pub(crate) fn udp_recv(
    fd: RawFd,
    bytes: u64,
    datagram: usize,
    acks: &Sender<u64>,
) -> Result<(u64, u64)> {
    // One byte more than a datagram, so a larger datagram shows instead of being truncated.
    let mut buf = vec![0u8; datagram + 1];
    let (mut received, mut datagrams) = (0u64, 0u64);
    while received < bytes {
        let expect = datagram.min((bytes - received) as usize);
        let n = match sys::recv(fd, &mut buf, 0) {
            Ok(n) => n,
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => bail!(
                    "udp datagrams lost: received {received} of {bytes} bytes \
                     ({datagrams} datagrams), nothing more within {TIMEOUT:?}"
                ),
                _ => bail!("udp recv after {received} bytes: {e}"),
            },
        };
        if n != expect {
            bail!("udp datagram {datagrams} has {n} bytes, expected {expect}");
        }
        received += expect as u64;
        datagrams += 1;
        if (datagrams % WINDOW == 0 || received == bytes) && acks.send(datagrams).is_err() {
            bail!("udp sender stopped after {datagrams} datagrams");
        }
    }
    Ok((received, datagrams))
}

/// A loopback UDP socket on a free port, with a large receive buffer and a receive timeout.
fn open_socket(ipv6: bool) -> Result<UdpSocket> {
    let addr = loopback(ipv6);
    let socket = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
    let fd = socket.as_raw_fd();
    let size = RCVBUF;
    let set = |opt| {
        // SAFETY: `size` is a live c_int and its length is passed.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    // SO_RCVBUFFORCE passes net.core.rmem_max (root only); SO_RCVBUF is capped by it.
    if set(libc::SO_RCVBUFFORCE) != 0 && set(libc::SO_RCVBUF) != 0 {
        bail!("setting SO_RCVBUF: {}", sys::errno());
    }
    socket.set_read_timeout(Some(TIMEOUT))?;
    Ok(socket)
}

/// What the server thread did: (tid, bytes received, bytes sent).
type ServerSide = (i32, u64, u64);

/// Runs the exchange: the client on the calling thread, the server in thread `udp-server`.
/// `bytes` go each way, client → server first; returns the report.
pub(crate) fn udp_exchange(ipv6: bool, bytes: u64, datagram: usize) -> Result<Value> {
    if datagram == 0 || datagram > MAX_DATAGRAM {
        bail!("--datagram must be between 1 and {MAX_DATAGRAM}");
    }
    let client = open_socket(ipv6)?;
    let server = open_socket(ipv6)?;
    let (client_addr, server_addr) = (client.local_addr()?, server.local_addr()?);
    client
        .connect(server_addr)
        .with_context(|| format!("connecting to {server_addr}"))?;
    server
        .connect(client_addr)
        .with_context(|| format!("connecting to {client_addr}"))?;
    // Acknowledgements: of client → server datagrams, and of server → client ones.
    let (to_client_ack, client_acks) = channel::<u64>();
    let (to_server_ack, server_acks) = channel::<u64>();
    let handle = sys::spawn_named(SERVER_THREAD, move || -> Result<ServerSide> {
        let tid = sys::tid();
        let (received, _) = udp_recv(server.as_raw_fd(), bytes, datagram, &to_client_ack)?;
        let (sent, _) = udp_send(server.as_raw_fd(), bytes, datagram, &server_acks)?;
        Ok((tid, received, sent))
    })?;
    let client_tid = sys::tid();
    let (sent, datagrams) = udp_send(client.as_raw_fd(), bytes, datagram, &client_acks)?;
    let (received, _) = udp_recv(client.as_raw_fd(), bytes, datagram, &to_server_ack)?;
    let (server_tid, server_received, server_sent) = sys::join_named(SERVER_THREAD, handle)?;
    if sent != bytes || received != bytes || server_received != bytes || server_sent != bytes {
        bail!(
            "udp counts differ from {bytes}: client sent {sent}, received {received}; \
             server received {server_received}, sent {server_sent}"
        );
    }
    Ok(json!({
        "workload": "udp",
        "family": family(ipv6),
        "bytes_each_way": bytes,
        "datagrams_each_way": datagrams,
        "client_tid": client_tid,
        "server_tid": server_tid,
        "client_port": client_addr.port(),
        "server_port": server_addr.port(),
        "sent_by_client": sent,
        "received_by_server": server_received,
        "sent_by_server": server_sent,
        "received_by_client": received,
    }))
}

pub(crate) fn run(a: &UdpArgs) -> Result<Value> {
    let bytes = sys::mib_bytes(a.mib, "--mib")?;
    udp_exchange(a.ipv6, bytes, a.datagram)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_exact_bytes_and_datagrams() {
        let bytes = sys::MIB + 100;
        let r = udp_exchange(false, bytes, 1000).unwrap();
        for k in [
            "sent_by_client",
            "received_by_server",
            "sent_by_server",
            "received_by_client",
        ] {
            assert_eq!(r[k], bytes, "{k}");
        }
        assert_eq!(r["datagrams_each_way"], bytes.div_ceil(1000));
    }

    #[test]
    fn rejects_oversized_datagrams() {
        assert!(udp_exchange(false, sys::MIB, MAX_DATAGRAM + 1).is_err());
    }
}
