//! The manager (RASHPA Manager): runs an acquisition from one configuration and sums up what
//! every node reports.
//!
//! [`run_in_process`] starts the receivers and the emulator as threads of this process (what the
//! Python API and the tests use); the `remora daq run` command starts them as processes of the
//! `remora` program and builds the same [`Summary`] from their reports.
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Instant;

use crate::config::Config;
use crate::dataset::Dataset;
use crate::emulator;
use crate::receiver::{FrameResult, Hooks, Progress, Receiver, ReceiverReport};
use crate::{DaqError, Result};

pub(crate) mod summary;

pub use summary::Summary;

/// Sees every committed frame: (receiver index, result).
pub type OnFrame<'a> = &'a (dyn Fn(usize, &FrameResult) + Sync);

/// Runs the whole acquisition inside this process: receivers and emulator as threads, over the
/// configured transport on this host. `on_frame` sees every committed frame (receiver index,
/// result); `progress` sees each receiver's progress.
pub fn run_in_process(
    cfg: &Config,
    on_frame: Option<OnFrame<'_>>,
    progress: &(dyn Fn(usize, &Progress) + Sync),
) -> Result<Summary> {
    let hooks = vec![Hooks::default(); cfg.receivers.len()];
    run_controlled(cfg, hooks, on_frame, progress, &|_| {})
}

/// [`run_in_process`] under a controller: receiver `i` is bound with `hooks[i]`, the emulator
/// stops at the gate of the first receiver's tap, and `sent` sees the frames sent so far.
pub fn run_controlled(
    cfg: &Config,
    hooks: Vec<Hooks>,
    on_frame: Option<OnFrame<'_>>,
    progress: &(dyn Fn(usize, &Progress) + Sync),
    sent: &(dyn Fn(u64) + Sync),
) -> Result<Summary> {
    if hooks.len() != cfg.receivers.len() {
        return Err(DaqError::Config(format!(
            "{} receiver hooks for {} receivers",
            hooks.len(),
            cfg.receivers.len()
        )));
    }
    let tap = hooks.first().and_then(|h| h.tap.clone());
    let data = Dataset::load(cfg)?;
    let receivers: Vec<Receiver> = hooks
        .into_iter()
        .enumerate()
        .map(|(i, h)| Receiver::bind_with(cfg, i, h))
        .collect::<Result<_>>()?;
    let addrs: Vec<SocketAddr> = receivers.iter().map(|r| r.local_addr()).collect();
    let t0 = Instant::now();
    let (tx, rx) = mpsc::channel();
    let emu = std::thread::scope(|sc| {
        for (i, r) in receivers.into_iter().enumerate() {
            let tx = tx.clone();
            sc.spawn(move || {
                let mut f = |fr: &FrameResult| {
                    if let Some(cb) = on_frame {
                        cb(i, fr)
                    }
                };
                let res = r.run(Some(&mut f), &|p| progress(i, p));
                let _ = tx.send((i, res));
            });
        }
        drop(tx);
        emulator::run_until(cfg, &data, &addrs, sent, tap.as_deref().map(|t| &t.gate))
    });
    let mut reps: Vec<Option<ReceiverReport>> = (0..addrs.len()).map(|_| None).collect();
    let mut first_err = None;
    for (i, res) in rx {
        match res {
            Ok(r) => reps[i] = Some(r),
            Err(e) => {
                first_err.get_or_insert(DaqError::Acquisition(format!("receiver {i}: {e}")));
            }
        }
    }
    // A receiver that failed (a file it could not open, say) closes its address, and the
    // emulator then fails to connect: the receiver's error is the cause, report it first.
    if let Some(e) = first_err {
        return Err(e);
    }
    let emu = emu?;
    let reps = reps
        .into_iter()
        .map(|r| r.expect("every receiver reported"))
        .collect();
    let mut s = Summary::new(cfg, emu, reps, t0.elapsed().as_secs_f64());
    crate::writer::master::finish_run(cfg, &mut s)?;
    Ok(s)
}
