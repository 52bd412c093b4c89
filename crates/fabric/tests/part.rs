//! PART end to end, across two processes: the responder runs in a child process (this test
//! binary re-executed with `--exact part_child_serves`), its region freshly mapped and never
//! touched, so every WRITE lands on pages that are not resident; between rounds the child drops
//! its pages (`Region::evict`) and the parent writes different bytes again. Every byte is
//! checked; over udp the PART counters of both sides are checked too (the stream transports
//! populate a whole message's range before placing and count no faults).
//!
//! Control messages are SENDs on the same queue pair: the parent sends a command (evict,
//! stats, bye) into a receive buffer the child posted; the child answers with a SEND carrying
//! its engine counters.
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use remora_fabric::{
    connect, Completion, FaultMode, Listener, PageInPolicy, PartConfig, Progress, Qp, QpOptions,
    RegionInfo, Stats, Status, Transport, WcOpcode, DEFAULT_REORDER,
};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// The child's region: 64 MiB and some slack.
const REMOTE_LEN: usize = 66 * MIB;
/// The parent's region: sources in the first half, READ destinations in the second.
const DST: usize = 66 * MIB;
const LOCAL_LEN: usize = 2 * DST;
/// Control regions (commands and replies).
const CTRL_LEN: usize = 64 * KIB;
const CMD_AT: usize = 8 * KIB;
const REPLY_LEN: usize = 4 * KIB;

/// Carries the child's role: `"<policy> <connections>"`.
const ENV: &str = "REMORA_PART_CHILD";
const CHILD_TEST: &str = "part_child_serves";
const ADDR_TAG: &str = "PART_CHILD_ADDR=";
/// Hang guard for any single wait (a 64 MiB transfer in a debug build takes well under this).
const WAIT: Duration = Duration::from_secs(60);

const EVICT: u32 = 1;
const STATS: u32 = 2;
const BYE: u32 = 3;

/// One transfer: `len` bytes from `src` in the parent to `remote` in the child, read back to
/// `DST + dst` in the parent. Odd offsets, so packets straddle pages.
#[derive(Clone, Copy, Debug)]
struct Case {
    len: usize,
    src: usize,
    remote: usize,
    dst: usize,
}

const CASES: [Case; 5] = [
    Case {
        len: 4 * KIB,
        src: 1,
        remote: 64 * MIB + 100,
        dst: 5,
    },
    Case {
        len: 64 * KIB,
        src: 3 * 4096 + 7,
        remote: 64 * MIB + 8192 + 3,
        dst: 3000,
    },
    Case {
        len: MIB,
        src: 11,
        remote: 64 * MIB + 512 * KIB + 5,
        dst: 77,
    },
    Case {
        len: 16 * MIB,
        src: 4096 + 13,
        remote: 1000,
        dst: 20_481,
    },
    Case {
        len: 64 * MIB,
        src: 99,
        remote: 17,
        dst: 123,
    },
];

// ---------------------------------------------------------------------------------------------
// Helpers shared by both sides.

fn anonymous(pd: &Pd, len: usize) -> Arc<Region> {
    let r = pd
        .register(Buffer::anonymous(len).unwrap(), Access::ALL, Mode::OnDemand)
        .unwrap();
    assert_eq!(
        r.refresh_residency().unwrap(),
        0,
        "a fresh mapping has no page"
    );
    r
}

/// Deterministic bytes that depend on the seed and the position (a misplaced block shows).
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

fn bytes(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    r.read_at(off, &mut v).unwrap();
    v
}

/// Compares without printing megabytes: the first difference and how many bytes differ.
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

/// The child's counters as it sends them back: every field, in declaration order.
fn stats_fields(s: &Stats) -> [u64; 27] {
    [
        s.tx_packets,
        s.rx_packets,
        s.rx_malformed,
        s.rx_wrong_qp,
        s.retransmits,
        s.timeouts,
        s.duplicates,
        s.out_of_sequence,
        s.naks_sent,
        s.naks_received,
        s.access_errors,
        s.invalid_requests,
        s.uc_messages_dropped,
        s.uc_packets_dropped,
        s.acks_sent,
        s.bad_pkey,
        s.faults,
        s.page_ins,
        s.pages_in,
        s.fault_naks,
        s.errs_sent,
        s.errs_received,
        s.fault_timeouts,
        s.held_drops,
        s.source_faults,
        s.wave_holds,
        s.paced_resumes,
    ]
}

