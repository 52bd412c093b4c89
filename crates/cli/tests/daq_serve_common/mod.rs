//! `remora daq serve` for the tests: started in a folder, its `serving on URL` line read (address
//! and token), killed on drop; plain HTTP/1.1 requests with or without the token.
// Each test binary uses a part of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `remora`, or the build `REMORA_TEST_EXE` names.
pub fn exe() -> String {
    std::env::var("REMORA_TEST_EXE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_remora").into())
}

/// A fresh directory (world-traversable) holding a world-writable, sticky `data/`.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("remora-secdaq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("data")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(p.join("data"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        Tmp(p)
    }
    pub fn data(&self) -> PathBuf {
        self.0.join("data")
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `remora daq serve`; killed on drop.
pub struct Daq {
    pub child: Child,
    pub addr: SocketAddr,
    pub token: Option<String>,
}

impl Drop for Daq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daq {
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Starts `remora daq serve ARGS` in `cwd` and reads its `serving on URL` line.
pub fn serve(cwd: &Path, args: &[&str]) -> Daq {
    let mut child = Command::new(exe())
        .args(["daq", "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .current_dir(cwd)
        .env_remove("REMORA_DAQ_TOKEN")
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("serving on http://")
        .unwrap_or_else(|| panic!("no address: {line:?}"));
    let (addr, rest) = url.split_once('/').unwrap_or((url, ""));
    let token = rest.strip_prefix("?token=").map(str::to_owned);
    Daq {
        child,
        addr: addr.parse().unwrap(),
        token,
    }
}

/// One HTTP/1.1 request on its own connection: (status, body).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/toml\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut all = Vec::new();
    s.read_to_end(&mut all)?;
    Ok(reply(&all))
}

pub fn reply(all: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(all);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

pub fn call(d: &Daq, method: &str, path: &str, body: &str) -> (u16, String) {
    request(
        d.addr,
        method,
        path,
        d.token.as_deref(),
        body,
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// A small run's configuration: `detector` lines after `modules`, `rest` appended.
pub fn config(detector: &str, rest: &str) -> String {
    format!(
        "[detector]\nmodules = 1\n{detector}[acquisition]\nframes = 8\nrate_hz = 50\n\
         deadline_ms = 10000\n[transport]\nkind = \"shm\"\n[pipeline]\nbins = 100\n{rest}"
    )
}
