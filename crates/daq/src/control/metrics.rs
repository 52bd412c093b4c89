//! `GET /metrics`: the service's state and the current (or last) run's counters in the
//! Prometheus text format, read from [`Service::status`] at each scrape (nothing is counted
//! twice on the frame path).
//!
//! The run's figures (`remora_daq_run_*`) are gauges: like `GET /status` they start again at 0
//! with each run, and hold the last run's final figures between runs. `remora_daq_runs_total`
//! counts the runs started, so a dashboard can tell one run from the next.
use std::sync::Arc;

use remora_http::metrics::{registry, Families, Registry};
use remora_http::Stats;

use super::service::Service;
use super::state::{RunKind, State};
use super::status::Status;

const STATES: [State; 5] = [
    State::Idle,
    State::Configured,
    State::Running,
    State::Pedestal,
    State::Error,
];

/// The registry `/metrics` serves: `svc`'s status and the HTTP listener's `http` counters.
pub fn service_registry(svc: Service, http: Arc<Stats>) -> Registry {
    registry(move |m| {
        let st = svc.status();
        report(m, &st);
        m.http("remora_daq_http", &http);
    })
}

/// The families of one status.
pub(crate) fn report(m: &mut Families, st: &Status) {
    for s in STATES {
        m.gauge_with(
            "remora_daq_state",
            "1 for the state the service is in (idle, configured, running, pedestal, error).",
            &[("state", s.name())],
            st.state == s,
        );
    }
    m.counter(
        "remora_daq_runs_total",
        "Runs started (acquisitions and dark runs).",
        st.run,
    );
    for k in [RunKind::Acquisition, RunKind::Pedestal] {
        let name = match k {
            RunKind::Acquisition => "acquisition",
            RunKind::Pedestal => "pedestal",
        };
        m.gauge_with(
            "remora_daq_run_kind",
            "1 for the kind of the current or last run.",
            &[("kind", name)],
            st.kind == Some(k),
        );
    }
    if let Some(e) = &st.engine_choice {
        let how = serde_json::to_value(e.how)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        m.info(
            "remora_daq_engine_info",
            "The engine the current or last run's pipeline runs on, and how it was chosen.",
            &[("engine", &e.engine), ("how", &how)],
        );
    }
    run_figures(m, st);
    if let Some(p) = &st.pedestal {
        m.gauge(
            "remora_daq_pedestal_frames",
            "Dark frames averaged into the pedestal in use (from the last dark run).",
            p.frames,
        );
    }
}

fn run_figures(m: &mut Families, st: &Status) {
    let c = &st.counters;
    let g: [(&str, &str, u64); 13] = [
        (
            "frames_expected",
            "Frames the run expects (summed over receivers).",
            st.frames_expected,
        ),
        (
            "frames_sent",
            "Detector frames the emulator sent.",
            c.frames_sent,
        ),
        (
            "frames_received",
            "Frames received and processed (complete and partial).",
            c.frames_complete + c.frames_partial,
        ),
        (
            "frames_complete",
            "Frames processed with every module whole.",
            c.frames_complete,
        ),
        (
            "frames_partial",
            "Frames processed with modules masked.",
            c.frames_partial,
        ),
        (
            "frames_lost",
            "Frames sent that never arrived (known at the run's end).",
            c.frames_lost,
        ),
        (
            "frames_overrun",
            "Frames lost to overruns (known at the run's end).",
            c.frames_overrun,
        ),
        ("frames_kept", "Frames the veto kept.", c.kept),
        ("frames_rejected", "Frames the veto rejected.", c.rejected),
        ("frames_dark", "Dark frames (pedestal updates).", c.dark),
        ("overruns", "Overrun events.", c.overruns),
        (
            "modules_lost",
            "Module parts masked because they did not arrive whole.",
            c.modules_lost,
        ),
        (
            "writer_dropped_frames",
            "Frames the writer dropped because the disk was too slow (known at the run's end).",
            c.writer_dropped,
        ),
    ];
    for (name, help, v) in g {
        m.gauge(&format!("remora_daq_run_{name}"), help, v);
    }
    m.gauge(
        "remora_daq_run_frames_per_second",
        "Detector frames processed per second: over the last second while a run goes on, the \
         run's average once it ended.",
        st.rates.fps,
    )
    .gauge(
        "remora_daq_run_gigabytes_per_second",
        "Raw data processed, 1e9 bytes per second (as frames_per_second).",
        st.rates.gbps,
    )
    .gauge(
        "remora_daq_run_progress_ratio",
        "Fraction of the run's frames committed.",
        st.progress,
    )
    .gauge(
        "remora_daq_run_elapsed_seconds",
        "Seconds since the current or last run started (to its end once ended).",
        st.elapsed_s,
    );
    for r in &st.receivers {
        let i = r.index.to_string();
        let l = [("receiver", i.as_str())];
        m.gauge_with(
            "remora_daq_receiver_frames_done",
            "Frames each receiver committed in the current or last run.",
            &l,
            r.frames_done,
        )
        .gauge_with(
            "remora_daq_receiver_frames_buffered",
            "Frames each receiver's buffer holds now, not yet processed.",
            &l,
            r.buffered,
        )
        .gauge_with(
            "remora_daq_receiver_overruns",
            "Overruns each receiver saw in the current or last run.",
            &l,
            r.overruns,
        );
    }
    for md in &st.modules {
        let i = md.index.to_string();
        m.gauge_with(
            "remora_daq_module_frames_masked",
            "Frames in which each detector module was masked (did not arrive whole).",
            &[("module", i.as_str())],
            md.lost,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_service_reports_its_state_and_no_run() {
        let svc = Service::new(Default::default());
        let reg = service_registry(svc, Arc::default());
        let t = remora_http::metrics::render(&reg, None).unwrap().1;
        for line in [
            "remora_daq_state{state=\"idle\"} 1\n",
            "remora_daq_state{state=\"running\"} 0\n",
            "remora_daq_runs_total 0\n",
            "remora_daq_run_frames_complete 0\n",
            "remora_daq_http_connections_open 0\n",
        ] {
            assert!(t.contains(line), "{line:?} missing from\n{t}");
        }
        assert!(!t.contains("remora_daq_engine_info"), "{t}");
    }
}
