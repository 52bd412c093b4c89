//! `remora bench acquisition`: the whole acquisition (emulator → fabric → receiver → pipeline)
//! on this host, and the pipeline alone on the same frames in the same run.
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use remora_daq::config::{Config, TransportKind};
use remora_daq::control::http::{new_token, Server, ServerOptions};
use remora_daq::control::{Service, ServiceOptions, State};
use remora_daq::dataset::Dataset;
use remora_daq::engine::calibrate::{self, EngineChoice};
use remora_daq::manager::{run_in_process, Summary};
use std::sync::atomic::Ordering;

use super::page_sim::PageSim;
use remora_daq::setup::Setup;
use serde_json::json;

/// Arguments of `remora bench acquisition`.
#[derive(Args)]
pub struct AcqBenchArgs {
    /// udp or shm (RoCEv2 UC queue pairs), or native (the detector's own UDP packets).
    #[arg(long, default_value = "udp")]
    transport: String,
    /// Detector modules (8 = 4M).
    #[arg(long, default_value_t = 8)]
    modules: usize,
    /// Frames to acquire.
    #[arg(long, default_value_t = 200)]
    frames: u64,
    /// Frames per stack.
    #[arg(long, default_value_t = 8)]
    bunch: usize,
    /// The receiver's frame buffer in stacks (`[receiver] buffer`): enough to absorb jitter,
    /// far less than the run, so that a rate is loss-free only if the receiver sustains it (a
    /// buffer holding the whole run would make any rate look loss-free).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=4096))]
    buffer_stacks: u64,
    /// Path MTU (udp).
    #[arg(long, default_value_t = 4096)]
    mtu: usize,
    /// Who drives the receivers' queue pairs: thread (the fabric's receive thread) or poll (the
    /// receive loop itself).
    #[arg(long, default_value = "thread", value_parser = ["thread", "poll"])]
    progress: String,
    /// Transfer only: the receiver counts frames and runs no pipeline.
    #[arg(long)]
    no_process: bool,
    /// Frames the pipeline processes side by side (`[pipeline] frame_lanes`), in the run and
    /// in the pipeline alone.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    lanes: u64,
    /// Frame rate of the end-to-end run (0: as fast as possible); default: the highest rate
    /// without loss, searched from the rate a flow-controlled run sustains (`overrun =
    /// "backpressure"` at full speed: the source goes as fast as the receiver frees its ring),
    /// then 15% below it, then down in 5% steps, then bisecting until the bracket is within 2%
    /// (at most 4 steps, none begun after 40 s of searching).
    #[arg(long)]
    rate: Option<f64>,
    /// Also run every try under the control service with one live view page open (its status
    /// stream followed, each new preview image and profile fetched), interleaved with the
    /// plain runs, and report the ratio of the two loss-free rates.
    #[arg(long)]
    with_service: bool,
    /// With --with-service: no page open (the service alone).
    #[arg(long, requires = "with_service")]
    no_page: bool,
    /// With --with-service: repeat the paired search this many times and report the median
    /// ratio (near the loss edge one late frame moves a single search by ±10%).
    #[arg(long, default_value_t = 1, requires = "with_service", value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
    /// With no engine given: measure the engines again instead of taking the choice cached for
    /// this host and configuration (once, at the start; the runs then read the new entry).
    #[arg(long)]
    recalibrate: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Also draw the search as an SVG chart: frames kept per second against the offered rate,
    /// with the pipeline alone and the flow-controlled rate as reference lines.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
}

fn settings(a: &AcqBenchArgs, rate: f64, policy: &str) -> anyhow::Result<Config> {
    let buffer = a.buffer_stacks * (a.bunch * a.modules * remora_daq::ring::MODULE_BYTES) as u64;
    let text = format!(
        "[detector]\nmodules = {}\n[acquisition]\nframes = {}\nbunch = {}\ndeadline_ms = 2000\n\
         rate_hz = {rate}\n[transport]\nkind = \"{}\"\nmtu = {}\nprogress = \"{}\"\n\
         [receiver]\nbuffer = {buffer}\noverrun = \"{policy}\"\n[pipeline]\nprocess = {}\n\
         frame_lanes = {}\n",
        a.modules, a.frames, a.bunch, a.transport, a.mtu, a.progress, !a.no_process, a.lanes
    );
    Config::parse(&text).context("benchmark settings")
}

