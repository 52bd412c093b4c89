//! Queue pairs (UC, RC), completion queues, connection setup and the udp, shm and tcp
//! transports of the remora fabric.
#![warn(missing_docs)]
