//! Opening the files a configuration names, under one rule: any path ([`Files::Any`]), or only
//! beneath directories held open since the start ([`Files::Beneath`]).
//!
//! Beneath a directory, a configured path is relative to it (an absolute path is accepted when
//! it lies inside, written out in full); `..` that would leave it, an absolute path elsewhere and
//! any symbolic link on the way are refused. The kernel resolves the path with `openat2`
//! (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`) from the directory's own
//! descriptor, so renaming directories or swapping in links between the check and the open
//! cannot move the open elsewhere. Only regular files are read or written (`fstat` after the
//! open: no devices, FIFOs or sockets); an output that exists is truncated only when it is a
//! regular file with a single link.
//!
//! Messages about a file opened beneath a directory never describe its contents or size
//! ([`Input::detail`]): the service's status is world-readable, and a configuration must not
//! turn it into a way to read files.
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::{DaqError, Result};

/// A directory files may be opened beneath, held open from the start: renaming or replacing its
/// path later does not move what it refers to.
pub struct Root {
    path: PathBuf,
    fd: OwnedFd,
    what: &'static str,
}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.what, self.path.display())
    }
}

impl Root {
    /// Opens `path` (a directory) as the `what` ("data directory", "input directory").
    pub fn open(path: &Path, what: &'static str) -> std::io::Result<Root> {
        let path = std::fs::canonicalize(path)?;
        let fd = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root { path, fd, what })
    }

    /// The directory's path when it was opened (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What it is for ("data directory").
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// `path` as a path below this directory, checked without touching the file system:
    /// relative, or absolute inside this directory; no `..` above it.
    fn relative(&self, key: &str, path: &Path) -> Result<PathBuf> {
        let outside = || {
            DaqError::Config(format!(
                "{key}: {:?} is outside the {} {}",
                path.display().to_string(),
                self.what,
                self.path.display()
            ))
        };
        let rest = if path.is_absolute() {
            path.strip_prefix(&self.path).map_err(|_| outside())?
        } else {
            path
        };
        let mut parts = Vec::new();
        for c in rest.components() {
            match c {
                Component::Normal(n) => parts.push(n),
                Component::CurDir => {}
                Component::ParentDir => {
                    parts.pop().ok_or_else(outside)?;
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        if parts.is_empty() {
            return Err(DaqError::Config(format!(
                "{key}: {:?} names the {} itself, not a file in it",
                path.display().to_string(),
                self.what
            )));
        }
        Ok(parts.iter().collect())
    }

    /// Opens `rel` (from [`Root::relative`]) beneath this directory.
    fn openat(&self, rel: &Path, flags: OFlags, mode: Mode) -> std::result::Result<OwnedFd, Errno> {
        let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(&self.fd, rel, flags | OFlags::CLOEXEC, mode, how) {
                // A rename somewhere in the file system during the walk: the kernel asks to retry.
                Err(Errno::AGAIN) if tries < 16 => tries += 1,
                r => return r,
            }
        }
    }

    fn open_error(&self, key: &str, shown: &Path, e: Errno) -> DaqError {
        let shown = shown.display().to_string();
        let why = match e {
            Errno::NOENT => format!("no such file in the {} {}", self.what, self.path.display()),
            Errno::LOOP => format!(
                "goes through a symbolic link, refused beneath the {}",
                self.what
            ),
            Errno::XDEV => format!("is outside the {} {}", self.what, self.path.display()),
            Errno::NOSYS => {
                "this kernel has no openat2 (Linux 5.6 or later is needed to open files beneath a directory safely)".into()
            }
            Errno::ISDIR => "is a directory, not a file".into(),
            Errno::NOTDIR => "a part of the path is not a directory".into(),
            e => std::io::Error::from(e).to_string(),
        };
        DaqError::Config(format!("{key}: {shown:?}: {why}"))
    }
}

/// Where a run may open files.
#[derive(Clone, Default)]
pub enum Files {
    /// Any path this process may open (the operator's own command line, the library).
    #[default]
    Any,
    /// Only beneath these directories (what the control service gives every configuration that
    /// arrives over HTTP): outputs beneath `data`, inputs (calibration, geometry, PONI and
    /// sources) beneath `input`. `None`: no files of that kind at all.
    Beneath {
        /// Where outputs are written.
        data: Option<Arc<Root>>,
        /// Where inputs are read.
        input: Option<Arc<Root>>,
    },
}

impl fmt::Debug for Files {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Files::Any => f.write_str("any path"),
            Files::Beneath { data, input } => write!(f, "beneath {data:?} and {input:?}"),
        }
    }
}

