//! The bit transpose of HDF5 filter 32008 ([`super::bslz4`]'s chunks), in two passes that
//! stream: the elements' bytes are first split into byte planes (plane `j` holds byte `j` of
//! every element, in order), then each plane's bits are transposed, 8 elements at a time with
//! a 64-bit 8x8 transpose, or 32 at a time with AVX2's `movemask` where the CPU has it (eight
//! shifts and masks give the eight output bytes of each bit, as the bitshuffle library's SIMD
//! path does).
//!
//! The layout: for element size `s` and `n` elements (a multiple of 8), output byte
//! `(j·8 + k)·n/8 + q` holds in its bit `i` the bit `k` of byte `j` of element `8q + i`.
//! Hand-written for the same reason as the chunk format: no maintained crate produces it.

/// Transposes the bits of the `n` elements of `elem` bytes in `input` (`n` a multiple of 8)
/// into `out` (same length). `planes` is scratch space, grown as needed.
pub(super) fn shuffle(input: &[u8], elem: usize, out: &mut [u8], planes: &mut Vec<u8>) {
    debug_assert_eq!(input.len(), out.len());
    let n = input.len() / elem;
    debug_assert_eq!(n % 8, 0);
    let row = n / 8;
    let planes = split_planes(input, elem, planes);
    for (j, plane) in planes.chunks_exact(n.max(1)).enumerate().take(elem) {
        let out = &mut out[j * n..(j + 1) * n];
        bits_of_plane(plane, out, row);
    }
}

/// The inverse of [`shuffle`]: `input` holds the transposed bits of `out.len() / elem`
/// elements.
pub(super) fn unshuffle(input: &[u8], elem: usize, out: &mut [u8], planes: &mut Vec<u8>) {
    debug_assert_eq!(input.len(), out.len());
    let n = out.len() / elem;
    debug_assert_eq!(n % 8, 0);
    let row = n / 8;
    planes.clear();
    planes.resize(input.len(), 0);
    for j in 0..elem {
        let bits = &input[j * n..(j + 1) * n];
        plane_of_bits(bits, &mut planes[j * n..(j + 1) * n], row);
    }
    join_planes(planes, elem, out);
}

/// Byte `j` of element `e` to `planes[j·n + e]`.
fn split_planes<'a>(input: &[u8], elem: usize, planes: &'a mut Vec<u8>) -> &'a [u8] {
    let n = input.len() / elem;
    planes.clear();
    planes.resize(input.len(), 0);
    match elem {
        1 => planes.copy_from_slice(input),
        4 => {
            let (p0, rest) = planes.split_at_mut(n);
            let (p1, rest) = rest.split_at_mut(n);
            let (p2, p3) = rest.split_at_mut(n);
            for (e, w) in input.chunks_exact(4).enumerate() {
                p0[e] = w[0];
                p1[e] = w[1];
                p2[e] = w[2];
                p3[e] = w[3];
            }
        }
        2 => {
            let (p0, p1) = planes.split_at_mut(n);
            for (e, w) in input.chunks_exact(2).enumerate() {
                p0[e] = w[0];
                p1[e] = w[1];
            }
        }
        _ => {
            for (e, w) in input.chunks_exact(elem).enumerate() {
                for (j, &b) in w.iter().enumerate() {
                    planes[j * n + e] = b;
                }
            }
        }
    }
    planes
}

/// The inverse of [`split_planes`].
fn join_planes(planes: &[u8], elem: usize, out: &mut [u8]) {
    let n = out.len() / elem;
    match elem {
        1 => out.copy_from_slice(planes),
        4 => {
            let (p0, rest) = planes.split_at(n);
            let (p1, rest) = rest.split_at(n);
            let (p2, p3) = rest.split_at(n);
            for (e, w) in out.chunks_exact_mut(4).enumerate() {
                w.copy_from_slice(&[p0[e], p1[e], p2[e], p3[e]]);
            }
        }
        2 => {
            let (p0, p1) = planes.split_at(n);
            for (e, w) in out.chunks_exact_mut(2).enumerate() {
                w.copy_from_slice(&[p0[e], p1[e]]);
            }
        }
        _ => {
            for (e, w) in out.chunks_exact_mut(elem).enumerate() {
                for (j, b) in w.iter_mut().enumerate() {
                    *b = planes[j * n + e];
                }
            }
        }
    }
}

/// Bit `k` of plane byte `8q + i` to bit `i` of `out[k·row + q]`.
fn bits_of_plane(plane: &[u8], out: &mut [u8], row: usize) {
    let mut q = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        q = unsafe { avx2::bits_of_plane(plane, out, row) };
    }
    while q < row {
        let x = u64::from_le_bytes(plane[8 * q..8 * q + 8].try_into().expect("8 bytes"));
        let t = transpose8(x);
        for k in 0..8 {
            out[k * row + q] = (t >> (8 * k)) as u8;
        }
        q += 1;
    }
}

/// The inverse of [`bits_of_plane`].
fn plane_of_bits(bits: &[u8], plane: &mut [u8], row: usize) {
    let mut q = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        q = unsafe { avx2::plane_of_bits(bits, plane, row) };
    }
    while q < row {
        let mut t = 0u64;
        for k in 0..8 {
            t |= u64::from(bits[k * row + q]) << (8 * k);
        }
        plane[8 * q..8 * q + 8].copy_from_slice(&transpose8(t).to_le_bytes());
        q += 1;
    }
}

