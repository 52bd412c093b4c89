//! Lazy memory regions whose pages are filled on demand from a remote page server through
//! userfaultfd, with prefetch and background push.
#![warn(missing_docs)]
