//! `remora bench part`: the PART paper's measurements on remora's udp RC engine.
//!
//! Both ends live in this process on 127.0.0.1, so the benchmark sets the responder's residency
//! between transfers (evicting is never timed). One timed operation is one WRITE of `size`
//! bytes from a resident source into the responder's region, from the post to the requester's
//! completion. The responder's region is anonymous memory with transparent huge pages turned
//! off, so every 4 KiB page faults on its own as on the paper's platform.
//!
//! Sections: transfer latency per variant and size (transfer only; pin or touch the pages per
//! transfer, present or evicted, on an inline-fault queue pair; PART with PIO, PI4 and PIA on
//! evicted pages); the requester's fault timeout; the fraction of pages evicted; one fault of a
//! 4 KiB WRITE taken apart; and the head-of-line test (one queue pair faulting on remote-backed
//! memory while another measures latency on the same responder device).
use std::ffi::{c_int, c_void};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use remora_fabric::{
    connect, FaultMode, Listener, PageInPolicy, PartConfig, Qp, QpOptions, Stats, Transport,
};
use remora_mem::{Access, Buffer, Mode, Pd, Region, PAGE_SIZE};
use serde_json::{json, Value};

/// Longest wait for one completion before the benchmark gives up.
const STALL: Duration = Duration::from_secs(10);
/// Fault timeouts of the sweep (the paper's), besides none (NTO).
const TIMEOUTS_US: [u64; 3] = [100, 500, 1000];
/// Fractions of the destination's pages evicted in the frequency sweep.
const FRACTIONS: [f64; 5] = [0.0, 0.01, 0.10, 0.50, 1.0];
/// Size of the head-of-line test's streaming WRITEs (into remote-backed memory).
const HOL_STREAM: usize = 4 << 20;
/// Size of the head-of-line test's latency probes (into resident memory).
const HOL_PROBE: usize = 64 << 10;

/// Arguments of `remora bench part`.
#[derive(Args, Clone, Debug)]
pub struct PartBenchArgs {
    /// One JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Transfer sizes, comma-separated (suffixes K, M).
    #[arg(long, value_delimiter = ',', default_value = "4K,16K,64K,256K,1M,4M", value_parser = super::parse_size)]
    pub sizes: Vec<usize>,
    /// Timed transfers per cell (median and min over them), after one untimed warm-up.
    #[arg(long, default_value_t = 30)]
    pub iters: usize,
    /// A cell stops early once it has run this long and has --min-iters samples (slow PIO
    /// cells); each cell reports how many samples it took.
    #[arg(long, default_value_t = 2.0)]
    pub cell_seconds: f64,
    /// Fewest timed transfers per cell.
    #[arg(long, default_value_t = 5)]
    pub min_iters: usize,
    /// Transport (PART is udp RC only).
    #[arg(long, default_value = "udp", value_parser = super::transport_parser())]
    pub transport: Transport,
    /// Requester window in packets (the whole default 4 MiB transfer is in flight at 1024):
    /// how much a faulting transfer sends before the responder's hold NAK can stop it.
    #[arg(long, default_value_t = QpOptions::default().window, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub window: u32,
    /// Seconds of the head-of-line test per fault mode (0 skips it).
    #[arg(long, default_value_t = 3.0)]
    pub hol_seconds: f64,
}

/// Median, min and p99 of one cell, in microseconds, and what the engines counted.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    n: usize,
    median: f64,
    min: f64,
    p99: f64,
    per: Option<PerTransfer>,
}

impl Cell {
    fn of(mut us: Vec<f64>) -> Cell {
        if us.is_empty() {
            return Cell::default();
        }
        us.sort_by(f64::total_cmp);
        let n = us.len();
        Cell {
            n,
            median: if n % 2 == 1 {
                us[n / 2]
            } else {
                (us[n / 2 - 1] + us[n / 2]) / 2.0
            },
            min: us[0],
            p99: us[((0.99 * n as f64).ceil() as usize).clamp(1, n) - 1],
            per: None,
        }
    }

    fn json(&self) -> Value {
        let mut v =
            json!({"n": self.n, "median_us": self.median, "min_us": self.min, "p99_us": self.p99});
        if let Some(p) = &self.per {
            v["per_transfer"] = p.json();
        }
        v
    }
}

/// Engine counters of a cell divided by its transfers (the warm-up included): responder
/// (faults .. held drops, packets received) and requester (ERRs received .. packets sent).
#[derive(Clone, Copy, Debug, Default)]
struct PerTransfer {
    faults: f64,
    page_ins: f64,
    pages_in: f64,
    fault_naks: f64,
    errs_sent: f64,
    held_drops: f64,
    errs_received: f64,
    fault_timeouts: f64,
    timeouts: f64,
    retransmits: f64,
    tx_packets: f64,
    rx_packets: f64,
}

impl PerTransfer {
    /// From the (responder, requester) counters before and after `n` transfers.
    fn between(before: (Stats, Stats), after: (Stats, Stats), n: usize) -> PerTransfer {
        let ((r0, q0), (r1, q1)) = (before, after);
        let n = n.max(1) as f64;
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / n;
        PerTransfer {
            faults: d(r1.faults, r0.faults),
            page_ins: d(r1.page_ins, r0.page_ins),
            pages_in: d(r1.pages_in, r0.pages_in),
            fault_naks: d(r1.fault_naks, r0.fault_naks),
            errs_sent: d(r1.errs_sent, r0.errs_sent),
            held_drops: d(r1.held_drops, r0.held_drops),
            errs_received: d(q1.errs_received, q0.errs_received),
            fault_timeouts: d(q1.fault_timeouts, q0.fault_timeouts),
            timeouts: d(q1.timeouts, q0.timeouts),
            retransmits: d(q1.retransmits, q0.retransmits),
            tx_packets: d(q1.tx_packets, q0.tx_packets),
            rx_packets: d(r1.rx_packets, r0.rx_packets),
        }
    }

