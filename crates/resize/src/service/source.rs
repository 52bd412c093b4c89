//! Where source images come from: files under the configured root, and `http://` URLs on the
//! allow-list. Everything else is refused (no open proxy, no file outside the root).
//!
//! Local paths are checked before the file system is touched (no `..`, no absolute path, no NUL)
//! and then opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` relative to a
//! descriptor of the root opened once at start: the kernel resolves the path and refuses any
//! step out of the root (a `..` or an absolute symlink, a symlink that leads out), in the same
//! call that opens the file, so swapping a path component for a symlink between a check and the
//! open (`renameat2(RENAME_EXCHANGE)`) gains nothing. Symlinks that stay inside the root are
//! followed. The file must be a regular file (checked on the opened descriptor). A kernel
//! without `openat2` (before 5.6) gets a walk of `openat(O_NOFOLLOW)` one component at a time,
//! which refuses every symlink. URLs must
//! start with an allowed prefix (a prefix without a path must be followed by `/`, `?` or the end,
//! so that `http://a.example` does not admit `http://a.example.evil`), must not hold dot segments
//! or encoded slashes (`%2e%2e`, `%2f`), must be `http://` (this build has no TLS),
//! and are fetched without following redirects, the byte limit enforced while reading.

use super::imgproxy::Source;
use super::Failure;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};
use std::sync::Arc;
use std::time::Duration;

/// The source directory: a descriptor of it opened at start (`O_PATH`).
#[derive(Debug, Clone)]
pub(crate) struct Root {
    dir: Arc<OwnedFd>,
}

/// What sources a server may read.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    /// The root, if any.
    pub root: Option<Root>,
    /// Allowed URL prefixes.
    pub allow: Vec<String>,
    /// Largest source in bytes.
    pub max_bytes: u64,
    /// The client for URL sources.
    pub agent: ureq::Agent,
}

