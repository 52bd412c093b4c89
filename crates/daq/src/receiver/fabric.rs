//! The fabric ingest: the modules WRITE into the registered ring over queue pairs, and their
//! start and end markers (WRITE-with-immediate completions) feed the [`Scheduler`], which
//! issues whole stacks to the processing thread ([`Worker`]); the source's ring credits follow
//! what the scheduler releases.
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use remora_fabric::{Listener, Qp, RegionInfo};

use super::ingest::{Ingest, Msg};
use super::processing::{Books, Worker};
use super::{Receiver, ReceiverReport};
use crate::flow::{CreditSender, CreditTarget, OverrunPolicy};
use crate::ring::packets_per_stack;
use crate::scheduler::{Issue, Scheduler};
use crate::{DaqError, Result};

/// Stacks handed to the processing thread and not yet back: one being processed, one waiting.
const ISSUED_AHEAD: usize = 2;

/// A running fabric acquisition's receive side.
pub(super) struct FabricIngest {
    /// Held for the run, as the queue pairs it set up are.
    _listener: Listener,
    books: Arc<Mutex<Books>>,
    credits: CreditSender,
    to_worker: Option<SyncSender<Issue>>,
    worker: Option<JoinHandle<()>>,
    stacks: u64,
    bunch: u64,
    frames: u64,
    in_worker: usize,
    issued: u64,
    all_closed: bool,
    flushed: bool,
}

impl FabricIngest {
    /// Accepts the modules' queue pairs and starts the processing thread on `rx`'s pipeline.
    pub(super) fn start(r: Receiver) -> Result<(FabricIngest, mpsc::Receiver<Msg<u64>>)> {
        let (qps, targets) = r.accept_modules()?;
        let super::IngestKind::Fabric {
            listener,
            region,
            pd,
        } = r.ingest
        else {
            unreachable!("accept_modules takes the fabric ingest only")
        };
        let cfg = &r.cfg;
        let policy = cfg.receiver.overrun;
        let credits = CreditSender::new(policy, &r.ring, &pd, targets)?;
        let frames = cfg.frames_of(r.index);
        let bunch = r.ring.bunch as u64;
        let roi = cfg.roi_of(r.index);
        let mtu = qps[0].mtu();
        let deadline = Duration::from_millis(cfg.acquisition.deadline_ms);
        let books = Arc::new(Mutex::new(Books {
            sched: {
                let s = Scheduler::new(cfg.detector.modules, deadline, r.ring.stacks);
                // A source that waits never overwrites, and its links are reliable; one that
                // does not, past the rate the receiver keeps up with, costs whole stacks rather
                // than wasted work.
                match policy {
                    OverrunPolicy::Mask => s.skipping_doomed(),
                    _ => s.reliable_links(),
                }
            },
            per_frame: (packets_per_stack(&r.ring, &roi, mtu) - 1) / bunch,
            frames,
            bunch,
            qps,
            comps: Vec::with_capacity(256),
            started: None,
        }));
        let (to_worker, worker_rx) = mpsc::sync_channel::<Issue>(ISSUED_AHEAD);
        let (worker_tx, from_worker) = mpsc::channel();
        let worker = Worker {
            cfg: r.cfg.clone(),
            index: r.index,
            ring: r.ring,
            region,
            pipeline: r.pipeline,
            books: books.clone(),
            tap: r.tap.clone(),
            ring_held: credits.every_module_waits(),
        };
        let handle = std::thread::Builder::new()
            .name(format!("rpu-{}", r.index))
            .spawn(move || worker.run(worker_rx, worker_tx))
            .map_err(|e| DaqError::Acquisition(format!("starting the processing thread: {e}")))?;
        let ingest = FabricIngest {
            _listener: listener,
            books,
            credits,
            to_worker: Some(to_worker),
            worker: Some(handle),
            stacks: frames.div_ceil(bunch),
            bunch,
            frames,
            in_worker: 0,
            issued: 0,
            all_closed: false,
            flushed: false,
        };
        Ok((ingest, from_worker))
    }
}

impl Ingest for FabricIngest {
    type Done = u64;

    fn pump(&mut self, now: Instant) -> Result<bool> {
        let mut b = self.books.lock().expect("books");
        let arrived = b.drain(now);
        while self.in_worker < ISSUED_AHEAD {
            let Some(issue) = b.sched.poll(Instant::now()) else {
                break;
            };
            if issue.stack >= self.stacks {
                // A hostile or misconfigured source: no such stack in this acquisition.
                b.sched.finish(issue.stack, Instant::now());
                continue;
            }
            let Some(tx) = &self.to_worker else { break };
            if tx.send(issue).is_err() {
                break;
            }
            self.in_worker += 1;
            self.issued += 1;
        }
        let mut all_closed = true;
        for m in 0..b.qps.len() {
            if b.qps[m].is_closed() {
                b.sched.link_closed(m);
            } else {
                all_closed = false;
            }
        }
        self.all_closed = all_closed;
        let (released, newest) = (b.sched.released(), b.sched.newest());
        self.credits.update(&b.qps, released, newest);
        Ok(arrived)
    }