    fn fields(&mut self) -> [&mut f64; 12] {
        [
            &mut self.faults,
            &mut self.page_ins,
            &mut self.pages_in,
            &mut self.fault_naks,
            &mut self.errs_sent,
            &mut self.held_drops,
            &mut self.errs_received,
            &mut self.fault_timeouts,
            &mut self.timeouts,
            &mut self.retransmits,
            &mut self.tx_packets,
            &mut self.rx_packets,
        ]
    }

    fn add(&mut self, o: &PerTransfer) {
        let mut o = *o;
        for (a, b) in self.fields().into_iter().zip(o.fields()) {
            *a += *b;
        }
    }

    fn scaled(mut self, k: f64) -> PerTransfer {
        for a in self.fields() {
            *a *= k;
        }
        self
    }

    fn json(&self) -> Value {
        json!({"faults": self.faults, "page_ins": self.page_ins, "pages_in": self.pages_in,
            "fault_naks": self.fault_naks, "errs_sent": self.errs_sent,
            "held_drops": self.held_drops, "errs_received": self.errs_received,
            "fault_timeouts": self.fault_timeouts, "timeouts": self.timeouts,
            "retransmits": self.retransmits, "requester_tx_packets": self.tx_packets,
            "responder_rx_packets": self.rx_packets})
    }
}

/// The benchmark's settings and its progress bar.
struct Bench {
    /// Requester window (packets in flight).
    window: u32,
    iters: usize,
    min_iters: usize,
    cell: Duration,
    bar: Option<indicatif::ProgressBar>,
}

/// One series of a round-robin measurement: what to set up (untimed) and what to time.
struct Job<'a> {
    what: String,
    /// Whose engine counters to attribute to the series (none for local work only).
    setup: Option<&'a Setup>,
    prep: Box<dyn FnMut() -> Result<()> + 'a>,
    timed: Box<dyn FnMut() -> Result<()> + 'a>,
}

impl<'a> Job<'a> {
    fn new(
        what: String,
        setup: Option<&'a Setup>,
        prep: impl FnMut() -> Result<()> + 'a,
        timed: impl FnMut() -> Result<()> + 'a,
    ) -> Job<'a> {
        Job {
            what,
            setup,
            prep: Box::new(prep),
            timed: Box::new(timed),
        }
    }

    /// Runs it once; returns the timed part and the engine counters it caused.
    fn run(&mut self) -> Result<(Duration, PerTransfer)> {
        let before = self.setup.map(Setup::stats);
        (self.prep)().with_context(|| format!("{}: setting up", self.what))?;
        let t = Instant::now();
        (self.timed)().with_context(|| self.what.clone())?;
        let took = t.elapsed();
        let per = match (before, self.setup.map(Setup::stats)) {
            (Some(b), Some(a)) => PerTransfer::between(b, a, 1),
            _ => PerTransfer::default(),
        };
        Ok((took, per))
    }
}

impl Bench {
    /// A requester's options: `part` (its fault timeout) and the benchmark's window.
    fn requester(&self, part: PartConfig) -> QpOptions {
        QpOptions {
            part,
            window: self.window,
            ..QpOptions::default()
        }
    }

