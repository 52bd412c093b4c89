//! `remora bench part --json`: every cell says which threads used the CPU (the poster, the two
//! ends' device threads, the page-in workers), and the model names the receive thread's share.
//! What is checked is who did the work, never how fast.
use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_remora");

#[test]
fn part_bench_attributes_cpu_time_to_the_threads_that_did_the_work() {
    if std::fs::metadata("/proc/self/schedstat").is_err() {
        eprintln!("no schedstat on this kernel: nothing to attribute");
        return;
    }
    let out = Command::new(EXE)
        .args(["bench", "part", "--sizes", "64K", "--iters", "2"])
        .args([
            "--min-iters",
            "1",
            "--cell-seconds",
            "0",
            "--hol-seconds",
            "0",
        ])
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let by = |variant: &str| {
        let row = v["latency"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["variant"] == variant)
            .unwrap_or_else(|| panic!("no {variant} row"));
        row["cells"][0]["cpu_us_by_thread"].clone()
    };
    let us = |t: &serde_json::Value, role: &str| {
        t[role]
            .as_f64()
            .unwrap_or_else(|| panic!("{role} missing in {t}"))
    };

    // The transfer alone: a sender (the poster or the requester's device thread) and the
    // responder's receive thread; no page-in.
    let t = by("transfer_only");
    assert!(us(&t, "responder_device") > 0.0, "{t}");
    assert!(us(&t, "poster") + us(&t, "requester_device") > 0.0, "{t}");
    assert_eq!(us(&t, "page_in"), 0.0, "{t}");
    // The page-in alone runs on the benchmark's own thread, after evicting there or on
    // another CPU.
    for variant in ["page_in_alone", "page_in_elsewhere"] {
        let p = by(variant);
        assert!(us(&p, "poster") > 0.0, "{variant}: {p}");
        for role in ["requester_device", "responder_device", "page_in"] {
            assert_eq!(us(&p, role), 0.0, "{variant} {role}: {p}");
        }
    }
    // PIA into evicted pages: the page-in worker brought them in.
    let w = by("pia");
    assert!(us(&w, "page_in") > 0.0, "{w}");

    let m = &v["model"];
    assert_eq!(
        m["transfer_receive_cpu_us"].as_f64(),
        Some(us(&t, "responder_device"))
    );
    assert_eq!(m["transfer_cpu_us_by_thread"], t);
    assert!(m["pia_to100_cpu_us_by_thread"]["page_in"].as_f64().unwrap() > 0.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(m["shared_core_us"].is_number(), cores < 3, "{m}");
    // The model takes the page-in as the worker meets it.
    assert_eq!(
        m["page_in_elsewhere_cpu_us"],
        v["latency"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["variant"] == "page_in_elsewhere")
            .unwrap()["cells"][0]["cpu_us"]
    );
}