    fn closed(&mut self) -> bool {
        self.all_closed
    }

    fn flush(&mut self, now: Instant) {
        if !self.flushed {
            self.books.lock().expect("books").sched.flush(now);
            self.flushed = true;
        }
    }

    fn done(&mut self, stack: u64) {
        let mut b = self.books.lock().expect("books");
        b.sched.finish(stack, Instant::now());
        self.in_worker -= 1;
    }

    fn finished(&self, flushed: bool, _results: u64) -> bool {
        let b = self.books.lock().expect("books");
        let all_issued = self.issued + b.sched.stats().stacks_dropped >= self.stacks;
        self.in_worker == 0 && (all_issued || (flushed && b.sched.in_flight() == 0))
    }

    fn load(&self) -> (u64, u64) {
        let b = self.books.lock().expect("books");
        let held = b
            .sched
            .newest()
            .map_or(0, |n| (n + 1).saturating_sub(b.sched.released()));
        (b.sched.stats().overruns, held * self.bunch)
    }

    fn started(&self) -> Option<Instant> {
        self.books.lock().expect("books").started
    }

    fn finish(mut self, rep: &mut ReceiverReport) {
        drop(self.to_worker.take());
        if let Some(h) = self.worker.take() {
            let _ = h.join();
        }
        let b = self.books.lock().expect("books");
        let st = b.sched.stats();
        rep.scheduler = st;
        rep.overruns = st.overruns;
        rep.buffer_high_water_frames = st.high_water_stacks * self.bunch;
        rep.frames_overrun += (st.stacks_dropped + st.stacks_skipped) * self.bunch;
        rep.frames_overrun = rep.frames_overrun.min(self.frames);
        rep.frames_lost = self
            .frames
            .saturating_sub(rep.frames_complete + rep.frames_partial + rep.frames_overrun);
        rep.packets_out_of_sequence = b.qps.iter().map(|q| q.stats().engine.out_of_sequence).sum();
        drop(b);
        rep.flow = self.credits.finish();
    }
}

impl Receiver {
    /// One queue pair per module, in module order, with where each module wants its ring
    /// credits written (when it asked for them).
    fn accept_modules(&self) -> Result<(Vec<Qp>, Vec<Option<CreditTarget>>)> {
        let modules = self.cfg.detector.modules;
        let super::IngestKind::Fabric {
            listener, region, ..
        } = &self.ingest
        else {
            unreachable!("only the fabric ingest accepts queue pairs")
        };
        let private = crate::link::Announce {
            region: RegionInfo::of(region),
            ring: self.ring,
        }
        .encode();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<(usize, Qp, Option<CreditTarget>)>();
        let listener_addr = self.local_addr();
        std::thread::scope(|sc| {
            let stop2 = stop.clone();
            sc.spawn(move || accept_loop(listener, &private, modules, &stop2, tx));
            let mut qps: Vec<Option<Qp>> = (0..modules).map(|_| None).collect();
            let mut targets: Vec<Option<CreditTarget>> = vec![None; modules];
            let wait = Duration::from_millis(self.cfg.acquisition.connect_timeout_ms);
            let end = Instant::now() + wait;
            let mut got = 0;
            let res = loop {
                if got == modules {
                    break Ok(());
                }
                match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                    Ok((m, qp, credit)) => {
                        if qps[m].is_none() {
                            got += 1;
                        }
                        qps[m] = Some(qp);
                        targets[m] = credit;
                    }
                    Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                        let missing: Vec<usize> =
                            (0..modules).filter(|&m| qps[m].is_none()).collect();
                        break Err(DaqError::Acquisition(format!(
                            "receiver {}: modules {missing:?} did not connect within {:.1} s \
                             (acquisition.connect_timeout_ms)",
                            self.index,
                            wait.as_secs_f64()
                        )));
                    }
                }
            };
            stop.store(true, Ordering::Relaxed);
            // Wakes the accept loop if it is still waiting.
            let _ = TcpStream::connect_timeout(&listener_addr, Duration::from_secs(1));
            res.map(|()| {
                let qps = qps.into_iter().map(|q| q.expect("all connected")).collect();
                (qps, targets)
            })
        })
    }
}

fn accept_loop(
    listener: &Listener,
    private: &[u8],
    modules: usize,
    stop: &AtomicBool,
    tx: mpsc::Sender<(usize, Qp, Option<CreditTarget>)>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(inc) = listener.incoming() else {
            return;
        };
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let from = inc.peer_addr();
        match inc.establish(private) {
            Ok((qp, hello)) => match crate::link::Hello::decode(&hello, modules) {
                Some(h) => {
                    if tx.send((h.module, qp, h.credit)).is_err() {
                        return;
                    }
                }
                None => {
                    tracing::warn!(%from, "not a module of this detector; connection dropped")
                }
            },
            Err(e) => tracing::warn!(%from, error = %e, "connection setup refused"),
        }
    }
}