/// Whether a file is read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Input,
    Output,
}

impl Files {
    /// Outputs beneath `data`, inputs beneath `input` (`None`: none of that kind). The
    /// directories are opened now and held.
    pub fn beneath(data: Option<&Path>, input: Option<&Path>) -> std::io::Result<Files> {
        let data = data
            .map(|p| Root::open(p, "data directory").map(Arc::new))
            .transpose()?;
        let input = input
            .map(|p| Root::open(p, "input directory").map(Arc::new))
            .transpose()?;
        Ok(Files::Beneath { data, input })
    }

    /// No files at all.
    pub fn none() -> Files {
        Files::Beneath {
            data: None,
            input: None,
        }
    }

    /// Whether paths are confined to directories.
    pub fn is_confined(&self) -> bool {
        matches!(self, Files::Beneath { .. })
    }

    /// Where outputs go, when confined.
    pub fn data_dir(&self) -> Option<&Path> {
        match self {
            Files::Beneath { data, .. } => data.as_deref().map(Root::path),
            Files::Any => None,
        }
    }

    /// Where inputs come from, when confined.
    pub fn input_dir(&self) -> Option<&Path> {
        match self {
            Files::Beneath { input, .. } => input.as_deref().map(Root::path),
            Files::Any => None,
        }
    }

    fn root(&self, key: &str, path: &Path, role: Role) -> Result<Option<(&Root, PathBuf)>> {
        let Files::Beneath { data, input } = self else {
            return Ok(None);
        };
        let (root, flag) = match role {
            Role::Output => (data, "--data-dir"),
            Role::Input => (input, "--input-dir"),
        };
        let root = root.as_deref().ok_or_else(|| {
            let what = match role {
                Role::Output => "writes no files",
                Role::Input => "reads no files",
            };
            DaqError::Config(format!(
                "{key}: {:?}: this service {what} (its operator named no directory for them: {flag})",
                path.display().to_string()
            ))
        })?;
        Ok(Some((root, root.relative(key, path)?)))
    }

    /// Checks an input's path without opening it (the message names `key`).
    pub fn check_input(&self, key: &str, path: &Path) -> Result<()> {
        self.root(key, path, Role::Input).map(drop)
    }

    /// Checks an output's path without creating it (the message names `key`).
    pub fn check_output(&self, key: &str, path: &Path) -> Result<()> {
        self.root(key, path, Role::Output).map(drop)
    }

    /// Opens an input for reading: a regular file, or an error naming `key`.
    pub fn open(&self, key: &'static str, path: &Path) -> Result<Input> {
        self.open_with(key, path, |kind| {
            DaqError::Config(format!(
                "{key}: {:?} is {kind}, not a regular file",
                path.display().to_string()
            ))
        })
    }

    /// [`Files::open`], with the error for a file that is not regular made by `not_regular`
    /// from what it is ("a directory", "not a regular file").
    pub fn open_with(
        &self,
        key: &'static str,
        path: &Path,
        not_regular: impl FnOnce(&'static str) -> DaqError,
    ) -> Result<Input> {
        self.open_in(key, path, Role::Input, not_regular)
    }

    /// Opens, for reading, an output this run wrote (beneath the data directory when
    /// confined): the master file reads the receivers' files back this way.
    pub fn open_output(&self, key: &'static str, path: &Path) -> Result<Input> {
        self.open_in(key, path, Role::Output, |kind| {
            DaqError::Config(format!(
                "{key}: {:?} is {kind}, not a regular file",
                path.display().to_string()
            ))
        })
    }

    fn open_in(
        &self,
        key: &'static str,
        path: &Path,
        role: Role,
        not_regular: impl FnOnce(&'static str) -> DaqError,
    ) -> Result<Input> {
        // Non-blocking, so that a FIFO does not hang the open; no controlling terminal.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let (file, detail) = match self.root(key, path, role)? {
            None => {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
                    .open(path)
                    .map_err(|source| DaqError::Io {
                        path: path.into(),
                        source,
                    })?;
                (f, true)
            }
            Some((root, rel)) => {
                let fd = root
                    .openat(&rel, flags, Mode::empty())
                    .map_err(|e| root.open_error(key, path, e))?;
                (File::from(fd), false)
            }
        };
        let meta = file.metadata().map_err(|source| DaqError::Io {
            path: path.into(),
            source,
        })?;
        if !meta.is_file() {
            return Err(not_regular(if meta.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            }));
        }
        Ok(Input {
            file,
            len: meta.len(),
            key,
            shown: path.into(),
            detail,
        })
    }

