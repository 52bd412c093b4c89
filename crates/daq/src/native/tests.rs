//! Over loopback: one [`Sender`] thread per module streams frames to a [`NativeSocket`], a
//! [`Reassembler`] puts them into a `Vec` ring; every frame must come out bit for bit, and with
//! packets held back by the drop hook, exactly those rows are 0xFFFF and counted.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::model::{ERROR_WORD, MODULE_PIXELS};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Packets a sender may have in flight: small enough for an unprivileged receive buffer
/// (net.core.rmem_max), so that the kernel never drops one and the test is exact.
const WINDOW: u64 = 4;

/// The test's module frame: distinct per frame and module, never an error word.
fn module_frame(frame: u64, module: usize) -> Vec<u16> {
    (0..MODULE_PIXELS)
        .map(|i| ((i as u64 * 31 + frame * 1009 + module as u64 * 7919) % 0x3fff) as u16)
        .collect()
}

struct Run {
    frames: Vec<(Done, Vec<u16>)>,
    stats: ReassemblyStats,
    recv: RecvStats,
    sent: u64,
}

/// Streams frames `1..=frames` of `modules` modules, without the packets `lose` names, and
/// reassembles them.
fn stream(modules: usize, frames: u64, lose: fn(u64, usize, u32) -> bool) -> Run {
    let mut sock = NativeSocket::bind(LOCAL, 0, modules).unwrap();
    let ports = sock.ports().to_vec();
    let received: Vec<AtomicU64> = (0..modules).map(|_| AtomicU64::new(0)).collect();
    let mut ring = vec![0u16; frames as usize * modules * MODULE_PIXELS];
    let mut out = Vec::new();
    let mut store = SliceStore::new(
        &mut ring,
        modules,
        frames as usize,
        |d: &Done, w: &mut [u16]| out.push((d.clone(), w.to_vec())),
    );
    let mut r = Reassembler::new(modules, frames as usize, Duration::from_secs(60));
    let sent = std::thread::scope(|sc| {
        let received = &received;
        let senders: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(m, &port)| {
                sc.spawn(move || {
                    let mut s = Sender::new(m as u16, SocketAddr::new(LOCAL, port)).unwrap();
                    let mut in_flight = 0u64;
                    for f in 1..=frames {
                        let words = module_frame(f, m);
                        let mut hook = |k: u32| {
                            if lose(f, m, k) {
                                return true;
                            }
                            // Flow control, so that loopback never overflows the socket.
                            let t = Instant::now();
                            while in_flight >= received[m].load(Ordering::Acquire) + WINDOW
                                && t.elapsed() < Duration::from_secs(5)
                            {
                                std::thread::yield_now();
                            }
                            in_flight += 1;
                            false
                        };
                        s.send_frame(f, &words, &mut hook).unwrap();
                    }
                    s.packets_sent()
                })
            })
            .collect();
        let end = Instant::now() + Duration::from_secs(60);
        while !senders.iter().all(|h| h.is_finished()) && Instant::now() < end {
            sock.recv_batch(Duration::from_millis(5), |d| {
                if let Ok(p) = Packet::new_checked(d) {
                    if let Some(c) = received.get(usize::from(p.module_id())) {
                        c.fetch_add(1, Ordering::Release);
                    }
                }
                let _ = r.push(Instant::now(), d, &mut store);
            })
            .unwrap();
        }
        senders.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    // What is still queued in the sockets.
    while sock
        .recv_batch(Duration::from_millis(50), |d| {
            let _ = r.push(Instant::now(), d, &mut store);
        })
        .unwrap()
        > 0
    {}
    r.flush(&mut store);
    Run {
        frames: out,
        stats: r.stats(),
        recv: sock.stats(),
        sent,
    }
}

/// Each frame's words: the sent frame, with the rows of lost packets 0xFFFF.
#[track_caller]
fn assert_frames(run: &Run, modules: usize, lose: fn(u64, usize, u32) -> bool) {
    for (d, words) in &run.frames {
        for m in 0..modules {
            let want_missing = (0..PACKETS_PER_FRAME)
                .filter(|&k| lose(d.frame, m, k))
                .fold(0u128, |a, k| a | 1 << k);
            assert_eq!(d.missing[m], want_missing, "frame {} module {m}", d.frame);
            let mut want = module_frame(d.frame, m);
            for k in (0..PACKETS_PER_FRAME).filter(|&k| lose(d.frame, m, k)) {
                want[words_of_packet(k)].fill(ERROR_WORD);
            }
            let got = &words[m * MODULE_PIXELS..(m + 1) * MODULE_PIXELS];
            assert!(
                got == want.as_slice(),
                "frame {} module {m} differs",
                d.frame
            );
        }
    }
}

#[test]
fn loopback_frames_arrive_bit_for_bit() {
    let none = |_, _, _| false;
    let run = stream(2, 3, none);
    assert_eq!(
        run.frames.iter().map(|(d, _)| d.frame).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(run.frames.iter().all(|(d, _)| d.complete()));
    assert_frames(&run, 2, none);
    assert_eq!(run.sent, 3 * 2 * 128);
    assert_eq!((run.stats.placed, run.stats.complete), (run.sent, 3));
    assert_eq!(
        run.stats.malformed() + run.stats.late + run.stats.duplicates,
        0
    );
    assert_eq!(run.recv.datagrams, run.sent);
    assert_eq!(run.recv.bytes, run.sent * PACKET_LEN as u64);
    assert_eq!(run.recv.truncated, 0);
}

/// Scattered packets everywhere, module 1 of frame 2 whole, module 0 of frame 3 whole.
fn some_lost(f: u64, m: usize, k: u32) -> bool {
    (f * 31 + m as u64 * 7 + u64::from(k)) % 17 == 0 || (f, m) == (2, 1) || (f, m) == (3, 0)
}

#[test]
fn loopback_lost_packets_rows_are_error_words_and_counted() {
    let run = stream(2, 3, some_lost);
    assert_eq!(
        run.frames.len(),
        3,
        "every frame had a packet, so every frame is reported"
    );
    assert!(run.frames.iter().all(|(d, _)| !d.complete()));
    assert_frames(&run, 2, some_lost);
    let lost = (1..=3u64)
        .flat_map(|f| (0..2).flat_map(move |m| (0..128).map(move |k| (f, m, k))))
        .filter(|&(f, m, k)| some_lost(f, m, k))
        .count() as u64;
    assert_eq!(run.sent + lost, 3 * 2 * 128);
    assert_eq!(run.stats.placed, run.sent);
    assert_eq!(run.stats.missing_packets, lost);
    assert_eq!(run.stats.partial, 3);
    let (d2, _) = &run.frames[1];
    assert_eq!(d2.lost_packets()[1], 128);
    assert_eq!(d2.lost_modules() & 0b10, 0b10);
}
