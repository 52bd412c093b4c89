//! Where source images come from: files under the configured root, and `http://` URLs on the
//! allow-list. Everything else is refused (no open proxy, no file outside the root).
//!
//! Local paths are checked before the file system is touched (no `..`, no absolute path, no NUL)
//! and again after canonicalisation (a symlink that leads out of the root is refused). URLs must
//! start with an allowed prefix (a prefix without a path must be followed by `/`, `?` or the end,
//! so that `http://a.example` does not admit `http://a.example.evil`), must not hold dot segments
//! or encoded slashes (`%2e%2e`, `%2f`), must be `http://` (this build has no TLS),
//! and are fetched without following redirects, the byte limit enforced while reading.

use super::imgproxy::Source;
use super::Failure;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// What sources a server may read.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    /// The canonical root, if any.
    pub root: Option<PathBuf>,
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
    ) -> std::io::Result<Sources> {
        let root = match root {
            Some(r) => Some(r.canonicalize().map_err(|e| {
                std::io::Error::new(e.kind(), format!("source root {}: {e}", r.display()))
            })?),
            None => None,
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
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

    /// The canonical path of `rel` under the root, or why not.
    pub(crate) fn resolve(&self, rel: &str) -> Result<PathBuf, Failure> {
        let root = self.root.as_ref().ok_or_else(|| {
            Failure::forbidden("this server has no source directory (serve --root DIR)")
        })?;
        if rel.contains('\0') {
            return Err(Failure::forbidden("a NUL byte in the source path"));
        }
        let path = Path::new(rel);
        for c in path.components() {
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
        let full = root.join(path);
        let canon = full.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Failure::not_found(format!("no source {rel:?} in the source directory"))
            }
            _ => Failure::not_found(format!("source {rel:?}: {e}")),
        })?;
        if !canon.starts_with(root) {
            return Err(Failure::forbidden(format!(
                "source {rel:?} leads out of the source directory (symlink)"
            )));
        }
        if !canon.is_file() {
            return Err(Failure::not_found(format!("source {rel:?} is not a file")));
        }
        Ok(canon)
    }

    fn read_file(&self, rel: &str) -> Result<Vec<u8>, Failure> {
        let path = self.resolve(rel)?;
        let file = std::fs::File::open(&path)
            .map_err(|e| Failure::not_found(format!("source {rel:?}: {e}")))?;
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
    fn dot_segments_are_spotted_encoded_or_not() {
        assert!(has_dot_segment("http://a/img/../secret"));
        assert!(has_dot_segment("http://a/img/%2E%2e/secret"));
        assert!(has_dot_segment("http://a/img/..%2fsecret"));
        assert!(!has_dot_segment("http://a/img/a..b.jpg"));
    }
}