    /// Creates (or truncates) an output: beneath the data directory when confined, where an
    /// existing file is truncated only when it is a regular file with one link.
    pub fn create(&self, key: &'static str, path: &Path) -> Result<Output> {
        let Some((root, rel)) = self.root(key, path, Role::Output)? else {
            return Ok(Output {
                held: None,
                path: path.into(),
            });
        };
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = root
            .openat(&rel, flags, Mode::from_raw_mode(0o666))
            .map_err(|e| root.open_error(key, path, e))?;
        let file = File::from(fd);
        let shown = path.display().to_string();
        let meta = file.metadata().map_err(|source| DaqError::Io {
            path: path.into(),
            source,
        })?;
        if !meta.is_file() {
            return Err(DaqError::Config(format!(
                "{key}: {shown:?} exists and is not a regular file"
            )));
        }
        if meta.nlink() > 1 {
            return Err(DaqError::Config(format!(
                "{key}: {shown:?} exists with other hard links; refusing to overwrite it"
            )));
        }
        file.set_len(0).map_err(|source| DaqError::Io {
            path: path.into(),
            source,
        })?;
        let proc = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Ok(Output {
            held: Some(file),
            path: proc,
        })
    }
}

/// An input opened for reading: a regular file of known size.
#[derive(Debug)]
pub struct Input {
    file: File,
    len: u64,
    key: &'static str,
    shown: PathBuf,
    detail: bool,
}

impl Input {
    /// Its size when opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The configuration key that named it.
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// Its path as configured (for messages).
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// Whether messages may describe the file's contents and size: true for [`Files::Any`]
    /// (whoever named the file can read it anyway), false beneath a directory.
    pub fn detail(&self) -> bool {
        self.detail
    }

    /// A path that opens this very file (`/proc/self/fd/N`) while `self` lives, for libraries
    /// that open by name (HDF5).
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }

    /// A refusal of this file: `key: "path": why` (`why` must not quote the file).
    pub fn refused(&self, why: impl fmt::Display) -> DaqError {
        DaqError::Config(format!(
            "{}: {:?}: {why}",
            self.key,
            self.shown.display().to_string()
        ))
    }

    fn io(&self, source: std::io::Error) -> DaqError {
        DaqError::Io {
            path: self.shown.clone(),
            source,
        }
    }

    /// The whole file: exactly the size it had when opened (it may not have shrunk; what it
    /// grew by since is not read).
    pub fn read_all(self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(|_| self.refused("too large"))?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(len)
            .map_err(|_| self.refused("too large for this process' memory"))?;
        (&self.file)
            .take(self.len)
            .read_to_end(&mut buf)
            .map_err(|e| self.io(e))?;
        if buf.len() != len {
            return Err(self.refused("changed while it was read"));
        }
        Ok(buf)
    }

    /// The file as UTF-8 text of at most `limit` bytes (a `what`: "PONI file").
    pub fn read_text(self, limit: u64, what: &str) -> Result<String> {
        if self.len > limit {
            return Err(self.refused(format_args!(
                "not a {what} (larger than the {} KiB one may have)",
                limit >> 10
            )));
        }
        let detail = self.detail;
        let refused = self.refused(format_args!("not a {what} (not UTF-8 text)"));
        let bytes = self.read_all()?;
        String::from_utf8(bytes).map_err(|e| {
            if detail {
                DaqError::Parse {
                    what: "text file",
                    msg: e.to_string(),
                }
            } else {
                refused
            }
        })
    }
}

/// An output to be written.
#[derive(Debug)]
pub struct Output {
    /// The file created beneath the data directory, held open until the writer has opened it
    /// through [`Output::path`].
    held: Option<File>,
    path: PathBuf,
}

