//! A blocking client of the resize service (`POST /resize`), with many jobs in flight.
//!
//! A 503 answer (the server's queue is full) is retried after the server's `Retry-After` delay
//! (1 s when it gives none, at most 30 s), up to [`Client::retries`] times; other errors come back
//! as they are.
//!
//! ```no_run
//! use remora_resize::client::{Client, Request};
//! let client = Client::new("http://127.0.0.1:8760").unwrap();
//! let jpeg = std::fs::read("photo.jpg").unwrap();
//! let req = Request { geometry: "500x500", quality: Some(85), ..Request::default() };
//! let small = client.resize(&jpeg, &req).unwrap();
//! ```

use crate::Format;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// One answer of `resize_many`, filled by whichever thread sent it.
type Slot = Mutex<Option<Result<Vec<u8>, ClientError>>>;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The base URL is not `http://host[:port][/path]`.
    #[error("bad server URL {0:?}: http://host:port")]
    Url(String),
    /// The server could not be reached, or the connection broke.
    #[error("connection to the resize server: {0}")]
    Connection(String),
    /// The server answered with an error status (503 after the retries ran out).
    #[error("resize server answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The server's reason.
        message: String,
    },
}

/// What to ask for.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    /// ImageMagick geometry (`500x500`, `50%`, `100x100^`, …).
    pub geometry: &'a str,
    /// JPEG quality; `None`: the server's default (the input's estimated quality, else 92).
    pub quality: Option<u8>,
    /// Output format; `None`: the input's.
    pub format: Option<Format>,
    /// Resampling filter by ImageMagick name; `None`: the server's choice.
    pub filter: Option<&'a str>,
    /// Drop metadata.
    pub strip: bool,
}

/// A client of one resize server; cheap to share between threads (connections are pooled).
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    agent: ureq::Agent,
    retries: u32,
}

impl Client {
    /// A client of the server at `base_url` (`http://127.0.0.1:8760`).
    pub fn new(base_url: &str) -> Result<Client, ClientError> {
        let base = base_url.trim_end_matches('/');
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| ClientError::Url(base_url.into()))?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(ClientError::Url(base_url.into()));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(300)))
            .max_idle_connections_per_host(64)
            .user_agent("remora-resize-client")
            .build()
            .new_agent();
        Ok(Client {
            base: base.to_string(),
            agent,
            retries: 5,
        })
    }

    /// How many times a 503 is retried (default 5).
    pub fn retries(mut self, n: u32) -> Client {
        self.retries = n;
        self
    }

    fn url(&self, req: &Request) -> String {
        let enc = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
        let mut url = format!("{}/resize?geometry={}", self.base, enc(req.geometry));
        if let Some(q) = req.quality {
            url += &format!("&quality={q}");
        }
        if let Some(f) = req.format {
            url += match f {
                Format::Jpeg => "&format=jpeg",
                Format::Png => "&format=png",
            };
        }
        if let Some(f) = req.filter {
            url += &format!("&filter={}", enc(f));
        }
        if req.strip {
            url += "&strip=1";
        }
        url
    }

    /// Resizes one image (`POST /resize`).
    pub fn resize(&self, image: &[u8], req: &Request) -> Result<Vec<u8>, ClientError> {
        let url = self.url(req);
        let mut attempt = 0;
        loop {
            let resp = self
                .agent
                .post(&url)
                .header("Content-Type", "application/octet-stream")
                .send(image)
                .map_err(|e| ClientError::Connection(e.to_string()))?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(Duration::from_secs(1), Duration::from_secs)
                .min(MAX_RETRY_AFTER);
            let mut body = resp.into_body();
            let data = body
                .with_config()
                .limit(u64::MAX)
                .read_to_vec()
                .map_err(|e| ClientError::Connection(e.to_string()))?;
            if status == 200 {
                return Ok(data);
            }
            if status == 503 && attempt < self.retries {
                attempt += 1;
                std::thread::sleep(retry_after);
                continue;
            }
            return Err(ClientError::Status {
                status,
                message: String::from_utf8_lossy(&data).trim().to_string(),
            });
        }
    }

    /// Resizes many images with `in_flight` requests at a time (threads sharing the client's
    /// connection pool); the results are in the order of `images`.
    pub fn resize_many(
        &self,
        images: Vec<Vec<u8>>,
        req: &Request,
        in_flight: usize,
    ) -> Vec<Result<Vec<u8>, ClientError>> {
        let n = images.len();
        let results: Vec<Slot> = (0..n).map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..in_flight.clamp(1, n.max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let r = self.resize(&images[i], req);
                    *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                });
            }
        });
        results
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .unwrap_or_else(|| Err(ClientError::Connection("not sent".into())))
            })
            .collect()
    }
}
