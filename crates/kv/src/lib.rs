//! A memcached-compatible cache: text, meta and binary protocols over TCP, UDP and unix
//! sockets, split into protocol, storage and server.
#![warn(missing_docs)]
