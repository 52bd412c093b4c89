//! The JUNGFRAU detector's own UDP stream: the packet format, reassembly into frames with the
//! pixels of lost packets masked, the emulator's senders and the receiver's ingest.
//!
//! What it does not: no jumbo-frame variants of other detectors (EIGER, MÖNCH), no
//! 10-GbE interface split of a module over two ports (each module here is one stream).
pub mod ingest;
pub mod packet;
pub mod reasm;
pub mod send;
