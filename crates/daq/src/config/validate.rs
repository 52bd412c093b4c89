//! The checks of the configuration's values, one function per table; every message names its
//! key (`acquisition.frames: must be at least 1`).
use std::net::SocketAddr;

use super::{err, Config, Fanout, SourceKind, TransportKind};
use crate::Result;

impl Config {
    /// Checks every value; the message names the key.
    pub fn validate(&self) -> Result<()> {
        self.check_detector_and_source()?;
        self.check_acquisition()?;
        self.check_transport_and_receivers()?;
        self.check_pipeline_and_output()?;
        self.check_access()
    }

    fn check_detector_and_source(&self) -> Result<()> {
        let d = &self.detector;
        if !(1..=32).contains(&d.modules) {
            return Err(err("detector.modules", format!("{} (1..=32)", d.modules)));
        }
        if d.gain.is_some() != d.pedestal.is_some() {
            return Err(err(
                "detector.gain",
                "gain and pedestal files go together (or neither: synthetic calibration)",
            ));
        }
        if !(d.photon_energy_kev.is_finite() && d.photon_energy_kev > 0.0) {
            return Err(err("detector.photon_energy_kev", "must be positive"));
        }
        let s = &self.source;
        if s.kind != SourceKind::Synthetic && s.path.is_none() {
            return Err(err("source.path", "needed for raw, npy and hdf5 sources"));
        }
        if !(1..=4096).contains(&s.distinct) {
            return Err(err("source.distinct", format!("{} (1..=4096)", s.distinct)));
        }
        Ok(())
    }

    fn check_acquisition(&self) -> Result<()> {
        let a = &self.acquisition;
        if a.frames == 0 || a.frames > 1 << 40 {
            return Err(err(
                "acquisition.frames",
                "must be at least 1 (and below 2^40)",
            ));
        }
        if !(a.rate_hz.is_finite() && a.rate_hz >= 0.0) {
            return Err(err(
                "acquisition.rate_hz",
                "must be 0 (as fast as possible) or positive",
            ));
        }
        if !(1..=4096).contains(&a.bunch) {
            return Err(err("acquisition.bunch", format!("{} (1..=4096)", a.bunch)));
        }
        if a.dark_every > 0 && a.dark_phase >= a.dark_every {
            return Err(err("acquisition.dark_phase", "must be below dark_every"));
        }
        if a.deadline_ms == 0 || a.deadline_ms > 600_000 {
            return Err(err("acquisition.deadline_ms", "1..=600000"));
        }
        if a.connect_timeout_ms == 0 || a.connect_timeout_ms > 3_600_000 {
            return Err(err("acquisition.connect_timeout_ms", "1..=3600000"));
        }
        Ok(())
    }

    fn check_transport_and_receivers(&self) -> Result<()> {
        let t = &self.transport;
        if !(256..=4096).contains(&t.mtu) || !t.mtu.is_power_of_two() {
            return Err(err(
                "transport.mtu",
                format!("{} (256, 512, 1024, 2048 or 4096)", t.mtu),
            ));
        }
        if !(0.0..1.0).contains(&t.loss) {
            return Err(err("transport.loss", "a fraction in [0, 1)"));
        }
        if let Some(r) = &self.emulator.roi {
            r.validate().map_err(|e| err("emulator.roi", e))?;
        }
        if self.receivers.is_empty() || self.receivers.len() > 16 {
            return Err(err("receivers", "1 to 16 receivers"));
        }
        for (i, r) in self.receivers.iter().enumerate() {
            let key = |k: &str| format!("receivers[{i}].{k}");
            r.listen
                .parse::<SocketAddr>()
                .map_err(|e| err(&key("listen"), format!("{:?}: {e}", r.listen)))?;
            match (&r.roi, self.emulator.fanout) {
                (Some(roi), Fanout::Roi) => roi.validate().map_err(|e| err(&key("roi"), e))?,
                (None, Fanout::Roi) => {
                    return Err(err(
                        &key("roi"),
                        "fanout = \"roi\" needs a region of interest per receiver",
                    ))
                }
                (Some(_), Fanout::Time) => {
                    return Err(err(
                        &key("roi"),
                        "only with emulator.fanout = \"roi\" (use emulator.roi for every receiver)",
                    ))
                }
                (None, Fanout::Time) => {}
            }
        }
        if t.kind == TransportKind::Native
            && self.receiver.overrun == crate::flow::OverrunPolicy::Pause
        {
            return Err(err(
                "receiver.overrun",
                "\"pause\" needs a fabric transport (udp or shm): the native UDP stream is a \
                 detector's; \"mask\" is what a real detector gets, and \"backpressure\" makes \
                 the emulated one wait for the receiver's grants",
            ));
        }
        crate::flow::ring_for(self, 0).map_err(|e| err("receiver.buffer", e))?;
        if t.kind == TransportKind::Native {
            if self.receivers.len() > 1 {
                return Err(err("receivers", "the native UDP stream feeds one receiver"));
            }
            if self.emulator.roi.is_some() {
                return Err(err(
                    "emulator.roi",
                    "the native UDP stream sends whole modules",
                ));
            }
        }
        Ok(())
    }

    fn check_pipeline_and_output(&self) -> Result<()> {
        let p = &self.pipeline;
        if let Some(e) = &p.engine {
            crate::engine::EngineKind::parse(e).map_err(|e| err("pipeline.engine", e))?;
        }
        if p.threads > 1024 {
            return Err(err("pipeline.threads", "at most 1024"));
        }
        if !p.veto_pixel_kev.is_finite() {
            return Err(err("pipeline.veto_pixel_kev", "must be a number"));
        }
        if !p.sparse_kev.is_finite() {
            return Err(err("pipeline.sparse_kev", "must be a number"));
        }
        if p.pedestal_window == 0 {
            return Err(err("pipeline.pedestal_window", "at least 1 frame"));
        }
        if !(1..=100_000).contains(&p.bins) {
            return Err(err("pipeline.bins", format!("{} (1..=100000)", p.bins)));
        }
        crate::azint::Unit::parse(&p.unit).map_err(|e| err("pipeline.unit", e))?;
        if p.slow_ms > 60_000 {
            return Err(err("pipeline.slow_ms", "at most 60000"));
        }
        for (key, v) in [
            ("pipeline.frame_lanes", p.frame_lanes),
            ("pipeline.frames_in_flight", p.frames_in_flight),
        ] {
            if !(1..=64).contains(&v) {
                return Err(err(key, format!("{v} (1..=64)")));
            }
        }
        if self.output.images && !p.integrate {
            return Err(err(
                "output.images",
                "the assembled images come from the integration stage (pipeline.integrate = true)",
            ));
        }
        if !(1..=1 << 20).contains(&self.output.queue) {
            return Err(err("output.queue", "1..=1048576 frames"));
        }
        Ok(())
    }
}
