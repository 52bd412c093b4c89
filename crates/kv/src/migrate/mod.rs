//! Post-copy live migration of a running cache to another server, on lazy memory (OPERA's
//! reason for remote page faults).
//!
//! The operator arms the source (`migrate to HOST:PORT`, or `remora kv migrate --to`), naming
//! where its clients should go; the target starts with `--migrate-from SOURCE` and asks for
//! the arena on the source's own port (`migrate begin`), whose connection then becomes the
//! migration's control channel:
//!
//! 1. **Freeze** (source): new requests wait at the [`Migration`] gate, those under way
//!    finish, and the arena is marked clean and handed over: nothing changes it from here.
//! 2. **Hand-over**: the source serves the arena's pages with a `remora-lazy` page server and
//!    sends the port and the state a warm restart keeps (settings, CAS, flush marks, clock).
//!    The target maps the arena as a lazy region, opens it restored (only the header pages
//!    are fetched), starts serving, and says `migrate serving`.
//! 3. **Switch**: the source answers every request, the waiting ones too, with
//!    `SERVER_ERROR migrated to HOST:PORT` and closes the connection (binary clients are
//!    closed): a write it held was never acknowledged. The target faults in what its
//!    clients touch and the background push copies the rest.
//! 4. **Done**: when every page is in, the target says `migrate done` and the source stops.
//!
//! Failures end in one consistent side, with a `[migrate]` log line and a counter
//! (`stats migration`):
//! - the target leaves before it serves (killed, a bind that fails, a switch-over past 10 s):
//!   the source takes its arena back and serves on, every item kept (`migrate_aborts`);
//! - the target leaves after it took over: its acknowledged writes are gone with it, so the
//!   source stops its page server and serves on with every item flushed rather than serve
//!   values older than writes it never saw (`migrate_failures`);
//! - the source leaves before the copy is complete: the target cannot serve what it has not
//!   got, so it answers `SERVER_ERROR`, says how far the copy went, and exits with status 75
//!   (`EX_TEMPFAIL`) before any fault on a missing page could return wrong bytes.
//!
//! Both sides watch each other on the control channel (progress lines every 200 ms, each
//! answered): silence for [`LIVENESS`] counts as leaving.

pub mod client;
pub mod gate;
mod page_source;
pub mod secret;
mod source;
mod target;

use std::time::Duration;

pub use gate::{Entry, Migration, Role, State, LIVENESS};
pub(crate) use source::begin as source_begin;
pub use target::MigrateFrom;
pub(crate) use target::{pull, take_over};

/// How often the target reports progress.
pub const REPORT_EVERY: Duration = Duration::from_millis(200);
/// Exit status of a target that lost its source before the copy was complete.
pub const EXIT_SOURCE_LOST: i32 = 75;