fn stats_decode(b: &[u8]) -> Stats {
    let f = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
    Stats {
        tx_packets: f(0),
        rx_packets: f(1),
        rx_malformed: f(2),
        rx_wrong_qp: f(3),
        retransmits: f(4),
        timeouts: f(5),
        duplicates: f(6),
        out_of_sequence: f(7),
        naks_sent: f(8),
        naks_received: f(9),
        access_errors: f(10),
        invalid_requests: f(11),
        uc_messages_dropped: f(12),
        uc_packets_dropped: f(13),
        acks_sent: f(14),
        bad_pkey: f(15),
        faults: f(16),
        page_ins: f(17),
        pages_in: f(18),
        fault_naks: f(19),
        errs_sent: f(20),
        errs_received: f(21),
        fault_timeouts: f(22),
        held_drops: f(23),
        source_faults: f(24),
        wave_holds: f(25),
        paced_resumes: f(26),
        ..Stats::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The child: a responder with a never-touched region.

/// Runs only when re-executed by a parent test (the environment variable says how); a no-op
/// otherwise.
#[test]
fn part_child_serves() {
    let Ok(spec) = std::env::var(ENV) else {
        return;
    };
    let mut words = spec.split_whitespace();
    let policy: PageInPolicy = words.next().unwrap().parse().unwrap();
    let conns: usize = words.next().unwrap().parse().unwrap();
    let progress: Progress = words.next().unwrap().parse().unwrap();
    let reorder: u32 = words.next().unwrap().parse().unwrap();
    // Never outlive a parent that died.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(240));
        eprintln!("part child: no end after 240 s; exiting");
        std::process::exit(3);
    });
    let pd = Arc::new(Pd::new());
    let mem = anonymous(&pd, REMOTE_LEN);
    let ctrl = anonymous(&pd, CTRL_LEN);
    let opts = QpOptions {
        part: PartConfig {
            mode: FaultMode::Part,
            policy,
            reorder,
            ..PartConfig::default()
        },
        progress,
        ..QpOptions::default()
    };
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), pd, opts).unwrap();
    let mut private = RegionInfo::of(&mem).encode().to_vec();
    private.extend_from_slice(&RegionInfo::of(&ctrl).encode());
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{ADDR_TAG}{}", listener.local_addr()).unwrap();
        out.flush().unwrap();
    }
    for _ in 0..conns {
        let (qp, _) = listener.accept(&private).unwrap();
        serve(&qp, &mem, &ctrl);
    }
}

fn child_wait(qp: &Qp) -> Completion {
    let c = qp
        .wait(WAIT)
        .unwrap()
        .unwrap_or_else(|| panic!("part child: no completion; stats {:?}", qp.stats()));
    assert_eq!(c.status, Status::Success, "part child: {c:?}");
    c
}

