//! The JUNGFRAU UDP packet: slsDetectorPackage's 48-byte `sls_detector_header` (v2.0, the same
//! bytes since package 4.0; v7 only renamed fields) followed by 8192 bytes of pixels, as a
//! zero-copy view in the style of `remora-wire`.
//!
//! ```text
//!  0               8       12      16              24              32  34  36  38  40      44  46 47
//! +---------------+-------+-------+---------------+---------------+---+---+---+---+-------+---+-+-+
//! | frame number  | exp.  |packet | bunch id      | timestamp     |mod|row|col|ds2| ds3   |ds4|t|v|
//! +---------------+-------+-------+---------------+---------------+---+---+---+---+-------+---+-+-+
//!  then 8192 bytes: 4 rows × 1024 pixels of u16, all little-endian
//! ```
//! For JUNGFRAU (slsDetectorPackage `docs/src/udpheader.rst`, `udpdetspec.rst`): `detSpec1` is
//! the bunch id, `detSpec3` the DAQ info word (gain settings, storage cell, …), `detSpec2` and
//! `detSpec4` are 0; exposure length and timestamp count 0.1 µs; the detector type is 3
//! ([`DETECTOR_JUNGFRAU`]) and the header version 2 ([`HEADER_VERSION`]).
//!
//! Panics: getters and setters index the buffer. [`Packet::new_checked`] makes sure they cannot
//! go out of bounds; with [`Packet::new_unchecked`] that is the caller's job.
use std::ops::Range;

use crate::model::MODULE_COLS;

/// Header bytes.
pub const HEADER_LEN: usize = 48;
/// Payload bytes: [`ROWS_PER_PACKET`] rows of 1024 pixels of 2 bytes.
pub const PAYLOAD_LEN: usize = 8192;
/// A whole packet.
pub const PACKET_LEN: usize = HEADER_LEN + PAYLOAD_LEN;
/// Packets per module frame (one 10 GbE interface per module).
pub const PACKETS_PER_FRAME: u32 = 128;
/// Module rows one packet carries.
pub const ROWS_PER_PACKET: usize = 4;
/// JUNGFRAU in slsDetectorPackage's `detectorType` enum (GENERIC 0, EIGER 1, GOTTHARD 2,
/// JUNGFRAU 3, …).
pub const DETECTOR_JUNGFRAU: u8 = 3;
/// The header version JUNGFRAU firmware writes (`0x2`).
pub const HEADER_VERSION: u8 = 2;

/// Byte ranges of the header fields.
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
    pub const PAYLOAD: Range<usize> = super::HEADER_LEN..super::PACKET_LEN;
}

/// The rows of the raw module frame (512 × 1024, row-major, [`crate::model`]) that packet `k`
/// carries: `4k..4k+4`. The one place that says how packets map to rows.
///
/// This is how slsDetectorPackage's receiver (`memcpy(buf + pnum * dsize, …)`, missing packets
/// `memset` to 0xFF) and PSI's sf_daq_buffer (`offset = 8192 * packetnum`) lay a module frame
/// out, so raw frames saved by them match. Which raw row is the sensor's top or bottom is a
/// question for the geometry, not for this mapping.
pub fn rows_of_packet(k: u32) -> Range<usize> {
    let first = k as usize * ROWS_PER_PACKET;
    first..first + ROWS_PER_PACKET
}

/// The words of a module frame that packet `k` carries (see [`rows_of_packet`]).
pub fn words_of_packet(k: u32) -> Range<usize> {
    let rows = rows_of_packet(k);
    rows.start * MODULE_COLS..rows.end * MODULE_COLS
}

/// Why a buffer is not a JUNGFRAU packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Not [`PACKET_LEN`] bytes.
    #[error("datagram of {0} bytes, a JUNGFRAU packet has {PACKET_LEN}")]
    Length(usize),
}

/// A read/write view of a JUNGFRAU packet in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