impl Sources {
    pub(crate) fn new(
        root: Option<&Path>,
        allow: Vec<String>,
        max_bytes: u64,
        job_timeout: Option<Duration>,
    ) -> std::io::Result<Sources> {
        let root = match root {
            Some(r) => {
                let at = |e: std::io::Error| {
                    std::io::Error::new(e.kind(), format!("source root {}: {e}", r.display()))
                };
                let dir = rustix::fs::open(
                    r,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| at(e.into()))?;
                Some(Root { dir: Arc::new(dir) })
            }
            None => None,
        };
        // A URL source is read on a worker: no longer than a job may take.
        let fetch = job_timeout.map_or(Duration::from_secs(30), |t| t.min(Duration::from_secs(30)));
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(fetch))
            .timeout_connect(Some(Duration::from_secs(5)))
            .user_agent("remora-resize")
            .build()
            .new_agent();
        Ok(Sources {
            root,
            allow,
            max_bytes,
            agent,
        })
    }

    /// Reads a source's bytes.
    pub(crate) fn load(&self, src: &Source) -> Result<Vec<u8>, Failure> {
        match src {
            Source::Local(p) => {
                let rel = p.strip_prefix('/').ok_or_else(|| {
                    Failure::bad_request(format!("local source {p:?}: write local:///path"))
                })?;
                self.read_file(rel)
            }
            Source::Path(p) => self.read_file(p),
            Source::Url(u) => self.fetch(u),
        }
    }

    /// Checks `rel` without touching the file system: the root, and a relative path with
    /// neither `..` nor NUL.
    fn check(&self, rel: &str) -> Result<&Root, Failure> {
        let root = self.root.as_ref().ok_or_else(|| {
            Failure::forbidden("this server has no source directory (serve --root DIR)")
        })?;
        if rel.contains('\0') {
            return Err(Failure::forbidden("a NUL byte in the source path"));
        }
        for c in Path::new(rel).components() {
            match c {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => {
                    return Err(Failure::forbidden(format!(
                        "source path {rel:?} leaves the source directory (..)"
                    )))
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(Failure::forbidden(format!(
                        "source path {rel:?} is absolute: give it relative to the source directory"
                    )))
                }
            }
        }
        Ok(root)
    }

    /// Opens `rel` beneath the root: a regular file, read-only.
    pub(crate) fn open(&self, rel: &str) -> Result<std::fs::File, Failure> {
        let root = self.check(rel)?;
        let rel_path = if rel.is_empty() { "." } else { rel };
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat2(
            &*root.dir,
            rel_path,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::NOSYS) => open_walking(&root.dir, rel_path, flags),
            r => r,
        }
        .map_err(|e| open_failure(rel, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| open_failure(rel, e))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(Failure::not_found(format!("source {rel:?} is not a file")));
        }
        Ok(std::fs::File::from(fd))
    }

    fn read_file(&self, rel: &str) -> Result<Vec<u8>, Failure> {
        let file = self.open(rel)?;
        read_limited(file, self.max_bytes)
            .map_err(|e| e.unwrap_or_else(|e| Failure::internal(format!("reading {rel:?}: {e}"))))
    }

    /// Whether `url` is on the allow-list.
    pub(crate) fn allowed(&self, url: &str) -> bool {
        self.allow.iter().any(|p| prefix_admits(p, url))
    }

    fn fetch(&self, url: &str) -> Result<Vec<u8>, Failure> {
        if !self.allowed(url) {
            return Err(Failure::forbidden(format!(
                "source {url:?} is not under an allowed prefix (serve --allow PREFIX)"
            )));
        }
        if has_dot_segment(url) {
            return Err(Failure::forbidden(format!(
                "source {url:?} has dot segments"
            )));
        }
        if !url.starts_with("http://") {
            return Err(Failure::bad_request(format!(
                "source {url:?}: only http:// sources are fetched (this build has no TLS)"
            )));
        }
        let resp = self
            .agent
            .get(url)
            .call()
            .map_err(|e| Failure::bad_gateway(format!("fetching {url}: {e}")))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let f = format!("fetching {url}: the source answered {status}");
            return Err(if status == 404 {
                Failure::not_found(f)
            } else {
                Failure::bad_gateway(f)
            });
        }
        let body = resp.into_body();
        if let Some(n) = body.content_length() {
            if n > self.max_bytes {
                return Err(Failure::too_large(format!(
                    "source of {n} bytes over the limit of {}",
                    self.max_bytes
                )));
            }
        }
        read_limited(body.into_reader(), self.max_bytes)
            .map_err(|e| e.unwrap_or_else(|e| Failure::bad_gateway(format!("fetching {url}: {e}"))))
    }
}

/// The answer for a failed open of `rel`.
fn open_failure(rel: &str, e: Errno) -> Failure {
    match e {
        Errno::NOENT | Errno::NOTDIR => {
            Failure::not_found(format!("no source {rel:?} in the source directory"))
        }
        Errno::XDEV | Errno::LOOP => Failure::forbidden(format!(
            "source {rel:?} leads out of the source directory (symlink)"
        )),
        Errno::ACCESS | Errno::PERM => Failure::forbidden(format!("source {rel:?} cannot be read")),
        e => Failure::not_found(format!("source {rel:?}: {}", std::io::Error::from(e))),
    }
}

