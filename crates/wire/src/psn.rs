//! 24-bit packet sequence numbers with wrap-around.
//!
//! Comparison is serial-number arithmetic: the signed distance is `((a - b) << 8) as i32 >> 8`, so
//! two PSNs compare correctly while they are less than 2^23 apart.

/// A 24-bit packet sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The 24 bits a PSN holds.
    pub const MASK: u32 = 0xFF_FFFF;

    /// A PSN from the low 24 bits of `v`.
    pub fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as a number in `0..=MASK`.
    pub fn value(self) -> u32 {
        self.0
    }

    /// The PSN `n` packets later, wrapping at 2^24.
    #[allow(clippy::should_implement_trait)] // the PSN + u32 asymmetry reads better as a method
    pub fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// The next PSN.
    pub fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self - other` in `-2^23..2^23`.
    pub fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 so its bit 23 becomes the sign.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Whether `self` comes strictly before `other`.
    pub fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// Whether `self` comes strictly after `other`.
    pub fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }
}

impl core::fmt::Display for Psn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0x1FF_FFFF).value(), 0xFF_FFFF);
        assert_eq!(Psn::new(Psn::MASK).next(), Psn::new(0));
        assert_eq!(Psn::new(0xFF_FFFE).add(5).value(), 3);
        assert!(Psn::new(0xFF_FFFF).before(Psn::new(0)));
        assert!(Psn::new(2).after(Psn::new(0xFF_FFF0)));
        assert_eq!(Psn::new(2).diff(Psn::new(0xFF_FFF0)), 18);
        assert_eq!(Psn::new(0xFF_FFF0).diff(Psn::new(2)), -18);
        assert_eq!(Psn::new(0x80_0000).diff(Psn::new(0)), -0x80_0000);
    }

    proptest! {
        #[test]
        fn add_then_diff_is_identity(a in 0u32..=Psn::MASK, n in 0u32..0x80_0000) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).diff(p), n as i32);
            prop_assert_eq!(p.diff(p.add(n)), -(n as i32));
            prop_assert_eq!(p.add(n).after(p), n > 0);
            prop_assert_eq!(p.before(p.add(n)), n > 0);
            prop_assert!(!p.before(p) && !p.after(p));
        }

        #[test]
        fn add_wraps_like_modular_arithmetic(a in any::<u32>(), n in any::<u32>()) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).value(), (a & Psn::MASK).wrapping_add(n) & Psn::MASK);
            prop_assert!(p.add(n).value() <= Psn::MASK);
        }

        #[test]
        fn diff_is_antisymmetric(a in 0u32..=Psn::MASK, b in 0u32..=Psn::MASK) {
            let (a, b) = (Psn::new(a), Psn::new(b));
            let d = a.diff(b);
            prop_assert!((-0x80_0000..0x80_0000).contains(&d));
            prop_assert_eq!(b.add(d as u32), a);
            if d != -0x80_0000 {
                prop_assert_eq!(b.diff(a), -d);
            }
        }
    }
}
