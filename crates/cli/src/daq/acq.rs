//! `remora daq run | receive | emulate`: the acquisition's nodes as processes.
//!
//! `run` is the manager: it starts one `remora daq receive` per configured receiver and one
//! `remora daq emulate`, and talks to them through their standard output, one line per message:
//! a receiver prints `listening on ADDR` once bound, `progress {json}` as it goes and
//! `report {json}` at the end; the emulator prints `report {json}`. Errors go to standard error,
//! which the manager collects and shows with the node's name.
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use remora_daq::config::Config;
use remora_daq::dataset::Dataset;
use remora_daq::emulator::{self, EmulatorReport};
use remora_daq::manager::Summary;
use remora_daq::receiver::{Progress, Receiver, ReceiverReport};

/// Arguments of `remora daq run`.
#[derive(Args)]
pub struct RunArgs {
    /// The acquisition's TOML file.
    config: PathBuf,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// Serve the live view and API at this address while the run goes on (the receivers and
    /// the emulator then run as threads of this process, so the page can show their frames).
    #[arg(long, value_name = "ADDR")]
    serve: Option<SocketAddr>,
    /// With --serve: the token every API call must carry (default: a random one, printed with
    /// the page's address; also REMORA_DAQ_TOKEN).
    #[arg(
        long,
        env = "REMORA_DAQ_TOKEN",
        hide_env_values = true,
        requires = "serve"
    )]
    token: Option<String>,
    /// With --serve: serve on a non-loopback address while running as root.
    #[arg(long, requires = "serve")]
    allow_root: bool,
    /// With no `pipeline.engine` configured: measure the engines again instead of taking the
    /// choice cached for this host and configuration (also REMORA_RECALIBRATE=1).
    #[arg(long)]
    recalibrate: bool,
}

/// Arguments of `remora daq receive`.
#[derive(Args)]
pub struct ReceiveArgs {
    /// The acquisition's TOML file.
    config: PathBuf,
    /// Which `[[receivers]]` entry this is.
    #[arg(long, default_value_t = 0)]
    index: usize,
    /// Control address, instead of the file's `listen`.
    #[arg(long)]
    listen: Option<SocketAddr>,
}

/// Arguments of `remora daq emulate`.
#[derive(Args)]
pub struct EmulateArgs {
    /// The acquisition's TOML file.
    config: PathBuf,
    /// The receivers' control addresses, in `[[receivers]]` order, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    to: Vec<SocketAddr>,
}

fn load(path: &std::path::Path) -> anyhow::Result<Config> {
    Ok(Config::load(path)?)
}

pub fn receive(a: ReceiveArgs) -> anyhow::Result<()> {
    let mut cfg = load(&a.config)?;
    if a.index >= cfg.receivers.len() {
        bail!(
            "--index {}: the configuration has {} receiver(s)",
            a.index,
            cfg.receivers.len()
        );
    }
    if let Some(l) = a.listen {
        cfg.receivers[a.index].listen = l.to_string();
    }
    let r = Receiver::bind(&cfg, a.index)?;
    eprintln!("receiver {}: {}", a.index, r.engine_choice().text());
    if let Some(b) = r.buffer() {
        eprintln!(
            "receiver {}: {b}; overrun policy {}",
            a.index,
            cfg.receiver.overrun.name()
        );
    }
    println!("listening on {}", r.local_addr());
    let progress = |p: &Progress| {
        println!("progress {}", serde_json::to_string(p).unwrap_or_default());
    };
    let rep = r.run(None, &progress)?;
    println!("report {}", serde_json::to_string(&rep)?);
    Ok(())
}

pub fn emulate(a: EmulateArgs) -> anyhow::Result<()> {
    let cfg = load(&a.config)?;
    let data = Dataset::load(&cfg).context("loading the dataset")?;
    let rep = emulator::run(&cfg, &data, &a.to, &|_| {})?;
    println!("report {}", serde_json::to_string(&rep)?);
    Ok(())
}

