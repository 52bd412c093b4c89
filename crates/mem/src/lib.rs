//! Registered memory regions for remora: anonymous, memfd, huge-page and caller-owned
//! buffers with local and remote keys, access rights, pinned or on-demand residency and the
//! bounds-and-rights check that every remote access goes through.
#![warn(missing_docs)]
