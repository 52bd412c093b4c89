//! Bitshuffle + LZ4 chunks, the format of HDF5 filter 32008 (the `bitshuffle` library's filter,
//! which `hdf5plugin`, silx, pyFAI, Dectris and PSI software read).
//!
//! Written by hand because no maintained Rust crate produces this chunk format; LZ4 itself is
//! `lz4_flex`'s block format. A chunk is: the uncompressed size in bytes (u64, big-endian), the
//! block size in bytes (u32, big-endian), then per block of `block` elements the block's bits
//! transposed (bit-planes) and LZ4-compressed, prefixed by the compressed length (u32,
//! big-endian); a last, shorter block keeps a multiple of 8 elements, and the 0–7 elements left
//! over are copied as they are.
//!
//! The bit transpose is `super::bitshuffle`'s.

use super::bitshuffle::{shuffle, unshuffle};

/// Elements per block for an element size, as the bitshuffle library picks (8 KiB blocks,
/// a multiple of 8 elements, at least 128).
pub fn default_block(elem: usize) -> usize {
    ((8192 / elem.max(1)) / 8 * 8).max(128)
}

/// Encodes `data` (elements of `elem` bytes) as one chunk with `block` elements per block.
pub fn encode(data: &[u8], elem: usize, block: usize) -> Vec<u8> {
    assert!(elem > 0 && block > 0 && block % 8 == 0 && data.len() % elem == 0);
    let n = data.len() / elem;
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    out.extend_from_slice(&(data.len() as u64).to_be_bytes());
    out.extend_from_slice(&((block * elem) as u32).to_be_bytes());
    let mut tmp = vec![0u8; block * elem];
    let mut planes = Vec::new();
    let mut put = |elems: usize, from: usize, out: &mut Vec<u8>| {
        let src = &data[from * elem..(from + elems) * elem];
        let t = &mut tmp[..elems * elem];
        shuffle(src, elem, t, &mut planes);
        // Compressed straight behind its length, which is written once it is known.
        let at = out.len();
        out.resize(
            at + 4 + lz4_flex::block::get_maximum_output_size(t.len()),
            0,
        );
        let c = lz4_flex::block::compress_into(t, &mut out[at + 4..])
            .expect("sized by get_maximum_output_size");
        out[at..at + 4].copy_from_slice(&(c as u32).to_be_bytes());
        out.truncate(at + 4 + c);
    };
    let full = n / block;
    for b in 0..full {
        put(block, b * block, &mut out);
    }
    let last = (n % block) / 8 * 8;
    if last > 0 {
        put(last, full * block, &mut out);
    }
    out.extend_from_slice(&data[(full * block + last) * elem..]);
    out
}

/// Why a chunk does not decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its headers say.
    #[error("bitshuffle chunk truncated")]
    Truncated,
    /// A size in the headers is impossible.
    #[error("bitshuffle chunk header is inconsistent")]
    Header,
    /// An LZ4 block does not decompress to its size.
    #[error("bitshuffle chunk: bad LZ4 block")]
    Lz4,
}

/// Decodes a chunk of elements of `elem` bytes; `limit` bounds the size it may claim.
pub fn decode(chunk: &[u8], elem: usize, limit: usize) -> Result<Vec<u8>, DecodeError> {
    if chunk.len() < 12 || elem == 0 {
        return Err(DecodeError::Truncated);
    }
    let total = u64::from_be_bytes(chunk[..8].try_into().expect("8 bytes")) as usize;
    let block_bytes = u32::from_be_bytes(chunk[8..12].try_into().expect("4 bytes")) as usize;
    if total > limit || total % elem != 0 || block_bytes == 0 || block_bytes % (8 * elem) != 0 {
        return Err(DecodeError::Header);
    }
    let (n, block) = (total / elem, block_bytes / elem);
    let mut out = vec![0u8; total];
    let mut pos = 12;
    let mut planes = Vec::new();
    let mut get = |elems: usize, at: usize, out: &mut [u8]| -> Result<(), DecodeError> {
        let len = chunk
            .get(pos..pos + 4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or(DecodeError::Truncated)?;
        let c = chunk
            .get(pos + 4..pos + 4 + len)
            .ok_or(DecodeError::Truncated)?;
        pos += 4 + len;
        let t = lz4_flex::block::decompress(c, elems * elem).map_err(|_| DecodeError::Lz4)?;
        if t.len() != elems * elem {
            return Err(DecodeError::Lz4);
        }
        unshuffle(
            &t,
            elem,
            &mut out[at * elem..(at + elems) * elem],
            &mut planes,
        );
        Ok(())
    };
    let full = n / block;
    for b in 0..full {
        get(block, b * block, &mut out)?;
    }
    let last = (n % block) / 8 * 8;
    if last > 0 {
        get(last, full * block, &mut out)?;
    }
    let rest = (full * block + last) * elem;
    let tail = chunk
        .get(pos..pos + (total - rest))
        .ok_or(DecodeError::Truncated)?;
    out[rest..].copy_from_slice(tail);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_known_chunk_has_the_library_headers() {
        let data: Vec<u8> = (0..100u32).flat_map(|v| v.to_le_bytes()).collect();
        let c = encode(&data, 4, 2048);
        assert_eq!(&c[..8], &400u64.to_be_bytes());
        assert_eq!(&c[8..12], &8192u32.to_be_bytes());
        // 96 elements shuffled and compressed, then 4 elements (16 bytes) raw at the end.
        assert_eq!(&c[c.len() - 16..], &data[384..]);
        assert_eq!(decode(&c, 4, 1 << 20).unwrap(), data);
    }

    #[test]
    fn hostile_chunks_are_errors() {
        assert_eq!(decode(&[0; 5], 4, 100), Err(DecodeError::Truncated));
        let mut c = encode(&[7u8; 64], 4, 128);
        assert_eq!(decode(&c, 4, 10), Err(DecodeError::Header));
        c.truncate(c.len() - 3);
        assert!(decode(&c, 4, 1 << 20).is_err());
        let mut bad = encode(&[7u8; 64], 4, 128);
        bad[8..12].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(decode(&bad, 4, 1 << 20), Err(DecodeError::Header));
    }

    proptest! {
        #[test]
        fn round_trip(elem in prop::sample::select(vec![1usize, 2, 4, 8]),
                      words in prop::collection::vec(any::<u8>(), 0..5000),
                      block_mult in 1usize..40) {
            let n = words.len() / elem * elem;
            let data = &words[..n];
            let block = block_mult * 8;
            let c = encode(data, elem, block);
            prop_assert_eq!(decode(&c, elem, 1 << 20).unwrap(), data);
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes, 4, 1 << 16);
        }
    }
}
