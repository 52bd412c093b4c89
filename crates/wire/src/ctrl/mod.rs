//! remora's own control frames, in the same view-and-repr style as the RoCEv2 headers but
//! little-endian: everything two remora peers exchange outside RoCEv2 packets.
//!
//! | module | frame | who speaks it |
//! | --- | --- | --- |
//! | [`setup`] | connection-setup hello (`RMRA`) and its private data | remora-fabric, at queue-pair setup over TCP |
//! | [`region`] | region description (address, length, rkey) | inside private data (fabric, lazy, REMU) |
//! | [`stream`] | 32-byte stream frame | remora-fabric's tcp and shm transports |
//! | [`page`] | 16-byte page request and reply headers | remora-lazy client and page server |
//! | [`page_hello`] | page server hello (`RMLZ`): length, segments, zero map | remora-lazy, on connect or in private data |
//! | [`remu`] | REMU hello and the receiver's ring announcement | remora-daq, in setup private data |
//! | [`share`] | shm page server's share announcement (`RSH2`) | remora-lazy, after the page hello |
//!
//! Each module has a view (`XxxPacket<T: AsRef<[u8]>>`, getters, setters on `AsMut`,
//! `new_checked`) and a repr (`parse`, `emit`, `buffer_len`, and `to_bytes` for convenience).
//! The variable-length messages (`setup`, `page_hello`) also have `message_len`, which checks a
//! fixed part read from a stream and says how much more to read. `new_checked` and `parse` check
//! lengths, magic, version and the counts a peer announces (against limits, before anything is
//! allocated); meanings the crate cannot know (a transport code, a module number, a ring layout)
//! stay plain numbers for the caller to check. The same panic rules as the rest of the crate hold.

pub mod page;
pub mod page_hello;
pub mod region;
pub mod remu;
pub mod setup;
pub mod share;
pub mod stream;

pub use page::{PageHeaderPacket, ReplyRepr, ReplyStatus, RequestOp, RequestRepr};
pub use page_hello::{PageHelloPacket, PageHelloRepr, Segment};
pub use region::{RegionPacket, RegionRepr};
pub use remu::{AnnouncePacket, AnnounceRepr, RemuHelloPacket, RemuHelloRepr};
pub use setup::{SetupPacket, SetupRepr};
pub use share::{ShareKind, SharePacket, ShareRepr};
pub use stream::{FramePacket, FrameRepr};
