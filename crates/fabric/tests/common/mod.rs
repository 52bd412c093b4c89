//! What the loopback tests share: both ends of a queue pair in one process, with regions full
//! of a known pattern, and a pump for ends whose progress is polled.
#![allow(dead_code)]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use remora_fabric::{connect, Listener, Progress, Qp, QpOptions, QpType, RegionInfo, Transport};
use remora_mem::{Access, Buffer, Mode, Pd, Region};

pub const LEN: usize = 4 << 20;

pub struct End {
    pub qp: Arc<Qp>,
    pub region: Arc<Region>,
    pub peer: RegionInfo,
    pub _pump: Option<Pump>,
}

/// Drives a polled queue pair from a thread of its own, as the application of a responder
/// does; completions stay for the test to take.
pub struct Pump {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Pump {
    pub fn start(qp: Arc<Qp>) -> Pump {
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
    pub fn pumped(mut self) -> End {
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
pub fn join(sopts: QpOptions, seed: u8, copts: QpOptions, memfd: bool) -> (End, End) {
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

/// A region over anonymous memory or a memfd (over shm, memfd regions are granted to the peer
/// for one-sided access; anonymous memory travels in the stream).
pub fn region_on(pd: &Pd, seed: u8, memfd: bool) -> Arc<Region> {
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

pub fn pair(transport: Transport, qp_type: QpType, mtu: usize) -> (End, End) {
    pair_on(transport, qp_type, mtu, false)
}

pub fn pair_on(transport: Transport, qp_type: QpType, mtu: usize, memfd: bool) -> (End, End) {
    pair_with(transport, qp_type, mtu, memfd, Progress::Thread)
}

/// A pair whose two sides both use `progress`.
pub fn pair_with(
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

pub fn bytes(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    r.read_at(off, &mut v).unwrap();
    v
}

pub fn wait(qp: &Qp) -> remora_fabric::Completion {
    qp.wait(Duration::from_secs(10))
        .unwrap()
        .unwrap_or_else(|| panic!("no completion in 10 s; stats {:?}", qp.stats()))
}
