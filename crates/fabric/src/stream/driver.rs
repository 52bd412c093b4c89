//! The stream driver (tcp and shm): a [`StreamQp`] behind the queue pair's [`Driver`] trait.
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::StreamQp;
use crate::cq::Cq;
use crate::driver::Driver;
use crate::error::{Error, Result};
use crate::qp_stats::QpStats;
use crate::wr::{Completion, RecvWr, SendWr};

pub(crate) struct StreamDriver(pub(crate) Arc<StreamQp>);

impl StreamDriver {
    /// [`Driver::wait`] on a polled stream: sleeps on its socket and the completion queue's
    /// eventfd and runs the round itself. A closed stream leaves its flushed completions to
    /// take.
    fn wait_polled(&self, cq: &Cq, timeout: Duration) -> Result<Option<Completion>> {
        let s = &self.0;
        let deadline = Instant::now() + timeout;
        loop {
            s.drain_ring();
            if let Some(c) = cq.pop() {
                return Ok(Some(c));
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(None);
            };
            let sleeping = cq.sleep_fd();
            if let Some(c) = cq.pop() {
                return Ok(Some(c));
            }
            match s.progress(left, sleeping.fd()) {
                Ok(true) => {}
                // Another thread is driving the stream, or it is closed: its completions
                // reach our queue.
                Ok(false) | Err(Error::Disconnected) => {
                    drop(sleeping);
                    if let Some(c) = cq.wait(left.min(Duration::from_millis(1))) {
                        return Ok(Some(c));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Driver for StreamDriver {
    fn post_send(&self, wr: SendWr) -> Result<()> {
        self.0.post_send(wr)
    }

    fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.0.post_recv(wr)
    }

    fn progress_now(&self) -> Result<()> {
        self.0.spin_once()
    }

    fn wait(&self, cq: &Cq, timeout: Duration) -> Result<Option<Completion>> {
        if self.0.polled() {
            return self.wait_polled(cq, timeout);
        }
        // shm: what the peer published in our ring, else sleep with the doorbell up (the
        // progress thread drains the ring when the peer rings it).
        if let Some(c) = cq.pop() {
            return Ok(Some(c));
        }
        self.0.want_doorbell(true);
        let c = cq.wait(timeout);
        self.0.want_doorbell(false);
        Ok(c)
    }

    fn progress(&self, wait: Duration) -> Result<()> {
        let s = &self.0;
        if s.polled() {
            return match s.progress(wait, None) {
                Ok(true) => Ok(()),
                // Another thread drives it, or it is closed: do not spin against it.
                Ok(false) | Err(Error::Disconnected) => {
                    if !wait.is_zero() {
                        std::thread::sleep(wait.min(Duration::from_micros(200)));
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            };
        }
        // A thread drives the stream; what the caller can drive is the shm ring.
        if !s.drain_ring() && !wait.is_zero() {
            std::thread::sleep(wait.min(Duration::from_millis(1)));
        }
        Ok(())
    }

    fn stats(&self) -> QpStats {
        QpStats {
            engine: self.0.stats(),
            ..QpStats::default()
        }
    }

    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    fn wait_disconnect(&self, timeout: Option<Duration>) -> Result<()> {
        self.0.wait_closed(timeout)
    }

    fn stop(&self) {
        self.0.stop()
    }

    fn peer_credentials(&self) -> Option<crate::Credentials> {
        self.0.peer_credentials()
    }

    fn take_handover(&self) -> Vec<OwnedFd> {
        self.0.take_handover()
    }
}
