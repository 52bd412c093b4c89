//! Both ends in one process over real sockets on loopback: every transport, every operation,
//! every byte checked.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use remora_fabric::{
    connect, Listener, Progress, Qp, QpOptions, QpType, RegionInfo, Status, Transport, WcOpcode,
};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

const LEN: usize = 4 << 20;

struct End {
    qp: Arc<Qp>,
    region: Arc<Region>,
    peer: RegionInfo,
    _pump: Option<Pump>,
}

/// Drives a polled queue pair from a thread of its own, as the application of a responder
/// does; completions stay for the test to take.
struct Pump {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Pump {
    fn start(qp: Arc<Qp>) -> Pump {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                qp.progress(Duration::from_millis(5)).unwrap();
            }
        });
        Pump {
            stop,
            thread: Some(thread),
        }
    }
}

impl End {
    /// The same end with a pump: for a polled end that must keep answering its peer while the
    /// test waits on the other end.
    fn pumped(mut self) -> End {
        self._pump = Some(Pump::start(self.qp.clone()));
        self
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Both ends: the server accepts with `sopts` on a thread, the client connects with `copts`.
/// A server in poll mode gets a pump; the client is driven by the test's own waits.
fn join(sopts: QpOptions, seed: u8, copts: QpOptions, memfd: bool) -> (End, End) {
    let polled = sopts.progress == Progress::Poll;
    let spd = Arc::new(Pd::new());
    let sregion = region_on(&spd, seed, memfd);
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), spd, sopts).unwrap();
    let addr = listener.local_addr();
    let info = RegionInfo::of(&sregion).encode();
    let server = thread::spawn(move || {
        let (qp, p) = listener.accept(&info).unwrap();
        let qp = Arc::new(qp);
        End {
            qp: qp.clone(),
            region: sregion,
            peer: RegionInfo::decode(&p).unwrap(),
            _pump: polled.then(|| Pump::start(qp)),
        }
    });
    let cpd = Arc::new(Pd::new());
    let cregion = region_on(&cpd, seed + 1, memfd);
    let (qp, p) = connect(addr, cpd, copts, &RegionInfo::of(&cregion).encode()).unwrap();
    let client = End {
        qp: Arc::new(qp),
        region: cregion,
        peer: RegionInfo::decode(&p).unwrap(),
        _pump: None,
    };
    (client, server.join().unwrap())
}

/// A region over anonymous memory or a memfd (the shm transport maps memfds of its peer and
/// copies with memcpy; anonymous memory goes through process_vm_readv/writev).
fn region_on(pd: &Pd, seed: u8, memfd: bool) -> Arc<Region> {
    let buf = if memfd {
        Buffer::memfd("remora-test", LEN).unwrap()
    } else {
        Buffer::anonymous(LEN).unwrap()
    };
    let r = pd.register(buf, Access::ALL, Mode::OnDemand).unwrap();
    let data: Vec<u8> = (0..LEN)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect();
    r.write_at(0, &data).unwrap();
    r
}

fn pair(transport: Transport, qp_type: QpType, mtu: usize) -> (End, End) {
    pair_on(transport, qp_type, mtu, false)
}

fn pair_on(transport: Transport, qp_type: QpType, mtu: usize, memfd: bool) -> (End, End) {
    pair_with(transport, qp_type, mtu, memfd, Progress::Thread)
}

/// A pair whose two sides both use `progress`.
fn pair_with(
    transport: Transport,
    qp_type: QpType,
    mtu: usize,
    memfd: bool,
    progress: Progress,
) -> (End, End) {
    let opts = QpOptions {
        transport,
        qp_type,
        mtu,
        progress,
        ..QpOptions::default()
    };
    join(opts.clone(), 1, opts, memfd)
}

fn bytes(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    r.read_at(off, &mut v).unwrap();
    v
}

fn wait(qp: &Qp) -> remora_fabric::Completion {
    qp.wait(Duration::from_secs(10))
        .unwrap()
        .unwrap_or_else(|| panic!("no completion in 10 s; stats {:?}", qp.stats()))
}

fn exercise(transport: Transport, mtu: usize) {
    exercise_on(transport, mtu, false)
}

fn exercise_on(transport: Transport, mtu: usize, memfd: bool) {
    let (c, s) = pair_on(transport, QpType::Rc, mtu, memfd);
    exercise_pair(c, s, mtu, transport);
}