    /// Runs the jobs in turn, one transfer each per round, so that a change in the machine's
    /// load touches every series alike: one untimed warm-up round, then rounds until each job
    /// has `iters` samples, or `min_iters` and its cell time used up.
    fn round_robin(&self, mut jobs: Vec<Job<'_>>) -> Result<Vec<Cell>> {
        let n = jobs.len();
        let mut us: Vec<Vec<f64>> = vec![Vec::with_capacity(self.iters); n];
        let mut spent = vec![Duration::ZERO; n];
        let mut per = vec![PerTransfer::default(); n];
        let mut done = vec![false; n];
        for (i, j) in jobs.iter_mut().enumerate() {
            let t = Instant::now();
            per[i].add(&j.run()?.1);
            spent[i] += t.elapsed();
        }
        while done.iter().any(|d| !d) {
            for (i, j) in jobs.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                if let Some(b) = &self.bar {
                    b.set_message(j.what.clone());
                }
                let t = Instant::now();
                let (took, p) = j.run()?;
                spent[i] += t.elapsed();
                us[i].push(took.as_secs_f64() * 1e6);
                per[i].add(&p);
                let k = us[i].len();
                if k >= self.iters || (k >= self.min_iters && spent[i] >= self.cell) {
                    done[i] = true;
                    if let Some(b) = &self.bar {
                        b.inc(1);
                    }
                }
            }
        }
        Ok(us
            .into_iter()
            .zip(per)
            .zip(&jobs)
            .map(|((us, p), j)| {
                let mut c = Cell::of(us);
                if j.setup.is_some() {
                    c.per = Some(p.scaled(1.0 / (c.n + 1) as f64));
                }
                c
            })
            .collect())
    }

    /// One job alone.
    fn measure(&self, job: Job<'_>) -> Result<Cell> {
        Ok(self.round_robin(vec![job])?.remove(0))
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

/// Calls into the C library that the crate's dependencies do not wrap for us.
mod sys {
    use super::{c_int, c_void};

    const MADV_NOHUGEPAGE: c_int = 15;

    extern "C" {
        fn mlock(addr: *const c_void, len: usize) -> c_int;
        fn munlock(addr: *const c_void, len: usize) -> c_int;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }

    /// Locks `[ptr, ptr+len)` (faulting in what is missing).
    ///
    /// # Safety
    /// The range must be mapped for the call.
    pub unsafe fn lock(ptr: *const u8, len: usize) -> std::io::Result<()> {
        // SAFETY: the caller keeps the range mapped; mlock only changes page state.
        match unsafe { mlock(ptr.cast(), len) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Unlocks `[ptr, ptr+len)`.
    ///
    /// # Safety
    /// As for [`lock`].
    pub unsafe fn unlock(ptr: *const u8, len: usize) -> std::io::Result<()> {
        // SAFETY: as in `lock`.
        match unsafe { munlock(ptr.cast(), len) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }

    /// Asks for 4 KiB pages only in `[ptr, ptr+len)` (`MADV_NOHUGEPAGE`).
    ///
    /// # Safety
    /// The range must be a page-aligned private anonymous mapping owned by the caller.
    pub unsafe fn no_huge_pages(ptr: *mut u8, len: usize) -> std::io::Result<()> {
        // SAFETY: the advice changes how future faults are served, never the contents.
        match unsafe { madvise(ptr.cast(), len, MADV_NOHUGEPAGE) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    }
}

/// An anonymous on-demand region of `len` bytes, 4 KiB pages only, filled and resident.
fn resident_region(pd: &Pd, len: usize) -> Result<Arc<Region>> {
    let buf = Buffer::anonymous(len.max(PAGE_SIZE))?;
    // SAFETY: a fresh private anonymous mapping this buffer owns.
    if let Err(e) = unsafe { sys::no_huge_pages(buf.as_ptr(), buf.len()) } {
        tracing::warn!(error = %e, "MADV_NOHUGEPAGE refused: faults may bring in 2 MiB at once");
    }
    let r = pd.register(buf, Access::ALL, Mode::OnDemand)?;
    let fill: Vec<u8> = (0..r.len())
        .map(|i| (i as u8).wrapping_mul(31) | 1)
        .collect();
    r.write_at(0, &fill)?;
    r.page_in_range(0, r.len())?;
    Ok(r)
}

/// A connected requester (with its source) and the responder queue pair it talks to.
struct Pair {
    req: Qp,
    resp: Qp,
    src: Arc<Region>,
    next_id: AtomicU64,
}

/// A responder listening on loopback: its regions' protection domain and PART setting.
fn listen(pd: Arc<Pd>, part: PartConfig) -> Result<Listener> {
    let opts = QpOptions {
        part,
        ..QpOptions::default()
    };
    Listener::bind("127.0.0.1:0".parse().expect("address"), pd, opts)
        .context("listening on 127.0.0.1")
}

/// Connects a requester with options `opts` and a `src_len`-byte source to `l`.
fn join(l: &Listener, opts: QpOptions, src_len: usize) -> Result<Pair> {
    let pd = Arc::new(Pd::new());
    let src = resident_region(&pd, src_len)?;
    let addr = l.local_addr();
    std::thread::scope(|s| {
        let accepted = s.spawn(|| l.incoming().and_then(|inc| inc.establish(&[])));
        let req = connect(addr, pd, opts, &[]);
        if req.is_err() {
            // Unblock the accepting thread if our connect never reached it.
            drop(TcpStream::connect(addr));
        }
        let resp = accepted.join().expect("accept thread");
        let (req, _) = req.context("connecting the requester")?;
        let (resp, _) = resp.context("accepting the requester")?;
        Ok(Pair {
            req,
            resp,
            src,
            next_id: AtomicU64::new(1),
        })
    })
}

impl Pair {
    /// WRITE `size` bytes of the source into `dst` at `offset` and waits for the completion.
    fn write(&self, dst: &Region, offset: usize, size: usize) -> Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.req.post_write(
            id,
            &self.src,
            0,
            size,
            dst.addr() + offset as u64,
            dst.rkey(),
            None,
        )?;
        let c = self.req.wait(STALL)?.with_context(|| {
            format!(
                "no completion in {} s; requester {:?}; responder {:?}",
                STALL.as_secs(),
                self.req.stats().engine,
                self.resp.stats().engine
            )
        })?;
        if !c.status.is_ok() {
            bail!(
                "WRITE of {size} bytes failed: {:?}; responder {:?}",
                c.status,
                self.resp.stats().engine
            );
        }
        Ok(())
    }
}

/// A responder region with its own listener and requester: one queue pair setting.
struct Setup {
    dst: Arc<Region>,
    pair: Pair,
    _listener: Listener,
}

impl Setup {
    fn open(resp: PartConfig, req: QpOptions, len: usize) -> Result<Setup> {
        let pd = Arc::new(Pd::new());
        let dst = resident_region(&pd, len)?;
        let l = listen(pd, resp)?;
        let pair = join(&l, req, len)?;
        Ok(Setup {
            dst,
            pair,
            _listener: l,
        })
    }

    fn write(&self, size: usize) -> Result<()> {
        self.pair.write(&self.dst, 0, size)
    }

    fn evict(&self, size: usize) -> Result<()> {
        Ok(self.dst.evict(0, size)?)
    }

    /// Both ends' counters: (responder, requester).
    fn stats(&self) -> (Stats, Stats) {
        (self.pair.resp.stats().engine, self.pair.req.stats().engine)
    }
}

fn part(mode: FaultMode, policy: PageInPolicy, timeout: Option<Duration>) -> PartConfig {
    PartConfig {
        mode,
        policy,
        fault_timeout: timeout,
        ..PartConfig::default()
    }
}

/// Writes one byte into every page of `[ptr, ptr+len)`.
fn touch(r: &Region, len: usize) {
    let p = r.as_ptr();
    for off in (0..len).step_by(PAGE_SIZE) {
        // SAFETY: `off < len <= r.len()`; nothing else accesses the region between transfers.
        unsafe { p.add(off).write_volatile(1) };
    }
}

/// Whether `mlock` works here for `len` bytes; the reason if not.
fn pin_check(len: usize) -> std::result::Result<(), String> {
    let pd = Pd::new();
    let r = resident_region(&pd, len).map_err(|e| e.to_string())?;
    // SAFETY: the region stays mapped for both calls.
    match unsafe { sys::lock(r.as_ptr(), len) } {
        Ok(()) => {
            // SAFETY: as above.
            unsafe { sys::unlock(r.as_ptr(), len) }.map_err(|e| format!("munlock: {e}"))
        }
        Err(e) => Err(format!(
            "mlock of {len} bytes refused ({e}): raise RLIMIT_MEMLOCK (ulimit -l) to at least \
             {} KiB or run with CAP_IPC_LOCK",
            len.div_ceil(1024)
        )),
    }
}

/// mlock + `f` + munlock of the first `len` bytes of `r`.
fn pinned(r: &Region, len: usize, f: impl FnOnce() -> Result<()>) -> Result<()> {
    // SAFETY: the region stays mapped; lock and unlock cover the same range.
    unsafe { sys::lock(r.as_ptr(), len) }.context("mlock")?;
    let out = f();
    // SAFETY: as above.
    unsafe { sys::unlock(r.as_ptr(), len) }.context("munlock")?;
    out
}

/// The main table's variants, in the order they run in each round.
const VARIANTS: [&str; 11] = [
    "transfer_only",
    "transfer_only_inline",
    "touch_alone",
    "page_in_alone",
    "pin_present",
    "pin_not_present",
    "touch_present",
    "touch_not_present",
    "pia",
    "pi4",
    "pio",
];

/// The queue pairs of the main table: the inline-fault one (pin and touch variants) and PART
/// with each policy.
struct Engines {
    inline: Setup,
    pia: Setup,
    pi4: Setup,
    pio: Setup,
}

/// The job of one main-table variant at one size.
fn variant_job<'a>(e: &'a Engines, name: &str, s: usize) -> Job<'a> {
    let inline = &e.inline;
    type Timed<'a> = Box<dyn FnMut() -> Result<()> + 'a>;
    let (setup, evict, timed): (&Setup, bool, Timed<'a>) = match name {
        "transfer_only" => (&e.pia, false, Box::new(move || e.pia.write(s))),
        "transfer_only_inline" => (inline, false, Box::new(move || inline.write(s))),
        "touch_alone" => (
            inline,
            true,
            Box::new(move || {
                touch(&inline.dst, s);
                Ok(())
            }),
        ),
        "page_in_alone" => (
            inline,
            true,
            Box::new(move || Ok(inline.dst.page_in_range(0, s).map(drop)?)),
        ),
        "pin_present" | "pin_not_present" => (
            inline,
            name == "pin_not_present",
            Box::new(move || pinned(&inline.dst, s, || inline.write(s))),
        ),
        "touch_present" | "touch_not_present" => (
            inline,
            name == "touch_not_present",
            Box::new(move || {
                touch(&inline.dst, s);
                inline.write(s)
            }),
        ),
        "pia" => (&e.pia, true, Box::new(move || e.pia.write(s))),
        "pi4" => (&e.pi4, true, Box::new(move || e.pi4.write(s))),
        _ => (&e.pio, true, Box::new(move || e.pio.write(s))),
    };
    // Present variants make sure of it: the one before may have left the pages out.
    let prep = move || {
        if evict {
            setup.evict(s)
        } else {
            Ok(setup.dst.page_in_range(0, s).map(drop)?)
        }
    };
    Job {
        what: format!("{name} {}", human(s)),
        setup: Some(setup),
        prep: Box::new(prep),
        timed,
    }
}

/// Main table: every variant at every size, the variants of one size in turn.
fn latency_table(b: &Bench, sizes: &[usize], pin: bool) -> Result<Vec<(String, Vec<Cell>)>> {
    let max = *sizes.iter().max().expect("sizes");
    let none = PartConfig::default();
    let open = |mode, policy| Setup::open(part(mode, policy, None), b.requester(none), max);
    let e = Engines {
        inline: open(FaultMode::Inline, PageInPolicy::Pia)?,
        pia: open(FaultMode::Part, PageInPolicy::Pia)?,
        pi4: open(FaultMode::Part, PageInPolicy::Pi4)?,
        pio: open(FaultMode::Part, PageInPolicy::Pio)?,
    };
    let names: Vec<&str> = VARIANTS
        .into_iter()
        .filter(|n| pin || !n.starts_with("pin"))
        .collect();
    let mut rows: Vec<(String, Vec<Cell>)> =
        names.iter().map(|n| (n.to_string(), Vec::new())).collect();
    for &s in sizes {
        let jobs = names.iter().map(|n| variant_job(&e, n, s)).collect();
        for (row, c) in rows.iter_mut().zip(b.round_robin(jobs)?) {
            row.1.push(c);
        }
    }
    Ok(rows)
}

/// One row of the timeout sweep: policy, the requester's fault timeout (None: NTO), cells.
type TimeoutRow = (PageInPolicy, Option<u64>, Vec<Cell>);

/// PIA and PIO with the requester's fault timeout at 100 µs, 500 µs, 1 ms and off, the four
/// of one policy and size in turn.
fn timeout_sweep(b: &Bench, sizes: &[usize]) -> Result<Vec<TimeoutRow>> {
    let max = *sizes.iter().max().expect("sizes");
    let tos: Vec<Option<u64>> = TIMEOUTS_US.into_iter().map(Some).chain([None]).collect();
    let mut out = Vec::new();
    for policy in [PageInPolicy::Pia, PageInPolicy::Pio] {
        let setups = tos
            .iter()
            .map(|to| {
                let t = to.map(Duration::from_micros);
                let resp = part(FaultMode::Part, policy, None);
                Setup::open(resp, b.requester(part(FaultMode::Part, policy, t)), max)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut rows: Vec<TimeoutRow> = tos.iter().map(|to| (policy, *to, Vec::new())).collect();
        for &s in sizes {
            let jobs = setups
                .iter()
                .zip(&tos)
                .map(|(st, to)| {
                    let to = to.map_or("NTO".to_string(), |t| format!("TO {t} µs"));
                    let what = format!("{policy} {to} {}", human(s));
                    Job::new(what, Some(st), move || st.evict(s), move || st.write(s))
                })
                .collect();
            for (row, c) in rows.iter_mut().zip(b.round_robin(jobs)?) {
                row.2.push(c);
            }
        }
        out.extend(rows);
    }
    Ok(out)
}

/// xorshift64: the fixed-seed generator that picks the pages to evict.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Evicts each page of the first `size` bytes with probability `f`, in runs.
fn evict_fraction(r: &Region, size: usize, f: f64, rng: &mut Rng) -> Result<()> {
    let pages = size.div_ceil(PAGE_SIZE);
    let mut run: Option<usize> = None;
    for p in 0..=pages {
        let out = p < pages && (f >= 1.0 || rng.unit() < f);
        match (out, run) {
            (true, None) => run = Some(p),
            (false, Some(start)) => {
                let end = (p * PAGE_SIZE).min(r.len());
                r.evict(start * PAGE_SIZE, end - start * PAGE_SIZE)?;
                run = None;
            }
            _ => {}
        }
    }
    Ok(())
}

/// One row of the frequency sweep: a policy, the fraction of pages evicted, a cell per size.
struct FreqRow {
    policy: PageInPolicy,
    fraction: f64,
    cells: Vec<Cell>,
}

/// PIA and PIO with a fraction of the destination's pages evicted before each transfer, every
/// (policy, fraction) of one size in turn.
fn frequency_sweep(b: &Bench, sizes: &[usize]) -> Result<Vec<FreqRow>> {
    let max = *sizes.iter().max().expect("sizes");
    let policies = [PageInPolicy::Pia, PageInPolicy::Pio];
    let setups = policies
        .iter()
        .map(|&p| {
            let req = b.requester(PartConfig::default());
            Setup::open(part(FaultMode::Part, p, None), req, max)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rows: Vec<FreqRow> = policies
        .iter()
        .flat_map(|&policy| {
            FRACTIONS.map(|fraction| FreqRow {
                policy,
                fraction,
                cells: Vec::new(),
            })
        })
        .collect();
    for &s in sizes {
        let mut jobs = Vec::new();
        for (st, policy) in setups.iter().zip(policies) {
            for f in FRACTIONS {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ s as u64 ^ (f * 1e6) as u64);
                let what = format!("{policy} f={:.0}% {}", f * 100.0, human(s));
                let prep = move || evict_fraction(&st.dst, s, f, &mut rng);
                jobs.push(Job::new(what, Some(st), prep, move || st.write(s)));
            }
        }
        for (row, c) in rows.iter_mut().zip(b.round_robin(jobs)?) {
            row.cells.push(c);
        }
    }
    Ok(rows)
}

/// One 4 KiB WRITE into one evicted page (PIA, no fault timeout), taken apart: the transfer
/// alone, the page-in alone and the whole, in turn.
fn one_fault(b: &Bench) -> Result<Value> {
    let none = PartConfig::default();
    let st = Setup::open(
        part(FaultMode::Part, PageInPolicy::Pia, None),
        b.requester(none),
        PAGE_SIZE,
    )?;
    let st = &st;
    let resident = move || Ok(st.dst.page_in_range(0, PAGE_SIZE).map(drop)?);
    let evict = move || st.evict(PAGE_SIZE);
    let write = move || st.write(PAGE_SIZE);
    let jobs = vec![
        Job::new("one fault: transfer".into(), Some(st), resident, write),
        Job::new("one fault: page-in".into(), None, evict, resident),
        Job::new("one fault: total".into(), Some(st), evict, write),
    ];
    let [transfer, page_in, total] = b.round_robin(jobs)?[..] else {
        unreachable!("three jobs, three cells");
    };
    Ok(json!({
        "total": total.json(),
        "transfer_only": transfer.json(),
        "page_in": page_in.json(),
        "remainder_us": total.median - transfer.median - page_in.median,
    }))
}

/// Pseudo-random bytes, never zero (so the page server never answers with a zero page).
fn synthetic(n: usize) -> Vec<u8> {
    let mut r = Rng(0x2545_F491_4F6C_DD1D);
    (0..n).map(|_| ((r.unit() * 256.0) as u8) | 1).collect()
}

/// A page server on loopback and a lazy region over it whose faults PART's page-in worker can
/// resolve (handler-thread mode: `MADV_POPULATE_WRITE` waits for the handler's install).
fn lazy_region() -> Result<(remora_lazy::ServerHandle, remora_lazy::LazyRegion)> {
    use remora_lazy::{LazyRegion, MemorySource, Options, PageServer, TcpFetcher};
    let src = Arc::new(MemorySource::new(synthetic(HOL_STREAM)));
    let server = PageServer::bind("127.0.0.1:0".parse().expect("address"), src)?;
    let addr = server.local_addr()?;
    let handle = server.spawn()?;
    let fetcher = Arc::new(TcpFetcher::connect(addr, Duration::from_secs(5))?);
    let opts = Options {
        mode: remora_lazy::Mode::Thread { handlers: 1 },
        ..Options::default()
    };
    Ok((handle, LazyRegion::open(fetcher, opts)?))
}

/// Registers the streaming destination: the lazy region if PART's page-in can populate it,
/// anonymous memory otherwise (with the precise reason).
fn stream_region(
    pd: &Pd,
    lazy: &std::result::Result<remora_lazy::LazyRegion, String>,
) -> (Arc<Region>, String) {
    let anonymous = |why: String| -> (Arc<Region>, String) {
        let r = resident_region(pd, HOL_STREAM).expect("anonymous region");
        (r, format!("anonymous memory ({why})"))
    };
    let l = match lazy {
        Ok(l) => l,
        Err(why) => return anonymous(why.clone()),
    };
    // SAFETY: the lazy mapping outlives the region (both end in `hol`, the region first), is
    // writable, and is only written through the region while the test runs.
    let reg = unsafe { Buffer::external(l.as_ptr(), l.len()) }
        .and_then(|buf| pd.register(buf, Access::ALL, Mode::OnDemand));
    let r = match reg {
        Ok(r) => r,
        Err(e) => return anonymous(format!("registering the lazy mapping failed: {e}")),
    };
    // What PART's page-in worker will do: evict a page, then populate it.
    let probe = r
        .evict(0, PAGE_SIZE)
        .and_then(|()| r.page_in_range(0, PAGE_SIZE));
    match probe {
        Ok(_) => (r, "lazy region over a TCP page server on loopback".into()),
        Err(e) => anonymous(format!(
            "populating an evicted page of the lazy region failed: {e}"
        )),
    }
}

/// One fault mode of the head-of-line test.
fn hol(b: &Bench, mode: FaultMode, secs: f64) -> Result<Value> {
    // The page server and the lazy mapping outlive the queue pairs and the region over it.
    let (_server, lazy) = match lazy_region() {
        Ok((h, l)) => (Some(h), Ok(l)),
        Err(e) => (None, Err(format!("opening the lazy region failed: {e:#}"))),
    };
    let pd = Arc::new(Pd::new());
    let (stream_dst, backing) = stream_region(&pd, &lazy);
    let probe_dst = resident_region(&pd, HOL_PROBE)?;
    let l = listen(pd.clone(), part(mode, PageInPolicy::Pia, None))?;
    let a = join(&l, b.requester(PartConfig::default()), HOL_STREAM)?;
    let p = join(&l, b.requester(PartConfig::default()), HOL_PROBE)?;
    let mut what = format!("hol {mode:?}: probe alone");
    let alone = b.measure(Job::new(
        what.clone(),
        None,
        || Ok(()),
        || p.write(&probe_dst, 0, HOL_PROBE),
    ))?;
    let stream_alone = b.measure(Job::new(
        format!("hol {mode:?}: stream alone"),
        None,
        || Ok(stream_dst.evict(0, HOL_STREAM)?),
        || a.write(&stream_dst, 0, HOL_STREAM),
    ))?;
    let stop = AtomicBool::new(false);
    let (busy, stream) = std::thread::scope(|s| {
        let streamer = s.spawn(|| -> Result<(usize, f64)> {
            let (mut n, mut t) = (0usize, 0f64);
            while !stop.load(Ordering::Acquire) {
                stream_dst.evict(0, HOL_STREAM)?;
                let t0 = Instant::now();
                a.write(&stream_dst, 0, HOL_STREAM)?;
                t += t0.elapsed().as_secs_f64();
                n += 1;
            }
            Ok((n, t))
        });
        let start = Instant::now();
        let mut us = Vec::new();
        let mut err = None;
        what = format!("hol {mode:?}: probe beside the faulting stream");
        b.say(&format!("{what} ({secs} s)"));
        while start.elapsed().as_secs_f64() < secs {
            let t = Instant::now();
            if let Err(e) = p.write(&probe_dst, 0, HOL_PROBE) {
                err = Some(e);
                break;
            }
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        stop.store(true, Ordering::Release);
        let stream = streamer.join().expect("stream thread");
        match err {
            Some(e) => Err(e),
            None => Ok((Cell::of(us), stream)),
        }
    })?;
    let (n, t) = stream.context("the faulting stream")?;
    if let Some(bar) = &b.bar {
        bar.inc(1);
    }
    let st = a.resp.stats().engine;
    let lazy_stats = match &lazy {
        Ok(l) => json!({"faults": l.stats().faults,
            "refetches": l.stats().refetches, "fetches": l.stats().fetches}),
        _ => Value::Null,
    };
    drop((a, p, l));
    drop((stream_dst, probe_dst, pd));
    Ok(json!({
        "mode": format!("{mode:?}").to_lowercase(),
        "stream_backing": backing,
        "probe_alone": alone.json(),
        "probe_beside_stream": busy.json(),
        "stream_alone": stream_alone.json(),
        "stream_alone_mb_per_s": HOL_STREAM as f64 / stream_alone.median,
        "stream_transfers": n,
        "stream_mb_per_s": if t > 0.0 { (n * HOL_STREAM) as f64 / t / 1e6 } else { 0.0 },
        "stream_ms_per_transfer": if n > 0 { t * 1e3 / n as f64 } else { 0.0 },
        "stream_responder": {"faults": st.faults, "page_ins": st.page_ins,
            "pages_in": st.pages_in, "fault_naks": st.fault_naks, "held_drops": st.held_drops,
            "errs_sent": st.errs_sent},
        "lazy": lazy_stats,
    }))
}

/// `4K`, `1M`: sizes as the tables name them.
fn human(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// Runs `remora bench part`.
pub fn part_bench(a: PartBenchArgs) -> Result<()> {
    if a.transport != Transport::Udp {
        bail!(
            "PART runs on the udp transport's RC engine; --transport {} has no fault path to \
             measure (tcp and shm populate whole messages before placing them)",
            a.transport
        );
    }
    if a.sizes.is_empty() || a.sizes.contains(&0) {
        bail!("--sizes needs at least one size, none of them 0");
    }
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    let mut sizes = a.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let max = *sizes.last().expect("sizes");
    if max > 1 << 30 {
        bail!("--sizes: {max} bytes exceeds this benchmark's 1 GiB limit");
    }
    let pin = pin_check(max);
    let variants = if pin.is_ok() { 11 } else { 9 };
    let cells = sizes.len() * (variants + (TIMEOUTS_US.len() + 1) * 2 + FRACTIONS.len() * 2) + 3;
    let hol_cells = if a.hol_seconds > 0.0 { 6 } else { 0 };
    let b = Bench {
        window: a.window,
        iters: a.iters,
        min_iters: a.min_iters.clamp(1, a.iters),
        cell: Duration::from_secs_f64(a.cell_seconds.max(0.0)),
        bar: progress(cells + hol_cells),
    };
    if let Err(why) = &pin {
        b.say(&format!("bench part: skipping the pin rows: {why}"));
    }
    let table = latency_table(&b, &sizes, pin.is_ok())?;
    let timeouts = timeout_sweep(&b, &sizes)?;
    let freq = frequency_sweep(&b, &sizes)?;
    let fault = one_fault(&b)?;
    let mut hols = Vec::new();
    if a.hol_seconds > 0.0 {
        for mode in [FaultMode::Inline, FaultMode::Part] {
            hols.push(hol(&b, mode, a.hol_seconds)?);
        }
    }
    if let Some(bar) = &b.bar {
        bar.finish_and_clear();
    }
    let r = Report {
        sizes,
        table,
        timeouts,
        freq,
        fault,
        hols,
        pin_skipped: pin.err(),
        window: a.window,
        iters: a.iters,
        min_iters: b.min_iters,
        cell_seconds: a.cell_seconds,
    };
    if a.json {
        println!("{}", r.json());
    } else {
        r.print();
    }
    Ok(())
}

fn progress(len: usize) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(len as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} cells {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b
    })
}

/// Everything measured, for the tables and the JSON.
struct Report {
    sizes: Vec<usize>,
    table: Vec<(String, Vec<Cell>)>,
    timeouts: Vec<TimeoutRow>,
    freq: Vec<FreqRow>,
    fault: Value,
    hols: Vec<Value>,
    pin_skipped: Option<String>,
    window: u32,
    iters: usize,
    min_iters: usize,
    cell_seconds: f64,
}

impl Report {
    /// The main table's cell of `variant` at the largest size.
    fn at_max(&self, variant: &str) -> Option<Cell> {
        let (_, cells) = self.table.iter().find(|(n, _)| n == variant)?;
        cells.last().copied()
    }

    /// The timeout sweep's cells of `policy` with fault timeout `to` (None: NTO).
    fn timeout_row(&self, policy: PageInPolicy, to: Option<u64>) -> Option<&[Cell]> {
        let (_, _, cells) = self
            .timeouts
            .iter()
            .find(|(p, t, _)| *p == policy && *t == to)?;
        Some(cells)
    }

    fn timeout_at_max(&self, policy: PageInPolicy, to: Option<u64>) -> Option<Cell> {
        self.timeout_row(policy, to)?.last().copied()
    }

    /// Headline figures at the largest size (the paper's 4 MB, every page faulting).
    fn headline(&self) -> Value {
        let m = |c: Option<Cell>| c.map(|c| c.median);
        let pia = m(self.at_max("pia"));
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        let nto = m(self.timeout_at_max(PageInPolicy::Pia, None));
        let to100 = m(self.timeout_at_max(PageInPolicy::Pia, Some(100)));
        let by_size: Vec<Value> = match (
            self.timeout_row(PageInPolicy::Pia, None),
            self.timeout_row(PageInPolicy::Pia, Some(100)),
        ) {
            (Some(n), Some(t)) => self
                .sizes
                .iter()
                .zip(n.iter().zip(t))
                .map(|(s, (n, t))| json!({"bytes": s, "ratio": n.median / t.median}))
                .collect(),
            _ => Vec::new(),
        };
        json!({
            "bytes": self.sizes.last(),
            "transfer_only_us": m(self.at_max("transfer_only")),
            "pio_us": m(self.at_max("pio")),
            "pi4_us": m(self.at_max("pi4")),
            "pia_us": pia,
            "touch_not_present_us": m(self.at_max("touch_not_present")),
            "pin_not_present_us": m(self.at_max("pin_not_present")),
            "pia_nto_us": nto,
            "pia_to100_us": to100,
            "pio_over_pia": ratio(m(self.at_max("pio")), pia),
            "pia_over_touch_not_present": ratio(pia, m(self.at_max("touch_not_present"))),
            "pia_over_pin_not_present": ratio(pia, m(self.at_max("pin_not_present"))),
            "pia_to100_over_touch_not_present": ratio(to100, m(self.at_max("touch_not_present"))),
            "pia_nto_over_to100": ratio(nto, to100),
            "pia_nto_over_to100_by_size": by_size,
        })
    }

    fn json(&self) -> Value {
        let mut o = self.headline();
        let row = |cells: &[Cell]| -> Vec<Value> {
            self.sizes
                .iter()
                .zip(cells)
                .map(|(s, c)| {
                    let mut v = c.json();
                    v["bytes"] = json!(s);
                    v
                })
                .collect()
        };
        o["sizes"] = json!(self.sizes);
        o["latency"] = self
            .table
            .iter()
            .map(|(n, c)| json!({"variant": n, "cells": row(c)}))
            .collect();
        o["timeout_sweep"] = self
            .timeouts
            .iter()
            .map(|(p, t, c)| json!({"policy": p.to_string(), "timeout_us": t, "cells": row(c)}))
            .collect();
        o["frequency_sweep"] = self
            .freq
            .iter()
            .map(|f| {
                json!({"policy": f.policy.to_string(), "fraction": f.fraction,
                "cells": row(&f.cells)})
            })
            .collect();
        o["one_fault_4k"] = self.fault.clone();
        o["head_of_line"] = json!(self.hols);
        o["pin_skipped"] = json!(self.pin_skipped);
        o["window_packets"] = json!(self.window);
        o["iters"] = json!(self.iters);
        o["min_iters"] = json!(self.min_iters);
        o["cell_seconds"] = json!(self.cell_seconds);
        o["transport"] = json!("udp rc, 127.0.0.1, MTU 4096, 4 KiB pages (THP off)");
        o
    }

    fn print(&self) {
        let line = "-".repeat(24 + 18 * self.sizes.len());
        let head = |title: &str| {
            println!("{line}");
            println!(" {title}");
            print!(" {:<22}", "");
            for s in &self.sizes {
                print!(" {:>17}", human(*s));
            }
            println!();
        };
        let cells = |name: &str, cells: &[Cell]| {
            print!(" {name:<22}");
            for c in cells {
                print!(" {:>17}", format!("{:.1} [{:.1}]", c.median, c.min));
            }
            println!();
        };
        println!(
            " PART: one WRITE post -> completion, udp RC on 127.0.0.1 (MTU 4096, window {} \
             packets, 4 KiB pages); median [min] µs over up to {} transfers per cell (at least \
             {}, stopping after {:.1} s)",
            self.window, self.iters, self.min_iters, self.cell_seconds
        );
        head("transfer latency (evicted = every page of the destination faults)");
        for (n, c) in &self.table {
            cells(n, c);
        }
        if let Some(why) = &self.pin_skipped {
            println!(" (pin rows skipped: {why})");
        }
        head("fault timeout at the requester (every page evicted)");
        for (p, t, c) in &self.timeouts {
            let to = t.map_or("NTO".to_string(), |t| format!("TO {t} µs"));
            cells(&format!("{p} {to}"), c);
        }
        head("fraction f of the destination's pages evicted");
        for f in &self.freq {
            cells(&format!("{} f={}%", f.policy, f.fraction * 100.0), &f.cells);
        }
        head("faults per transfer in that sweep (responder)");
        for f in &self.freq {
            print!(" {:<22}", format!("{} f={}%", f.policy, f.fraction * 100.0));
            for c in &f.cells {
                print!(" {:>17.1}", c.per.map_or(f64::NAN, |p| p.faults));
            }
            println!();
        }
        println!("{line}");
        self.print_tail();
    }

    fn print_tail(&self) {
        let f = &self.fault;
        let us = |v: &Value| v["median_us"].as_f64().unwrap_or(f64::NAN);
        println!(
            " one 4 KiB WRITE into one evicted page (PIA, NTO), medians: total {:.1} µs = \
             transfer {:.1} + page-in {:.1} + NAK/ERR/resend {:.1}",
            us(&f["total"]),
            us(&f["transfer_only"]),
            us(&f["page_in"]),
            f["remainder_us"].as_f64().unwrap_or(f64::NAN)
        );
        println!(" per transfer: {}", f["total"]["per_transfer"]);
        for h in &self.hols {
            println!(
                " head-of-line, responder {}: 64 KiB probe median {:.1} µs p99 {:.1} (alone \
                 {:.1} / {:.1}, n={}) beside 4 MiB WRITEs into {} at {:.1} MB/s ({} transfers; \
                 alone {:.1} MB/s)",
                h["mode"].as_str().unwrap_or("?"),
                us(&h["probe_beside_stream"]),
                h["probe_beside_stream"]["p99_us"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                us(&h["probe_alone"]),
                h["probe_alone"]["p99_us"].as_f64().unwrap_or(f64::NAN),
                h["probe_beside_stream"]["n"],
                h["stream_backing"].as_str().unwrap_or("?"),
                h["stream_mb_per_s"].as_f64().unwrap_or(0.0),
                h["stream_transfers"],
                h["stream_alone_mb_per_s"].as_f64().unwrap_or(0.0),
            );
        }
        let hl = self.headline();
        println!(
            " at {}: PIO/PIA {:.2}x, PIA/touch_not_present {:.2}x (PIA with TO 100 µs: {:.2}x), \
             PIA NTO/TO 100 µs {:.2}x",
            human(self.sizes.last().copied().unwrap_or(0)),
            hl["pio_over_pia"].as_f64().unwrap_or(f64::NAN),
            hl["pia_over_touch_not_present"]
                .as_f64()
                .unwrap_or(f64::NAN),
            hl["pia_to100_over_touch_not_present"]
                .as_f64()
                .unwrap_or(f64::NAN),
            hl["pia_nto_over_to100"].as_f64().unwrap_or(f64::NAN),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{human, Cell, Rng};

    #[test]
    fn cells_take_the_median_min_and_p99() {
        let c = Cell::of(vec![5.0, 1.0, 3.0, 2.0]);
        assert_eq!((c.n, c.median, c.min, c.p99), (4, 2.5, 1.0, 5.0));
        assert_eq!(Cell::of(vec![]).n, 0);
    }

    #[test]
    fn eviction_draws_are_reproducible_and_near_the_fraction() {
        let draws = |seed| {
            let mut r = Rng(seed);
            (0..10_000).filter(|_| r.unit() < 0.1).count()
        };
        assert_eq!(draws(7), draws(7));
        assert!((800..1200).contains(&draws(7)), "{}", draws(7));
    }

    #[test]
    fn sizes_are_named_in_binary_units() {
        assert_eq!(human(4096), "4K");
        assert_eq!(human(4 << 20), "4M");
        assert_eq!(human(1000), "1000");
    }
}
