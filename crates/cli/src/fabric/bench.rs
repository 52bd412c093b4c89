//! `remora fabric bench`: perftest-shaped bandwidth and latency tests.
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use remora_fabric::{connect, Completion, Qp, QpOptions, QpType, RegionInfo, Transport, WcOpcode};
use remora_mem::{Access, Buffer, Mode, Pd, Region};
use serde_json::json;

use super::{BenchArgs, Role, Test};

/// Longest wait for any single completion before the benchmark gives up.
const STALL: Duration = Duration::from_secs(10);

/// A responder process started for a benchmark or the demo; killed if still running on drop.
pub(crate) struct Responder {
    child: Child,
    pub addr: SocketAddr,
}

impl Responder {
    /// Starts `remora fabric serve` on loopback for `connections` peers.
    pub fn start(
        region_size: usize,
        mtu: usize,
        connections: usize,
        icrc: bool,
        part: &super::PartArgs,
        progress: super::ProgressArgs,
    ) -> anyhow::Result<Responder> {
        let exe = std::env::current_exe().context("locating the remora executable")?;
        let mut cmd = Command::new(exe);
        cmd.args(["fabric", "serve", "--listen", "127.0.0.1:0"])
            .args(["--region-size", &region_size.to_string()])
            .args(["--mtu", &mtu.to_string()])
            .args(["--connections", &connections.to_string()])
            .args(part.to_args())
            .args(progress.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !icrc {
            cmd.arg("--no-icrc-check");
        }
        let mut child = cmd.spawn().context("starting the responder process")?;
        let out = child.stdout.take().context("responder stdout")?;
        let mut line = String::new();
        BufReader::new(out)
            .read_line(&mut line)
            .context("reading the responder's address")?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("responder did not report its address (got {line:?})"))?;
        Ok(Responder { child, addr })
    }

