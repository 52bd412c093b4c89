//! Packets emitted by remora-wire, wrapped by `pcap::write_pcap`, decode in tshark as RRoCE with
//! the opcode, destination QP, PSN and extension header fields that were sent.
//!
//! Skips (with a printed reason) when tshark is not installed.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{emit_vec, sample_repr};
use remora_wire::{icrc, pcap, Endpoints, Op, Opcode, Repr, Service};

const FIELDS: &[&str] = &[
    "_ws.col.Protocol",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.padcnt",
    "infiniband.bth.se",
    "infiniband.bth.a",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.immdt",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.invariant.crc",
    "_ws.col.Info",
];

/// Runs tshark with a deadline; None when tshark cannot be started.
fn tshark(args: &[&str]) -> Option<String> {
    let mut child = Command::new("tshark")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait for tshark") {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(status.success(), "tshark failed: {status}: {err}");
            return Some(out);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tshark did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_pcap() -> PathBuf {
    std::env::temp_dir().join(format!("remora-wire-tshark-{}.pcap", std::process::id()))
}

#[test]
fn tshark_decodes_emitted_packets_as_rroce() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP tshark_decodes_emitted_packets_as_rroce: tshark is not installed");
        return;
    }
    let v4 = Endpoints::new(
        "127.0.0.1:49170".parse().unwrap(),
        "127.0.0.1:4791".parse().unwrap(),
    );
    let v6 = Endpoints::new(
        "[::1]:49171".parse().unwrap(),
        "[::1]:4791".parse().unwrap(),
    );
    let op = |s, o| Opcode::new(s, o).unwrap();
    let cases = [
        (v4, op(Service::Uc, Op::WriteOnlyImm), 13),
        (v4, op(Service::Uc, Op::SendFirst), 256),
        (v4, op(Service::Rc, Op::WriteFirst), 1024),
        (v4, op(Service::Rc, Op::WriteMiddle), 1024),
        (v4, op(Service::Rc, Op::WriteLastImm), 7),
        (v4, op(Service::Rc, Op::ReadRequest), 0),
        (v4, op(Service::Rc, Op::ReadResponseFirst), 512),
        (v4, op(Service::Rc, Op::ReadResponseMiddle), 512),
        (v4, op(Service::Rc, Op::ReadResponseOnly), 3),
        (v4, op(Service::Rc, Op::Ack), 0),
        (v6, op(Service::Rc, Op::SendOnlyImm), 100),
        (v6, op(Service::Uc, Op::WriteOnly), 64),
    ];
    let mut packets = Vec::new();
    for (ep, opcode, len) in cases {
        let repr = sample_repr(opcode, len);
        let payload: Vec<u8> = (0..repr.payload_len).map(|i| (i * 7) as u8).collect();
        let mut bytes = emit_vec(&repr, &payload);
        icrc::seal(&ep, &mut bytes);
        // The remora checker accepts what tshark is about to decode.
        icrc::check(&ep, &bytes).unwrap();
        packets.push((ep, repr, bytes));
    }
    let path = temp_pcap();
    let records: Vec<(Endpoints, &[u8])> = packets.iter().map(|(ep, _, b)| (*ep, &b[..])).collect();
    pcap::write_pcap(&path, &records).unwrap();

    let mut args = vec![
        "-r",
        path.to_str().unwrap(),
        "-T",
        "fields",
        "-E",
        "separator=|",
    ];
    for f in FIELDS {
        args.extend(["-e", f]);
    }
    let out = tshark(&args);
    if std::env::var_os("KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
    let out = out.expect("tshark ran");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), packets.len(), "one line per packet:\n{out}");

    for ((_, repr, bytes), line) in packets.iter().zip(&lines) {
        println!("{line}");
        let cols: Vec<&str> = line.split('|').collect();
        assert_eq!(cols.len(), FIELDS.len(), "{line}");
        let col = |name: &str| cols[FIELDS.iter().position(|f| *f == name).unwrap()];
        let num = |name: &str| parse_num(col(name)).unwrap_or_else(|| panic!("{name} in {line}"));
        let opcode = repr.bth.opcode;
        assert_eq!(col("_ws.col.Protocol"), "RRoCE", "{line}");
        assert_eq!(
            num("infiniband.bth.opcode"),
            u64::from(opcode.to_u8()),
            "{line}"
        );
        assert_eq!(
            num("infiniband.bth.destqp"),
            u64::from(repr.bth.dest_qp),
            "{line}"
        );
        assert_eq!(
            num("infiniband.bth.psn"),
            u64::from(repr.bth.psn.value()),
            "{line}"
        );
        assert_eq!(
            num("infiniband.bth.padcnt"),
            repr.pad_len() as u64,
            "{line}"
        );
        let info = col("_ws.col.Info");
        let qp = format!("QP=0x{:06x}", repr.bth.dest_qp);
        assert!(info.contains(&qp), "{info} lacks {qp}");
        let service = match opcode.service {
            Service::Rc => "RC ",
            Service::Uc => "UC ",
        };
        assert!(info.starts_with(service), "{info}");
        if let Some(reth) = repr.reth {
            assert_eq!(num("infiniband.reth.va"), reth.va, "{line}");
            assert_eq!(num("infiniband.reth.r_key"), u64::from(reth.rkey), "{line}");
            assert_eq!(num("infiniband.reth.dmalen"), u64::from(reth.len), "{line}");
        } else {
            assert_eq!(col("infiniband.reth.va"), "", "{line}");
        }
        if let Some(imm) = repr.immdt {
            let hex: String = imm
                .to_be_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            // tshark 4.0 lists the ImmDt subtree and its value under one name: take the first.
            let shown = col("infiniband.immdt")
                .split(',')
                .next()
                .unwrap()
                .replace(':', "");
            assert_eq!(shown, hex, "{line}");
        }
        if opcode.op == Op::Ack {
            assert!(info.contains("[Remote Access Error]"), "{info}");
        }
        if let Some(aeth) = repr.aeth {
            assert_eq!(
                num("infiniband.aeth.syndrome"),
                u64::from(aeth.syndrome.to_u8())
            );
            assert_eq!(num("infiniband.aeth.msn"), u64::from(aeth.msn));
        }
        // tshark shows the ICRC but does not verify it; it must show what remora sealed.
        let icrc_wire = &bytes[bytes.len() - 4..];
        let shown = num("infiniband.invariant.crc") as u32;
        assert_eq!(shown.to_be_bytes(), icrc_wire, "{line}");
        // And remora's parser agrees with itself on the captured bytes.
        assert_eq!(Repr::parse(bytes).unwrap().0, *repr);
    }
}

/// Parses a tshark number, decimal or 0x-prefixed hex.
fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}
