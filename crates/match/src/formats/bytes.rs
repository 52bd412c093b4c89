//! A bounds-checked reader of fixed-size fields, in either byte order: the one small codec the
//! binary formats share.

use super::FormatError;

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    pub big_endian: bool,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            big_endian: false,
        }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails unless `count` records of `size` bytes remain (checked before any allocation).
    pub fn need(&self, what: &'static str, count: u64, size: u64) -> Result<(), FormatError> {
        let need = count.saturating_mul(size);
        if need > self.remaining() as u64 {
            return Err(FormatError::Truncated {
                what,
                need,
                at: self.pos,
                len: self.buf.len(),
            });
        }
        Ok(())
    }

    pub fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], FormatError> {
        self.need(what, 1, n as u64)?;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], FormatError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(what, N)?);
        if self.big_endian {
            a.reverse();
        }
        Ok(a)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, FormatError> {
        Ok(self.take(what, 1)?[0])
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub fn i16(&mut self, what: &'static str) -> Result<i16, FormatError> {
        self.array(what).map(i16::from_le_bytes)
    }

    pub fn f32(&mut self, what: &'static str) -> Result<f32, FormatError> {
        self.array(what).map(f32::from_le_bytes)
    }

    pub fn f64(&mut self, what: &'static str) -> Result<f64, FormatError> {
        self.array(what).map(f64::from_le_bytes)
    }

    /// Fails when bytes remain after `n` records.
    pub fn finish(&self, n: u64) -> Result<(), FormatError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(FormatError::Trailing { n, extra }),
        }
    }
}

/// A writer of fixed-size fields in either byte order.
pub(crate) struct Writer {
    pub buf: Vec<u8>,
    pub big_endian: bool,
}

impl Writer {
    pub fn new(big_endian: bool) -> Self {
        Writer {
            buf: Vec::new(),
            big_endian,
        }
    }

    fn put<const N: usize>(&mut self, le: [u8; N]) {
        let mut a = le;
        if self.big_endian {
            a.reverse();
        }
        self.buf.extend_from_slice(&a);
    }

    pub fn u32(&mut self, x: u32) {
        self.put(x.to_le_bytes())
    }

    pub fn i16(&mut self, x: i16) {
        self.put(x.to_le_bytes())
    }

    pub fn f32(&mut self, x: f32) {
        self.put(x.to_le_bytes())
    }

    pub fn f64(&mut self, x: f64) {
        self.put(x.to_le_bytes())
    }
}
