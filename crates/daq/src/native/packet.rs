//! The JUNGFRAU UDP packet (slsDetectorPackage's `sls_detector_header` followed by 8192 bytes),
//! as a zero-copy view in the style of `remora-wire`.
//!
//! Header, 48 bytes, little-endian: frame number u64, exposure length u32, packet number u32,
//! bunch id u64, timestamp u64, module id u16, row u16, column u16, detSpec2 u16, detSpec3 u32,
//! detSpec4 u16, detector type u8, header version u8. Then 4 rows × 1024 pixels of u16.
//!
//! Panics: getters and setters index the buffer; [`Packet::new_checked`] makes sure they cannot
//! go out of bounds, [`Packet::new_unchecked`] leaves that to the caller.

/// Header bytes.
pub const HEADER_LEN: usize = 48;
/// Payload bytes: 4 rows of 1024 pixels.
pub const PAYLOAD_LEN: usize = 8192;
/// A whole packet.
pub const PACKET_LEN: usize = HEADER_LEN + PAYLOAD_LEN;
/// Packets per module frame.
pub const PACKETS_PER_FRAME: u32 = 128;
/// Module rows one packet carries.
pub const ROWS_PER_PACKET: usize = 4;
/// `detType` of JUNGFRAU in slsDetectorPackage's `detectorType` enum.
pub const DETECTOR_JUNGFRAU: u8 = 3;
/// The header version this code writes (slsDetectorPackage v2 header).
pub const HEADER_VERSION: u8 = 2;

mod field {
    use std::ops::Range;
    pub const FRAME: Range<usize> = 0..8;
    pub const EXPOSURE: Range<usize> = 8..12;
    pub const PACKET: Range<usize> = 12..16;
    pub const BUNCH: Range<usize> = 16..24;
    pub const TIMESTAMP: Range<usize> = 24..32;
    pub const MODULE: Range<usize> = 32..34;
    pub const ROW: Range<usize> = 34..36;
    pub const COLUMN: Range<usize> = 36..38;
    pub const SPEC2: Range<usize> = 38..40;
    pub const SPEC3: Range<usize> = 40..44;
    pub const SPEC4: Range<usize> = 44..46;
    pub const DET_TYPE: usize = 46;
    pub const VERSION: usize = 47;
}

/// The module rows packet `k` carries: the one place that says how packets map to rows.
pub fn rows_of_packet(k: u32) -> std::ops::Range<usize> {
    let first = k as usize * ROWS_PER_PACKET;
    first..first + ROWS_PER_PACKET
}

/// Why a datagram is not a JUNGFRAU packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Not 8240 bytes.
    #[error("datagram of {0} bytes, a JUNGFRAU packet has {PACKET_LEN}")]
    Length(usize),
}

/// A view of a packet in a buffer.
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buf: T,
}

macro_rules! le {
    ($get:ident, $set:ident, $t:ty, $f:expr) => {
        #[doc = concat!("The `", stringify!($get), "` field.")]
        pub fn $get(&self) -> $t {
            <$t>::from_le_bytes(self.buf.as_ref()[$f].try_into().expect("field width"))
        }
    };
}