fn exercise_pair(c: End, s: End, mtu: usize, transport: Transport) {
    // WRITE with immediate, several sizes, to distinct places.
    let sizes = [1usize, 100, mtu, mtu + 1, 65_536, 1 << 20];
    let mut off = 0;
    for (i, &n) in sizes.iter().enumerate() {
        c.qp.post_write(
            i as u64,
            &c.region,
            off,
            n,
            c.peer.addr + off as u64,
            c.peer.rkey,
            Some(i as u32),
        )
        .unwrap();
        off += n;
    }
    for (i, &n) in sizes.iter().enumerate() {
        let done = wait(&c.qp);
        assert_eq!(
            (done.wr_id, done.status, done.opcode),
            (i as u64, Status::Success, WcOpcode::Write)
        );
        let got = wait(&s.qp);
        assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!((got.imm, got.byte_len as usize), (Some(i as u32), n));
    }
    assert_eq!(
        bytes(&s.region, 0, off),
        bytes(&c.region, 0, off),
        "{transport} WRITE bytes"
    );
    // READ back from the server into another part of the client region.
    let back = 2 << 20;
    c.qp.post_read(
        100,
        &c.region,
        back,
        1 << 20,
        c.peer.addr + 12345,
        c.peer.rkey,
    )
    .unwrap();
    let done = wait(&c.qp);
    assert_eq!(
        (done.wr_id, done.status, done.opcode),
        (100, Status::Success, WcOpcode::Read)
    );
    assert_eq!(
        bytes(&c.region, back, 1 << 20),
        bytes(&s.region, 12345, 1 << 20),
        "{transport} READ bytes"
    );
    // SEND into a posted receive buffer, both directions.
    s.qp.post_recv(7, &s.region, 3 << 20, 100_000).unwrap();
    c.qp.post_send(8, &c.region, 500, 70_000, Some(99)).unwrap();
    assert_eq!(wait(&c.qp).status, Status::Success);
    let r = wait(&s.qp);
    assert_eq!(
        (r.wr_id, r.opcode, r.byte_len, r.imm),
        (7, WcOpcode::Recv, 70_000, Some(99))
    );
    assert_eq!(
        bytes(&s.region, 3 << 20, 70_000),
        bytes(&c.region, 500, 70_000)
    );
    // The server writes to the client too.
    s.qp.post_write(
        9,
        &s.region,
        0,
        300_000,
        s.peer.addr + 100,
        s.peer.rkey,
        None,
    )
    .unwrap();
    assert_eq!(wait(&s.qp).status, Status::Success);
    assert_eq!(bytes(&c.region, 100, 300_000), bytes(&s.region, 0, 300_000));
    // A wrong key is refused with an error completion; the responder keeps serving.
    c.qp.post_write(
        10,
        &c.region,
        0,
        10,
        c.peer.addr,
        c.peer.rkey ^ 0xff00,
        None,
    )
    .unwrap();
    assert_eq!(wait(&c.qp).status, Status::RemoteAccessError);
    assert_eq!(s.qp.stats().engine.access_errors, 1);
    s.qp.post_read(11, &s.region, 0, 4096, s.peer.addr, s.peer.rkey)
        .unwrap();
    assert_eq!(wait(&s.qp).status, Status::Success);
}

#[test]
fn udp_rc_moves_every_byte() {
    exercise(Transport::Udp, 4096);
}

#[test]
fn udp_rc_small_mtu_moves_every_byte() {
    exercise(Transport::Udp, 1024);
}

#[test]
fn tcp_rc_moves_every_byte() {
    exercise(Transport::Tcp, 4096);
}

#[test]
fn shm_rc_moves_every_byte() {
    exercise(Transport::Shm, 4096);
}

#[test]
fn shm_rc_with_memfd_regions_moves_every_byte() {
    exercise_on(Transport::Shm, 4096, true);
}

#[test]
fn udp_rc_moves_every_byte_with_progress_in_the_callers_thread() {
    for mtu in [4096, 1024] {
        // The server writes to the client too: the client needs a thread that polls while
        // the test waits on the server.
        let (c, s) = pair_with(Transport::Udp, QpType::Rc, mtu, false, Progress::Poll);
        exercise_pair(c.pumped(), s, mtu, Transport::Udp);
    }
}

