//! RoCEv2 transport headers (BTH, RETH, ImmDt, AETH), opcodes, PSN arithmetic and the
//! invariant CRC, as zero-copy views and owned representations. Pure functions, no I/O.
#![warn(missing_docs)]
