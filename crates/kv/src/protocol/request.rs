//! The requests the text and meta parsers produce, apart from the parsers, so that neither
//! parser module depends on the other's types (the text parser hands meta lines to
//! [`super::meta`], which builds these same requests).

use super::reply::Fail;

/// memcached's token limit per line (the rest of a `get` line is kept whole).
pub const MAX_TOKENS: usize = 24;

/// get-family variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKind {
    /// `get`
    Get,
    /// `gets` (with CAS)
    Gets,
    /// `gat` (touch and get)
    Gat,
    /// `gats`
    Gats,
}

/// Storage verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCmd {
    /// `set`
    Set,
    /// `add`
    Add,
    /// `replace`
    Replace,
    /// `append`
    Append,
    /// `prepend`
    Prepend,
    /// `cas`
    Cas,
}

/// One parsed text-protocol request.
#[derive(Debug, Clone, PartialEq)]
pub enum Command<'a> {
    /// get/gets/gat/gats: `keys` is the rest of the line, space separated.
    Get {
        /// Which verb.
        kind: GetKind,
        /// New exptime for gat/gats.
        exptime: i64,
        /// Space-separated keys.
        keys: &'a [u8],
    },
    /// set/add/replace/append/prepend/cas with its data block.
    Store {
        /// Which verb.
        cmd: StoreCmd,
        /// Key.
        key: &'a [u8],
        /// Client flags.
        flags: u32,
        /// Protocol exptime.
        exptime: i64,
        /// Value without CRLF.
        data: &'a [u8],
        /// CAS operand (cas only).
        cas: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// A storage command whose value exceeds the item limit: reply, then swallow `swallow`
    /// bytes of data that follow.
    TooLarge {
        /// Key (its old value is dropped for set/cas).
        key: &'a [u8],
        /// Which verb.
        cmd: StoreCmd,
        /// Bytes of data to discard.
        swallow: usize,
        /// Suppress the reply.
        noreply: bool,
        /// From meta `ms` (which `stats detail` does not count).
        meta: bool,
    },
    /// delete
    Delete {
        /// Key.
        key: &'a [u8],
        /// Suppress the reply.
        noreply: bool,
    },
    /// incr/decr
    Arith {
        /// incr (true) or decr.
        incr: bool,
        /// Key.
        key: &'a [u8],
        /// Amount.
        delta: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// touch
    Touch {
        /// Key.
        key: &'a [u8],
        /// New exptime.
        exptime: i64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// flush_all [delay]
    FlushAll {
        /// Delay (protocol exptime rules), 0 = now.
        delay: i64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// version
    Version,
    /// verbosity N
    Verbosity {
        /// The level asked for (`None` for `verbosity noreply`, which memcached leaves alone).
        level: Option<u64>,
        /// Suppress the reply.
        noreply: bool,
    },
    /// quit
    Quit,
    /// `shutdown` or `shutdown graceful` (refused unless `-A`).
    Shutdown(ShutdownMode),
    /// remora's `migrate …` (post-copy live migration; refused unless `-A`).
    Migrate(MigrateCmd<'a>),
    /// slabs automove 0|1|2 or slabs automove ratio R.
    SlabsAutomove {
        /// The new mode, or the new ratio.
        set: Automove,
        /// Suppress the reply.
        noreply: bool,
    },
    /// `slabs reassign SRC DST`: move a page between slab classes (`SRC` -1: any class with
    /// a spare page; `DST` 0: the global pool). `None` when either is not a 32-bit number.
    SlabsReassign(Option<(i32, i32)>),
    /// `watch STREAM…`: turn the connection into a log stream.
    Watch {
        /// The streams asked for (the [`watch`] bits); `None` names an unknown one, which
        /// memcached answers `ERROR` after checking that `watch` is allowed.
        streams: Option<u16>,
        /// Suppress an error reply.
        noreply: bool,
    },
    /// `lru_crawler …`.
    LruCrawler(Crawler<'a>),
    /// cache_memlimit N
    CacheMemlimit {
        /// Megabytes.
        mb: u64,
        /// Suppress the reply.
        noreply: bool,
    },
    /// stats [group]
    Stats {
        /// First argument, if any.
        arg: Option<&'a [u8]>,
        /// Second argument, if any.
        arg2: Option<&'a [u8]>,
        /// Third argument, if any (`stats cachedump <class> <limit>`).
        arg3: Option<&'a [u8]>,
    },
    /// A meta command.
    Meta(MetaCommand<'a>),
    /// A malformed request: reply with this error and go on.
    Fail(Fail),
    /// A malformed request whose line ends in `noreply`: memcached sets its noreply flag before
    /// it checks the arguments, so the error is not sent either.
    FailQuiet(Fail),
    /// An HTTP request line (an unknown command whose last token starts with `HTTP/`):
    /// memcached closes the connection without a reply.
    Hangup,
}

/// A `migrate` subcommand (`crate::migrate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrateCmd<'a> {
    /// `migrate to HOST:PORT [SECRET]`: arm this server to hand its cache to the target that
    /// asks with the secret (the operator's, or one made up and answered), sending its
    /// clients to `HOST:PORT`.
    To {
        /// Where clients go.
        to: &'a [u8],
        /// The operator's secret, if given.
        secret: Option<&'a [u8]>,
    },
    /// `migrate cancel`: disarm.
    Cancel,
    /// `migrate begin SECRET`: a target asks for the cache (the connection becomes the
    /// control channel); empty when the secret is missing.
    Begin(&'a [u8]),
    /// Anything else.
    Invalid,
}

/// What `shutdown` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: stop now (memcached raises SIGINT).
    Now,
    /// `shutdown graceful`: stop as on SIGUSR1 (memcached saves a `-e` memory file).
    Graceful,
    /// Any other argument: `CLIENT_ERROR invalid shutdown mode` (when shutdown is enabled).
    Invalid,
}

/// An `lru_crawler` subcommand (memcached's `process_lru_crawler_command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crawler<'a> {
    /// `crawl <classes>|all`.
    Crawl(&'a [u8]),
    /// `metadump <classes>|all|hash`.
    Metadump(&'a [u8]),
    /// `tocrawl N` (`None`: not a 32-bit number).
    Tocrawl(Option<u32>),
    /// `sleep N` in microseconds (`None`: not a 32-bit number).
    Sleep(Option<u32>),
    /// `enable`.
    Enable,
    /// `disable`.
    Disable,
    /// Anything else: `ERROR`.
    Unknown,
}

/// The argument of `slabs automove`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Automove {
    /// `slabs automove 0|1|2`.
    Mode(u8),
    /// `slabs automove ratio R`.
    Ratio(f64),
}

/// Parser result.
#[derive(Debug, Clone, PartialEq)]
pub enum Parse<'a> {
    /// Need more bytes.
    Incomplete,
    /// A request and how many bytes it used.
    Done(Command<'a>, usize),
    /// Drop the connection (over-long line).
    Close,
}

/// Space-separated tokens of one line, at most [`MAX_TOKENS`].
pub struct Tokens<'a> {
    /// The tokens.
    pub t: [&'a [u8]; MAX_TOKENS],
    /// How many were found.
    pub n: usize,
    /// Text after the last token taken (non-empty when there were more).
    pub rest: &'a [u8],
}

/// Which meta command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    /// `mg`
    Get,
    /// `ms`
    Set,
    /// `md`
    Delete,
    /// `ma`
    Arith,
}

/// Parsed flags of one meta command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// Raw flag tokens in client order (for echoing return flags).
    pub raw: [&'a [u8]; MAX_TOKENS],
    /// Number of raw tokens.
    pub n: usize,
    /// `q`: hide the "nothing happened" reply.
    pub quiet: bool,
    /// `b`: key is base64.
    pub base64: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `u`: do not bump LRU.
    pub no_bump: bool,
    /// `I`: invalidate (mark stale) instead of removing / allow stale CAS.
    pub invalidate: bool,
    /// `T`: new TTL.
    pub ttl: Option<i64>,
    /// `N`: vivify on miss with this TTL.
    pub vivify: Option<i64>,
    /// `R`: win the recache race if TTL is below this.
    pub recache: Option<i64>,
    /// `C`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `F`: client flags.
    pub client_flags: Option<u32>,
    /// `M`: mode letter.
    pub mode: Option<u8>,
    /// `D`: delta.
    pub delta: Option<u64>,
    /// `J`: initial value for auto-created counters.
    pub initial: Option<u64>,
    /// An `O` token over 32 bytes: mg and ma still run, then answer
    /// `CLIENT_ERROR opaque token too long` (memcached checks it while writing the reply).
    pub opaque_too_long: bool,
}

/// One meta request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaCommand<'a> {
    /// `mn`
    Noop,
    /// `me <key>`
    Debug {
        /// Key.
        key: &'a [u8],
    },
    /// mg / ms / md / ma.
    Op {
        /// Which.
        kind: MetaKind,
        /// Key as sent (base64 if `b`).
        key: &'a [u8],
        /// Data block (ms only).
        data: &'a [u8],
        /// Flags.
        flags: Box<MetaFlags<'a>>,
    },
}
