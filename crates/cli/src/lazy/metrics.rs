//! `remora lazy serve --metrics ADDR`: what the page server read from its source, for
//! Prometheus. The server counts nothing itself, so the source is wrapped in [`Counted`], which
//! counts each read as it passes (two relaxed adds beside a read of up to a push chunk).
//!
//! Over tcp every page a client faults in or is pushed is such a read. Over udp and shm the
//! clients READ the registered region one-sided, without the server: the reads counted there
//! are the copy taken at start (a process, synthetic bytes), or none (a file mapped live).
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use remora_http::metrics::{registry, Registry};
use remora_lazy::protocol::Segment;
use remora_lazy::PageSource;

/// A source that counts the reads made of it; every other call goes to the source unchanged.
pub struct Counted {
    src: Arc<dyn PageSource>,
    reads: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
}

impl Counted {
    pub fn new(src: Arc<dyn PageSource>) -> Counted {
        Counted {
            src,
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

impl PageSource for Counted {
    fn len(&self) -> u64 {
        self.src.len()
    }
    fn is_empty(&self) -> bool {
        self.src.is_empty()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> remora_lazy::Result<()> {
        let r = self.src.read_at(offset, buf);
        match r {
            Ok(()) => {
                self.reads.fetch_add(1, Relaxed);
                self.bytes.fetch_add(buf.len() as u64, Relaxed);
            }
            Err(_) => {
                self.errors.fetch_add(1, Relaxed);
            }
        }
        r
    }
    fn segments(&self) -> Vec<Segment> {
        self.src.segments()
    }
    fn zero_map(&self) -> Vec<u64> {
        self.src.zero_map()
    }
    fn file(&self) -> Option<&File> {
        self.src.file()
    }
    fn process(&self) -> Option<i32> {
        self.src.process()
    }
    fn describe(&self) -> String {
        self.src.describe()
    }
}

/// The families `/metrics` reports for `src` served over `transport` (`tcp`, `udp`, `shm`).
pub fn metrics(src: Arc<Counted>, transport: &'static str) -> Registry {
    let kind = if src.file().is_some() {
        "file"
    } else if src.process().is_some() {
        "process"
    } else {
        "memory"
    };
    registry(move |m| {
        m.info(
            "remora_lazy_serve_info",
            "What the page server serves (file, process or memory) and over which transport.",
            &[("transport", transport), ("source", kind)],
        )
        .gauge(
            "remora_lazy_source_bytes",
            "Length of the served source.",
            src.len(),
        )
        .counter(
            "remora_lazy_source_reads_total",
            "Reads of the source by the server (tcp: one per fault or push chunk served).",
            src.reads.load(Relaxed),
        )
        .counter(
            "remora_lazy_source_read_bytes_total",
            "Bytes read from the source by the server.",
            src.bytes.load(Relaxed),
        )
        .counter(
            "remora_lazy_source_read_errors_total",
            "Reads of the source that failed (answered with an error).",
            src.errors.load(Relaxed),
        );
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use remora_lazy::MemorySource;

    #[test]
    fn reads_are_counted_and_reported() {
        let src = Arc::new(Counted::new(Arc::new(MemorySource::new(vec![7; 8192]))));
        let reg = metrics(src.clone(), "tcp");
        let mut buf = [0u8; 4096];
        src.read_at(4096, &mut buf).unwrap();
        assert_eq!(buf[0], 7);
        let t = remora_http::metrics::render(&reg, None).unwrap().1;
        for line in [
            "remora_lazy_serve_info{transport=\"tcp\",source=\"memory\"} 1\n",
            "remora_lazy_source_bytes 8192\n",
            "remora_lazy_source_reads_total 1\n",
            "remora_lazy_source_read_bytes_total 4096\n",
            "remora_lazy_source_read_errors_total 0\n",
        ] {
            assert!(t.contains(line), "{line:?} missing from\n{t}");
        }
    }
}