/// A node process and what it said.
struct Node {
    name: String,
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Node {
    fn start(name: String, args: &[String]) -> anyhow::Result<Node> {
        let exe = std::env::current_exe().context("locating the remora executable")?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let out = child.stdout.take().context("node stdout")?;
        let mut err = child.stderr.take().context("node stderr")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let e2 = stderr.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            *e2.lock().expect("stderr lock") = s;
        });
        Ok(Node {
            name,
            child,
            lines,
            stderr,
        })
    }

    /// The node's last error line, for a message.
    fn failure(&mut self) -> String {
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        let e = self.stderr.lock().expect("stderr lock").clone();
        let last = e
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("exited without a message")
            .trim_start_matches("Error: ")
            .to_string();
        format!("{}: {last}", self.name)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    let cfg = load(&a.config)?;
    if a.recalibrate {
        // Before any thread starts; the receiver processes inherit it.
        std::env::set_var(remora_daq::engine::calibrate::RECALIBRATE_ENV, "1");
    }
    let s = match a.serve {
        Some(addr) => super::serve::run_served(cfg, addr, a.token, a.allow_root)?,
        None => manage(&cfg, &a.config)?,
    };
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", s.text());
    }
    Ok(())
}

/// `remora demo`: the 4M acquisition of `examples/demo.toml`, written to `out`.
pub fn demo(out: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let out = out
        .canonicalize()
        .with_context(|| format!("resolving {}", out.display()))?;
    let h5 = out.join("remora-demo.h5");
    let text = include_str!("../../../../examples/demo.toml").replace(
        "file = \"demo.h5\"",
        &format!("file = {:?}", h5.display().to_string()),
    );
    let cfg_path = out.join("remora-demo.toml");
    std::fs::write(&cfg_path, &text).with_context(|| format!("writing {}", cfg_path.display()))?;
    let cfg = load(&cfg_path)?;
    println!(
        "remora demo: an emulated JUNGFRAU 4M ({} modules) streams {} frames at {} frames/s over \
         RoCEv2 UC WRITEs on loopback\ninto a receiver that converts, tracks the pedestal, \
         vetoes, compresses and integrates them, and writes NeXus/HDF5 ({})\n",
        cfg.detector.modules,
        cfg.acquisition.frames,
        cfg.acquisition.rate_hz,
        cfg_path.display()
    );
    if let Ok((_, b)) = remora_daq::flow::ring_for(&cfg, 0) {
        println!(
            "receiver: {b}; overrun policy {}\n",
            cfg.receiver.overrun.name()
        );
    }
    // A fixed address is easier to open; another service there just moves the demo's elsewhere.
    let listen = ["127.0.0.1:8750", "127.0.0.1:0"]
        .into_iter()
        .map(|a| a.parse::<SocketAddr>().expect("literal address"))
        .find(|a| std::net::TcpListener::bind(a).is_ok())
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let s = super::serve::run_served(cfg, listen, None, false)?;
    print!("{}", s.text());
    // The program as this shell can run it now (no install step after `make demo`).
    let exe = std::env::current_exe().ok();
    let cwd = std::env::current_dir().ok();
    let exe = match (&exe, &cwd) {
        (Some(e), Some(c)) => e.strip_prefix(c).map_or(e.clone(), |r| r.to_path_buf()),
        _ => "remora".into(),
    };
    println!(
        "\nread it back:\n  {} daq inspect {}\n  (or in Python, with h5py and hdf5plugin: \
         h5py.File('{}')['/entry/azint/I'])",
        exe.display(),
        h5.display(),
        h5.display()
    );
    Ok(())
}