/// `openat2` without the syscall: one `openat(O_NOFOLLOW)` per component, so no symlink is
/// followed at all (and `..` never reaches this: it is refused before).
fn open_walking(root: &OwnedFd, rel: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let Some((last, dirs)) = parts.split_last() else {
        return rustix::fs::openat(root, ".", flags | OFlags::NOFOLLOW, Mode::empty());
    };
    let mut dir: Option<OwnedFd> = None;
    for d in dirs {
        let at = dir.as_ref().unwrap_or(root);
        let next = rustix::fs::openat(
            at,
            *d,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        dir = Some(next);
    }
    rustix::fs::openat(
        dir.as_ref().unwrap_or(root),
        *last,
        flags | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

/// Reads at most `max` bytes: `Err(Ok(failure))` when over, `Err(Err(io))` on a read error.
fn read_limited(r: impl Read, max: u64) -> Result<Vec<u8>, Result<Failure, std::io::Error>> {
    let mut out = Vec::new();
    r.take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(Err)?;
    if out.len() as u64 > max {
        return Err(Ok(Failure::too_large(format!(
            "source over the limit of {max} bytes"
        ))));
    }
    Ok(out)
}

/// Whether the allowed `prefix` admits `url`.
fn prefix_admits(prefix: &str, url: &str) -> bool {
    let Some(rest) = url.strip_prefix(prefix) else {
        return false;
    };
    // After the scheme: a prefix that ends inside the authority must end with it.
    let authority_only = prefix
        .split_once("://")
        .is_some_and(|(_, after)| !after.contains('/'));
    !authority_only || rest.is_empty() || rest.starts_with(['/', '?'])
}

fn has_dot_segment(url: &str) -> bool {
    let path = url
        .split_once("://")
        .map_or(url, |(_, after)| after)
        .split(['?', '#'])
        .next()
        .unwrap_or("");
    let lower = path.to_ascii_lowercase().replace("%2e", ".");
    lower.split(['/', '\\']).any(|s| s == ".." || s == ".")
        || lower.contains("%2f")
        || lower.contains("%5c")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_do_not_admit_lookalike_hosts() {
        assert!(prefix_admits("http://a.example", "http://a.example/x.jpg"));
        assert!(!prefix_admits(
            "http://a.example",
            "http://a.example.evil/x.jpg"
        ));
        assert!(!prefix_admits(
            "http://a.example",
            "http://a.example@evil/x.jpg"
        ));
        assert!(prefix_admits(
            "http://a.example/img/",
            "http://a.example/img/x.jpg"
        ));
        assert!(!prefix_admits(
            "http://a.example/img/",
            "http://a.example/other/x.jpg"
        ));
    }

    #[test]
    fn only_regular_files_beneath_the_root_are_opened_and_a_fifo_does_not_block() {
        let dir = std::env::temp_dir().join(format!("remora-src-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.jpg"), b"x").unwrap();
        std::os::unix::fs::symlink("sub/a.jpg", dir.join("inside.jpg")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join("out.jpg")).unwrap();
        std::os::unix::fs::symlink("../..", dir.join("sub/up")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let s = Sources::new(Some(&dir), Vec::new(), 1 << 20, None).unwrap();
        let status = |rel: &str| s.open(rel).err().map_or(200, |f| f.status.as_u16());
        assert_eq!(status("sub/a.jpg"), 200);
        assert_eq!(status("./sub/a.jpg"), 200);
        assert_eq!(
            status("inside.jpg"),
            200,
            "a symlink inside the root is followed"
        );
        assert_eq!(status("out.jpg"), 403);
        assert_eq!(status("sub/up/etc/passwd"), 403);
        assert_eq!(status("../etc/passwd"), 403);
        assert_eq!(status("/etc/passwd"), 403);
        assert_eq!(status("missing.jpg"), 404);
        assert_eq!(status("sub"), 404, "a folder is not a file");
        let t = std::time::Instant::now();
        assert_eq!(status("fifo"), 404);
        assert!(t.elapsed() < Duration::from_secs(1));
        // The walk without openat2 refuses every symlink.
        let root = s.root.as_ref().unwrap();
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        assert!(open_walking(&root.dir, "sub/a.jpg", flags).is_ok());
        assert!(open_walking(&root.dir, "inside.jpg", flags).is_err());
        assert!(open_walking(&root.dir, "sub/up/etc/passwd", flags).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dot_segments_are_spotted_encoded_or_not() {
        assert!(has_dot_segment("http://a/img/../secret"));
        assert!(has_dot_segment("http://a/img/%2E%2e/secret"));
        assert!(has_dot_segment("http://a/img/..%2fsecret"));
        assert!(!has_dot_segment("http://a/img/a..b.jpg"));
    }
}
