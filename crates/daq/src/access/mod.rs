//! What a run may touch on this host: which files it may open ([`Files`]) and how much memory
//! its configuration may imply ([`budget`]).
//!
//! A configuration carries its [`Access`] (not part of the file format: it is set by whoever
//! loads the configuration). `remora daq run` and the library's own callers leave the default,
//! [`Access::default`]: any path this process may open, no memory budget. The control service
//! (`remora daq serve`) sets it on every configuration that arrives over HTTP: files only
//! beneath the directories the operator named, opened with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, regular files only, and a memory budget checked before anything is
//! allocated. Every file of a run is opened through [`Files`], so the rule lives in one place.
//!
//! What it does not: it is no sandbox of the process (a bug elsewhere in the process is not
//! contained), and it does not stop a user who may write into a named directory from placing
//! there a hard link to a file they cannot read (Linux refuses that with
//! `fs.protected_hardlinks = 1`, the default of most distributions; outputs refuse files with
//! more than one link).
pub mod budget;
pub(crate) mod bytes;
mod files;

pub use budget::{Estimate, MemoryBudget};
pub use files::{Files, Input, Output, Root};

/// What a run may touch: files and memory.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Where files may be read and written.
    pub files: Files,
    /// How many bytes the configuration may imply at most (`None`: no check).
    pub memory: Option<MemoryBudget>,
}
