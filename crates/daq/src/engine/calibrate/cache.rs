//! The calibration cache: one small JSON file of past choices, each under the key of the
//! devices and the configuration it was measured for.
//!
//! A missing file is an empty cache. A file that cannot be read or parsed is reported as an
//! error string (the caller warns and measures again, then replaces it); it is never a failure
//! of the run. The file is written whole to a temporary name beside it and renamed over it, so a
//! reader sees the old file or the new one; it is created readable by its owner only (0600), in
//! a folder created 0700.
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The cache file's format version; a file of another version is replaced.
const VERSION: u32 = 1;
/// Entries kept (the newest): a host sees few configurations.
const MAX_ENTRIES: usize = 64;
/// The largest cache file read (64 entries take a few tens of kilobytes).
const MAX_LEN: u64 = 1 << 20;

/// What a measurement depends on: the engines' devices and the work per frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// remora's version (kernels change between versions).
    pub remora: String,
    /// Each engine measured and its device: `gpu-wgpu: NAME (DRIVER)`, `cpu-simd: …`.
    pub devices: Vec<String>,
    /// The CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// Threads of the CPU engine.
    pub threads: usize,
    /// Detector modules.
    pub modules: usize,
    /// Radial bins (0: no integration).
    pub bins: usize,
    /// The pipeline's stages and what the run downloads (`convert+veto+sparse+integrate`, …).
    pub stages: String,
}

/// One past choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// What it was measured for.
    pub key: CacheKey,
    /// The engine chosen.
    pub engine: String,
    /// Milliseconds per frame measured, by engine.
    pub ms_per_frame: BTreeMap<String, f64>,
    /// Why it was chosen.
    pub reason: String,
    /// When (ISO 8601, UTC).
    pub measured_at: String,
}

/// The whole file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CacheFile {
    /// Format version.
    pub version: u32,
    /// Past choices, oldest first.
    pub entries: Vec<Entry>,
}

impl CacheFile {
    /// Reads `path`: an empty cache when there is no file, `Err(why)` when the file cannot be
    /// read or is not a cache of this version.
    pub fn load(path: &Path) -> Result<CacheFile, String> {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CacheFile::default()),
            Err(e) => return Err(e.to_string()),
        };
        let mut text = String::new();
        use std::io::Read;
        file.take(MAX_LEN + 1)
            .read_to_string(&mut text)
            .map_err(|e| e.to_string())?;
        if text.len() as u64 > MAX_LEN {
            return Err(format!("larger than {MAX_LEN} bytes"));
        }
        let c: CacheFile = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
        if c.version != VERSION {
            return Err(format!("version {}, not {VERSION}", c.version));
        }
        Ok(c)
    }

    /// The entry for `key`, if any.
    pub fn get(&self, key: &CacheKey) -> Option<&Entry> {
        self.entries.iter().rev().find(|e| &e.key == key)
    }

    /// Replaces the entry of `e`'s key (or adds it), dropping the oldest past the limit.
    pub fn put(&mut self, e: Entry) {
        self.entries.retain(|o| o.key != e.key);
        self.entries.push(e);
        let over = self.entries.len().saturating_sub(MAX_ENTRIES);
        self.entries.drain(..over);
    }

    /// Writes the file (folder 0700, file 0600), through a temporary file renamed over it.
    pub fn store(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let c = CacheFile {
            version: VERSION,
            entries: self.entries.clone(),
        };
        let text = serde_json::to_string_pretty(&c).map_err(std::io::Error::other)?;
        let tmp = temp_beside(path);
        let written = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

/// A temporary name beside `path`, unique to this process and call.
fn temp_beside(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.{n}.tmp", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let p = std::env::temp_dir()
                .join(format!("remora-engine-cache-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn key(modules: usize) -> CacheKey {
        CacheKey {
            remora: "0.0.0".into(),
            devices: vec![
                "gpu-wgpu: Test GPU (driver 1)".into(),
                "cpu-simd: avx2".into(),
            ],
            cpu: "Test CPU".into(),
            threads: 2,
            modules,
            bins: 1000,
            stages: "convert+veto+sparse+integrate".into(),
        }
    }

    fn entry(modules: usize, engine: &str) -> Entry {
        Entry {
            key: key(modules),
            engine: engine.into(),
            ms_per_frame: [
                ("gpu-wgpu".to_string(), 3.5),
                ("cpu-simd".to_string(), 9.25),
            ]
            .into_iter()
            .collect(),
            reason: "because".into(),
            measured_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_stored_cache_reads_back_the_same_entries_owner_only() {
        let d = TempDir::new("roundtrip");
        let path = d.0.join("nested/engines.json");
        let mut c = CacheFile::default();
        c.put(entry(8, "gpu-wgpu"));
        c.put(entry(2, "cpu-simd"));
        c.store(&path).unwrap();
        let back = CacheFile::load(&path).unwrap();
        assert_eq!(back.entries, c.entries);
        assert_eq!(back.get(&key(8)).unwrap().engine, "gpu-wgpu");
        assert_eq!(back.get(&key(2)).unwrap().ms_per_frame["cpu-simd"], 9.25);
        assert!(back.get(&key(4)).is_none());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        let dir = std::fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(dir.permissions().mode() & 0o777, 0o700);
        // Nothing left beside it.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("engines.json")]);
    }

    #[test]
    fn putting_a_key_again_replaces_its_entry() {
        let mut c = CacheFile::default();
        c.put(entry(8, "gpu-wgpu"));
        c.put(entry(8, "cpu-simd"));
        assert_eq!(c.entries.len(), 1);
        assert_eq!(c.get(&key(8)).unwrap().engine, "cpu-simd");
        for m in 0..MAX_ENTRIES + 5 {
            c.put(entry(100 + m, "cpu-simd"));
        }
        assert_eq!(c.entries.len(), MAX_ENTRIES);
        assert!(c.get(&key(8)).is_none(), "the oldest went first");
    }

    #[test]
    fn a_missing_file_is_an_empty_cache_and_a_corrupt_one_an_error() {
        let d = TempDir::new("corrupt");
        std::fs::create_dir_all(&d.0).unwrap();
        let path = d.0.join("engines.json");
        assert!(CacheFile::load(&path).unwrap().entries.is_empty());
        std::fs::write(&path, b"{\"version\": 1, \"entries\": [{\"key\": 3").unwrap();
        let e = CacheFile::load(&path).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        std::fs::write(&path, b"{\"version\": 99, \"entries\": []}").unwrap();
        let e = CacheFile::load(&path).unwrap_err();
        assert!(e.contains("version 99"), "{e}");
        // A folder where the file should be cannot be read.
        let e = CacheFile::load(&d.0).unwrap_err();
        assert!(!e.is_empty());
    }
}
