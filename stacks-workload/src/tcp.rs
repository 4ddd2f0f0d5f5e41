//! The `tcp` workload: a client and a server thread (`tcp-server`) in one process exchange an
//! exact number of bytes over loopback TCP, first client → server, then server → client, with
//! `send` in `tcp_send` and `recv` in `tcp_recv`, so network recording has exact totals
//! per direction, thread and port.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::sys;

/// The name of the server thread (its `comm`).
pub(crate) const SERVER_THREAD: &str = "tcp-server";

#[derive(clap::Args)]
pub(crate) struct TcpArgs {
    /// MiB to carry in each direction.
    #[arg(long, default_value_t = 10)]
    mib: u64,
    /// Use ::1 instead of 127.0.0.1.
    #[arg(long)]
    ipv6: bool,
    /// Bytes per send(2)/recv(2), in KiB.
    #[arg(long, default_value_t = 64)]
    chunk_kib: usize,
}

/// The loopback address of the family, port 0 (any free port).
pub(crate) fn loopback(ipv6: bool) -> SocketAddr {
    if ipv6 {
        (Ipv6Addr::LOCALHOST, 0).into()
    } else {
        (Ipv4Addr::LOCALHOST, 0).into()
    }
}

/// The family's name in reports.
pub(crate) fn family(ipv6: bool) -> &'static str {
    if ipv6 { "ipv6" } else { "ipv4" }
}

/// Sends exactly `bytes` bytes of non-zero pseudo-random data on the connected socket `fd` with
/// `send` (system call `sendto`) in calls of at most `chunk` bytes. Returns (bytes sent, send
/// calls).
#[inline(never)]
pub(crate) fn tcp_send(fd: RawFd, bytes: u64, chunk: usize) -> Result<(u64, u64)> {
    let mut buf = vec![0u8; chunk];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let (mut sent, mut calls) = (0u64, 0u64);
    while sent < bytes {
        let want = chunk.min((bytes - sent) as usize);
        sys::fill_nonzero(&mut buf[..want], &mut state);
        let mut off = 0;
        while off < want {
            let result = sys::send(fd, &buf[off..want], libc::MSG_NOSIGNAL);
            calls += 1;
            let n = match result {
                Ok(n) => n,
                Err(e) if sys::interrupted(&e) => continue,
                Err(e) => bail!("tcp send after {sent} bytes: {e}"),
            };
            off += n;
            sent += n as u64;
        }
    }
    Ok((sent, calls))
}

/// Receives exactly `bytes` bytes from the connected socket `fd` with `recv` (system call
/// `recvfrom`) in calls of at most `chunk` bytes (never more than what is still due). Returns
/// (bytes received, calls).
#[inline(never)]
pub(crate) fn tcp_recv(fd: RawFd, bytes: u64, chunk: usize) -> Result<(u64, u64)> {
    let mut buf = vec![0u8; chunk];
    let (mut received, mut calls) = (0u64, 0u64);
    while received < bytes {
        let want = chunk.min((bytes - received) as usize);
        let result = sys::recv(fd, &mut buf[..want], 0);
        calls += 1;
        let n = match result {
            Ok(n) => n,
            Err(e) if sys::interrupted(&e) => continue,
            Err(e) => bail!("tcp recv after {received} bytes: {e}"),
        };
        if n == 0 {
            bail!("tcp peer closed after {received} of {bytes} bytes");
        }
        received += n as u64;
    }
    Ok((received, calls))
}

/// What the server thread did: (tid, bytes received, bytes sent).
type ServerSide = (i32, u64, u64);

/// Runs the exchange: the client on the calling thread, the server in thread `tcp-server`.
/// `bytes` go each way, client → server first; returns the report.
pub(crate) fn tcp_exchange(ipv6: bool, bytes: u64, chunk: usize) -> Result<Value> {
    let listener = TcpListener::bind(loopback(ipv6))
        .with_context(|| format!("listening on {}", loopback(ipv6)))?;
    let server_addr = listener.local_addr()?;
    let server = sys::spawn_named(SERVER_THREAD, move || -> Result<ServerSide> {
        let tid = sys::tid();
        let (stream, _) = listener.accept().context("accept")?;
        drop(listener);
        let (received, _) = tcp_recv(stream.as_raw_fd(), bytes, chunk)?;
        let (sent, _) = tcp_send(stream.as_raw_fd(), bytes, chunk)?;
        // Closing now is clean: everything the client sent has been read.
        drop(stream);
        Ok((tid, received, sent))
    })?;
    let client_tid = sys::tid();
    let stream =
        TcpStream::connect(server_addr).with_context(|| format!("connecting to {server_addr}"))?;
    let client_port = stream.local_addr()?.port();
    let (sent, _) = tcp_send(stream.as_raw_fd(), bytes, chunk)?;
    let (received, _) = tcp_recv(stream.as_raw_fd(), bytes, chunk)?;
    let (server_tid, server_received, server_sent) = sys::join_named(SERVER_THREAD, server)?;
    drop(stream);
    if sent != bytes || received != bytes || server_received != bytes || server_sent != bytes {
        bail!(
            "tcp counts differ from {bytes}: client sent {sent}, received {received}; \
             server received {server_received}, sent {server_sent}"
        );
    }
    Ok(json!({
        "workload": "tcp",
        "family": family(ipv6),
        "bytes_each_way": bytes,
        "client_tid": client_tid,
        "server_tid": server_tid,
        "client_port": client_port,
        "server_port": server_addr.port(),
        "sent_by_client": sent,
        "received_by_server": server_received,
        "sent_by_server": server_sent,
        "received_by_client": received,
    }))
}

pub(crate) fn run(a: &TcpArgs) -> Result<Value> {
    let bytes = sys::mib_bytes(a.mib, "--mib")?;
    let chunk = sys::kib_bytes(a.chunk_kib, "--chunk-kib")?;
    tcp_exchange(a.ipv6, bytes, chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_exact_bytes_both_ways() {
        let r = tcp_exchange(false, sys::MIB + 777, 64 * 1024).unwrap();
        for k in [
            "sent_by_client",
            "received_by_server",
            "sent_by_server",
            "received_by_client",
        ] {
            assert_eq!(r[k], sys::MIB + 777, "{k}");
        }
        assert_ne!(r["client_tid"], r["server_tid"]);
    }
}
