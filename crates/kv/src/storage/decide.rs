//! memcached's store rules, written once for both stores: given the mode of a store command and
//! the item its key holds now (if any), whether it stores, with which flags and expiry, and how
//! the new value is made. The arena and the heap shards carry the decision out in their own
//! memory.

use super::{StoreMode, StoreOutcome};

/// What the rules need of the item the key holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Found {
    pub cas: u64,
    pub flags: u32,
    pub exptime: u32,
    /// A recache winner was told (meta `W`) for the current value.
    pub win_sent: bool,
}

/// How the new value is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Value {
    /// The data given.
    Given,
    /// The old value, then the data.
    Append,
    /// The data, then the old value.
    Prepend,
}

/// What a store does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Nothing is written: answer `outcome`. `bump`: refresh the LRU position of the item an
    /// `add` collided with, as memcached does.
    Refuse { outcome: StoreOutcome, bump: bool },
    /// Write the item with these flags and expiry. `stale`: a stale CAS store (`ms C I` with
    /// an older CAS), which marks the value stale and keeps the old win marker.
    Write {
        flags: u32,
        exptime: u32,
        value: Value,
        stale: Option<bool>,
    },
}

/// The rules: `flags` and `exptime_abs` are the request's.
pub(super) fn decide(
    mode: StoreMode,
    found: Option<Found>,
    flags: u32,
    exptime_abs: u32,
) -> Decision {
    let refuse = |outcome| Decision::Refuse {
        outcome,
        bump: false,
    };
    let write = |flags, exptime, value, stale| Decision::Write {
        flags,
        exptime,
        value,
        stale,
    };
    match (mode, found) {
        (StoreMode::Add, Some(_)) => Decision::Refuse {
            outcome: StoreOutcome::NotStored,
            bump: true,
        },
        (StoreMode::Replace | StoreMode::Append(_) | StoreMode::Prepend(_), None) => {
            refuse(StoreOutcome::NotStored)
        }
        (StoreMode::Cas(_) | StoreMode::CasStale(_), None) => refuse(StoreOutcome::NotFound),
        (StoreMode::Cas(c), Some(f)) if f.cas != c => refuse(StoreOutcome::Exists),
        (StoreMode::Append(Some(c)) | StoreMode::Prepend(Some(c)), Some(f)) if f.cas != c => {
            refuse(StoreOutcome::Exists)
        }
        // An older CAS still stores, stale, keeping the expiry; a newer one is refused.
        (StoreMode::CasStale(c), Some(f)) if f.cas != c => {
            if c > f.cas {
                refuse(StoreOutcome::Exists)
            } else {
                write(flags, f.exptime, Value::Given, Some(f.win_sent))
            }
        }
        // Append and prepend keep the item's flags and expiry.
        (StoreMode::Append(_), Some(f)) => write(f.flags, f.exptime, Value::Append, None),
        (StoreMode::Prepend(_), Some(f)) => write(f.flags, f.exptime, Value::Prepend, None),
        _ => write(flags, exptime_abs, Value::Given, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Found = Found {
        cas: 10,
        flags: 7,
        exptime: 99,
        win_sent: true,
    };

    fn written(d: Decision) -> Option<(u32, u32, Value, Option<bool>)> {
        match d {
            Decision::Write {
                flags,
                exptime,
                value,
                stale,
            } => Some((flags, exptime, value, stale)),
            Decision::Refuse { .. } => None,
        }
    }

    #[test]
    fn the_table() {
        use StoreMode::*;
        let refused = |o, bump| Decision::Refuse { outcome: o, bump };
        // (mode, found) -> decision, with the request's flags 1 and expiry 5.
        let cases: &[(StoreMode, Option<Found>, Decision)] = &[
            (Set, None, decide(Set, Some(F), 1, 5)),
            (Add, Some(F), refused(StoreOutcome::NotStored, true)),
            (Replace, None, refused(StoreOutcome::NotStored, false)),
            (Append(None), None, refused(StoreOutcome::NotStored, false)),
            (Prepend(None), None, refused(StoreOutcome::NotStored, false)),
            (
                Append(Some(10)),
                None,
                refused(StoreOutcome::NotStored, false),
            ),
            (
                Append(Some(11)),
                Some(F),
                refused(StoreOutcome::Exists, false),
            ),
            (
                Prepend(Some(11)),
                Some(F),
                refused(StoreOutcome::Exists, false),
            ),
            (Cas(10), None, refused(StoreOutcome::NotFound, false)),
            (CasStale(10), None, refused(StoreOutcome::NotFound, false)),
            (Cas(11), Some(F), refused(StoreOutcome::Exists, false)),
            (CasStale(11), Some(F), refused(StoreOutcome::Exists, false)),
        ];
        for (mode, found, want) in cases {
            assert_eq!(decide(*mode, *found, 1, 5), *want, "{mode:?} {found:?}");
        }
        let given = Some((1, 5, Value::Given, None));
        assert_eq!(written(decide(Set, None, 1, 5)), given);
        assert_eq!(written(decide(Set, Some(F), 1, 5)), given);
        assert_eq!(written(decide(Add, None, 1, 5)), given);
        assert_eq!(written(decide(Replace, Some(F), 1, 5)), given);
        assert_eq!(written(decide(Cas(10), Some(F), 1, 5)), given);
        assert_eq!(written(decide(CasStale(10), Some(F), 1, 5)), given);
        assert_eq!(
            written(decide(CasStale(9), Some(F), 1, 5)),
            Some((1, 99, Value::Given, Some(true)))
        );
        for cas in [None, Some(10)] {
            assert_eq!(
                written(decide(Append(cas), Some(F), 1, 5)),
                Some((7, 99, Value::Append, None))
            );
            assert_eq!(
                written(decide(Prepend(cas), Some(F), 1, 5)),
                Some((7, 99, Value::Prepend, None))
            );
        }
    }
}