impl Output {
    /// The path to create the file at: the configured path ([`Files::Any`]), or
    /// `/proc/self/fd/N` of the file already created beneath the data directory (valid while
    /// `self` lives, and naming that file whatever happens to directories meanwhile).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file was created already (confined), rather than left to the writer.
    pub fn is_created(&self) -> bool {
        self.held.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Tmp {
        fn new(name: &str) -> Tmp {
            let p =
                std::env::temp_dir().join(format!("remora-files-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(p.join("data/sub")).unwrap();
            Tmp(p)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn msg(r: Result<impl fmt::Debug>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn paths_outside_the_directory_are_refused_with_the_key_named() {
        let t = Tmp::new("outside");
        let data = t.0.join("data");
        let f = Files::beneath(Some(&data), Some(&data)).unwrap();
        for p in [
            "/etc/x.h5",
            "../x.h5",
            "sub/../../x.h5",
            "./../../../../etc/passwd",
            "/",
        ] {
            let m = msg(f.check_output("output.file", Path::new(p)));
            assert!(
                m.contains("output.file") && m.contains("outside"),
                "{p}: {m}"
            );
            let m = msg(f.open("detector.poni", Path::new(p)));
            assert!(m.contains("detector.poni"), "{p}: {m}");
        }
        assert!(msg(f.check_output("output.file", Path::new("."))).contains("itself"));
        f.check_output("output.file", Path::new("sub/../run.h5"))
            .unwrap();
        let inside = data.canonicalize().unwrap().join("run.h5");
        f.check_output("output.file", &inside).unwrap();
    }

    #[test]
    fn symbolic_links_fifos_and_directories_are_refused() {
        let t = Tmp::new("links");
        let data = t.0.join("data");
        std::fs::write(t.0.join("secret"), b"top secret").unwrap();
        std::os::unix::fs::symlink(t.0.join("secret"), data.join("link")).unwrap();
        std::os::unix::fs::symlink("/", data.join("root")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            data.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let f = Files::beneath(Some(&data), Some(&data)).unwrap();
        let m = msg(f.open("detector.poni", Path::new("link")));
        assert!(
            m.contains("symbolic link") && !m.contains("secret\""),
            "{m}"
        );
        assert!(msg(f.open("source.path", Path::new("root/etc/passwd"))).contains("symbolic"));
        assert!(msg(f.create("output.file", Path::new("link"))).contains("symbolic"));
        assert_eq!(std::fs::read(t.0.join("secret")).unwrap(), b"top secret");
        assert!(msg(f.open("source.path", Path::new("fifo"))).contains("not a regular file"));
        assert!(msg(f.create("output.file", Path::new("fifo"))).contains("not a regular file"));
        assert!(msg(f.open("source.path", Path::new("sub"))).contains("a directory"));
        assert!(msg(f.open("source.path", Path::new("nothing"))).contains("no such file"));
        // Any path: still regular files only.
        assert!(
            msg(Files::Any.open("source.path", Path::new("/dev/zero"))).contains("not a regular")
        );
    }

    #[test]
    fn outputs_are_created_beneath_and_hard_links_are_not_overwritten() {
        let t = Tmp::new("create");
        let data = t.0.join("data");
        let f = Files::beneath(Some(&data), None).unwrap();
        let out = f.create("output.file", Path::new("sub/run.h5")).unwrap();
        std::fs::write(out.path(), b"written through the descriptor").unwrap();
        drop(out);
        assert_eq!(
            std::fs::read(data.join("sub/run.h5")).unwrap(),
            b"written through the descriptor"
        );
        std::fs::write(t.0.join("victim"), b"keep").unwrap();
        std::fs::hard_link(t.0.join("victim"), data.join("hard.h5")).unwrap();
        assert!(msg(f.create("output.file", Path::new("hard.h5"))).contains("hard links"));
        assert_eq!(std::fs::read(t.0.join("victim")).unwrap(), b"keep");
        // No input directory: inputs are refused, naming the flag.
        assert!(msg(f.open("detector.gain", Path::new("g.bin"))).contains("--input-dir"));
    }

    #[test]
    fn a_directory_renamed_after_the_start_still_confines() {
        let t = Tmp::new("rename");
        let data = t.0.join("data");
        let f = Files::beneath(Some(&data), None).unwrap();
        // The path now names another directory; the service still writes into the first one.
        std::fs::rename(&data, t.0.join("moved")).unwrap();
        std::fs::create_dir(&data).unwrap();
        drop(f.create("output.file", Path::new("run.h5")).unwrap());
        assert!(t.0.join("moved/run.h5").is_file());
        assert!(!data.join("run.h5").exists());
    }

    #[test]
    fn inputs_read_exactly_their_size_and_text_is_bounded() {
        let t = Tmp::new("read");
        let data = t.0.join("data");
        std::fs::write(data.join("a.txt"), b"hello").unwrap();
        let f = Files::beneath(None, Some(&data)).unwrap();
        let i = f.open("detector.poni", Path::new("a.txt")).unwrap();
        assert!(!i.detail());
        assert_eq!(i.read_all().unwrap(), b"hello");
        let i = f.open("detector.poni", Path::new("a.txt")).unwrap();
        let m = msg(i.read_text(2, "PONI file"));
        assert!(m.contains("detector.poni") && !m.contains('5'), "{m}");
    }
}