#[test]
fn a_polled_requester_talks_to_a_threaded_responder_and_back() {
    let opts = |progress| QpOptions {
        progress,
        ..QpOptions::default()
    };
    let (c, s) = join(opts(Progress::Thread), 1, opts(Progress::Poll), false);
    exercise_pair(c.pumped(), s, 4096, Transport::Udp);
    let (c, s) = join(opts(Progress::Poll), 1, opts(Progress::Thread), false);
    exercise_pair(c, s, 4096, Transport::Udp);
}

#[test]
fn uc_with_progress_in_the_callers_thread_delivers_every_immediate() {
    let (c, s) = pair_with(Transport::Udp, QpType::Uc, 4096, false, Progress::Poll);
    for i in 0..50u32 {
        c.qp.post_write(
            i as u64,
            &c.region,
            0,
            20_000,
            c.peer.addr + i as u64 * 20_000,
            c.peer.rkey,
            Some(i),
        )
        .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
    }
    for i in 0..50u32 {
        assert_eq!(wait(&s.qp).imm, Some(i));
    }
}

#[test]
fn busy_polling_spins_progress_and_finds_the_completion() {
    let (c, s) = pair_with(Transport::Udp, QpType::Rc, 4096, false, Progress::Poll);
    for i in 0..200u64 {
        c.qp.post_write(i, &c.region, 0, 8, c.peer.addr, c.peer.rkey, Some(i as u32))
            .unwrap();
        // The client's spin alone drives the client (the first WRITE into a page the server
        // has not mapped yet is held and resumed by an ERR that only this spin receives).
        let done = c.qp.spin(Duration::from_secs(10)).expect("completion");
        assert_eq!((done.wr_id, done.status), (i, Status::Success));
        let got = s.qp.spin(Duration::from_secs(10)).expect("arrival");
        assert_eq!(got.imm, Some(i as u32));
    }
}

#[test]
fn progress_poll_on_tcp_is_refused_with_the_reason() {
    let pd = Arc::new(Pd::new());
    let opts = QpOptions {
        transport: Transport::Tcp,
        progress: Progress::Poll,
        ..QpOptions::default()
    };
    let e = connect("127.0.0.1:9".parse().unwrap(), pd, opts, &[])
        .err()
        .expect("refused");
    assert!(e.to_string().contains("progress poll"), "{e}");
}

#[test]
fn a_listener_owns_the_roce_port_from_the_start_and_requesters_do_not_take_it() {
    // A loopback address of this test's own: no other test's listener competes for its 4791.
    let ip: std::net::IpAddr = "127.0.0.98".parse().unwrap();
    let spd = Arc::new(Pd::new());
    let mr = region_on(&spd, 3, false);
    let l = Listener::bind((ip, 0).into(), spd.clone(), QpOptions::default()).unwrap();
    let dev = l.udp_device(ip).expect("bound when the listener started");
    assert_eq!(dev.port(), 4791);
    // A second listener on the address finds 4791 taken, falls back and says where it went.
    let other = Listener::bind((ip, 0).into(), spd, QpOptions::default()).unwrap();
    let fallback = other.udp_device(ip).unwrap();
    assert_ne!(fallback.port(), 4791);
    drop(other);
    let addr = l.local_addr();
    let info = RegionInfo::of(&mr).encode();
    let server = thread::spawn(move || l.accept(&info).unwrap());
    let cpd = Arc::new(Pd::new());
    let cmr = region_on(&cpd, 4, false);
    let (qp, p) = connect(addr, cpd, QpOptions::default(), &[]).unwrap();
    let (_sqp, _) = server.join().unwrap();
    assert_eq!(
        qp.udp_peer(),
        Some(dev),
        "requests go to the responder's 4791"
    );
    assert_ne!(
        qp.udp_device().unwrap().port(),
        4791,
        "a requester leaves 4791 alone"
    );
    let peer = RegionInfo::decode(&p).unwrap();
    qp.post_write(1, &cmr, 0, 4096, peer.addr, peer.rkey, None)
        .unwrap();
    assert_eq!(wait(&qp).status, Status::Success);
    assert_eq!(bytes(&mr, 0, 4096), bytes(&cmr, 0, 4096));
}

