//! Access rights of a registered region, as in verbs (`IBV_ACCESS_*`).

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};

/// A set of access rights: a small `Copy` bit set.
///
/// Local reads are always allowed and have no bit. The bit values are remora's own, stable, and
/// what `bits`/`from_bits` exchange (e.g. in the Python bindings).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local reads.
    pub const NONE: Access = Access(0);
    /// The local side (the engine placing READ responses or received SENDs) may write.
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote peers may WRITE into the region.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote peers may READ from the region.
    pub const REMOTE_READ: Access = Access(4);
    /// Every right.
    pub const ALL: Access = Access(7);

    /// True if every right in `other` is in `self` (so `x.contains(Access::NONE)` is true).
    #[inline]
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    #[inline]
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The set with these bits, or `None` if an unknown bit is set.
    pub fn from_bits(bits: u8) -> Option<Access> {
        (bits & !Access::ALL.0 == 0).then_some(Access(bits))
    }

    /// True if any write right (local or remote) is granted.
    #[inline]
    pub fn writable(self) -> bool {
        self.0 & (Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0) != 0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Access {
    type Output = Access;
    fn bitand(self, rhs: Access) -> Access {
        Access(self.0 & rhs.0)
    }
}

const NAMES: [(Access, &str); 3] = [
    (Access::LOCAL_WRITE, "LOCAL_WRITE"),
    (Access::REMOTE_WRITE, "REMOTE_WRITE"),
    (Access::REMOTE_READ, "REMOTE_READ"),
];

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("NONE");
        }
        let mut first = true;
        for (bit, name) in NAMES {
            if self.contains(bit) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Access({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_and_or() {
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        assert!(rw.contains(Access::REMOTE_READ));
        assert!(rw.contains(Access::NONE));
        assert!(!rw.contains(Access::LOCAL_WRITE));
        assert!(!rw.contains(Access::ALL));
        assert!(Access::ALL.contains(rw));
        assert_eq!(rw & Access::REMOTE_READ, Access::REMOTE_READ);
    }

    #[test]
    fn bits_round_trip() {
        for b in 0..=255u8 {
            match Access::from_bits(b) {
                Some(a) => assert_eq!(a.bits(), b),
                None => assert!(b > 7),
            }
        }
    }

    #[test]
    fn display() {
        assert_eq!(Access::NONE.to_string(), "NONE");
        assert_eq!(
            (Access::REMOTE_READ | Access::LOCAL_WRITE).to_string(),
            "LOCAL_WRITE|REMOTE_READ"
        );
        assert_eq!(
            Access::ALL.to_string(),
            "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ"
        );
    }
}