    /// Waits for the responder to exit by itself (it does after its connections end).
    pub fn finish(mut self) {
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A connected client: its queue pair, its region and the responder's region.
pub(crate) struct Client {
    pub qp: Qp,
    pub region: Arc<Region>,
    pub remote: RegionInfo,
}

/// Connects with a role for the responder; `local_len` sizes our region.
pub(crate) fn connect_client(
    addr: SocketAddr,
    opts: QpOptions,
    role: Role,
    local_len: usize,
    size: usize,
) -> anyhow::Result<Client> {
    let pd = Arc::new(Pd::new());
    let region = pd.register(
        Buffer::memfd("remora-bench", local_len.max(4096))?,
        Access::ALL,
        Mode::OnDemand,
    )?;
    region.page_in_range(0, region.len())?;
    let mut private = vec![role as u8];
    private.extend_from_slice(&RegionInfo::of(&region).encode());
    private.extend_from_slice(&(size as u32).to_le_bytes());
    let (qp, peer) = connect(addr, pd, opts, &private)
        .with_context(|| format!("connecting to the responder at {addr}"))?;
    let remote = RegionInfo::decode(&peer).context("responder's region description")?;
    Ok(Client { qp, region, remote })
}

/// The next completion, busy-polled with `spin`, slept for otherwise; an error if it failed.
fn wait_ok(qp: &Qp, spin: bool) -> anyhow::Result<Completion> {
    let c = if spin {
        qp.spin(STALL)
    } else {
        qp.wait(STALL)?
    };
    let c = c.with_context(|| format!("no completion for {} s", STALL.as_secs()))?;
    if !c.status.is_ok() {
        bail!("request {} failed: {:?}", c.wr_id, c.status);
    }
    Ok(c)
}

pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.iters == 0 {
        bail!("--iters must be at least 1");
    }
    if a.size > 1 << 30 {
        bail!(
            "--size {} exceeds the 1 GiB limit of this benchmark",
            a.size
        );
    }
    if a.test == Test::ReadLat && a.qp == QpType::Uc {
        bail!("READ needs an RC queue pair (--qp rc)");
    }
    if !(256..=4096).contains(&a.mtu) {
        bail!("--mtu must be 256..=4096");
    }
    let depth = a.tx_depth.clamp(1, 4096);
    let region_size = (a.size.max(1) * 2).max(1 << 20);
    let responder = match a.connect {
        Some(_) => None,
        None => Some(Responder::start(
            region_size,
            a.mtu,
            1,
            !a.no_icrc_check,
            &a.part,
            a.progress,
        )?),
    };
    let addr = a
        .connect
        .or(responder.as_ref().map(|r| r.addr))
        .expect("an address");
    let role = match a.test {
        Test::WriteLat => Role::Pong,
        Test::SendBw => Role::Sink,
        _ => Role::Passive,
    };
    let opts = QpOptions {
        transport: a.transport,
        qp_type: a.qp,
        mtu: a.mtu,
        icrc_check: !a.no_icrc_check,
        part: a.part.config(),
        progress: a.progress.progress,
        lazy_ack: a.progress.lazy_ack,
        ..QpOptions::default()
    };
    let c = connect_client(addr, opts, role, a.size.max(1), a.size)?;
    if c.remote.len < a.size as u64 {
        bail!(
            "the responder's region ({} bytes) is smaller than --size {}",
            c.remote.len,
            a.size
        );
    }
    let result = match a.test {
        Test::WriteBw | Test::SendBw => Measured::Bw(bandwidth(&a, &c, depth)?),
        Test::WriteLat | Test::ReadLat => Measured::Lat(latency(&a, &c)?),
    };
    let stats = c.qp.stats();
    let mtu = c.qp.mtu();
    let roce_dst = c.qp.udp_peer();
    drop(c);
    if let Some(r) = responder {
        r.finish();
    }
    report(&a, mtu, depth, &result, &stats, roce_dst);
    Ok(())
}

enum Measured {
    Bw(Bw),
    Lat(Lat),
}

struct Bw {
    peak_gbps: f64,
    avg_gbps: f64,
    mpps: f64,
}

struct Lat {
    min: f64,
    max: f64,
    typical: f64,
    avg: f64,
    stdev: f64,
    p99: f64,
    p999: f64,
}

fn bandwidth(a: &BenchArgs, c: &Client, depth: usize) -> anyhow::Result<Bw> {
    let post = |i: usize| -> anyhow::Result<()> {
        match a.test {
            Test::SendBw => c.qp.post_send(i as u64, &c.region, 0, a.size, None)?,
            _ => c.qp.post_write(
                i as u64,
                &c.region,
                0,
                a.size,
                c.remote.addr,
                c.remote.rkey,
                None,
            )?,
        }
        Ok(())
    };
    let run = |n: usize, stamps: &mut Vec<Instant>| -> anyhow::Result<()> {
        let (mut posted, mut done) = (0, 0);
        let mut batch = Vec::with_capacity(64);
        while done < n {
            while posted < n && posted - done < depth {
                post(posted)?;
                posted += 1;
            }
            batch.clear();
            if c.qp.poll(&mut batch, 64) == 0 {
                batch.push(wait_ok(&c.qp, a.progress.spin)?);
            }
            let now = Instant::now();
            for comp in &batch {
                if !comp.status.is_ok() {
                    bail!("request {} failed: {:?}", comp.wr_id, comp.status);
                }
                stamps.push(now);
                done += 1;
            }
        }
        Ok(())
    };
    let mut stamps = Vec::with_capacity(a.iters);
    run(a.warmup, &mut stamps)?;
    stamps.clear();
    let start = Instant::now();
    run(a.iters, &mut stamps)?;
    let end = *stamps.last().expect("iters >= 1");
    let secs = (end - start).as_secs_f64().max(1e-9);
    let bits = a.size as f64 * 8.0;
    let avg = bits * a.iters as f64 / secs / 1e9;
    // Peak: the best rate over any window of a fifth of the run and at least twice the depth
    // (completions arrive in bursts of up to one ACK's worth; shorter windows measure bursts).
    let w = (a.iters / 5)
        .max(2 * depth)
        .min(a.iters.saturating_sub(1))
        .max(1);
    let mut peak = avg;
    if stamps.len() > w {
        for i in 0..stamps.len() - w {
            let dt = (stamps[i + w] - stamps[i]).as_secs_f64();
            if dt > 0.0 {
                peak = peak.max(bits * w as f64 / dt / 1e9);
            }
        }
    }
    Ok(Bw {
        peak_gbps: peak,
        avg_gbps: avg,
        mpps: a.iters as f64 / secs / 1e6,
    })
}

fn latency(a: &BenchArgs, c: &Client) -> anyhow::Result<Lat> {
    let mut samples = Vec::with_capacity(a.iters);
    for i in 0..a.warmup + a.iters {
        let t0 = Instant::now();
        match a.test {
            Test::ReadLat => {
                c.qp.post_read(i as u64, &c.region, 0, a.size, c.remote.addr, c.remote.rkey)?;
                wait_ok(&c.qp, a.progress.spin)?;
            }
            _ => {
                c.qp.post_write(
                    i as u64,
                    &c.region,
                    0,
                    a.size,
                    c.remote.addr,
                    c.remote.rkey,
                    Some(i as u32),
                )?;
                // Our own WRITE completion and the responder's answer come in either order.
                loop {
                    let comp = wait_ok(&c.qp, a.progress.spin)?;
                    if comp.opcode == WcOpcode::RecvRdmaWithImm {
                        if comp.imm != Some(i as u32) {
                            bail!("pong carried immediate {:?}, expected {i}", comp.imm);
                        }
                        break;
                    }
                }
            }
        }
        let us = t0.elapsed().as_secs_f64() * 1e6;
        if i >= a.warmup {
            // perftest reports WRITE latency one-way (half the ping-pong), READ as a round trip.
            samples.push(if a.test == Test::ReadLat {
                us
            } else {
                us / 2.0
            });
        }
    }
    // Drain our remaining WRITE completions so the responder sees a clean close.
    while c.qp.wait(Duration::from_millis(20))?.is_some() {}
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let avg = samples.iter().sum::<f64>() / n as f64;
    let var = samples.iter().map(|s| (s - avg).powi(2)).sum::<f64>() / n as f64;
    let pct = |p: f64| samples[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    Ok(Lat {
        min: samples[0],
        max: samples[n - 1],
        typical: samples[n / 2],
        avg,
        stdev: var.sqrt(),
        p99: pct(0.99),
        p999: pct(0.999),
    })
}

fn title(t: Test) -> &'static str {
    match t {
        Test::WriteBw => "RDMA_Write BW Test",
        Test::WriteLat => "RDMA_Write Latency Test",
        Test::ReadLat => "RDMA_Read Latency Test",
        Test::SendBw => "Send BW Test",
    }
}

fn test_name(t: Test) -> &'static str {
    match t {
        Test::WriteBw => "write-bw",
        Test::WriteLat => "write-lat",
        Test::ReadLat => "read-lat",
        Test::SendBw => "send-bw",
    }
}

