//! `remora bench match`: remora's exact matching against OpenCV (brute force and FLANN) and
//! FAISS on the same descriptors and threads, with FLANN's recall and FAISS's agreement.
//!
//! remora is timed here (best of `--repeat`); the peers run in `bench/match_peers.py` under the
//! chosen Python, which also computes SIFT descriptors for `--images`. The script writes each
//! peer's accepted matches as `.npy` index pairs, read back here to compare with remora's.
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use clap::Args;
use remora_match::formats::npy::{self, NpyArray, NpyData};
use remora_match::formats::{Descriptors, Format};
use remora_match::{match_f32, match_u8, GpuMatcher, Kernel, Match, Options};
use serde_json::{json, Value};

use super::input::{self, Loaded};
use super::pair::as_f32;
use super::{kernel_name, EngineArg, KernelArg};

/// Arguments of `remora bench match`.
#[derive(Args)]
pub struct BenchArgs {
    /// Query descriptors: `.npy` (n × dim, u8 or f32) or a keypoint file.
    #[arg(
        long,
        value_name = "Q",
        requires = "train",
        conflicts_with = "images",
        required_unless_present = "images"
    )]
    query: Option<PathBuf>,
    /// Reference (train) descriptors, searched by the queries.
    #[arg(long, value_name = "T", requires = "query")]
    train: Option<PathBuf>,
    /// Two photographs A B: SIFT descriptors by OpenCV (default parameters) in the peer script;
    /// A's are the train set, B's the queries (MicMac's order).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    images: Option<Vec<PathBuf>>,
    /// Threads for remora and every peer [default: all cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Lowe's ratio for everyone: d1 < R · d2.
    #[arg(long, value_name = "R", default_value_t = 0.6)]
    ratio: f32,
    /// Python that runs bench/match_peers.py [default: .venv/bin/python, else python3].
    #[arg(long, value_name = "PY")]
    python: Option<PathBuf>,
    /// The peer script [default: bench/match_peers.py of this checkout].
    #[arg(long, value_name = "FILE")]
    peers_script: Option<PathBuf>,
    /// Time remora only.
    #[arg(long)]
    no_peers: bool,
    /// Timed runs of each; the best counts (a peer run over 10 s is not repeated).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Distance kernel for u8 descriptors with `--engine cpu` (auto: the fastest this CPU runs).
    #[arg(long, value_enum, env = "REMORA_MATCH_KERNEL", default_value = "auto")]
    kernel: KernelArg,
    /// Which engines to time: cpu (the `--kernel` one), gpu (gpu-wgpu on the device
    /// REMORA_GPU allows), all (every CPU kernel and the GPU if one opens, side by side, each
    /// compared with the portable kernel's matches).
    #[arg(long, value_enum, default_value = "cpu")]
    engine: EngineArg,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// A folder removed when dropped.
struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The repository root this binary was built from (for the default script and venv).
fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn default_python() -> PathBuf {
    [
        PathBuf::from(".venv/bin/python"),
        source_root().join(".venv/bin/python"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| PathBuf::from("python3"))
}

fn default_script() -> PathBuf {
    [
        PathBuf::from("bench/match_peers.py"),
        source_root().join("bench/match_peers.py"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| PathBuf::from("bench/match_peers.py"))
}

/// Runs the peer script; returns its JSON output.
fn script(py: &Path, script: &Path, args: &[String]) -> anyhow::Result<Value> {
    let out = Command::new(py)
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {} {}", py.display(), script.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} {} exited with {}",
            py.display(),
            script.display(),
            args.first().map(String::as_str).unwrap_or(""),
            out.status
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "{} printed no JSON: {:?}",
            script.display(),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// One engine's timed run.
struct Run {
    /// The engine as results name it (`avx2`, `gpu-wgpu`; `avx2 (f32)` for f32 descriptors).
    name: String,
    /// Where it ran: `cpu` or the GPU.
    device: String,
    matches: Vec<Match>,
    /// Best of the timed runs.
    seconds: f64,
    /// The GPU engine's device work per timed call (null for the CPU kernels).
    gpu: Option<GpuWork>,
}

/// What one timed call of the GPU engine asked of the device: the counters' difference
/// between the end of a warm-up call and the end of the timed calls, divided by their number.
struct GpuWork {
    /// Adapter name.
    name: String,
    submissions: f64,
    h2d_bytes: f64,
    d2h_bytes: f64,
    /// Buffers, bind groups and pipelines created during the timed calls, all of them.
    objects: u64,
}

impl GpuWork {
    fn json(w: Option<&GpuWork>) -> Value {
        match w {
            None => json!({
                "submissions": null, "h2d_bytes": null, "d2h_bytes": null,
                "objects_after_warmup": null, "device_name": null, "device_ms": null,
            }),
            // device_ms: the shared device is opened without timestamp queries.
            Some(w) => json!({
                "submissions": w.submissions, "h2d_bytes": w.h2d_bytes, "d2h_bytes": w.d2h_bytes,
                "objects_after_warmup": w.objects, "device_name": w.name, "device_ms": null,
            }),
        }
    }
}

/// remora's matches with `kernel` (concrete), best seconds of `repeat` runs.
fn time_remora(
    train: &Loaded,
    query: &Loaded,
    opts: &Options,
    kernel: Kernel,
    repeat: u32,
) -> anyhow::Result<Run> {
    let opts = Options {
        kernel,
        ..opts.clone()
    };
    let dim = train.kp.dim;
    let (mut best, mut matches) = (f64::INFINITY, Vec::new());
    let name = match (&train.kp.descriptors, &query.kp.descriptors) {
        (Descriptors::U8(_), Descriptors::U8(_)) => kernel_name(kernel).to_string(),
        _ if matches!(kernel, Kernel::Avx2 | Kernel::Avx512) => "avx2 (f32)".into(),
        _ => "portable (f32)".into(),
    };
    let (tf, qf) = (as_f32(&train.kp.descriptors), as_f32(&query.kp.descriptors));
    let run = || match (&train.kp.descriptors, &query.kp.descriptors) {
        (Descriptors::U8(t), Descriptors::U8(q)) => match_u8(q, t, dim, &opts),
        _ => match_f32(&qf, &tf, dim, &opts),
    };
    // The GPU engine: one untimed warm-up call (pipelines, buffers, bind groups), then the
    // device's counters over the timed calls.
    let gpu = match kernel {
        Kernel::Gpu => {
            let g = GpuMatcher::shared()?;
            run()?;
            Some((g.counters(), g))
        }
        _ => None,
    };
    for _ in 0..repeat {
        let t0 = Instant::now();
        matches = run()?;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let gpu = gpu.map(|(before, g)| {
        let d = g.counters().since(&before);
        let per = |x: u64| x as f64 / f64::from(repeat);
        GpuWork {
            name: g.info().name.clone(),
            submissions: per(d.submissions),
            h2d_bytes: per(d.h2d_bytes),
            d2h_bytes: per(d.d2h_bytes),
            objects: d.objects(),
        }
    });
    Ok(Run {
        name,
        device: kernel.device()?,
        matches,
        seconds: best,
        gpu,
    })
}

/// Engines left out of a run, with the reason.
type Skipped = Vec<(Kernel, String)>;

/// The concrete kernels `--engine` names, and the engines left out.
fn engines(a: &BenchArgs, u8_data: bool) -> anyhow::Result<(Vec<Kernel>, Skipped)> {
    match a.engine {
        EngineArg::Cpu => {
            if a.kernel == KernelArg::Gpu {
                bail!("--kernel gpu is the GPU engine: use --engine gpu (or --engine all)");
            }
            Ok((vec![Kernel::from(a.kernel).resolve_cpu()?], vec![]))
        }
        EngineArg::Gpu => {
            if !u8_data {
                bail!("--engine gpu: the GPU engine matches u8 descriptors only");
            }
            Kernel::Gpu.resolve().context("--engine gpu")?;
            Ok((vec![Kernel::Gpu], vec![]))
        }
        EngineArg::All => {
            let mut ks = Kernel::available();
            let mut skipped = Vec::new();
            if !u8_data && ks.contains(&Kernel::Avx512) {
                // f32 descriptors: avx512 runs the same AVX2 code as avx2.
                ks.retain(|&k| k != Kernel::Avx512);
                skipped.push((Kernel::Avx512, "f32 descriptors: same code as avx2".into()));
            }
            match Kernel::Gpu.resolve() {
                Ok(k) if u8_data => ks.push(k),
                Ok(k) => skipped.push((k, "u8 descriptors only".to_string())),
                Err(e) => skipped.push((Kernel::Gpu, e.to_string())),
            }
            Ok((ks, skipped))
        }
    }
}

/// Query → train of a peer's matches file.
fn read_pairs(path: &Path) -> anyhow::Result<HashMap<u32, u32>> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let a = npy::parse(&b).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let pairs = a
        .index_pairs()
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok(pairs.into_iter().map(|[q, t]| (q, t)).collect())
}

/// Queries whose accepted match (or its absence) differs between remora and a peer.
fn disagreements(ours: &HashMap<u32, u32>, theirs: &HashMap<u32, u32>) -> usize {
    let differ_ours = ours
        .iter()
        .filter(|(q, t)| theirs.get(q) != Some(t))
        .count();
    let only_theirs = theirs.keys().filter(|q| !ours.contains_key(q)).count();
    differ_ours + only_theirs
}

/// Writes descriptors as `.npy` for the peer script (f32 when `f32`).
fn write_npy(dir: &Path, name: &str, l: &Loaded, f32: bool) -> anyhow::Result<PathBuf> {
    if l.format == Format::Npy && !f32 {
        return Ok(l.path.clone());
    }
    let data = match &l.kp.descriptors {
        Descriptors::U8(v) if !f32 => NpyData::U8(v.clone()),
        d => NpyData::F32(as_f32(d).into_owned()),
    };
    let a = NpyArray {
        rows: l.kp.len(),
        cols: l.kp.dim,
        data,
    };
    let p = dir.join(name);
    std::fs::write(&p, a.encode()).with_context(|| format!("writing {}", p.display()))?;
    Ok(p)
}

/// Runs `remora bench match`.
pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let threads = a.threads.map(|n| n as usize).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let opts = Options {
        ratio: Some(a.ratio),
        threads: Some(threads),
        kernel: a.kernel.into(),
        ..Options::default()
    };
    let py = a.python.clone().unwrap_or_else(default_python);
    let peers = a.peers_script.clone().unwrap_or_else(default_script);
    let tmp =
        TempDir(std::env::temp_dir().join(format!("remora-bench-match-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).with_context(|| format!("creating {}", tmp.0.display()))?;
    let (train_path, query_path) = match (&a.images, &a.train, &a.query) {
        (Some(img), _, _) => {
            let args = [
                "sift".to_string(),
                img[0].display().to_string(),
                img[1].display().to_string(),
                "--out".into(),
                tmp.0.display().to_string(),
            ];
            script(&py, &peers, &args).context("SIFT descriptors for --images")?;
            (tmp.0.join("train.npy"), tmp.0.join("query.npy"))
        }
        (None, Some(t), Some(q)) => (t.clone(), q.clone()),
        _ => bail!("give --query Q --train T, or --images A B"),
    };
    let train = input::load(&train_path, None)?;
    let query = input::load(&query_path, None)?;
    if train.kp.dim != query.kp.dim {
        bail!(
            "{} has descriptors of dimension {} and {} of dimension {}",
            train.name(),
            train.kp.dim,
            query.name(),
            query.kp.dim
        );
    }
    let u8_data = matches!(
        (&train.kp.descriptors, &query.kp.descriptors),
        (Descriptors::U8(_), Descriptors::U8(_))
    );
    let (kernels, skipped) = engines(&a, u8_data)?;
    let mut runs = Vec::new();
    for &k in &kernels {
        runs.push((k, time_remora(&train, &query, &opts, k, a.repeat)?));
    }
    let (nq, nt, dim) = (query.kp.len(), train.kp.len(), train.kp.dim);
    let reference = (a.engine == EngineArg::All)
        .then(|| runs.iter().find(|(k, _)| *k == Kernel::Portable))
        .flatten()
        .map(|(_, r)| &r.matches);
    let gmacs = |s: f64| nq as f64 * nt as f64 * dim as f64 / s / 1e9;
    let per_engine: Vec<Value> = runs
        .iter()
        .map(|(_, r)| {
            let mut e = json!({
                "engine": r.name, "device": r.device, "seconds": r.seconds,
                "queries_per_s": nq as f64 / r.seconds, "gmacs": gmacs(r.seconds),
                "matches": r.matches.len(),
                "identical": reference.map(|m| *m == r.matches),
            });
            if let (Some(e), Value::Object(w)) = (e.as_object_mut(), GpuWork::json(r.gpu.as_ref()))
            {
                e.extend(w);
            }
            e
        })
        .collect();
    let skipped: serde_json::Map<String, Value> = skipped
        .into_iter()
        .map(|(k, why)| (kernel_name(k).to_string(), json!(why)))
        .collect();
    // The top-level figures (and the peers' comparison) are the fastest engine's.
    let (_, best) = runs
        .iter()
        .min_by(|a, b| a.1.seconds.total_cmp(&b.1.seconds))
        .context("no engine ran")?;
    let (ours, seconds, kernel) = (&best.matches, best.seconds, &best.name);
    let mut r = json!({
        "n_query": nq, "n_ref": nt, "dim": dim, "seconds": seconds, "matches": ours.len(),
        "kernel": kernel, "engine": kernel, "device": best.device, "threads": threads,
        "engines": per_engine, "skipped": skipped,
        "ratio": a.ratio.to_string().parse::<f64>().unwrap_or(f64::NAN),
        "gmacs": gmacs(seconds),
        "faiss_seconds": null, "bf_seconds": null, "flann_seconds": null, "flann_recall": null,
        "faiss_matches": null, "bf_matches": null, "flann_matches": null,
        "faiss_agree": null, "bf_agree": null, "flann_extra": null,
        "ratios": {"faiss": null, "bf": null, "flann": null},
    });
    if !a.no_peers {
        run_peers(
            &a,
            &py,
            &peers,
            &tmp.0,
            (&train, &query),
            threads,
            ours,
            &mut r,
        )?;
    }
    if a.json {
        println!("{r}");
    } else {
        print_table(&r);
    }
    Ok(())
}

/// Times the peers and adds their keys to `r`.
#[allow(clippy::too_many_arguments)]
fn run_peers(
    a: &BenchArgs,
    py: &Path,
    peers: &Path,
    tmp: &Path,
    (train, query): (&Loaded, &Loaded),
    threads: usize,
    ours: &[Match],
    r: &mut Value,
) -> anyhow::Result<()> {
    let f32 = train.value_type() != query.value_type();
    let t = write_npy(tmp, "peer_train.npy", train, f32)?;
    let q = write_npy(tmp, "peer_query.npy", query, f32)?;
    let args: Vec<String> = [
        "match",
        "--query",
        &q.display().to_string(),
        "--train",
        &t.display().to_string(),
        "--threads",
        &threads.to_string(),
        "--ratio",
        &a.ratio.to_string(),
        "--repeat",
        &a.repeat.to_string(),
        "--out",
        &tmp.display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let p = match script(py, peers, &args) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!("peers not run: {}", crate::report(&e));
            return Ok(());
        }
    };
    let ours_map: HashMap<u32, u32> = ours.iter().map(|m| (m.query, m.train)).collect();
    let seconds = r["seconds"].as_f64().unwrap_or(f64::NAN);
    for peer in ["faiss", "bf", "flann"] {
        let Some(s) = p[peer]["seconds"].as_f64() else {
            let why = p[peer]["missing"].as_str().unwrap_or("not run");
            tracing::warn!("{peer}: {why}; its keys are null");
            continue;
        };
        r[format!("{peer}_seconds")] = json!(s);
        r["ratios"][peer] = json!(s / seconds);
        let theirs = read_pairs(&tmp.join(format!("{peer}.npy")))?;
        r[format!("{peer}_matches")] = json!(theirs.len());
        match peer {
            "flann" => {
                let found = ours
                    .iter()
                    .filter(|m| theirs.get(&m.query) == Some(&m.train))
                    .count();
                let recall = (!ours.is_empty()).then(|| found as f64 / ours.len() as f64);
                r["flann_recall"] = json!(recall);
                r["flann_extra"] = json!(theirs
                    .iter()
                    .filter(|(q, t)| ours_map.get(q) != Some(t))
                    .count());
            }
            _ => r[format!("{peer}_agree")] = json!(disagreements(&ours_map, &theirs)),
        }
    }
    for k in ["opencv", "faiss_version", "peer_threads"] {
        if !p[k].is_null() {
            r[k] = p[k].clone();
        }
    }
    Ok(())
}

fn print_table(r: &Value) {
    let f = |k: &str| r[k].as_f64();
    println!(
        "{} queries x {} references x {} dims, ratio {}, {} threads, kernel {}",
        r["n_query"],
        r["n_ref"],
        r["dim"],
        r["ratio"],
        r["threads"],
        r["kernel"].as_str().unwrap_or("?")
    );
    println!(
        "  {:<22} {:>9.3} s  {:>7} matches  {:.1} GMAC/s",
        "remora (exact)",
        f("seconds").unwrap_or(f64::NAN),
        r["matches"],
        f("gmacs").unwrap_or(f64::NAN)
    );
    if let Some(engines) = r["engines"].as_array().filter(|e| e.len() > 1) {
        for e in engines {
            let same = match e["identical"].as_bool() {
                Some(true) => "identical to portable",
                Some(false) => "DIFFERS from portable",
                None => "",
            };
            println!(
                "    {:<20} {:>9.3} s  {:>10.0} queries/s  {:>7} matches  {same}",
                e["engine"].as_str().unwrap_or("?"),
                e["seconds"].as_f64().unwrap_or(f64::NAN),
                e["queries_per_s"].as_f64().unwrap_or(f64::NAN),
                e["matches"],
            );
        }
    }
    if let Some(skipped) = r["skipped"].as_object() {
        for (engine, why) in skipped {
            println!("    {engine:<20} not run: {}", why.as_str().unwrap_or("?"));
        }
    }
    for (peer, label) in [
        ("faiss", "FAISS IndexFlatL2"),
        ("bf", "OpenCV BFMatcher"),
        ("flann", "OpenCV FLANN"),
    ] {
        match f(&format!("{peer}_seconds")) {
            Some(s) => println!(
                "  {label:<22} {s:>9.3} s  {:>7} matches  remora {:.1}x faster",
                r[format!("{peer}_matches")],
                s / f("seconds").unwrap_or(f64::NAN)
            ),
            None => println!("  {label:<22} not run"),
        }
    }
    let recall = f("flann_recall").map_or("-".to_string(), |x| format!("{x:.4}"));
    println!(
        "  FLANN recall of remora's matches {recall}; FAISS differs on {} queries, BF on {}",
        r["faiss_agree"], r["bf_agree"]
    );
}