/// CPU time (user + system) this process has used, from `/proc/self/stat`: it tells what the
/// emulator and the transport cost the pipeline on a machine where they share the cores.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (indices 11 and 12 here), in clock ticks of 1/100 s
    // on Linux (USER_HZ).
    (ticks(11) + ticks(12)) / 100.0
}

/// Frames per second of the pipeline alone on the run's frames, in order, on the engine a run
/// chooses (which downloads no pixels to the host: no images, no preview) with the run's
/// frames in flight, and that choice.
fn pipeline_alone(cfg: &Config, opts: &calibrate::Options) -> anyhow::Result<(f64, EngineChoice)> {
    let data = Dataset::load(cfg)?;
    let setup = Setup::new(cfg, 0)?;
    let (mut p, choice) = setup.pipeline_chosen(cfg, false, opts)?;
    let frames: Vec<Vec<u16>> = (0..data.frames).map(|d| data.frame(d)).collect();
    let n = cfg.acquisition.frames;
    let t = Instant::now();
    // As the run does: up to the pipeline's depth in flight (the GPU chain), else one by one.
    for i in 0..n {
        p.submit(i, &frames[data.index_of(i)])?;
        while p.in_flight() >= p.depth() {
            p.collect()?;
        }
    }
    while p.collect()?.is_some() {}
    Ok((n as f64 / t.elapsed().as_secs_f64(), choice))
}

/// The control service the `--with-service` runs go through, its server, and the live view
/// page open on it (none with `--no-page`).
type Served = (Service, Server, Option<PageSim>);

/// Starts the control service behind its HTTP server on a loopback port, with a token, and
/// opens the page on it (unless `--no-page`).
fn serve(a: &AcqBenchArgs) -> anyhow::Result<Served> {
    let svc = Service::new(ServiceOptions::default());
    let token = new_token()?;
    let opts = ServerOptions {
        token: Some(token.clone()),
        ..ServerOptions::default()
    };
    let server = Server::spawn(svc.clone(), "127.0.0.1:0".parse()?, opts)?;
    let page = if a.no_page {
        None
    } else {
        Some(PageSim::open(server.local_addr(), &token)?)
    };
    Ok((svc, server, page))
}

/// One acquisition of `cfg` through the control service: configured, started, waited for.
fn run_under_service(served: &Option<Served>, cfg: &Config) -> anyhow::Result<Summary> {
    let (svc, _, _) = served.as_ref().expect("with service");
    svc.configure(cfg.clone())?;
    svc.start()?;
    let st = svc.wait(std::time::Duration::from_secs(3600));
    if st.state == State::Error {
        anyhow::bail!("{}", st.message.unwrap_or_default());
    }
    svc.summary().context("the service's summary")
}

/// The rates the search tries, highest first: `--rate` alone, or the rate a flow-controlled
/// run sustains then a ladder below it; with that run's summary in the second case.
fn rates_to_try(
    a: &AcqBenchArgs,
    plain: &dyn Fn(&Config) -> anyhow::Result<Summary>,
) -> anyhow::Result<(Option<Summary>, Vec<f64>)> {
    // The end-to-end rate: as asked, or the highest without loss, down in 5% steps from what
    // the receiver sustains when the source follows its ring credits: one run finds the rate
    // a source that cannot wait must stay under, where a search from above took minutes.
    let sustained = match a.rate {
        Some(_) => None,
        None => Some(plain(&settings(a, 0.0, "backpressure")?)?),
    };
    let rates: Vec<f64> = match (a.rate, &sustained) {
        (Some(r), _) => vec![r],
        // The sustained rate, then 15% below it (where a source that cannot wait has so far
        // always been loss-free here), then 5% steps down; the bisection then splits the
        // bracket once.
        (None, Some(bp)) if bp.e2e_fps > 0.0 => std::iter::once(bp.e2e_fps)
            .chain((0..14).map(|k| bp.e2e_fps * 0.85 * 0.95f64.powi(k)))
            .collect(),
        _ => anyhow::bail!("the flow-controlled run committed no frame"),
    };
    Ok((sustained, rates))
}

