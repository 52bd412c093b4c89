//! The one error type of the crate.

use crate::opcode::{Op, Service};

/// Why a buffer or value was rejected.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the headers it must hold.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the headers require.
        need: usize,
        /// Bytes in the buffer.
        have: usize,
    },
    /// The opcode byte is not an RC or UC opcode this crate knows.
    #[error("unknown opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// The operation is not defined for the service (READ and ACK exist only on RC).
    #[error("{op:?} is not defined for {service:?}")]
    OpNotInService {
        /// The service asked for.
        service: Service,
        /// The operation asked for.
        op: Op,
    },
    /// The BTH transport header version is not 0.
    #[error("unsupported transport header version {0}")]
    BadVersion(u8),
    /// The pad count is larger than the bytes after the headers.
    #[error("pad count {pad} exceeds the {available} bytes after the headers")]
    BadPad {
        /// The BTH pad count.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        available: usize,
    },
    /// The datagram payload length is not a multiple of 4.
    #[error("length {0} is not a multiple of 4")]
    Unaligned(usize),
    /// A READ request or ACK carries payload bytes.
    #[error("opcode 0x{opcode:02x} carries {len} payload bytes but allows none")]
    UnexpectedPayload {
        /// The opcode byte.
        opcode: u8,
        /// The payload length found.
        len: usize,
    },
    /// A `Repr` lacks an extension header its opcode requires.
    #[error("opcode 0x{opcode:02x} requires the {header} header")]
    MissingHeader {
        /// The opcode byte.
        opcode: u8,
        /// Name of the missing header.
        header: &'static str,
    },
    /// A `Repr` carries an extension header its opcode does not.
    #[error("opcode 0x{opcode:02x} does not carry the {header} header")]
    UnexpectedHeader {
        /// The opcode byte.
        opcode: u8,
        /// Name of the extra header.
        header: &'static str,
    },
    /// The AETH syndrome is reserved or unknown.
    #[error("unknown AETH syndrome 0x{0:02x}")]
    UnknownSyndrome(u8),
    /// The invariant CRC does not match.
    #[error("ICRC mismatch: expected 0x{expected:08x}, found 0x{found:08x}")]
    BadIcrc {
        /// The CRC computed over the packet.
        expected: u32,
        /// The CRC stored in the packet.
        found: u32,
    },
    /// A control frame ([`crate::ctrl`]) does not start with its magic.
    #[error("not a {frame}: magic {found:02x?}, expected {magic:?}")]
    BadMagic {
        /// What the frame should have been.
        frame: &'static str,
        /// The magic it should start with.
        magic: &'static str,
        /// The first four bytes found.
        found: [u8; 4],
    },
    /// A control frame's version is not the one this crate speaks.
    #[error("{frame} version {found}, this side speaks {supported}")]
    UnsupportedVersion {
        /// Which frame.
        frame: &'static str,
        /// The version found.
        found: u16,
        /// The version this crate reads and writes.
        supported: u16,
    },
    /// A code field holds a value the format does not define.
    #[error("unknown {field} code {code}")]
    UnknownCode {
        /// Which field.
        field: &'static str,
        /// The value found.
        code: u8,
    },
    /// A length or count field is larger than the format allows.
    #[error("{field} of {value} exceeds the limit of {max}")]
    TooLarge {
        /// Which field.
        field: &'static str,
        /// The value found.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// Fields that must agree do not.
    #[error("inconsistent {0}")]
    Inconsistent(&'static str),
}