fn lossy_pair(qp_type: QpType, loss: f64, progress: Progress) -> (End, End) {
    let faults = |seed| remora_fabric::Faults {
        loss,
        duplicate: 0.02,
        reorder: 0.02,
        seed,
    };
    let opts = QpOptions {
        transport: Transport::Udp,
        qp_type,
        mtu: 1024,
        retry_timeout: Duration::from_millis(5),
        retry_count: 12,
        progress,
        ..QpOptions::default()
    };
    join(
        QpOptions {
            faults: Some(faults(7)),
            ..opts.clone()
        },
        1,
        QpOptions {
            faults: Some(faults(11)),
            ..opts
        },
        false,
    )
}

#[test]
fn udp_rc_delivers_exactly_once_in_order_through_loss_duplication_and_reordering() {
    for progress in [Progress::Thread, Progress::Poll] {
        lossy_rc(progress);
    }
}

/// With `Progress::Poll` the retransmission timers run in the threads that wait: the test's
/// own for the client, the pump for the server.
fn lossy_rc(progress: Progress) {
    let (c, s) = lossy_pair(QpType::Rc, 0.05, progress);
    let n = 40;
    let size = 50_000;
    for i in 0..n {
        c.qp.post_write(
            i,
            &c.region,
            i as usize * size,
            size,
            c.peer.addr + i * size as u64,
            c.peer.rkey,
            Some(i as u32),
        )
        .unwrap();
    }
    c.qp.post_read(
        1000,
        &c.region,
        3 << 20,
        500_000,
        c.peer.addr + 3_000_000,
        c.peer.rkey,
    )
    .unwrap();
    for i in 0..n {
        let w = wait(&c.qp);
        assert_eq!((w.wr_id, w.status), (i, Status::Success));
        let imm = wait(&s.qp);
        assert_eq!(imm.imm, Some(i as u32), "immediates arrive once, in order");
    }
    let r = wait(&c.qp);
    assert_eq!((r.wr_id, r.status), (1000, Status::Success));
    let total = n as usize * size;
    assert_eq!(bytes(&s.region, 0, total), bytes(&c.region, 0, total));
    assert_eq!(
        bytes(&c.region, 3 << 20, 500_000),
        bytes(&s.region, 3_000_000, 500_000)
    );
    assert!(
        s.qp.wait(Duration::from_millis(200)).unwrap().is_none(),
        "no duplicate arrivals"
    );
    let st = c.qp.stats().engine;
    assert!(
        st.retransmits > 0,
        "losses were recovered by retransmission: {st:?}"
    );
}

#[test]
fn udp_uc_drops_damaged_messages_and_counts_them() {
    let (c, s) = lossy_pair(QpType::Uc, 0.05, Progress::Thread);
    for i in 0..100u64 {
        c.qp.post_write(
            i,
            &c.region,
            0,
            8192,
            c.peer.addr + i * 8192,
            c.peer.rkey,
            Some(i as u32),
        )
        .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut arrived = Vec::new();
    while let Some(x) = s.qp.wait(Duration::from_millis(50)).unwrap() {
        arrived.push(x.imm.unwrap());
    }
    let st = s.qp.stats().engine;
    assert!(
        arrived.len() < 100,
        "5% packet loss must cost some of 100 eight-packet messages"
    );
    assert!(
        arrived.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates: {arrived:?}"
    );
    assert!(st.uc_messages_dropped + st.uc_packets_dropped > 0, "{st:?}");
    for &i in &arrived {
        let off = i as usize * 8192;
        assert_eq!(
            bytes(&s.region, off, 8192),
            bytes(&c.region, 0, 8192),
            "message {i} intact"
        );
    }
}

/// A responder that drops its queue pair as soon as it sees a SEND arrive must still have
/// acknowledged it: the requester's SEND completes as a success, not flushed. (The stream
/// transports once shut both directions at once on close and lost that last ACK about one time
/// in six.)
#[test]
fn a_responder_closing_right_after_a_send_still_acknowledges_it() {
    for transport in [Transport::Shm, Transport::Tcp, Transport::Udp] {
        for round in 0..20 {
            let (c, s) = pair(transport, QpType::Rc, 4096);
            s.qp.post_recv(1, &s.region, 0, 4096).unwrap();
            c.qp.post_send(7, &c.region, 0, 64, None).unwrap();
            let got = wait(&s.qp);
            assert_eq!(got.status, Status::Success);
            drop(s);
            let done = wait(&c.qp);
            assert_eq!(
                (done.wr_id, done.status),
                (7, Status::Success),
                "{transport}, round {round}"
            );
        }
    }
}

/// A pair over shm whose regions are memfds (granted for one-sided access at setup), with
/// `progress` on both sides.
fn shm_pair(progress: Progress) -> (End, End) {
    let opts = QpOptions {
        transport: Transport::Shm,
        progress,
        ..QpOptions::default()
    };
    let (c, s) = join(opts.clone(), 5, opts, true);
    await_grants(&c);
    await_grants(&s);
    (c, s)
}

/// The grants travel in the first frames after setup: writes one byte (to offset 0, which the
/// tests overwrite) until one of them goes one-sided.
fn await_grants(e: &End) {
    let t0 = std::time::Instant::now();
    while e.qp.stats().engine.one_sided == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "grants never arrived"
        );
        e.qp.post_write(u64::MAX, &e.region, 0, 1, e.peer.addr, e.peer.rkey, None)
            .unwrap();
        assert_eq!(wait(&e.qp).status, Status::Success);
    }
}

