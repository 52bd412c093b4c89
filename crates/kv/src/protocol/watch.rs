//! The `LOG_*` stream bits of memcached's logger.h, by `watch`'s argument names: the words
//! the text parser reads and the streams the logger writes (a leaf both import).

/// `rawcmds`
pub const RAWCMDS: u16 = 1 << 0;
/// `evictions`
pub const EVICTIONS: u16 = 1 << 1;
/// `fetchers`
pub const FETCHERS: u16 = 1 << 2;
/// `mutations`
pub const MUTATIONS: u16 = 1 << 3;
/// `sysevents`
pub const SYSEVENTS: u16 = 1 << 4;
/// `connevents`
pub const CONNEVENTS: u16 = 1 << 5;
/// `proxyreqs`
pub const PROXYREQS: u16 = 1 << 6;
/// `proxyevents`
pub const PROXYEVENTS: u16 = 1 << 7;
/// `proxyuser`
pub const PROXYUSER: u16 = 1 << 8;
