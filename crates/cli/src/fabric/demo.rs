//! `remora fabric demo`: two processes, a region written with WRITE-with-immediate and read
//! back, on each transport.
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use remora_fabric::{QpOptions, QpType, Transport, WcOpcode};

use super::bench::{connect_client, Responder};
use super::Role;

const CHUNK: usize = 1 << 20;
const CHUNKS: usize = 8;

pub fn demo() -> anyhow::Result<()> {
    let transports = [Transport::Udp, Transport::Shm, Transport::Tcp];
    println!("remora demo: one-sided RDMA-style transfers between two processes on this host");
    println!(
        "  a responder process serves a registered region; this process WRITEs {} MiB into it as \
         {CHUNKS} WRITE-with-immediate messages,\n  then READs it back and checks every byte\n",
        (CHUNK * CHUNKS) >> 20
    );
    let responder = Responder::start(
        CHUNK * CHUNKS,
        4096,
        transports.len(),
        true,
        &super::PartArgs::default(),
        super::ProgressArgs::default(),
    )?;
    for t in transports {
        let opts = QpOptions {
            transport: t,
            qp_type: QpType::Rc,
            ..QpOptions::default()
        };
        let c = connect_client(responder.addr, opts, Role::Report, 2 * CHUNK * CHUNKS, 0)?;
        let pattern: Vec<u8> = (0..CHUNK * CHUNKS)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ t as u8)
            .collect();
        c.region.write_at(0, &pattern)?;
        let t0 = Instant::now();
        for i in 0..CHUNKS {
            c.qp.post_write(
                i as u64,
                &c.region,
                i * CHUNK,
                CHUNK,
                c.remote.addr + (i * CHUNK) as u64,
                c.remote.rkey,
                Some(0x1000 + i as u32),
            )?;
        }
        for _ in 0..CHUNKS {
            let done =
                c.qp.wait(Duration::from_secs(10))?
                    .context("WRITE did not complete in 10 s")?;
            if !done.status.is_ok() || done.opcode != WcOpcode::Write {
                bail!("WRITE {} ended {:?}", done.wr_id, done.status);
            }
        }
        let t_write = t0.elapsed();
        let t1 = Instant::now();
        let back = CHUNK * CHUNKS;
        c.qp.post_read(99, &c.region, back, back, c.remote.addr, c.remote.rkey)?;
        let done =
            c.qp.wait(Duration::from_secs(10))?
                .context("READ did not complete in 10 s")?;
        if !done.status.is_ok() {
            bail!("READ ended {:?}", done.status);
        }
        let t_read = t1.elapsed();
        let mut got = vec![0u8; back];
        c.region.read_at(back, &mut got)?;
        let same = got == pattern;
        let s = c.qp.stats();
        let gbps = |d: Duration| (back * 8) as f64 / d.as_secs_f64() / 1e9;
        println!(
            "{:>4}/rc  WRITE+imm {} MiB in {:>7.2} ms ({:>6.2} Gb/s), READ back in {:>7.2} ms ({:>6.2} Gb/s): {}",
            t,
            back >> 20,
            t_write.as_secs_f64() * 1e3,
            gbps(t_write),
            t_read.as_secs_f64() * 1e3,
            gbps(t_read),
            if same { "all bytes verified" } else { "MISMATCH" }
        );
        if t == Transport::Udp {
            println!(
                "         {} RoCEv2 packets out, {} in, {} retransmitted, {} ICRC errors",
                s.engine.tx_packets, s.engine.rx_packets, s.engine.retransmits, s.icrc_errors
            );
        }
        if !same {
            bail!("data read back over {t} differs from what was written");
        }
        drop(c);
        // Let the responder print its line for this connection before the next one.
        std::thread::sleep(Duration::from_millis(150));
    }
    responder.finish();
    println!("\ndone: see `remora fabric bench --help` for the benchmarks");
    Ok(())
}