#[test]
fn one_sided_shm_writes_reads_and_signals_every_byte_in_both_progress_modes() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        // Setup grants arrive with the first frames: wait until the client sees them.
        let sizes = [1usize, 8, 4095, 4096, 65_537, 1 << 20];
        let mut off = 0;
        for (i, &n) in sizes.iter().enumerate() {
            c.qp.post_write(
                i as u64,
                &c.region,
                off,
                n,
                c.peer.addr + off as u64,
                c.peer.rkey,
                Some(i as u32),
            )
            .unwrap();
            assert_eq!(wait(&c.qp).status, Status::Success);
            let got = wait(&s.qp);
            assert_eq!(got.opcode, WcOpcode::RecvRdmaWithImm);
            assert_eq!((got.imm, got.byte_len as usize), (Some(i as u32), n));
            off += n;
        }
        assert_eq!(bytes(&s.region, 0, off), bytes(&c.region, 0, off));
        // Plain WRITE: silent at the target, bytes in place when the requester completes.
        c.qp.post_write(
            50,
            &c.region,
            7,
            3000,
            c.peer.addr + (2 << 20),
            c.peer.rkey,
            None,
        )
        .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
        assert_eq!(bytes(&s.region, 2 << 20, 3000), bytes(&c.region, 7, 3000));
        // READ back into another part of the client's region.
        c.qp.post_read(
            51,
            &c.region,
            3 << 20,
            100_000,
            c.peer.addr + 999,
            c.peer.rkey,
        )
        .unwrap();
        let r = wait(&c.qp);
        assert_eq!(
            (r.wr_id, r.status, r.opcode),
            (51, Status::Success, WcOpcode::Read)
        );
        assert_eq!(
            bytes(&c.region, 3 << 20, 100_000),
            bytes(&s.region, 999, 100_000)
        );
        let st = c.qp.stats().engine;
        let warm = st.tx_packets; // what went through the stream before the grants landed
        assert_eq!(
            st.one_sided,
            sizes.len() as u64 + 2 + 1,
            "{st:?} (after {warm})"
        );
        assert_eq!(s.qp.stats().engine.ring_completions, sizes.len() as u64);
        // The server's direction works the same way.
        s.qp.post_write(
            60,
            &s.region,
            0,
            5000,
            s.peer.addr + 100,
            s.peer.rkey,
            Some(77),
        )
        .unwrap();
        assert_eq!(wait(&s.qp).status, Status::Success);
        assert_eq!(wait(&c.qp).imm, Some(77));
        assert_eq!(bytes(&c.region, 100, 5000), bytes(&s.region, 0, 5000));
    }
}

