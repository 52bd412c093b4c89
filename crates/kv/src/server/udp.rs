//! The UDP server: requests in one datagram (after the 8-byte frame header); each request's
//! reply is cut into frames of at most 1400 bytes sent back to the sender as they fill.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::handler::{process_one, Cache, Session};
use crate::out::Out;
use crate::protocol::udp::{datagrams, Frame, HEADER_LEN};

/// Serves one UDP socket until `stop`.
pub fn serve(sock: UdpSocket, eng: Arc<Cache>, stop: Arc<AtomicBool>) {
    let counters = eng.register_worker();
    if let Err(e) = sock.set_read_timeout(Some(Duration::from_millis(200))) {
        tracing::error!("udp socket: {e}");
        return;
    }
    let mut buf = vec![0u8; 65536];
    // Replies hold large values by reference and are cut into datagrams one at a time, so a
    // multiget of large values leaves no large buffer behind.
    let mut out = Out::new();
    while !stop.load(Ordering::Relaxed) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        let Some(frame) = Frame::decode(&buf[..n]) else {
            continue;
        };
        // memcached ignores requests spread over several datagrams.
        if frame.total != 1 || frame.seq != 0 {
            continue;
        }
        let mut session = Session::new(counters.clone());
        let mut input = &buf[HEADER_LEN..n];
        // Like memcached, every request's reply is its own message (own sequence numbers).
        while !input.is_empty() {
            let o = process_one(&eng, &mut session, input, &mut out);
            input = &input[o.consumed..];
            if !out.is_empty() {
                datagrams(frame.request_id, out.len(), out.pieces(), |d| {
                    let _ = sock.send_to(d, peer);
                });
            }
            out.clear();
            if o.close || o.consumed == 0 {
                break;
            }
        }
    }
}
