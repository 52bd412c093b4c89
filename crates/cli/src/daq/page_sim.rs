//! One live view page, as the benchmark opens it: it follows the status stream and fetches each
//! new preview image and profile, as `page.html` does, so that the benchmark measures what a
//! page costs the acquisition without a browser's own CPU on the same cores.
//!
//! A few lines of HTTP/1.1 over a `TcpStream` (one request per connection) rather than an HTTP
//! client crate: the requests are fixed and the server is ours.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the page fetched.
#[derive(Debug, Default)]
pub struct PageCounts {
    /// Status events received.
    pub events: AtomicU64,
    /// Preview images fetched.
    pub images: AtomicU64,
    /// Bytes of those images.
    pub image_bytes: AtomicU64,
    /// Profiles fetched.
    pub profiles: AtomicU64,
}

/// A running page; dropped, it closes.
pub struct PageSim {
    stop: Arc<AtomicBool>,
    pub counts: Arc<PageCounts>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn get(addr: SocketAddr, token: &str, path: &str) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    let at = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(all.len(), |i| i + 4);
    Ok(all.split_off(at))
}

/// The width the page shows the image at: `page.html` asks for the binning that brings the
/// image down to its displayed width (a third of a 1800-pixel window here).
pub const SHOWN_WIDTH: u64 = 600;

impl PageSim {
    /// Opens the page against the service at `addr`, whose token is `token`.
    pub fn open(addr: SocketAddr, token: &str) -> std::io::Result<PageSim> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        write!(
            s,
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        )?;
        let token = token.to_owned();
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(PageCounts::default());
        let (stop2, counts2) = (stop.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name("page-sim".into())
            .spawn(move || follow(s, addr, &token, &stop2, &counts2))?;
        Ok(PageSim {
            stop,
            counts,
            thread: Some(thread),
        })
    }
}

fn follow(s: TcpStream, addr: SocketAddr, token: &str, stop: &AtomicBool, c: &PageCounts) {
    let mut r = BufReader::new(s);
    let (mut last_image, mut last_profile) = (None, None);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        let Some(data) = line.trim_end().strip_prefix("data:") else {
            continue;
        };
        let Ok(st) = serde_json::from_str::<serde_json::Value>(data.trim()) else {
            continue;
        };
        c.events.fetch_add(1, Ordering::Relaxed);
        let preview = st["preview"]["frame"].as_u64();
        if preview.is_some() && preview != last_image {
            last_image = preview;
            let width = st["preview"]["width"].as_u64().unwrap_or(0);
            let bin = (width / SHOWN_WIDTH).clamp(1, 16);
            if let Ok(b) = get(addr, token, &format!("/preview/image?scale=log&bin={bin}")) {
                c.images.fetch_add(1, Ordering::Relaxed);
                c.image_bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
        }
        let profile = st["profile_frame"].as_u64();
        if profile.is_some() && profile != last_profile {
            last_profile = profile;
            if get(addr, token, "/preview/profile").is_ok() {
                c.profiles.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for PageSim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