#[test]
fn one_sided_shm_refuses_what_was_not_granted() {
    let (c, s) = shm_pair(Progress::Thread);
    // Past the end of the granted region: refused on the requester, nothing written.
    let before = bytes(&s.region, LEN - 100, 100);
    c.qp.post_write(
        2,
        &c.region,
        0,
        200,
        c.peer.addr + LEN as u64 - 100,
        c.peer.rkey,
        Some(1),
    )
    .unwrap();
    assert_eq!(wait(&c.qp).status, Status::RemoteAccessError);
    assert_eq!(bytes(&s.region, LEN - 100, 100), before);
    assert!(c.qp.stats().engine.access_errors >= 1);
    assert!(
        s.qp.wait(Duration::from_millis(100)).unwrap().is_none(),
        "no immediate for a refused WRITE"
    );
    // RC after a refused request: the queue pair is in error, as after a NAK.
    assert!(c
        .qp
        .post_write(3, &c.region, 0, 8, c.peer.addr, c.peer.rkey, None)
        .is_err());

    // A region granted for reading only cannot be written, and an address below its base
    // (checked arithmetic) is refused too.
    let spd = Arc::new(Pd::new());
    let ro = spd
        .register(
            Buffer::memfd("remora-ro", 1 << 16).unwrap(),
            remora_mem::Access::REMOTE_READ | remora_mem::Access::LOCAL_WRITE,
            Mode::OnDemand,
        )
        .unwrap();
    ro.write_at(0, &[0xAB; 4096]).unwrap();
    let opts = QpOptions {
        transport: Transport::Shm,
        ..QpOptions::default()
    };
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), spd, opts.clone()).unwrap();
    let addr = listener.local_addr();
    let info = RegionInfo::of(&ro).encode();
    let server = thread::spawn(move || listener.accept(&info).unwrap());
    let cpd = Arc::new(Pd::new());
    let mine = region_on(&cpd, 9, true);
    let (qp, p) = connect(addr, cpd, opts, &[]).unwrap();
    let _keep = server.join().unwrap();
    let peer = RegionInfo::decode(&p).unwrap();
    let t0 = std::time::Instant::now();
    while qp.stats().engine.one_sided == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "grants never arrived"
        );
        qp.post_read(1, &mine, 0, 4096, peer.addr, peer.rkey)
            .unwrap();
        assert_eq!(wait(&qp).status, Status::Success);
    }
    assert_eq!(bytes(&mine, 0, 4096), vec![0xAB; 4096]);
    qp.post_write(2, &mine, 0, 16, peer.addr, peer.rkey, None)
        .unwrap();
    assert_eq!(wait(&qp).status, Status::RemoteAccessError);
    assert_eq!(
        bytes(&ro, 0, 16),
        vec![0xAB; 16],
        "the read-only region is untouched"
    );
}

#[test]
fn one_sided_shm_rings_wrap_and_keep_order_under_a_long_run() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        // Thousands of immediates (the ring holds 1024) before the server looks: the client
        // waits for room, the server's receive thread drains on the doorbell.
        let n = 5000u32;
        for i in 0..n {
            let off = (i as usize % 512) * 64;
            c.qp.post_write(
                i as u64,
                &c.region,
                off,
                64,
                c.peer.addr + off as u64,
                c.peer.rkey,
                Some(i),
            )
            .unwrap();
        }
        for i in 0..n {
            let d = wait(&c.qp);
            assert_eq!((d.wr_id, d.status), (i as u64, Status::Success));
        }
        for i in 0..n {
            let got = wait(&s.qp);
            assert_eq!(got.imm, Some(i), "{progress}: immediates in order");
        }
        assert!(s.qp.wait(Duration::from_millis(50)).unwrap().is_none());
        let st = s.qp.stats().engine;
        assert!(st.ring_completions > 4000, "{progress}: {st:?}");
    }
}

#[test]
fn one_sided_shm_peer_gone_is_an_error_not_a_hang() {
    for progress in [Progress::Thread, Progress::Poll] {
        let (c, s) = shm_pair(progress);
        c.qp.post_write(1, &c.region, 0, 8, c.peer.addr, c.peer.rkey, Some(1))
            .unwrap();
        assert_eq!(wait(&c.qp).status, Status::Success);
        drop(s);
        // Within a bounded time, posting or completing fails: never a hang, even with the
        // ring full and nobody left to drain it.
        let t0 = std::time::Instant::now();
        let mut failed = false;
        for i in 0..10_000u64 {
            match c.qp.post_write(
                i,
                &c.region,
                0,
                64,
                c.peer.addr,
                c.peer.rkey,
                Some(i as u32),
            ) {
                Err(_) => {
                    failed = true;
                    break;
                }
                Ok(()) => {
                    if let Some(d) = c.qp.wait(Duration::from_secs(5)).unwrap() {
                        if d.status != Status::Success {
                            failed = true;
                            break;
                        }
                    }
                }
            }
            if c.qp.is_closed() && i > 0 {
                failed = true;
                break;
            }
        }
        assert!(failed, "{progress}: the peer's end was noticed");
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
}
