//! The `-Y FILE` authentication file, read at start with memcached's rules and messages (the
//! exchange itself is `handler::auth`).
use std::path::Path;

/// memcached reads at most 8 entries.
const MAX_ENTRIES: usize = 8;

/// The `user:password` entries of an auth file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthFile {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl AuthFile {
    /// The file with these entries (tests of the exchange).
    #[cfg(test)]
    pub(crate) fn from_entries(entries: Vec<(Vec<u8>, Vec<u8>)>) -> AuthFile {
        AuthFile { entries }
    }

    /// Reads `path` with memcached's rules and error messages: one `user:password` per line
    /// (the password ends at the line's end), at most 8 entries.
    pub fn load(path: &Path) -> Result<AuthFile, String> {
        let data = std::fs::read(path).map_err(|e| {
            format!(
                "Could not open authfile [{}] for reading, error {e}",
                path.display()
            )
        })?;
        let mut entries = Vec::new();
        for line in data.split(|&b| b == b'\n') {
            if entries.len() == MAX_ENTRIES {
                break;
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(format!(
                    "Authfile [{}] has a malformed entry. Should be 'user:password'",
                    path.display()
                ));
            };
            entries.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
        }
        Ok(AuthFile { entries })
    }

    /// Whether `user` and `pass` are one of the entries, in time independent of the bytes.
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        // Every entry is compared whole, so the time taken does not tell which byte differs.
        self.entries.iter().fold(false, |ok, (u, p)| {
            ok | (constant_eq(u, user) & constant_eq(p, pass))
        })
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}