macro_rules! le_set {
    ($set:ident, $t:ty, $f:expr) => {
        #[doc = concat!("Sets the `", stringify!($set), "` field.")]
        pub fn $set(&mut self, v: $t) {
            self.buf.as_mut()[$f].copy_from_slice(&v.to_le_bytes());
        }
    };
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks.
    pub fn new_unchecked(buf: T) -> Packet<T> {
        Packet { buf }
    }

    /// A view of exactly one packet.
    pub fn new_checked(buf: T) -> Result<Packet<T>, PacketError> {
        let p = Packet::new_unchecked(buf);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the length.
    pub fn check_len(&self) -> Result<(), PacketError> {
        match self.buf.as_ref().len() {
            PACKET_LEN => Ok(()),
            n => Err(PacketError::Length(n)),
        }
    }

    le!(frame_number, set_frame_number, u64, field::FRAME);
    le!(exposure_length, set_exposure_length, u32, field::EXPOSURE);
    le!(packet_number, set_packet_number, u32, field::PACKET);
    le!(bunch_id, set_bunch_id, u64, field::BUNCH);
    le!(timestamp, set_timestamp, u64, field::TIMESTAMP);
    le!(module_id, set_module_id, u16, field::MODULE);
    le!(row, set_row, u16, field::ROW);
    le!(column, set_column, u16, field::COLUMN);
    le!(det_spec2, set_det_spec2, u16, field::SPEC2);
    le!(det_spec3, set_det_spec3, u32, field::SPEC3);
    le!(det_spec4, set_det_spec4, u16, field::SPEC4);

    /// Detector type.
    pub fn det_type(&self) -> u8 {
        self.buf.as_ref()[field::DET_TYPE]
    }

    /// Header version.
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VERSION]
    }

    /// The 8192 payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..PACKET_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    le_set!(set_frame_number, u64, field::FRAME);
    le_set!(set_exposure_length, u32, field::EXPOSURE);
    le_set!(set_packet_number, u32, field::PACKET);
    le_set!(set_bunch_id, u64, field::BUNCH);
    le_set!(set_timestamp, u64, field::TIMESTAMP);
    le_set!(set_module_id, u16, field::MODULE);
    le_set!(set_row, u16, field::ROW);
    le_set!(set_column, u16, field::COLUMN);
    le_set!(set_det_spec2, u16, field::SPEC2);
    le_set!(set_det_spec3, u32, field::SPEC3);
    le_set!(set_det_spec4, u16, field::SPEC4);

    /// Sets the detector type.
    pub fn set_det_type(&mut self, v: u8) {
        self.buf.as_mut()[field::DET_TYPE] = v;
    }

    /// Sets the header version.
    pub fn set_version(&mut self, v: u8) {
        self.buf.as_mut()[field::VERSION] = v;
    }

    /// The payload, to fill.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[HEADER_LEN..PACKET_LEN]
    }
}

/// The header fields remora reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Frame number (real detectors count from 1).
    pub frame: u64,
    /// Packet number within the module frame, 0..128.
    pub packet: u32,
    /// Module id.
    pub module: u16,
    /// Timestamp (10 MHz ticks on the detector).
    pub timestamp: u64,
}

impl Repr {
    /// Reads the header of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, PacketError> {
        p.check_len()?;
        Ok(Repr {
            frame: p.frame_number(),
            packet: p.packet_number(),
            module: p.module_id(),
            timestamp: p.timestamp(),
        })
    }

    /// Writes the whole header (fields remora does not use are zero, type and version set).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.buf.as_mut()[..HEADER_LEN].fill(0);
        p.set_frame_number(self.frame);
        p.set_packet_number(self.packet);
        p.set_module_id(self.module);
        p.set_row(self.module);
        p.set_timestamp(self.timestamp);
        p.set_det_type(DETECTOR_JUNGFRAU);
        p.set_version(HEADER_VERSION);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn emit_writes_every_header_byte_in_place() {
        let mut buf = vec![0xa5u8; PACKET_LEN];
        let r = Repr {
            frame: 0x0102_0304_0506_0708,
            packet: 127,
            module: 5,
            timestamp: 42,
        };
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        r.emit(&mut p);
        let want: [u8; HEADER_LEN] = [
            8, 7, 6, 5, 4, 3, 2, 1, // frame number
            0, 0, 0, 0, // exposure length
            127, 0, 0, 0, // packet number
            0, 0, 0, 0, 0, 0, 0, 0, // bunch id
            42, 0, 0, 0, 0, 0, 0, 0, // timestamp
            5, 0, 5, 0, 0, 0, // module id, row, column
            0, 0, 0, 0, 0, 0, 0, 0, // detSpec2..4
            3, 2, // detector type, version
        ];
        assert_eq!(&buf[..HEADER_LEN], &want);
        assert!(
            buf[HEADER_LEN..].iter().all(|&b| b == 0xa5),
            "payload untouched"
        );
        assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])).unwrap(), r);
    }

    #[test]
    fn wrong_lengths_are_refused() {
        assert_eq!(
            Packet::new_checked(&[0u8; 100][..]).unwrap_err(),
            PacketError::Length(100)
        );
        assert!(Packet::new_checked(&vec![0u8; PACKET_LEN + 1][..]).is_err());
    }

    #[test]
    fn packets_cover_the_module_rows_once() {
        let mut seen = [0u8; 512];
        for k in 0..PACKETS_PER_FRAME {
            for r in rows_of_packet(k) {
                seen[r] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1));
    }

    proptest! {
        #[test]
        fn parse_emit_round_trip(frame: u64, packet in 0u32..128, module: u16, ts: u64) {
            let r = Repr { frame, packet, module, timestamp: ts };
            let mut buf = vec![0u8; PACKET_LEN];
            r.emit(&mut Packet::new_unchecked(&mut buf[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..9000)) {
            let _ = Packet::new_checked(&bytes[..]).and_then(|p| Repr::parse(&p));
        }
    }
}
