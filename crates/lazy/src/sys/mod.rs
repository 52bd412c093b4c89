//! Raw userfaultfd, mmap and signal plumbing. Every `unsafe` block of the crate's kernel interface
//! lives here, each with its own SAFETY note; the rest of the crate calls these safe wrappers
//! (and rustix, for the calls rustix has). `libc` appears nowhere else in the crate.
//!
//! - `uffd.rs`: userfaultfd (open, register, copy, zeropage, poison, wake, read its messages);
//! - `mem.rs`: mappings owned by a value, `process_vm_readv`;
//! - `signal.rs`: SIGBUS handler entry points and `sigaction`;
//! - `net.rs`: a socket receive that busy-polls before it blocks.
mod mem;
mod net;
mod signal;
mod uffd;

pub use mem::{process_read, Mapping};
pub use net::recv_exact_spin;
pub use signal::{install_sigbus, sigbus_installed, swap_sigbus, SigbusHandler};
pub use uffd::{
    copy, open_uffd, poison, poll_in, read_msgs, register, supported_features, unregister, wake,
    zeropage, Partial, UffdMsg, EVENT_PAGEFAULT, FEATURE_POISON, FEATURE_SIGBUS,
};
