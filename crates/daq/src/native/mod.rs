//! The JUNGFRAU detector's own UDP stream, as slsDetectorPackage defines it: per module frame 128
//! packets of a 48-byte header and 4 rows × 1024 pixels.
//!
//! - [`packet`]: the packet as a zero-copy view ([`Packet`]) and its header ([`Repr`]);
//!   [`rows_of_packet`] is the one place that maps packets to module rows.
//! - [`reassembler`]: sans-IO reassembly ([`Reassembler`]) of detector frames into memory the
//!   caller lends ([`FrameStore`]); the rows of lost packets become 0xFFFF (error words, never
//!   stale data) and each frame reports what it missed ([`Done`]).
//! - [`send`]: one module's packet stream ([`Sender`]); the emulator's native mode.
//! - [`recv`]: one UDP socket per module, large kernel buffers, `recvmmsg` batches
//!   ([`NativeSocket`]); `sys` holds its one `unsafe` system call.
//! - [`ingest`]: the receiver's native mode, all of the above feeding the processing pipeline.
//!
//! What it does not: no other detectors' variants (EIGER, MÖNCH, GOTTHARD), no module split
//! over two 10 GbE interfaces (64 packets per port, top and bottom halves: each module here is
//! one stream), no partial readout (`readnrows`), no check of the header's detector type or
//! version on receive (they are written as JUNGFRAU 3, version 2, and read back as they come).
pub mod ingest;
pub mod packet;
pub mod reassembler;
pub mod recv;
pub mod send;
mod sys;

pub use packet::{
    rows_of_packet, words_of_packet, Packet, PacketError, Repr, DETECTOR_JUNGFRAU, HEADER_LEN,
    HEADER_VERSION, PACKETS_PER_FRAME, PACKET_LEN, PAYLOAD_LEN, ROWS_PER_PACKET,
};
pub use reassembler::{Done, Dropped, FrameStore, Reassembler, ReassemblyStats, SliceStore};
pub use recv::{NativeSocket, RecvStats, RECV_BUFFER_WANTED};
pub use send::Sender;

#[cfg(test)]
mod tests;