/// Starts the nodes of `cfg` (read by them from `config`) and sums up their reports.
fn manage(cfg: &Config, config: &std::path::Path) -> anyhow::Result<Summary> {
    let path = config.display().to_string();
    let n = cfg.receivers.len();
    let mut receivers = Vec::with_capacity(n);
    let mut addrs = Vec::with_capacity(n);
    for i in 0..n {
        let mut node = Node::start(
            format!("receiver {i}"),
            &[
                "daq".into(),
                "receive".into(),
                path.clone(),
                "--index".into(),
                i.to_string(),
            ],
        )?;
        let line = node
            .lines
            .recv_timeout(Duration::from_secs(120))
            .ok()
            .and_then(|l| l.strip_prefix("listening on ").map(str::to_owned));
        let Some(addr) = line.and_then(|l| l.parse::<SocketAddr>().ok()) else {
            bail!("{}", node.failure());
        };
        addrs.push(addr);
        receivers.push(node);
    }
    let to = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let t0 = Instant::now();
    let mut emu = Node::start(
        "emulator".into(),
        &[
            "daq".into(),
            "emulate".into(),
            path.clone(),
            "--to".into(),
            to,
        ],
    )?;
    let bar = (std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(cfg.acquisition.frames);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} frames {msg}",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b
    });
    let mut reports: Vec<Option<ReceiverReport>> = (0..n).map(|_| None).collect();
    let mut done: Vec<Progress> = vec![Progress::default(); n];
    let mut emu_report: Option<EmulatorReport> = None;
    while reports.iter().any(Option::is_none) {
        let mut idle = true;
        for (i, node) in receivers.iter_mut().enumerate() {
            while let Ok(l) = node.lines.try_recv() {
                idle = false;
                if let Some(j) = l.strip_prefix("progress ") {
                    if let Ok(p) = serde_json::from_str::<Progress>(j) {
                        done[i] = p;
                    }
                } else if let Some(j) = l.strip_prefix("report ") {
                    reports[i] = Some(serde_json::from_str(j).context("a receiver's report")?);
                }
            }
            if reports[i].is_none() {
                if let Ok(Some(_)) = node.child.try_wait() {
                    // Read what it printed last before judging.
                    while let Ok(l) = node.lines.recv_timeout(Duration::from_millis(200)) {
                        if let Some(j) = l.strip_prefix("report ") {
                            reports[i] = Some(serde_json::from_str(j)?);
                        }
                    }
                    if reports[i].is_none() {
                        bail!("{}", node.failure());
                    }
                }
            }
        }
        while let Ok(l) = emu.lines.try_recv() {
            if let Some(j) = l.strip_prefix("report ") {
                emu_report = Some(serde_json::from_str(j).context("the emulator's report")?);
            }
        }
        if emu_report.is_none() {
            if let Ok(Some(st)) = emu.child.try_wait() {
                if !st.success() {
                    bail!("{}", emu.failure());
                }
            }
        }
        if let Some(b) = &bar {
            let frames: u64 = done.iter().map(|p| p.frames_done).sum();
            let overruns: u64 = done.iter().map(|p| p.overruns).sum();
            let kept: u64 = done.iter().map(|p| p.kept).sum();
            b.set_position(frames);
            b.set_message(format!("{kept} kept, {overruns} overruns"));
        }
        if idle {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let end = Instant::now() + Duration::from_secs(30);
    while emu_report.is_none() && Instant::now() < end {
        match emu.lines.recv_timeout(Duration::from_millis(200)) {
            Ok(l) => {
                if let Some(j) = l.strip_prefix("report ") {
                    emu_report = Some(serde_json::from_str(j)?);
                }
            }
            Err(_) => {
                if let Ok(Some(_)) = emu.child.try_wait() {
                    break;
                }
            }
        }
    }
    let Some(emu_report) = emu_report else {
        bail!("{}", emu.failure());
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let reports = reports
        .into_iter()
        .map(|r| r.expect("all reported"))
        .collect();
    let mut s = Summary::new(cfg, emu_report, reports, seconds);
    remora_daq::writer::master::finish_run(cfg, &mut s)?;
    Ok(s)
}
