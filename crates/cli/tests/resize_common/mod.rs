//! Helpers for the `remora resize` security tests: a `remora resize serve` child (its address
//! read from `listening on http://ADDR`, killed on drop), a raw HTTP/1.1 client that can stop
//! half-way through a request, the peak memory of a process (`VmHWM`, or `wait4`'s rusage for
//! a finished one), and inputs built in memory: JPEGs (the engine's test helpers), scan bombs
//! and constant gray PNGs of any shape (compressed with fixed-Huffman runs, so a 1×50,000,000
//! PNG is a few hundred KB). `REMORA_TEST_EXE` runs another build of `remora` instead of this
//! one (to show that a test fails against the build before a fix).
// Each test binary uses a part of these helpers.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `remora` binary under test.
pub fn exe() -> String {
    std::env::var("REMORA_TEST_EXE").unwrap_or_else(|_| env!("CARGO_BIN_EXE_remora").into())
}

/// A scratch folder, removed on drop.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("remora-sec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn write(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.path(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, data).unwrap();
        p
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `remora resize serve`; dropping it kills it.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `remora resize serve --listen 127.0.0.1:0 ARGS`, once it prints its address.
    pub fn start(args: &[&str]) -> Server {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        Server::start_env(&all, &[])
    }

    /// `remora resize serve ARGS` with `env` added to its environment (which must make it
    /// listen on a free port: `--listen 127.0.0.1:0` or `IMGPROXY_BIND=127.0.0.1:0`), once it
    /// prints its address.
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(exe())
            .args(["resize", "serve"])
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start remora resize serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        Server { child, addr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The peak resident memory of the server so far, in bytes.
    pub fn vm_hwm(&self) -> u64 {
        vm_hwm(self.pid())
    }

    /// `GET path` on a fresh connection.
    pub fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, &[], Duration::from_secs(60))
    }

    /// `POST path` with `body` on a fresh connection.
    pub fn post(&self, path: &str, body: &[u8]) -> Reply {
        request(self.addr, "POST", path, body, Duration::from_secs(60))
    }
}