/// Answers commands until BYE.
fn serve(qp: &Qp, mem: &Arc<Region>, ctrl: &Arc<Region>) {
    // Receive buffers have odd ids, replies even ones.
    let mut recv_id = 1u64;
    let mut send_id = 0u64;
    qp.post_recv(recv_id, ctrl, 0, 64).unwrap();
    loop {
        let c = child_wait(qp);
        if c.opcode != WcOpcode::Recv {
            // A reply went out.
            assert_eq!(c.opcode, WcOpcode::Send);
            continue;
        }
        assert_eq!((c.wr_id, c.byte_len), (recv_id, 8), "part child: {c:?}");
        let head = bytes(ctrl, 0, 8);
        let cmd = u32::from_le_bytes(head[..4].try_into().unwrap());
        match cmd {
            EVICT => {
                mem.evict(0, mem.len()).unwrap();
                assert_eq!(mem.residency().resident_count(), 0, "part child: evicted");
            }
            STATS | BYE => {}
            other => panic!("part child: unknown command {other}"),
        }
        if cmd != BYE {
            recv_id += 2;
            qp.post_recv(recv_id, ctrl, 0, 64).unwrap();
        }
        // The command and its sequence number, echoed: a reply can only answer its command.
        let mut reply = head;
        for v in stats_fields(&qp.stats().engine) {
            reply.extend_from_slice(&v.to_le_bytes());
        }
        ctrl.write_at(CMD_AT, &reply).unwrap();
        send_id += 2;
        qp.post_send(send_id, ctrl, CMD_AT, reply.len(), None)
            .unwrap();
        if cmd == BYE {
            // The parent closes first, once it holds this reply and the acknowledgement of its
            // command (which this side may not have sent yet: leaving now could lose it). This
            // reply's own completion may then come back flushed, which is fine.
            qp.wait_disconnect(Some(WAIT))
                .expect("part child: the parent did not close");
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: the child process, and the requester side of one connection.

/// A child process; killed if the test fails before it ends.
struct ChildProc {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    addr: SocketAddr,
}

impl ChildProc {
    fn spawn(policy: PageInPolicy, conns: usize, progress: Progress, reorder: u32) -> ChildProc {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
            .env(ENV, format!("{policy} {conns} {progress} {reorder}"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut me = ChildProc {
            child: Some(child),
            lines,
            addr: "0.0.0.0:0".parse().unwrap(),
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = me
                .lines
                .recv_timeout(left)
                .expect("the child did not report its address");
            assert!(
                !line.starts_with("running 0 tests"),
                "the child runs no test named {CHILD_TEST}"
            );
            // libtest prints "test part_child_serves ... " on the same line.
            if let Some((_, a)) = line.split_once(ADDR_TAG) {
                me.addr = a.trim().parse().unwrap();
                return me;
            }
        }
    }

    /// Waits for the child to exit and checks that its test passed.
    fn finish(mut self) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Everything the child printed, up to the end of its output.
        let mut out = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            out.push(line);
        }
        assert!(status.success(), "child failed ({status}): {out:#?}");
        assert!(
            out.iter().any(|l| l.contains("test result: ok. 1 passed")),
            "child output: {out:#?}"
        );
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Where a round's WRITE sources come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A pattern written into the parent's region first.
    Pattern(u64),
    /// A range of a region nothing ever touched: it must arrive as zeros.
    Fresh,
}

struct Session {
    transport: Transport,
    qp: Qp,
    /// Sources and READ destinations.
    mem: Arc<Region>,
    /// Never touched (the zero-source round).
    fresh: Arc<Region>,
    ctrl: Arc<Region>,
    remote: RegionInfo,
    next_id: u64,
}

impl Session {
    fn open(
        transport: Transport,
        addr: SocketAddr,
        fault_timeout: Option<Duration>,
        progress: Progress,
    ) -> Session {
        let pd = Arc::new(Pd::new());
        let mem = anonymous(&pd, LOCAL_LEN);
        let fresh = anonymous(&pd, REMOTE_LEN);
        let ctrl = anonymous(&pd, CTRL_LEN);
        let opts = QpOptions {
            transport,
            part: PartConfig {
                fault_timeout,
                ..PartConfig::default()
            },
            progress,
            // The child posts its first receive only once the connection is up, which a loaded
            // machine may delay past a few RNR waits.
            rnr_retry: u32::MAX,
            ..QpOptions::default()
        };
        let (qp, private) = connect(addr, pd, opts, &[]).unwrap();
        let remote = RegionInfo::decode(&private).unwrap();
        assert_eq!(remote.len as usize, REMOTE_LEN);
        Session {
            transport,
            qp,
            mem,
            fresh,
            ctrl,
            remote,
            next_id: 100,
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Waits for the completions of `ids` (any order), all successful.
    fn expect(&self, ids: &[u64], what: &str) -> Vec<Completion> {
        let deadline = Instant::now() + WAIT;
        let mut got: Vec<Completion> = Vec::new();
        while got.len() < ids.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let c = self.qp.wait(left).unwrap().unwrap_or_else(|| {
                panic!(
                    "{} {what}: no completion within {WAIT:?} (have {got:?}); stats {:?}",
                    self.transport,
                    self.qp.stats()
                )
            });
            assert!(
                ids.contains(&c.wr_id) && !got.iter().any(|g| g.wr_id == c.wr_id),
                "{} {what}: unexpected {c:?}",
                self.transport
            );
            assert_eq!(
                c.status,
                Status::Success,
                "{} {what}: {c:?}; stats {:?}",
                self.transport,
                self.qp.stats()
            );
            got.push(c);
        }
        got
    }

    /// Sends a command to the child and returns its counters after carrying it out.
    fn command(&mut self, cmd: u32) -> Stats {
        let (r, s) = (self.id(), self.id());
        self.qp.post_recv(r, &self.ctrl, 0, REPLY_LEN).unwrap();
        let mut head = cmd.to_le_bytes().to_vec();
        head.extend_from_slice(&(s as u32).to_le_bytes());
        self.ctrl.write_at(CMD_AT, &head).unwrap();
        self.qp.post_send(s, &self.ctrl, CMD_AT, 8, None).unwrap();
        let got = self.expect(&[r, s], "command");
        let reply = got.iter().find(|c| c.wr_id == r).unwrap();
        assert_eq!(reply.opcode, WcOpcode::Recv);
        let b = bytes(&self.ctrl, 0, reply.byte_len as usize);
        assert_eq!(
            b[..8],
            head[..],
            "{} command {cmd}: the reply of another",
            self.transport
        );
        stats_decode(&b[8..])
    }

    fn write(&mut self, src: &Arc<Region>, src_off: usize, len: usize, remote_off: usize) {
        let id = self.id();
        self.qp
            .post_write(
                id,
                src,
                src_off,
                len,
                self.remote.addr + remote_off as u64,
                self.remote.rkey,
                None,
            )
            .unwrap();
        let c = self.expect(&[id], "WRITE");
        assert_eq!(
            (c[0].opcode, c[0].byte_len as usize),
            (WcOpcode::Write, len)
        );
    }

    fn read(&mut self, remote_off: usize, len: usize, dst_off: usize) -> Vec<u8> {
        let id = self.id();
        self.qp
            .post_read(
                id,
                &self.mem,
                DST + dst_off,
                len,
                self.remote.addr + remote_off as u64,
                self.remote.rkey,
            )
            .unwrap();
        let c = self.expect(&[id], "READ");
        assert_eq!(c[0].opcode, WcOpcode::Read);
        bytes(&self.mem, DST + dst_off, len)
    }

    /// Drops the pages of the READ destinations, so the READs land on missing pages again.
    fn evict_destinations(&self) {
        self.mem.evict(DST, LOCAL_LEN - DST).unwrap();
    }

    /// Writes every case, reads it back and checks every byte.
    fn round(&mut self, source: Source, cases: &[Case]) {
        for (i, c) in cases.iter().enumerate() {
            let what = match source {
                Source::Pattern(seed) => {
                    format!("{} {} bytes, pattern {seed}", self.transport, c.len)
                }
                Source::Fresh => format!("{} {} bytes, fresh source", self.transport, c.len),
            };
            let want = match source {
                Source::Pattern(seed) => {
                    let p = pattern(seed * 16 + i as u64, c.len);
                    self.mem.write_at(c.src, &p).unwrap();
                    self.write(&self.mem.clone(), c.src, c.len, c.remote);
                    p
                }
                Source::Fresh => {
                    assert!(!self.fresh.is_resident(c.src, c.len));
                    // What the destination held before must not survive the READ.
                    self.mem
                        .write_at(DST + c.dst, &pattern(0xBAD + i as u64, c.len))
                        .unwrap();
                    self.write(&self.fresh.clone(), c.src, c.len, c.remote);
                    vec![0; c.len]
                }
            };
            let got = self.read(c.remote, c.len, c.dst);
            check_eq(&what, &want, &got);
        }
    }

    /// Ends the connection: the child waits for us to close once we have its reply and the
    /// acknowledgement of the command.
    fn bye(mut self) {
        self.command(BYE);
    }
}

/// All sizes up to 64 MiB over one transport: a round into never-touched pages, the child's
/// pages dropped, a round with other bytes (READ destinations dropped too), and a round from a
/// never-touched source (zeros over what the child held).
fn all_sizes(transport: Transport, progress: Progress) {
    let child = ChildProc::spawn(PageInPolicy::Pia, 1, progress, DEFAULT_REORDER);
    let mut s = Session::open(transport, child.addr, None, progress);
    let udp = transport == Transport::Udp;

    let before = s.command(EVICT);
    s.round(Source::Pattern(1), &CASES);
    let r0 = s.command(STATS);
    let p0 = s.qp.stats().engine;
    if udp {
        assert!(r0.faults > before.faults, "udp: no fault: {r0:?}");
        // Each fault either waited behind its wave or stopped the sender until the ERR (or,
        // when the pages came in first, until the sender's own timer resent): a loaded machine
        // can keep every packet of a wave in the window. The policy tests, which have no
        // window, check the ERR itself.
        assert!(
            r0.errs_sent + r0.wave_holds > 0,
            "udp: no fault was held or stopped: {r0:?}"
        );
        assert!(r0.pages_in > 0, "udp: no page made resident: {r0:?}");
        assert!(
            p0.source_faults > 0,
            "udp: READs into never-touched pages populate them: {p0:?}"
        );
    }

    // Pages dropped mid-run: what the child held is gone (reads back as zeros), and the next
    // round faults again.
    let e1 = s.command(EVICT);
    let c = CASES[2];
    s.mem.write_at(DST + c.dst, &pattern(0xBAD, c.len)).unwrap();
    let got = s.read(c.remote, c.len, c.dst);
    check_eq(
        &format!("{transport}: READ of evicted pages"),
        &vec![0; c.len],
        &got,
    );
    s.evict_destinations();
    s.round(Source::Pattern(2), &CASES);
    let r1 = s.command(STATS);
    let p1 = s.qp.stats().engine;
    if udp {
        assert!(
            r1.faults > e1.faults,
            "udp: no fault after the pages were dropped: {e1:?} -> {r1:?}"
        );
        // Each fault either waited behind its wave or stopped the sender until the ERR.
        assert!(
            r1.errs_sent + r1.wave_holds > e1.errs_sent + e1.wave_holds,
            "udp: {e1:?} -> {r1:?}"
        );
        assert!(
            r1.source_faults > e1.source_faults,
            "udp: the READ of dropped pages populates them at the responder: {r1:?}"
        );
    }

    // A never-touched source arrives as zeros over what the child holds now.
    s.round(Source::Fresh, &CASES);
    let p2 = s.qp.stats().engine;
    eprintln!("{transport}: child {before:?}\n -> {r0:?}\n -> {e1:?}\n -> {r1:?}");
    eprintln!("{transport}: parent {p0:?}\n -> {p1:?}\n -> {p2:?}");
    if udp {
        assert!(
            p2.source_faults > p1.source_faults,
            "udp: the never-touched source is populated before reading: {p2:?}"
        );
    }
    s.bye();
    child.finish();
}

#[test]
fn udp_part_all_sizes_with_pages_dropped_mid_run() {
    all_sizes(Transport::Udp, Progress::Thread);
}

/// Both processes drive their queue pairs from the threads that wait (no receive thread).
#[test]
fn udp_part_all_sizes_with_progress_in_the_callers_thread() {
    all_sizes(Transport::Udp, Progress::Poll);
}

#[test]
fn shm_all_sizes_with_pages_dropped_mid_run() {
    all_sizes(Transport::Shm, Progress::Thread);
}

#[test]
fn shm_all_sizes_with_progress_in_the_callers_thread() {
    all_sizes(Transport::Shm, Progress::Poll);
}

#[test]
fn tcp_all_sizes_with_pages_dropped_mid_run() {
    all_sizes(Transport::Tcp, Progress::Thread);
}

/// One responder policy of the paper's protocol (no reorder window: every fault stops the
/// sender), with and without a requester fault timeout: 4 KiB, 64 KiB and 1 MiB into
/// never-touched pages, then again after the child dropped them.
fn policy(policy: PageInPolicy) {
    let timeouts = [None, Some(Duration::from_micros(100))];
    let child = ChildProc::spawn(policy, timeouts.len(), Progress::Thread, 0);
    let cases = &CASES[..3];
    let packets_1m = (MIB / 4096) as u64;
    for (k, to) in timeouts.into_iter().enumerate() {
        let mut s = Session::open(Transport::Udp, child.addr, to, Progress::Thread);
        let what = format!("udp {policy} timeout {to:?}");
        for round in 0..2u64 {
            let e = s.command(EVICT);
            s.evict_destinations();
            s.round(Source::Pattern(10 * k as u64 + round + 3), cases);
            if policy == PageInPolicy::Pio {
                // Every packet of the 1 MiB WRITE needs a page the one before did not bring;
                // the READ back finds every page the WRITE placed resident.
                let r = s.command(STATS);
                let (faults, source) = (r.faults - e.faults, r.source_faults - e.source_faults);
                assert!(
                    faults >= packets_1m,
                    "{what} round {round}: {faults} faults, {source} source faults: {e:?} -> {r:?}"
                );
            }
        }
        let r = s.command(STATS);
        let p = s.qp.stats().engine;
        eprintln!("{what}: child {r:?}\n parent {p:?}");
        assert!(
            r.faults > 0 && r.page_ins > 0 && r.pages_in > 0,
            "{what}: {r:?}"
        );
        assert!(r.fault_naks >= r.faults, "{what}: {r:?}");
        match to {
            None => {
                assert!(r.errs_sent > 0, "{what}: {r:?}");
                assert!(p.errs_received > 0, "{what}: {p:?}");
                assert_eq!(p.fault_timeouts, 0, "{what}: no timeout set: {p:?}");
            }
            // Each hold ends either by the ERR or by the timeout, whichever comes first.
            Some(_) => assert!(p.errs_received + p.fault_timeouts > 0, "{what}: {p:?}"),
        }
        // What each policy brings in per fault (4 KiB pages, 4 KiB packets at odd offsets).
        match policy {
            PageInPolicy::Pio => {
                assert!(r.pages_in <= 2 * r.page_ins, "{what}: {r:?}");
            }
            PageInPolicy::Pi4 => {
                assert!(r.pages_in <= 8 * r.page_ins, "{what}: {r:?}");
                assert!(r.faults >= 2 * (MIB / (32 * KIB)) as u64, "{what}: {r:?}");
            }
            PageInPolicy::Pia => {
                // One page-in per message that found missing pages (3 per round) and one for
                // the command buffer: the rest of the message comes in with the first fault.
                assert!(r.page_ins <= 2 * 3 + 1, "{what}: {r:?}");
                assert!(r.pages_in >= 2 * packets_1m, "{what}: {r:?}");
            }
        }
        s.bye();
    }
    child.finish();
}

#[test]
fn udp_part_pio_with_and_without_fault_timeout() {
    policy(PageInPolicy::Pio);
}

#[test]
fn udp_part_pi4_with_and_without_fault_timeout() {
    policy(PageInPolicy::Pi4);
}

#[test]
fn udp_part_pia_with_and_without_fault_timeout() {
    policy(PageInPolicy::Pia);
}

/// The wave (the default reorder window), with and without a fault timeout: every message's
/// first fault starts one page-in, and the packets behind it wait for its front instead of
/// being sent again.
#[test]
fn udp_part_pia_wave_with_and_without_fault_timeout() {
    let timeouts = [None, Some(Duration::from_micros(100))];
    let child = ChildProc::spawn(
        PageInPolicy::Pia,
        timeouts.len(),
        Progress::Thread,
        DEFAULT_REORDER,
    );
    let cases = &CASES[..3];
    let packets_1m = (MIB / 4096) as u64;
    for (k, to) in timeouts.into_iter().enumerate() {
        let mut s = Session::open(Transport::Udp, child.addr, to, Progress::Thread);
        let what = format!("udp pia wave timeout {to:?}");
        let r0 = s.command(STATS);
        for round in 0..2u64 {
            s.command(EVICT);
            s.evict_destinations();
            s.round(Source::Pattern(10 * k as u64 + round + 5), cases);
        }
        let r = s.command(STATS);
        eprintln!("{what}: child {r0:?}\n -> {r:?}");
        assert!(r.faults > r0.faults, "{what}: {r:?}");
        assert!(r.wave_holds > r0.wave_holds, "{what}: {r:?}");
        assert!(r.page_ins - r0.page_ins <= 2 * 3 + 1, "{what}: {r:?}");
        assert!(r.pages_in - r0.pages_in >= 2 * packets_1m, "{what}: {r:?}");
        s.bye();
    }
    child.finish();
}