/// The round whose service/plain ratio is the median (the lower middle one for an even
/// count), which gives the detailed figures, and every round's ratio.
fn median_round(mut rounds: Vec<Vec<Found>>) -> (Vec<Found>, Vec<f64>) {
    let ratio_of = |r: &Vec<Found>| match (r.first(), r.get(1)) {
        (Some(p), Some(s)) if p.1.e2e_fps > 0.0 => s.1.e2e_fps / p.1.e2e_fps,
        _ => 0.0,
    };
    let ratios: Vec<f64> = rounds.iter().map(ratio_of).collect();
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|&i, &j| ratios[i].total_cmp(&ratios[j]));
    let median = order[(order.len() - 1) / 2];
    (rounds.swap_remove(median), ratios)
}

/// What the page fetched while it was open.
fn page_counts(served: &Option<Served>) -> Option<serde_json::Value> {
    served.as_ref().and_then(|(_, _, p)| p.as_ref()).map(|p| {
        let c = &p.counts;
        json!({
            "events": c.events.load(Ordering::Relaxed),
            "images": c.images.load(Ordering::Relaxed),
            "image_bytes": c.image_bytes.load(Ordering::Relaxed),
            "profiles": c.profiles.load(Ordering::Relaxed),
        })
    })
}

/// What the search found, for the report.
struct Outcome {
    /// When the benchmark began.
    started: Instant,
    /// The plain runner's chosen try: its settings, summary and CPU cores used.
    chosen: Found,
    /// The service runner's chosen try (`--with-service`).
    service: Option<Found>,
    /// The flow-controlled run (no `--rate`).
    sustained: Option<Summary>,
    /// The pipeline alone, frames per second (none with `--no-process`).
    pipeline_fps: Option<f64>,
    /// Bytes of one raw frame.
    frame_bytes: f64,
    /// Each round's service/plain ratio.
    ratios: Vec<f64>,
    page_counts: Option<serde_json::Value>,
    tries: Vec<serde_json::Value>,
}

