//! Exact comparisons of squared distances against a scaled squared distance.
//!
//! The ratio test `d1 < r · d2` on plain distances is `D1 < r² · D2` on squared ones. `r` is the
//! f32 the user gave, `D1`, `D2` are exact integers (u8 path) or f32 values (f32 path). Every one
//! of them is `m · 2^e` with an integer `m` below 2²⁴ (2³² for integers), so both sides are
//! products of integers and powers of two and the comparison is done exactly on `u128`
//! mantissas, without the rounding a float product would add.

/// A non-negative number `m · 2^e`.
#[derive(Debug, Clone, Copy)]
struct Exact {
    m: u128,
    e: i32,
}

impl Exact {
    fn from_f32(x: f32) -> Exact {
        debug_assert!(x.is_finite() && x >= 0.0);
        let bits = x.to_bits();
        let exp = ((bits >> 23) & 0xff) as i32;
        let frac = (bits & 0x7f_ffff) as u128;
        if exp == 0 {
            Exact { m: frac, e: -149 }
        } else {
            Exact {
                m: frac | 0x80_0000,
                e: exp - 150,
            }
        }
    }

    fn from_int(x: u64) -> Exact {
        Exact { m: x as u128, e: 0 }
    }

    /// Product; mantissas must stay below 2¹²⁸ (at most 24 + 24 + 32 bits here).
    fn mul(self, o: Exact) -> Exact {
        Exact {
            m: self.m * o.m,
            e: self.e + o.e,
        }
    }

    /// `self < o`, exactly.
    fn lt(self, o: Exact) -> bool {
        if self.m == 0 || o.m == 0 {
            return self.m < o.m;
        }
        let top_a = 128 - self.m.leading_zeros() as i64 + self.e as i64;
        let top_b = 128 - o.m.leading_zeros() as i64 + o.e as i64;
        if top_a != top_b {
            return top_a < top_b;
        }
        // Same leading bit position: align the exponents by shifting the mantissa with the
        // larger exponent left; it has fewer bits, so it cannot overflow.
        if self.e >= o.e {
            (self.m << (self.e - o.e)) < o.m
        } else {
            self.m < (o.m << (o.e - self.e))
        }
    }
}

/// A squared distance: an exact integer or an f32.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dist2 {
    Int(u32),
    Float(f32),
}

impl Dist2 {
    fn exact(self) -> Exact {
        match self {
            Dist2::Int(x) => Exact::from_int(x as u64),
            Dist2::Float(x) => Exact::from_f32(x),
        }
    }

    /// The plain distance, rounded to f32.
    pub fn plain(self) -> f32 {
        match self {
            Dist2::Int(x) => (x as f64).sqrt() as f32,
            Dist2::Float(x) => x.sqrt(),
        }
    }
}

/// `sqrt(d1) < ratio · sqrt(d2)`, exactly (`ratio` finite and positive).
pub(crate) fn passes_ratio(d1: Dist2, d2: Dist2, ratio: f32) -> bool {
    let r = Exact::from_f32(ratio);
    d1.exact().lt(r.mul(r).mul(d2.exact()))
}

/// `ratio²` as `m / 2^s` with an integer `m < 2⁴⁸` and `s >= 0` (`ratio` in (0, 1]): the GPU
/// engine's ratio test is then `d1 · 2^s < m · d2` on integers.
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) fn ratio_squared(ratio: f32) -> (u64, u32) {
    let mut r = Exact::from_f32(ratio);
    // Fewer bits to shift on the device; r ≤ 1 keeps the exponent ≤ 0 once m is odd.
    let z = r.m.trailing_zeros().min(127);
    r.m >>= z;
    r.e += z as i32;
    debug_assert!(r.m > 0 && r.m < 1 << 24 && r.e <= 0);
    ((r.m * r.m) as u64, (-2 * r.e) as u32)
}

