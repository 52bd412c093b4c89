//! Helpers of the HTTP service tests (`service.rs`, `service_load.rs`): options, requests and
//! answers, a temporary root of images, crafted headers, metric lines.
#![allow(dead_code)] // each test file uses some of them

use remora_resize::service::{ServeOptions, Server};
use remora_resize::testing::gradient_jpeg;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn opts() -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        queue: 64,
        ..ServeOptions::default()
    }
}

pub fn base(s: &Server) -> String {
    format!("http://{}", s.local_addr())
}

pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn size(&self) -> (u32, u32) {
        (
            self.header("x-remora-width").unwrap().parse().unwrap(),
            self.header("x-remora-height").unwrap().parse().unwrap(),
        )
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
}

pub fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
    let r = r.expect("request");
    let status = r.status().as_u16();
    let headers = r
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = r
        .into_body()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

pub fn get(url: &str) -> Answer {
    answer(agent().get(url).call())
}

pub fn post(url: &str, body: &[u8]) -> Answer {
    answer(agent().post(url).send(body))
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "remora-resize-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A source root with `photos/a.jpg` (800×600) and `b.jpg` (300×400), and a secret next to it.
pub fn root_with_images() -> (TempDir, PathBuf) {
    let t = TempDir::new("root");
    let root = t.0.join("root");
    std::fs::create_dir_all(root.join("photos")).unwrap();
    std::fs::write(root.join("photos/a.jpg"), gradient_jpeg(800, 600, 90)).unwrap();
    std::fs::write(root.join("b.jpg"), gradient_jpeg(300, 400, 90)).unwrap();
    std::fs::write(t.0.join("secret.jpg"), gradient_jpeg(64, 64, 90)).unwrap();
    (t, root)
}

pub fn crafted_header(w: u16, h: u16) -> Vec<u8> {
    let mut v = vec![0xFF, 0xD8];
    v.extend_from_slice(&[0xFF, 0xDB, 0, 67, 0]);
    v.extend_from_slice(&[1u8; 64]);
    v.extend_from_slice(&[0xFF, 0xC0, 0, 17, 8]);
    v.extend_from_slice(&h.to_be_bytes());
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0]);
    v.extend_from_slice(&[0xFF, 0xDA, 0, 12, 3, 1, 0, 2, 0, 3, 0, 0, 63, 0]);
    v.extend_from_slice(&[0u8; 64]);
    v.extend_from_slice(&[0xFF, 0xD9]);
    v
}

pub fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}