impl Outcome {
    /// The plain run's transfer rate: bytes that landed (whole or masked frames) per second of
    /// the receiver, in GB/s.
    fn transfer_gbps(&self) -> f64 {
        let r = &self.chosen.1.receiver_reports[0];
        let landed =
            r.bytes_expected * (r.frames_complete + r.frames_partial) / r.frames_expected.max(1);
        if r.seconds > 0.0 {
            landed as f64 / r.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// The JSON object `--json` prints (and `--plot` draws from).
fn report_json(a: &AcqBenchArgs, o: &Outcome) -> serde_json::Value {
    let (cfg, s, cores) = &o.chosen;
    let r = &s.receiver_reports[0];
    let pipeline_fps = o.pipeline_fps;
    let mut out = json!({
        "transport": cfg.transport.kind.name(),
        "progress": a.progress,
        "modules": a.modules,
        "mtu": a.mtu,
        "bunch": a.bunch,
        "lanes": a.lanes,
        "process": !a.no_process,
        "frames_sent": s.frames_sent,
        "frames_complete": s.frames_complete,
        "frames_partial": s.frames_partial,
        "frames_lost": s.frames_lost + s.frames_overrun,
        "overruns": s.overruns,
        "kept": s.kept,
        "seconds": r.seconds,
        "transfer_gbps": o.transfer_gbps(),
        "e2e_fps": s.e2e_fps,
        "e2e_gbps": s.e2e_gbps,
        "pipeline_fps": pipeline_fps,
        "pipeline_gbps": pipeline_fps.map(|f| f * o.frame_bytes / 1e9),
        "engine": r.engine,
        "engine_choice": s.engine_choice,
        "rate_hz": cfg.acquisition.rate_hz,
        "zero_loss": s.frames_lost + s.frames_overrun + s.frames_partial == 0,
        "cpu_cores": cores,
        "buffer_frames": s.buffer_frames,
        "sustained_fps": o.sustained.as_ref().map(|b| b.e2e_fps),
        "sustained_complete": o.sustained.as_ref().map(|b| b.frames_complete),
        "search_seconds": o.started.elapsed().as_secs_f64(),
        "tries": o.tries,
    });
    if let Some((scfg, ss, scores)) = &o.service {
        let ratio = if s.e2e_fps > 0.0 {
            ss.e2e_fps / s.e2e_fps
        } else {
            0.0
        };
        out["service"] = json!({
            "e2e_fps": ss.e2e_fps,
            "rate_hz": scfg.acquisition.rate_hz,
            "zero_loss": ss.frames_lost + ss.frames_overrun + ss.frames_partial == 0,
            "cpu_cores": scores,
            "ratio": ratio,
            "ratios": o.ratios,
            "page": o.page_counts,
        });
    }
    out
}

/// The report as text.
fn print_report(a: &AcqBenchArgs, o: &Outcome, out: &serde_json::Value) {
    let (cfg, s, cores) = &o.chosen;
    let r = &s.receiver_reports[0];
    let transfer_gbps = o.transfer_gbps();
    let (pipeline_fps, frame_bytes, ratios) = (o.pipeline_fps, o.frame_bytes, &o.ratios);
    println!(
        "acquisition: {} modules over {} (MTU {}), {} frames sent: {} complete, {} masked, {} lost, {} overruns",
        a.modules,
        cfg.transport.kind.name(),
        a.mtu,
        s.frames_sent,
        s.frames_complete,
        s.frames_partial,
        s.frames_lost + s.frames_overrun,
        s.overruns
    );
    println!(
        "  source rate {} frames/s; transfer {transfer_gbps:.3} GB/s; end to end {:.1} frames/s = {:.3} GB/s",
        if cfg.acquisition.rate_hz > 0.0 { format!("{:.1}", cfg.acquisition.rate_hz) } else { "unlimited".into() },
        s.e2e_fps, s.e2e_gbps
    );
    println!("  this process used {cores:.2} cores during the run (emulator, transport, receiver, pipeline)");
    match &s.engine_choice {
        Some(c) => println!("  {}", c.text()),
        None => println!("  engine {}", r.engine),
    }
    if let Some(bp) = &o.sustained {
        println!(
            "  flow-controlled (backpressure) at full speed: {:.1} frames/s, {} of {} complete; \
             search took {:.0} s and {} tries; frame buffer {} frames",
            bp.e2e_fps,
            bp.frames_complete,
            bp.frames_sent,
            o.started.elapsed().as_secs_f64(),
            o.tries.len(),
            s.buffer_frames
        );
    }
    if let Some(f) = pipeline_fps {
        println!(
            "  pipeline alone on the same frames: {f:.1} frames/s = {:.3} GB/s (end to end / alone = {:.2})",
            f * frame_bytes / 1e9,
            s.e2e_fps / f
        );
    }
    if let Some(sv) = out.get("service") {
        println!(
            "  under the control service with one page open: {:.1} frames/s without loss ({:.2}x the plain run; {})",
            sv["e2e_fps"].as_f64().unwrap_or(0.0),
            sv["ratio"].as_f64().unwrap_or(0.0),
            sv["page"]
        );
        if ratios.len() > 1 {
            let list: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "  ratios of the {} paired searches: {} (median shown above)",
                ratios.len(),
                list.join(", ")
            );
        }
    }
    if cfg.transport.kind == TransportKind::Native {
        println!("  (native: the detector's UDP packets, reassembled by the receiver)");
    }
}

/// Runs `remora bench acquisition`.
pub fn bench_acquisition(a: AcqBenchArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let probe = settings(&a, 0.0, "mask")?;
    let mut opts = calibrate::Options::from_env();
    opts.recalibrate |= a.recalibrate;
    if opts.recalibrate && a.with_service && !a.no_process {
        // Runs under the service download pixels for the page: another configuration to
        // measure (the plain runs' is measured by the pipeline alone, below).
        Setup::new(&probe, 0)?.pipeline_chosen(&probe, true, &opts)?;
    }
    let alone = if a.no_process {
        None
    } else {
        Some(pipeline_alone(&probe, &opts)?)
    };
    let pipeline_fps = alone.as_ref().map(|a| a.0);
    let frame_bytes = (a.modules * remora_daq::ring::MODULE_BYTES) as f64;
    let plain =
        |cfg: &Config| -> anyhow::Result<Summary> { Ok(run_in_process(cfg, None, &|_, _| {})?) };
    let (sustained, rates) = rates_to_try(&a, &plain)?;
    let mut tries = Vec::new();
    let served = if a.with_service {
        Some(serve(&a)?)
    } else {
        None
    };
    let through_service = |cfg: &Config| run_under_service(&served, cfg);
    let mut runners: Vec<Runner<'_>> = vec![("plain", &plain)];
    if a.with_service {
        runners.push(("service", &through_service));
    }
    let mut rounds = Vec::new();
    for _ in 0..a.repeat {
        rounds.push(search(&a, &rates, &runners, &mut tries)?);
    }
    let (found, ratios) = median_round(rounds);
    let page_counts = page_counts(&served);
    drop(served);
    let mut found = found.into_iter();
    let o = Outcome {
        started,
        chosen: found.next().expect("plain runner"),
        service: found.next(),
        sustained,
        pipeline_fps,
        frame_bytes,
        ratios,
        page_counts,
        tries,
    };
    let out = report_json(&a, &o);
    if let Some(path) = &a.plot {
        plot_search(path, &a, &out)?;
    }
    if a.json {
        println!("{out}");
        return Ok(());
    }
    print_report(&a, &o, &out);
    Ok(())
}

/// `--plot`: each runner's tries (offered rate, frames kept per second), the offered rate
/// itself, and the pipeline alone and the flow-controlled run as reference lines.
fn plot_search(
    path: &std::path::Path,
    a: &AcqBenchArgs,
    out: &serde_json::Value,
) -> anyhow::Result<()> {
    use crate::plot::{lines, Chart, Series};
    let tries = out["tries"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<&str> = tries.iter().filter_map(|t| t["runner"].as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let point = |t: &serde_json::Value| Some((t["rate_hz"].as_f64()?, t["e2e_fps"].as_f64()?));
    let mut series: Vec<Series> = names
        .iter()
        .map(|&n| {
            let mut pts: Vec<(f64, f64)> = tries
                .iter()
                .filter(|t| t["runner"] == n)
                .filter_map(point)
                .collect();
            pts.sort_by(|x, y| x.0.total_cmp(&y.0));
            Series::new(format!("kept ({n})"), pts)
        })
        .collect();
    let mut rates: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let offered = rates.into_iter().map(|r| (r, r)).collect();
    series.push(Series::new("offered", offered));
    let mut marks = Vec::new();
    if let Some(f) = out["pipeline_fps"].as_f64() {
        marks.push((format!("pipeline alone {f:.0}/s"), f));
    }
    if let Some(f) = out["sustained_fps"].as_f64() {
        marks.push((format!("flow-controlled {f:.0}/s"), f));
    }
    let chart = Chart {
        title: format!(
            "{} module{} over {}: frames kept per second against the offered rate",
            a.modules,
            if a.modules == 1 { "" } else { "s" },
            a.transport
        ),
        x_label: "offered rate (frames/s)".into(),
        y_label: "kept (frames/s)".into(),
        log: false,
        x_bytes: false,
        marks,
        caption: format!(
            "remora bench acquisition --transport {} --modules {} --frames {}; loss-free at {:.1} frames/s",
            a.transport,
            a.modules,
            a.frames,
            out["e2e_fps"].as_f64().unwrap_or(0.0)
        ),
    };
    lines(path, &chart, &series)
}

mod search;
use search::{search, Found, Runner};

#[cfg(test)]
mod tests;