/// `sqrt(d1) <= max`, exactly (`max` finite and non-negative).
pub(crate) fn within(d1: Dist2, max: f32) -> bool {
    let m = Exact::from_f32(max);
    !m.mul(m).lt(d1.exact())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_is_strict_and_exact() {
        // 0.5 is exact in f32: 1 < 0.25 · 4 is false, 1 < 0.25 · 5 true.
        assert!(!passes_ratio(Dist2::Int(1), Dist2::Int(4), 0.5));
        assert!(passes_ratio(Dist2::Int(1), Dist2::Int(5), 0.5));
        assert!(!passes_ratio(Dist2::Int(0), Dist2::Int(0), 0.6));
        assert!(passes_ratio(Dist2::Int(0), Dist2::Int(1), 0.6));
        // r = 1: equal distances fail, a smaller first passes.
        assert!(!passes_ratio(
            Dist2::Int(u32::MAX),
            Dist2::Int(u32::MAX),
            1.0
        ));
        assert!(passes_ratio(
            Dist2::Int(u32::MAX - 1),
            Dist2::Int(u32::MAX),
            1.0
        ));
        // Floats, with a subnormal.
        assert!(passes_ratio(Dist2::Float(1e-45), Dist2::Float(1.0), 1e-20));
        assert!(!passes_ratio(Dist2::Float(0.25), Dist2::Float(1.0), 0.5));
        // 0.6f32 is slightly above 0.6, its square above 0.36f32: the test uses the f32 given.
        assert!(passes_ratio(Dist2::Float(0.36), Dist2::Float(1.0), 0.6));
    }

    #[test]
    fn ratio_agrees_with_f64_where_f64_is_exact() {
        // r = 0.6f32 = 10066330 · 2^-24; r² · D2 is exact in u128, compare to integers.
        let r = 0.6f32;
        let (m, e) = (10066330u128, 24);
        assert_eq!(r, (m as f64 / (1u64 << e) as f64) as f32);
        for d2 in [1u32, 2, 3, 1000, 123_456, 66_585_600] {
            for d1 in [0u32, 1, d2 / 3, d2 * 9 / 25, d2 * 9 / 25 + 1, d2] {
                let want = (d1 as u128) << (2 * e) < m * m * d2 as u128;
                assert_eq!(
                    passes_ratio(Dist2::Int(d1), Dist2::Int(d2), r),
                    want,
                    "{d1} {d2}"
                );
            }
        }
    }

    #[test]
    fn ratio_squared_is_exact() {
        assert_eq!(ratio_squared(1.0), (1, 0));
        assert_eq!(ratio_squared(0.5), (1, 2));
        assert_eq!(ratio_squared(0.75), (9, 4));
        // 0.6f32 = 10066330 · 2^-24 = 5033165 · 2^-23.
        assert_eq!(ratio_squared(0.6), (5033165u64.pow(2), 46));
        // The smallest subnormal: 2^-149.
        assert_eq!(ratio_squared(f32::from_bits(1)), (1, 298));
        for r in [0.6f32, 0.8, 0.123_456_7, 1.0, 1e-30] {
            let (m, s) = ratio_squared(r);
            for (d1, d2) in [
                (0u32, 1u32),
                (9, 25),
                (36, 100),
                (1000, 2000),
                (1 << 26, 1 << 26),
            ] {
                let want = passes_ratio(Dist2::Int(d1), Dist2::Int(d2), r);
                // m · d2 < 2^75: past that shift only d1 = 0 can pass (as in the shader).
                let got = if s >= 75 {
                    d1 == 0 && d2 > 0
                } else {
                    ((d1 as u128) << s) < m as u128 * d2 as u128
                };
                assert_eq!(got, want, "{r} {d1} {d2}");
            }
        }
    }

    #[test]
    fn within_is_inclusive() {
        assert!(within(Dist2::Int(9), 3.0));
        assert!(!within(Dist2::Int(10), 3.0));
        assert!(within(Dist2::Int(0), 0.0));
        assert!(within(Dist2::Float(2.25), 1.5));
    }
}