fn report(
    a: &BenchArgs,
    mtu: usize,
    depth: usize,
    m: &Measured,
    s: &remora_fabric::QpStats,
    roce_dst: Option<SocketAddr>,
) {
    let e = &s.engine;
    // A responder that found 4791 taken receives elsewhere; captures filtering on the RoCEv2
    // port would then see nothing, so say it.
    let off_port = roce_dst.filter(|d| d.port() != remora_wire::ROCE_PORT);
    if let Some(d) = off_port {
        eprintln!(
            "note: the responder receives RoCEv2 on UDP {} (4791 was taken on its host)",
            d.port()
        );
    }
    let counters = json!({
        "tx_packets": e.tx_packets, "rx_packets": e.rx_packets, "retransmits": e.retransmits,
        "timeouts": e.timeouts, "naks_received": e.naks_received, "icrc_errors": s.icrc_errors,
        "errs_received": e.errs_received, "fault_timeouts": e.fault_timeouts,
        "paced_resumes": e.paced_resumes, "source_faults": e.source_faults, "one_sided": e.one_sided,
    });
    if a.json {
        let mut o = json!({
            "test": test_name(a.test), "transport": a.transport.to_string(),
            "qp": a.qp.to_string(), "bytes": a.size, "iterations": a.iters, "mtu": mtu,
            "progress": a.progress.progress.to_string(), "spin": a.progress.spin,
            "lazy_ack": a.progress.lazy_ack,
            "udp_dst_port": roce_dst.map(|d| d.port()),
            "counters": counters,
        });
        let m = match m {
            Measured::Bw(b) => json!({"tx_depth": depth, "bw_peak_gbps": b.peak_gbps,
                "bw_avg_gbps": b.avg_gbps, "msg_rate_mpps": b.mpps}),
            Measured::Lat(l) => json!({"t_min_us": l.min, "t_max_us": l.max,
                "t_typical_us": l.typical, "t_avg_us": l.avg, "t_stdev_us": l.stdev,
                "t_p99_us": l.p99, "t_p999_us": l.p999}),
        };
        for (k, v) in m.as_object().expect("object") {
            o[k] = v.clone();
        }
        println!("{o}");
        return;
    }
    let line = "-".repeat(95);
    println!("{line}");
    println!("                    {}", title(a.test));
    println!(
        " Transport: {}   Connection type: {}   MTU: {}   TX depth: {}   Progress: {}{}",
        a.transport,
        a.qp.to_string().to_uppercase(),
        if a.transport == Transport::Udp {
            mtu.to_string()
        } else {
            "-".into()
        },
        depth,
        a.progress.progress,
        if a.progress.spin {
            " (busy polling)"
        } else {
            ""
        }
    );
    if let Some(d) = roce_dst {
        println!(" RoCEv2 destination: {d}");
    }
    println!("{line}");
    match m {
        Measured::Bw(b) => {
            println!(
                " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
            );
            println!(
                " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
                a.size, a.iters, b.peak_gbps, b.avg_gbps, b.mpps
            );
        }
        Measured::Lat(l) => {
            println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]");
            println!(
                " {:<6} {:<14} {:<14.2} {:<12.2} {:<18.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                a.size, a.iters, l.min, l.max, l.typical, l.avg, l.stdev, l.p99, l.p999
            );
        }
    }
    println!("{line}");
    println!(
        " packets tx {} rx {}, retransmits {}, timeouts {}, NAKs received {}, ICRC errors {}",
        e.tx_packets, e.rx_packets, e.retransmits, e.timeouts, e.naks_received, s.icrc_errors
    );
    if e.one_sided > 0 {
        println!(
            " one-sided over shm: {} requests carried out in the responder's granted memory",
            e.one_sided
        );
    }
    if e.errs_received + e.fault_timeouts + e.paced_resumes + e.source_faults > 0 {
        println!(
            " page faults (PART): ERRs received {}, fault timeouts {}, resumes at the \
             responder's pace {}, sources populated {}",
            e.errs_received, e.fault_timeouts, e.paced_resumes, e.source_faults
        );
    }
}
