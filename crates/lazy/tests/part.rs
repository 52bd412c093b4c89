//! PART over lazy memory: a fabric responder whose region is a [`LazyRegion`] (registered as
//! external, on-demand memory), so a WRITE's target pages are remote-backed faults: PART's
//! page-in worker brings them in (fetching the source's bytes) off the receive thread.
//!
//! Head-of-line test: one udp device serves two queue pairs; A's WRITE faults on pages whose
//! fetch is held at a gate the test controls, B's WRITEs go to resident memory. Under PART
//! all of B's messages complete while A is blocked; with inline faults none do (the shared
//! receive thread is stuck in A's fault) until the gate opens.
#![cfg(feature = "fabric")]
mod common;
use common::bounded;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use remora_fabric::{
    connect, Completion, FaultMode, Listener, PartConfig, Qp, QpOptions, Status, WcOpcode,
};
use remora_lazy::{FetchError, Fetched, LazyRegion, Mode, Options, PageFetcher, PushStream};
use remora_mem::{Access, Buffer, Pd, Region};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Deterministic bytes, different per seed and position.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..len.div_ceil(8) as u64 {
        let w = (i ^ s).wrapping_mul(0xD6E8_FEB8_6659_FD93).rotate_left(29) ^ s;
        v.extend_from_slice(&w.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn check_eq(what: &str, want: &[u8], got: &[u8]) {
    assert_eq!(want.len(), got.len(), "{what}: lengths");
    if want != got {
        let first = want.iter().zip(got).position(|(a, b)| a != b).unwrap();
        let bad = want.iter().zip(got).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: {bad} of {} bytes differ, first at {first}: want {:#04x} got {:#04x}",
            want.len(),
            want[first],
            got[first]
        );
    }
}

fn bytes(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    r.read_at(off, &mut v).unwrap();
    v
}

/// A page source in this process whose fetches wait at a gate while it is closed.
struct Gated {
    data: Vec<u8>,
    open: Mutex<bool>,
    cv: Condvar,
    /// Fetches that found the gate closed (each is a thread stuck in a fault).
    blocked: AtomicUsize,
    fetches: AtomicU64,
}

impl Gated {
    fn new(data: Vec<u8>, open: bool) -> Arc<Gated> {
        Arc::new(Gated {
            data,
            open: Mutex::new(open),
            cv: Condvar::new(),
            blocked: AtomicUsize::new(0),
            fetches: AtomicU64::new(0),
        })
    }

    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Waits until some fetch is held at the gate.
    fn wait_blocked(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while self.blocked.load(Ordering::SeqCst) == 0 {
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

impl PageFetcher for Gated {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    fn fetch(&self, offset: u64, buf: &mut [u8], deadline: Instant) -> Result<Fetched, FetchError> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            if !*open {
                self.blocked.fetch_add(1, Ordering::SeqCst);
            }
            while !*open {
                let now = Instant::now();
                if now >= deadline {
                    return Err(FetchError::Transient("the gate is still closed".into()));
                }
                open = self
                    .cv
                    .wait_timeout(open, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        let off = offset as usize;
        let n = buf.len().min(self.data.len().saturating_sub(off));
        buf[..n].copy_from_slice(&self.data[off..off + n]);
        buf[n..].fill(0);
        Ok(Fetched::Data)
    }

    fn open_push(&self, _from: u64, _unit: u64) -> Result<Box<dyn PushStream>, FetchError> {
        Err(FetchError::Fatal("no push in this test".into()))
    }

    fn transport(&self) -> &'static str {
        "gated"
    }
}

/// Opens the gate when dropped, so that a failing test does not leave threads stuck in a
/// fault (a device's receive thread is joined when it drops).
struct OpenOnDrop(Arc<Gated>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

fn lazy(fetcher: &Arc<Gated>, mode: Mode) -> LazyRegion {
    LazyRegion::open(
        fetcher.clone(),
        Options {
            unit: 4096,
            mode,
            // Longer than any gate is held: a fetch must not give up (and poison) meanwhile.
            deadline: Duration::from_secs(60),
            ..Options::default()
        },
    )
    .unwrap()
}

/// Both ends in this process over udp: `conns` queue pairs from one client Pd to one Listener
/// (one udp device) serving the lazy region and a resident one.
struct Rig {
    clients: Vec<Qp>,
    servers: Vec<Qp>,
    /// The client's memory (resident).
    local: Arc<Region>,
    /// The lazy region, registered on the responder.
    lazy: Arc<Region>,
    /// Ordinary memory on the responder, made resident.
    plain: Arc<Region>,
}

const LOCAL_LEN: usize = 8 * MIB;
const PLAIN_LEN: usize = 4 * MIB;

impl Rig {
    /// `lazy` must outlive the rig (drop the rig first).
    fn new(lazy: &LazyRegion, mode: FaultMode, conns: usize) -> Rig {
        let spd = Arc::new(Pd::new());
        // SAFETY: the lazy mapping stays mapped and writable while `lazy` lives, which the
        // caller keeps alive until this rig (the queue pairs and the Pd) has dropped.
        let buf = unsafe { Buffer::external(lazy.as_ptr(), lazy.len()) }.unwrap();
        let lazy_mr = spd
            .register(buf, Access::ALL, remora_mem::Mode::OnDemand)
            .unwrap();
        assert!(
            !lazy_mr.is_resident(0, lazy_mr.len()),
            "nothing fetched yet"
        );
        let plain = spd
            .register(
                Buffer::anonymous(PLAIN_LEN).unwrap(),
                Access::ALL,
                remora_mem::Mode::OnDemand,
            )
            .unwrap();
        plain.page_in_range(0, PLAIN_LEN).unwrap();
        assert!(plain.is_resident(0, PLAIN_LEN));
        let opts = QpOptions {
            part: PartConfig {
                mode,
                ..PartConfig::default()
            },
            // Inline faults stall the responder with no ACK for seconds: the default budget
            // (7 retries from 10 ms, about 2.5 s) would fail the requests meanwhile.
            retry_timeout: Duration::from_millis(50),
            retry_count: 10,
            ..QpOptions::default()
        };
        let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), spd, opts.clone()).unwrap();
        let addr = listener.local_addr();
        let server = std::thread::spawn(move || {
            (0..conns)
                .map(|_| listener.accept(&[]).unwrap().0)
                .collect::<Vec<_>>()
        });
        let cpd = Arc::new(Pd::new());
        let local = cpd
            .register(
                Buffer::anonymous(LOCAL_LEN).unwrap(),
                Access::ALL,
                remora_mem::Mode::OnDemand,
            )
            .unwrap();
        local.page_in_range(0, LOCAL_LEN).unwrap();
        // One at a time, so the accepted queue pairs come in the same order.
        let clients = (0..conns)
            .map(|_| connect(addr, cpd.clone(), opts.clone(), &[]).unwrap().0)
            .collect();
        let servers = server.join().unwrap();
        Rig {
            clients,
            servers,
            local,
            lazy: lazy_mr,
            plain,
        }
    }
}

/// The next completion of `qp` within `secs`, which must be a success.
fn wait_ok(qp: &Qp, secs: u64, what: &str) -> Completion {
    let c = qp
        .wait(Duration::from_secs(secs))
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: no completion in {secs} s; stats {:?}", qp.stats()));
    assert_eq!(c.status, Status::Success, "{what}: {c:?}; {:?}", qp.stats());
    c
}

/// Every `(mode name, lazy mode)` the tests run with.
fn lazy_modes() -> [(&'static str, Mode); 2] {
    [
        ("sigbus", Mode::Sigbus),
        ("thread", Mode::Thread { handlers: 1 }),
    ]
}

const LAZY_LEN: usize = 4 * MIB;

/// A WRITE into a lazy region faults remote-backed pages: PART brings them in (fetched from the
/// source) and places the payload; the bytes around it, and an unwritten range READ later,
/// are the source's.
fn write_and_read_lazy(mode: Mode, name: &str) {
    let src = pattern(1, LAZY_LEN);
    let fetcher = Gated::new(src.clone(), true);
    let region = lazy(&fetcher, mode);
    let rig = Rig::new(&region, FaultMode::Part, 1);
    let (c, s) = (&rig.clients[0], &rig.servers[0]);
    let (addr, rkey) = (rig.lazy.addr(), rig.lazy.rkey());

    // 1 MiB at an odd offset: the first and last pages are shared with unwritten bytes.
    let w_off = 512 * KIB + 3;
    let data = pattern(2, MIB);
    rig.local.write_at(0, &data).unwrap();
    c.post_write(1, &rig.local, 0, MIB, addr + w_off as u64, rkey, None)
        .unwrap();
    let done = wait_ok(c, 20, &format!("{name}: WRITE"));
    assert_eq!((done.wr_id, done.opcode), (1, WcOpcode::Write));

    // Back with a margin on both sides.
    let margin = 5000;
    let back = 2 * MIB;
    let len = MIB + 2 * margin;
    c.post_read(
        2,
        &rig.local,
        back,
        len,
        addr + (w_off - margin) as u64,
        rkey,
    )
    .unwrap();
    assert_eq!(wait_ok(c, 20, &format!("{name}: READ")).wr_id, 2);
    let mut want = src[w_off - margin..w_off + MIB + margin].to_vec();
    want[margin..margin + MIB].copy_from_slice(&data);
    check_eq(
        &format!("{name}: written range"),
        &want,
        &bytes(&rig.local, back, len),
    );

    // A range nothing wrote: the source's bytes, fetched when the READ response reads them.
    let (u_off, u_len) = (3 * MIB + 7, 512 * KIB);
    c.post_read(3, &rig.local, 6 * MIB, u_len, addr + u_off as u64, rkey)
        .unwrap();
    assert_eq!(wait_ok(c, 20, &format!("{name}: READ unwritten")).wr_id, 3);
    check_eq(
        &format!("{name}: unwritten range"),
        &src[u_off..u_off + u_len],
        &bytes(&rig.local, 6 * MIB, u_len),
    );
    // The region itself, through the lazy mapping.
    check_eq(
        &format!("{name}: lazy mapping"),
        &want,
        &region.as_slice()[w_off - margin..w_off + MIB + margin],
    );

    let st = s.stats().engine;
    let ls = region.stats();
    eprintln!("{name}: responder {st:?}\nlazy {ls:?}");
    assert!(st.faults > 0, "{name}: the WRITE faulted: {st:?}");
    // The WRITE's packets waited behind the page-in wave, or the sender resent them after the ERR.
    assert!(st.errs_sent + st.wave_holds > 0, "{name}: {st:?}");
    assert!(st.pages_in > 0, "{name}: {st:?}");
    assert!(
        fetcher.fetches.load(Ordering::SeqCst) > 0 && ls.faults > 0,
        "{name}: pages came from the source: {ls:?}"
    );
    // The sender either followed an ERR or its packets waited behind the wave. (Whether its
    // retransmission timer also fired while the page-in ran depends on the machine's load: a
    // resend of the window's front is answered with a hold, so it is not counted against it.)
    let cs = c.stats().engine;
    assert!(cs.errs_received > 0 || st.wave_holds > 0, "{name}: {cs:?}");
    drop(rig);
    drop(region);
}

#[test]
fn part_places_writes_into_lazy_memory_and_reads_back_the_source() {
    bounded(120, || {
        for (name, mode) in lazy_modes() {
            write_and_read_lazy(mode, name);
        }
    });
}

/// Queue pair A WRITEs 256 KiB into lazy memory whose fetches wait at a closed gate; queue pair
/// B, on the same responder device, then WRITEs 50 messages of 64 KiB with immediate into
/// resident memory.
fn head_of_line(fault: FaultMode, mode: Mode, name: &str) {
    const A_LEN: usize = 256 * KIB;
    const A_OFF: usize = 64 * KIB + 9;
    const B_MSGS: usize = 50;
    const B_LEN: usize = 64 * KIB;
    const B_SRC: usize = MIB;
    let name = format!("{name} {fault:?}");

    let src = pattern(3, MIB);
    let gate = Gated::new(src.clone(), false);
    let region = lazy(&gate, mode);
    let rig = Rig::new(&region, fault, 2);
    let _open = OpenOnDrop(gate.clone());
    let (ca, sa) = (&rig.clients[0], &rig.servers[0]);
    let (cb, sb) = (&rig.clients[1], &rig.servers[1]);

    let a_data = pattern(4, A_LEN);
    rig.local.write_at(0, &a_data).unwrap();
    let b_data = pattern(5, B_MSGS * B_LEN);
    rig.local.write_at(B_SRC, &b_data).unwrap();

    ca.post_write(
        1,
        &rig.local,
        0,
        A_LEN,
        rig.lazy.addr() + A_OFF as u64,
        rig.lazy.rkey(),
        None,
    )
    .unwrap();
    assert!(
        gate.wait_blocked(Duration::from_secs(20)),
        "{name}: A's WRITE never reached the gate; {:?}",
        ca.stats()
    );

    let posted = Instant::now();
    for i in 0..B_MSGS {
        cb.post_write(
            100 + i as u64,
            &rig.local,
            B_SRC + i * B_LEN,
            B_LEN,
            rig.plain.addr() + (i * B_LEN) as u64,
            rig.plain.rkey(),
            Some(i as u32),
        )
        .unwrap();
    }
    let b_done = |secs: u64| {
        for i in 0..B_MSGS {
            let c = wait_ok(cb, secs, &format!("{name}: B's WRITE {i}"));
            assert_eq!((c.wr_id, c.opcode), (100 + i as u64, WcOpcode::Write));
            let r = wait_ok(sb, secs, &format!("{name}: B's arrival {i}"));
            assert_eq!(
                (r.opcode, r.imm, r.byte_len as usize),
                (WcOpcode::RecvRdmaWithImm, Some(i as u32), B_LEN)
            );
        }
    };
    match fault {
        FaultMode::Part => {
            // A is blocked for as long as the gate stays closed; B is not.
            b_done(20);
            // Hold the gate past A's retransmission timeout and hold limit: A's packets wait
            // behind the wave; A resends, is told to hold, asks for nothing new and does not
            // fail.
            std::thread::sleep(Duration::from_millis(500));
            assert!(
                ca.cq().is_empty(),
                "{name}: A completed with its pages held at the gate"
            );
            let st = sa.stats().engine;
            assert!(st.faults > 0 && st.fault_naks > 0, "{name}: A: {st:?}");
            assert_eq!(st.page_ins, 1, "{name}: one page-in covers A: {st:?}");
            assert_eq!(st.errs_sent, 0, "{name}: A's pages are not in yet: {st:?}");
        }
        FaultMode::Inline => {
            // The receive thread the two queue pairs share is stuck in A's fault: nothing of B
            // gets placed or acknowledged.
            let until = posted + Duration::from_secs(3);
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                std::thread::sleep(left);
            }
            assert_eq!(
                (cb.cq().len(), sb.cq().len(), ca.cq().len()),
                (0, 0, 0),
                "{name}: something completed while the receive thread was in A's fault"
            );
        }
    }
    assert!(gate.blocked.load(Ordering::SeqCst) > 0);
    gate.open();

    let a = wait_ok(ca, 20, &format!("{name}: A's WRITE"));
    assert_eq!((a.wr_id, a.opcode), (1, WcOpcode::Write));
    if fault == FaultMode::Inline {
        b_done(20);
    }
    // A's bytes, with the source's around them, READ back over A.
    let (from, len) = (A_OFF - 100, A_LEN + 200);
    ca.post_read(
        2,
        &rig.local,
        4 * MIB,
        len,
        rig.lazy.addr() + from as u64,
        rig.lazy.rkey(),
    )
    .unwrap();
    assert_eq!(wait_ok(ca, 20, &format!("{name}: A's READ")).wr_id, 2);
    let mut want = src[from..from + len].to_vec();
    want[100..100 + A_LEN].copy_from_slice(&a_data);
    check_eq(
        &format!("{name}: A's bytes"),
        &want,
        &bytes(&rig.local, 4 * MIB, len),
    );
    check_eq(
        &format!("{name}: B's bytes"),
        &b_data,
        &bytes(&rig.plain, 0, B_MSGS * B_LEN),
    );
    let st = sa.stats().engine;
    eprintln!("{name}: A responder {st:?}\nlazy {:?}", region.stats());
    match fault {
        FaultMode::Part => {
            // The WRITE's packets waited behind the page-in wave, or the sender resent them after the ERR.
            assert!(st.errs_sent + st.wave_holds > 0, "{name}: {st:?}");
            assert_eq!(st.page_ins, 1, "{name}: {st:?}");
        }
        // Inline faults are taken in the copy: PART never sees them.
        FaultMode::Inline => assert_eq!(st.faults, 0, "{name}: {st:?}"),
    }
    drop(rig);
    drop(region);
}

#[test]
fn part_keeps_serving_other_queue_pairs_while_one_waits_for_remote_pages() {
    bounded(120, || {
        for (name, mode) in lazy_modes() {
            head_of_line(FaultMode::Part, mode, name);
        }
    });
}

#[test]
fn inline_faults_block_every_queue_pair_of_the_receive_thread() {
    bounded(120, || {
        for (name, mode) in lazy_modes() {
            head_of_line(FaultMode::Inline, mode, name);
        }
    });
}

/// What PART's page-in worker does, straight on the region: populating lazy memory fetches
/// the source's bytes. In SIGBUS mode the kernel refuses `MADV_POPULATE_*` with EFAULT, so the
/// populate has to touch the pages (remora-mem falls back to that for external memory).
#[test]
fn populating_lazy_memory_fetches_the_source_in_both_modes() {
    bounded(60, || {
        for (name, mode) in lazy_modes() {
            let src = pattern(7, LAZY_LEN);
            let fetcher = Gated::new(src.clone(), true);
            let region = lazy(&fetcher, mode);
            let pd = Pd::new();
            // SAFETY: the mapping outlives the regions over it (dropped below, before it).
            let buf = unsafe { Buffer::external(region.as_ptr(), region.len()) }.unwrap();
            let mr = pd
                .register(buf, Access::ALL, remora_mem::Mode::OnDemand)
                .unwrap();
            assert_eq!(mr.page_in_range(4096 + 5, 8192).unwrap(), 3, "{name}");
            assert!(mr.is_resident(4096, 3 * 4096), "{name}");
            // SAFETY: as above; a read-only registration populates for reading.
            let buf = unsafe { Buffer::external(region.as_ptr().add(MIB), 4096) }.unwrap();
            let ro = pd
                .register(buf, Access::REMOTE_READ, remora_mem::Mode::OnDemand)
                .unwrap();
            assert_eq!(ro.page_in_range(0, 4096).unwrap(), 1, "{name}");
            let ls = region.stats();
            assert_eq!((ls.faults, ls.fetches), (4, 4), "{name}: {ls:?}");
            assert_eq!(fetcher.fetches.load(Ordering::SeqCst), 4, "{name}");
            check_eq(name, &src[4096..4 * 4096], &bytes(&mr, 4096, 3 * 4096));
            check_eq(name, &src[MIB..MIB + 4096], &bytes(&ro, 0, 4096));
            drop((mr, ro, pd));
            drop(region);
        }
    });
}