/// `VmHWM` of a running process, in bytes.
pub fn vm_hwm(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header's value (names compared without case).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// One request on a fresh connection (`Connection: close`), read to its end.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    // A server that answers before reading the body may close: the answer still counts.
    let _ = s.write_all(body);
    read_reply(&mut s).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// Reads an answer (head and a `Content-Length` body, or up to EOF).
pub fn read_reply(s: &mut TcpStream) -> std::io::Result<Reply> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed after {} bytes", buf.len()),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut reply = Reply {
        status,
        head,
        body: buf[end..].to_vec(),
    };
    let len = reply
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    loop {
        if len.is_some_and(|l| reply.body.len() >= l) {
            break;
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => reply.body.extend_from_slice(&chunk[..n]),
            Err(e) if len.is_none() => {
                let _ = e;
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(reply)
}

/// Runs `remora ARGS` to its end (killed after `timeout`): exit code (`None`: killed by a
/// signal or the timeout), stdout, stderr, and its peak resident bytes (`VmHWM`, read every few
/// milliseconds while it runs: `wait4`'s `ru_maxrss` would count the test process's memory
/// too, which a spawned child shares until it executes).
pub fn run(args: &[&str], timeout: Duration) -> (Option<i32>, String, String, u64) {
    let mut child = Command::new(exe())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start remora");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (pid, t0) = (child.id(), Instant::now());
    let mut peak = 0;
    let status = loop {
        // Before try_wait: the process (a zombie at worst) is still there to be read.
        peak = peak.max(vm_hwm(pid));
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    (status.code(), o.join().unwrap(), e.join().unwrap(), peak)
}

/// A gray 8-bit PNG of `w`×`h` pixels all `value`, its image data compressed with
/// fixed-Huffman matches (258 bytes in 13 bits): cheap to build at any size.
pub fn constant_png(w: u32, h: u32, value: u8) -> Vec<u8> {
    // Rows: a filter byte (0) and w pixels. The stream repeats with period w + 1 (h > 1) or,
    // within a single row, with period 1 after the filter byte.
    let row = u64::from(w) + 1;
    let total = row * u64::from(h);
    let period = if h > 1 { row } else { 1 };
    assert!(
        period <= 32_768,
        "constant_png: rows of at most 32767 pixels, or one row"
    );
    let mut z = Bits::default();
    z.bits(1, 1); // last block
    z.bits(1, 2); // fixed Huffman
    let first: Vec<u8> = if h > 1 {
        (0..row).map(|i| if i == 0 { 0 } else { value }).collect()
    } else {
        vec![0, value]
    };
    for &b in &first {
        z.literal(b);
    }
    let mut left = total - first.len() as u64;
    while left > 0 {
        if left < 3 {
            // The last bytes continue the pattern: literals.
            let at = total - left;
            let b = if h > 1 {
                if at % row == 0 {
                    0
                } else {
                    value
                }
            } else {
                value
            };
            z.literal(b);
            left -= 1;
            continue;
        }
        let n = left.clamp(3, 258);
        // Leave at least 3 for a last match.
        let n = if left - n > 0 && left - n < 3 {
            n - 3
        } else {
            n
        };
        z.matched(n as u32, period as u32);
        left -= n;
    }
    z.huffman(256, 7, 0); // end of block
    let mut data = vec![0x78, 0x01];
    data.extend_from_slice(&z.finish());
    data.extend_from_slice(&adler32_constant(w, h, value).to_be_bytes());
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    chunk(&mut png, b"IDAT", &data);
    chunk(&mut png, b"IEND", &[]);
    png
}

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Adler-32 of the rows of [`constant_png`], computed per row.
fn adler32_constant(w: u32, h: u32, value: u8) -> u32 {
    const M: u64 = 65_521;
    let (mut a, mut b) = (1u64, 0u64);
    for _ in 0..h {
        // The filter byte.
        b = (b + a) % M;
        // w bytes of `value`: a grows by value each, b by the running a.
        let (n, v) = (u64::from(w), u64::from(value));
        // b += n·a + v·n(n+1)/2, a += n·v (mod M).
        let tri = (n % (2 * M)) * ((n + 1) % (2 * M)) / 2 % M;
        b = (b + (n % M) * a + v * tri) % M;
        a = (a + (n % M) * v) % M;
    }
    ((b << 16) | a) as u32
}

/// A deflate bit writer (least significant bit first; Huffman codes most significant first).
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn bits(&mut self, v: u32, len: u32) {
        self.acc |= u64::from(v) << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code of `len` bits for `base + off`.
    fn huffman(&mut self, _symbol: u32, len: u32, code: u32) {
        let mut rev = 0;
        for i in 0..len {
            rev |= ((code >> i) & 1) << (len - 1 - i);
        }
        self.bits(rev, len);
    }

    fn literal(&mut self, b: u8) {
        let b = u32::from(b);
        if b < 144 {
            self.huffman(b, 8, 0x30 + b);
        } else {
            self.huffman(b, 9, 0x190 + b - 144);
        }
    }

    fn length_symbol(&mut self, sym: u32) {
        if sym < 280 {
            self.huffman(sym, 7, sym - 256);
        } else {
            self.huffman(sym, 8, 0xC0 + sym - 280);
        }
    }

    /// A match of `len` (3–258) at distance `dist` (1–32768).
    fn matched(&mut self, len: u32, dist: u32) {
        const BASE: [u32; 29] = [
            3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99,
            115, 131, 163, 195, 227, 258,
        ];
        const EXTRA: [u32; 29] = [
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
        ];
        let i = BASE.iter().rposition(|&b| b <= len).unwrap();
        self.length_symbol(257 + i as u32);
        self.bits(len - BASE[i], EXTRA[i]);
        // Distance codes: 0–3 for 1–4, then pairs of codes per power of two.
        let (code, extra, base) = if dist <= 4 {
            (dist - 1, 0, dist)
        } else {
            let e = 31 - (dist - 1).leading_zeros() - 1;
            let half = ((dist - 1) >> e) & 1;
            (2 * e + 2 + half, e, (1 << (e + 1)) + 1 + half * (1 << e))
        };
        self.huffman(code, 5, code);
        self.bits(dist - base, extra);
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Sends `SIGTERM` to `pid`.
pub fn sigterm(pid: u32) {
    // SAFETY: kill has no memory preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
}

/// A world-readable copy of this test binary (for re-running it as `nobody`), in a folder of
/// its own (removed with the returned `Tmp`).
pub fn world_runnable_copy(tag: &str) -> (Tmp, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let t = Tmp::new(&format!("exe-{tag}"));
    std::fs::set_permissions(&t.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = t.path("attacker");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    (t, exe)
}

/// Sets `path`'s mode.
pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