/// Transposes an 8x8 bit matrix held as 8 bytes (byte `i` = row `i`, bit `k` = column `k`):
/// afterwards byte `k` bit `i` is the old byte `i` bit `k`.
fn transpose8(mut x: u64) -> u64 {
    // Three rounds of swapping off-diagonal blocks (Hacker's Delight, 7-3).
    let mut t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
    x ^= t ^ (t << 28);
    x
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// 32 plane bytes at a time: after a left shift by `7 - k` of each 16-bit lane, the top
    /// bit of every byte is that byte's bit `k` (the bits shifted in from the low byte stay
    /// below it), and `movemask` gathers the 32 of them, element `32m + b` at bit `b`: the
    /// four output bytes `q = 4m..4m+4` of bit `k`. Returns the rows done (a multiple of 4).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn bits_of_plane(plane: &[u8], out: &mut [u8], row: usize) -> usize {
        let chunks = row / 4;
        for m in 0..chunks {
            let src = &plane[32 * m..32 * m + 32];
            // SAFETY: 32 bytes in bounds (the slice above); unaligned load.
            let v = unsafe { _mm256_loadu_si256(src.as_ptr().cast()) };
            macro_rules! bit {
                ($k:literal) => {{
                    let mask = _mm256_movemask_epi8(_mm256_slli_epi16::<{ 7 - $k }>(v)) as u32;
                    let at = $k * row + 4 * m;
                    out[at..at + 4].copy_from_slice(&mask.to_le_bytes());
                }};
            }
            bit!(0);
            bit!(1);
            bit!(2);
            bit!(3);
            bit!(4);
            bit!(5);
            bit!(6);
            bit!(7);
        }
        chunks * 4
    }

    /// The inverse, 32 plane bytes at a time: each bit's four output bytes are spread so that
    /// every plane byte sees the byte holding its bit (`shuffle_epi8`), tested against its
    /// own bit (`cmpeq`), and the result's bit `k` set where it was. Returns the rows done.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn plane_of_bits(bits: &[u8], plane: &mut [u8], row: usize) -> usize {
        let chunks = row / 4;
        // Lane 0 takes mask bytes 0 and 1, lane 1 bytes 2 and 3, eight plane bytes each.
        let spread = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        for m in 0..chunks {
            let mut acc = _mm256_setzero_si256();
            for k in 0..8 {
                let at = k * row + 4 * m;
                let mask = u32::from_le_bytes(bits[at..at + 4].try_into().expect("4 bytes"));
                let v = _mm256_shuffle_epi8(_mm256_set1_epi32(mask as i32), spread);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(v, select), select);
                acc = _mm256_or_si256(acc, _mm256_and_si256(set, _mm256_set1_epi8(1 << k)));
            }
            let dst = &mut plane[32 * m..32 * m + 32];
            // SAFETY: 32 bytes in bounds (the slice above); unaligned store.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), acc) };
        }
        chunks * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The layout, one bit at a time: what the fast paths must equal.
    fn shuffle_by_definition(input: &[u8], elem: usize) -> Vec<u8> {
        let n = input.len() / elem;
        let row = n / 8;
        let mut out = vec![0u8; input.len()];
        for e in 0..n {
            for j in 0..elem {
                for k in 0..8 {
                    if input[e * elem + j] >> k & 1 == 1 {
                        out[(j * 8 + k) * row + e / 8] |= 1 << (e % 8);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn transpose8_is_a_transpose() {
        let x = 0x8040_2010_0804_0201u64; // the identity matrix
        assert_eq!(transpose8(x), x);
        // Row 0 all ones -> column 0 all ones: bit 0 of every byte.
        assert_eq!(transpose8(0xff), 0x0101_0101_0101_0101);
        for x in [0x1234_5678_9abc_def0u64, u64::MAX, 1 << 63] {
            assert_eq!(transpose8(transpose8(x)), x);
        }
    }

    #[test]
    fn the_bit_layout_is_bitshuffles() {
        // 8 u16 elements: element 3 has bit 9 set (byte 1, bit 1): output byte
        // (j*8 + k) * n/8 + q = (1*8 + 1) * 1 + 0 = 9, bit i = 3.
        let mut data = [0u8; 16];
        data[3 * 2 + 1] = 0b10;
        let mut out = [0u8; 16];
        shuffle(&data, 2, &mut out, &mut Vec::new());
        let mut want = [0u8; 16];
        want[9] = 1 << 3;
        assert_eq!(out, want);
    }

    proptest! {
        /// Sizes that cover the 32-element SIMD steps, the 8-element tail after them, and
        /// element sizes with their own plane split (1, 2, 4) and the generic one (3, 8).
        #[test]
        fn fast_paths_match_the_definition_and_invert(
            (elem, input) in (prop::sample::select(vec![1usize, 2, 3, 4, 8]), 0usize..80)
                .prop_flat_map(|(elem, groups)| {
                    (Just(elem), prop::collection::vec(any::<u8>(), groups * 8 * elem))
                }),
        ) {
            let mut planes = Vec::new();
            let mut out = vec![0u8; input.len()];
            shuffle(&input, elem, &mut out, &mut planes);
            prop_assert_eq!(&out, &shuffle_by_definition(&input, elem));
            let mut back = vec![0u8; input.len()];
            unshuffle(&out, elem, &mut back, &mut planes);
            prop_assert_eq!(back, input);
        }
    }
}