/// A little-endian field's getter.
macro_rules! get {
    ($(#[$doc:meta])* $name:ident, $t:ty, $f:expr) => {
        $(#[$doc])*
        pub fn $name(&self) -> $t {
            let b = &self.buffer.as_ref()[$f];
            <$t>::from_le_bytes(b.try_into().expect("field width"))
        }
    };
}

/// A little-endian field's setter.
macro_rules! set {
    ($(#[$doc:meta])* $name:ident, $t:ty, $f:expr) => {
        $(#[$doc])*
        pub fn $name(&mut self, v: $t) {
            self.buffer.as_mut()[$f].copy_from_slice(&v.to_le_bytes());
        }
    };
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without a length check.
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of exactly one packet ([`PACKET_LEN`] bytes).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, PacketError> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Whether the buffer is exactly one packet long, so that no accessor can panic.
    pub fn check_len(&self) -> Result<(), PacketError> {
        match self.buffer.as_ref().len() {
            PACKET_LEN => Ok(()),
            n => Err(PacketError::Length(n)),
        }
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    get!(
        /// Frame number (the detector counts from 1 at the start of an acquisition).
        frame_number, u64, field::FRAME
    );
    get!(
        /// Measured exposure time in 0.1 µs (EIGER: the sub-frame number).
        exposure_length, u32, field::EXPOSURE
    );
    get!(
        /// Packet number within the module frame, 0..[`PACKETS_PER_FRAME`].
        packet_number, u32, field::PACKET
    );
    get!(
        /// Bunch id from the beamline (`detSpec1`).
        bunch_id, u64, field::BUNCH
    );
    get!(
        /// Start of the exposure in 0.1 µs since the start of the measurement.
        timestamp, u64, field::TIMESTAMP
    );
    get!(
        /// Module id (from the detector's `det_id` file).
        module_id, u16, field::MODULE
    );
    get!(
        /// Row position of the module in the detector.
        row, u16, field::ROW
    );
    get!(
        /// Column position of the module in the detector.
        column, u16, field::COLUMN
    );
    get!(
        /// `detSpec2` (0 for JUNGFRAU).
        det_spec2, u16, field::SPEC2
    );
    get!(
        /// `detSpec3`: for JUNGFRAU the DAQ info word (gain settings, storage cell, event code).
        det_spec3, u32, field::SPEC3
    );
    get!(
        /// `detSpec4` (0 for JUNGFRAU).
        det_spec4, u16, field::SPEC4
    );

    /// Detector type (slsDetectorPackage's enum; [`DETECTOR_JUNGFRAU`]).
    pub fn det_type(&self) -> u8 {
        self.buffer.as_ref()[field::DET_TYPE]
    }

    /// Header version ([`HEADER_VERSION`]).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The [`PAYLOAD_LEN`] bytes of pixels.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    set!(
        /// Sets the frame number.
        set_frame_number, u64, field::FRAME
    );
    set!(
        /// Sets the exposure length.
        set_exposure_length, u32, field::EXPOSURE
    );
    set!(
        /// Sets the packet number.
        set_packet_number, u32, field::PACKET
    );
    set!(
        /// Sets the bunch id.
        set_bunch_id, u64, field::BUNCH
    );
    set!(
        /// Sets the timestamp.
        set_timestamp, u64, field::TIMESTAMP
    );
    set!(
        /// Sets the module id.
        set_module_id, u16, field::MODULE
    );
    set!(
        /// Sets the module's row position.
        set_row, u16, field::ROW
    );
    set!(
        /// Sets the module's column position.
        set_column, u16, field::COLUMN
    );
    set!(
        /// Sets `detSpec2`.
        set_det_spec2, u16, field::SPEC2
    );
    set!(
        /// Sets `detSpec3`.
        set_det_spec3, u32, field::SPEC3
    );
    set!(
        /// Sets `detSpec4`.
        set_det_spec4, u16, field::SPEC4
    );

    /// Sets the detector type.
    pub fn set_det_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::DET_TYPE] = v;
    }

    /// Sets the header version.
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }

    /// The payload, to fill.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The decoded header of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Frame number.
    pub frame_number: u64,
    /// Measured exposure time in 0.1 µs.
    pub exposure_length: u32,
    /// Packet number within the module frame.
    pub packet_number: u32,
    /// Bunch id (`detSpec1`).
    pub bunch_id: u64,
    /// Start of the exposure in 0.1 µs.
    pub timestamp: u64,
    /// Module id.
    pub module_id: u16,
    /// Row position of the module.
    pub row: u16,
    /// Column position of the module.
    pub column: u16,
    /// `detSpec2`.
    pub det_spec2: u16,
    /// `detSpec3` (JUNGFRAU: DAQ info).
    pub det_spec3: u32,
    /// `detSpec4`.
    pub det_spec4: u16,
    /// Detector type.
    pub det_type: u8,
    /// Header version.
    pub version: u8,
}

impl Repr {
    /// A JUNGFRAU header (type 3, version 2) for packet `packet_number` of `module_id`'s frame
    /// `frame_number`, every other field 0.
    pub fn jungfrau(frame_number: u64, packet_number: u32, module_id: u16) -> Repr {
        Repr {
            frame_number,
            packet_number,
            module_id,
            det_type: DETECTOR_JUNGFRAU,
            version: HEADER_VERSION,
            ..Repr::default()
        }
    }

    /// Reads the header; refuses a buffer that is not one packet. Every field value is
    /// accepted: whether a packet number or module id fits the stream is the reassembler's call.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, PacketError> {
        packet.check_len()?;
        Ok(Repr {
            frame_number: packet.frame_number(),
            exposure_length: packet.exposure_length(),
            packet_number: packet.packet_number(),
            bunch_id: packet.bunch_id(),
            timestamp: packet.timestamp(),
            module_id: packet.module_id(),
            row: packet.row(),
            column: packet.column(),
            det_spec2: packet.det_spec2(),
            det_spec3: packet.det_spec3(),
            det_spec4: packet.det_spec4(),
            det_type: packet.det_type(),
            version: packet.version(),
        })
    }

    /// The header length, [`HEADER_LEN`].
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes every header byte; the payload is left alone. Panics if the buffer is shorter
    /// than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_frame_number(self.frame_number);
        packet.set_exposure_length(self.exposure_length);
        packet.set_packet_number(self.packet_number);
        packet.set_bunch_id(self.bunch_id);
        packet.set_timestamp(self.timestamp);
        packet.set_module_id(self.module_id);
        packet.set_row(self.row);
        packet.set_column(self.column);
        packet.set_det_spec2(self.det_spec2);
        packet.set_det_spec3(self.det_spec3);
        packet.set_det_spec4(self.det_spec4);
        packet.set_det_type(self.det_type);
        packet.set_version(self.version);
    }
}

#[cfg(test)]
mod tests;
