//! The page-server protocol, shared by every stream transport. Its bytes are remora-wire's
//! ([`remora_wire::ctrl::page`]: the 16-byte request and reply headers;
//! [`remora_wire::ctrl::page_hello`]: the greeting); this module names them as the server and
//! the client use them.
//!
//! On connect the server sends a [`Hello`] (the source's length, its segments and a map of pages
//! known to be zero). The client then sends 16-byte [`Request`]s; each `Read` is answered by one
//! 16-byte [`Reply`] header, followed by `len` data bytes when the status is `Data`. A `PushStart`
//! turns the connection into the bulk channel: the server streams `Data`/`Zero` replies in order
//! from the given offset, wrapping around once, and ends with `End`; the client may send
//! `PushRestart` at any time to move the stream (it then continues from there).
//!
//! Parsers never panic: lengths and counts are checked against [`MAX_CHUNK`], [`MAX_SEGMENTS`],
//! [`MAX_ZERO_WORDS`] and the buffer before use.

pub use remora_wire::ctrl::page::{
    PageHeaderPacket, ReplyRepr as Reply, ReplyStatus as Status, RequestOp as Op,
    RequestRepr as Request, HEADER_LEN, MAX_CHUNK,
};
pub use remora_wire::ctrl::page_hello::{
    message_len as hello_len, PageHelloPacket, PageHelloRepr as Hello, Segment, HELLO_FIXED_LEN,
    MAX_SEGMENTS, MAX_ZERO_WORDS, ZERO_MAP_PAGE,
};
