//! What a fabric page server tells each client at connect, as the fabric's private data: its
//! region table (address, length, rkey), then its [`Hello`] (length, segments, zero map), then,
//! over shm, which handed-over descriptor holds its bytes ([`Share`]). The server writes it with
//! [`encode`], the client reads it with [`decode`].
use super::fab;
use super::shmmap::{Kind, Share};
use crate::error::{Error, Result};
use crate::protocol::{hello_len, Hello, PageHelloPacket, Segment};
use remora_fabric::RegionInfo;

/// Largest private data the fabric carries at connect.
const MAX_PRIVATE: usize = remora_wire::ctrl::setup::MAX_PRIVATE;

/// The private data of a server whose registered region is `region` and whose source `hello`
/// describes; `handed` is the kind of descriptor its listener hands over (shm), if any.
pub(super) fn encode(region: RegionInfo, hello: &Hello, handed: Option<Kind>) -> Vec<u8> {
    let mut private = region.encode().to_vec();
    private.extend_from_slice(&hello.to_bytes());
    let mut segments_sent = true;
    if private.len() > MAX_PRIVATE {
        segments_sent = false;
        // Too many segments or too big a zero map for private data: send only the length.
        private.truncate(RegionInfo::LEN);
        private.extend_from_slice(
            &Hello {
                len: hello.len,
                segments: vec![Segment {
                    va: 0,
                    len: hello.len,
                }],
                zero_map: vec![],
            }
            .to_bytes(),
        );
    }
    // The client needs the process's addresses, which only a whole hello carries.
    if let Some(kind) = handed {
        if kind == Kind::Fd || segments_sent {
            let s = Share {
                kind,
                index: 0,
                len: hello.len,
            };
            private.extend_from_slice(&s.emit());
        }
    }
    private
}

/// Reads a server's private data: its region table, its hello, and the shm announcement after
/// the hello, if there is one.
pub(super) fn decode(private: &[u8]) -> Result<(RegionInfo, Hello, Option<Share>)> {
    let remote = RegionInfo::decode(private).map_err(|e| fab("region table", e))?;
    let hello = Hello::parse(&PageHelloPacket::new_unchecked(&private[RegionInfo::LEN..]))
        .map_err(|e| Error::Protocol(format!("page server hello: {e}")))?;
    if remote.len < hello.len {
        return Err(Error::Protocol(format!(
            "server region of {} bytes is shorter than its source of {}",
            remote.len, hello.len
        )));
    }
    let tail = hello_len(&private[RegionInfo::LEN..])
        .ok()
        .and_then(|n| private.get(RegionInfo::LEN + n..))
        .unwrap_or_default();
    Ok((remote, hello, Share::parse(tail)))
}
