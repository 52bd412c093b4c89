//! Registers the bitshuffle/LZ4 codec ([`super::bslz4`]) with the HDF5 library as filter 32008,
//! so that datasets are created, written and read back through the library like any other
//! filtered dataset, and the file says what any reader needs (filter id and parameters).
//!
//! The writer registers it before creating a file and the HDF5 source ([`crate::dataset`])
//! before reading one. The filter's parameters are (major, minor, element size, block size,
//! compression); of the compressions the bitshuffle library defines (0 none, 2 LZ4, 3 zstd)
//! only LZ4 is implemented here, and a chunk of any other is refused with a message naming it
//! (pushed on the library's error stack, so it reaches whoever called the read), never decoded
//! as if it were LZ4.
use std::ffi::{c_uint, c_void, CString};
use std::sync::OnceLock;

use hdf5_sys::h5::{H5allocate_memory, H5free_memory};
use hdf5_sys::h5e::{H5Epush2, H5E_BADVALUE, H5E_DEFAULT, H5E_ERR_CLS, H5E_PLINE};
use hdf5_sys::h5z::{H5Z_class2_t, H5Zregister, H5Z_FLAG_REVERSE};

use super::bslz4;

/// The filter's id in the HDF5 registry.
pub const BSLZ4: i32 = 32008;

/// The compression `cd_values[4]` names for LZ4, the only one this codec implements.
pub const COMPRESS_LZ4: c_uint = 2;

/// `cd_values` for elements of `elem` bytes: bitshuffle 0.4, element size, default block, LZ4.
pub fn params(elem: usize) -> [c_uint; 5] {
    [0, 4, elem as c_uint, 0, COMPRESS_LZ4]
}

/// The bitshuffle library's name of a compression type (`cd_values[4]`).
fn compression_name(c: c_uint) -> &'static str {
    match c {
        0 => "none",
        2 => "lz4",
        3 => "zstd",
        _ => "unknown",
    }
}

/// Checks a 32008 filter's parameters: `Err` with why a chunk written with them cannot be
/// decoded here (a compression other than LZ4; no `cd_values[4]` means none).
pub fn check_params(cd: &[c_uint]) -> Result<(), String> {
    let c = cd.get(4).copied().unwrap_or(0);
    if c != COMPRESS_LZ4 {
        return Err(format!(
            "bitshuffle compression type {c} ({}) is not supported; only {COMPRESS_LZ4} (lz4)",
            compression_name(c)
        ));
    }
    match cd.get(2) {
        Some(&e) if (1..=64).contains(&e) => Ok(()),
        Some(&e) => Err(format!("bitshuffle element size {e} is not 1 to 64 bytes")),
        None => Err("bitshuffle filter parameters lack the element size".into()),
    }
}

/// Puts `msg` on the library's error stack, under the I/O pipeline (a failed filter).
fn push_error(msg: &str) {
    let msg = CString::new(msg.replace('\0', " ")).expect("no NUL left");
    // SAFETY: the strings are NUL-terminated and outlive the call; the format is "%s" with one
    // string argument. Called from the filter callback, inside the library call that holds
    // hdf5-metno's lock.
    unsafe {
        H5Epush2(
            H5E_DEFAULT,
            c"remora/writer/filter.rs".as_ptr(),
            c"bitshuffle filter".as_ptr(),
            0,
            *H5E_ERR_CLS,
            *H5E_PLINE,
            *H5E_BADVALUE,
            c"%s".as_ptr(),
            msg.as_ptr(),
        );
    }
}

/// Registers the filter once per process; false if the library refused.
pub fn register() -> bool {
    static DONE: OnceLock<bool> = OnceLock::new();
    *DONE.get_or_init(|| {
        let class = H5Z_class2_t {
            version: 1,
            id: BSLZ4,
            encoder_present: 1,
            decoder_present: 1,
            name: c"bitshuffle + LZ4 (remora); see https://github.com/kiyo-masui/bitshuffle"
                .as_ptr(),
            can_apply: None,
            set_local: None,
            filter: Some(apply),
        };
        // SAFETY: `class` is a valid H5Z_class2_t whose name is a static C string and whose
        // callback has the library's signature; the library copies the struct. The call holds
        // hdf5-metno's lock, as every call into the library must.
        hdf5::sync::sync(|| unsafe { H5Zregister((&raw const class).cast()) }) >= 0
    })
}

/// The filter callback: encodes (or, with `H5Z_FLAG_REVERSE`, decodes) `nbytes` at `*buf`,
/// replacing the buffer; 0 on failure, as the library expects.
extern "C" fn apply(
    flags: c_uint,
    cd_nelmts: usize,
    cd_values: *const c_uint,
    nbytes: usize,
    buf_size: *mut usize,
    buf: *mut *mut c_void,
) -> usize {
    if cd_values.is_null() || buf.is_null() || buf_size.is_null() {
        return 0;
    }
    // SAFETY: the library passes `cd_nelmts` parameters at `cd_values` and a buffer of at least
    // `nbytes` bytes at `*buf`, which it allocated with its own allocator.
    let (cd, input) = unsafe {
        (
            std::slice::from_raw_parts(cd_values, cd_nelmts),
            std::slice::from_raw_parts((*buf).cast::<u8>(), nbytes),
        )
    };
    if let Err(why) = check_params(cd) {
        push_error(&why);
        return 0;
    }
    let elem = cd[2] as usize;
    let result = if flags & H5Z_FLAG_REVERSE != 0 {
        // A chunk never claims more than 4 GiB here; a larger claim is a corrupt file.
        match bslz4::decode(input, elem, 1 << 32) {
            Ok(v) => v,
            Err(e) => {
                push_error(&e.to_string());
                return 0;
            }
        }
    } else {
        if nbytes % elem != 0 {
            return 0;
        }
        let block = match cd.get(3).copied().unwrap_or(0) as usize {
            0 => bslz4::default_block(elem),
            b if b % 8 == 0 => b,
            _ => return 0,
        };
        bslz4::encode(input, elem, block)
    };
    // SAFETY: the output buffer comes from the library's allocator, as it will free it; the
    // input buffer is freed with the same allocator once replaced.
    unsafe {
        let out = H5allocate_memory(result.len().max(1), 0).cast::<u8>();
        if out.is_null() {
            return 0;
        }
        std::ptr::copy_nonoverlapping(result.as_ptr(), out, result.len());
        H5free_memory(*buf);
        *buf = out.cast();
        *buf_size = result.len().max(1);
    }
    result.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lz4_chunks_are_accepted_and_others_are_named() {
        assert_eq!(check_params(&params(2)), Ok(()));
        assert_eq!(
            check_params(&[0, 4, 2, 0, 3]).unwrap_err(),
            "bitshuffle compression type 3 (zstd) is not supported; only 2 (lz4)"
        );
        // No compression slot: plain bitshuffle, which this codec does not decode either.
        let e = check_params(&[0, 4, 2, 0]).unwrap_err();
        assert!(e.contains("type 0 (none)"), "{e}");
        let e = check_params(&[0, 4, 2, 0, 7]).unwrap_err();
        assert!(e.contains("type 7 (unknown)"), "{e}");
        assert!(check_params(&[0, 4, 0, 0, 2]).is_err());
        assert!(check_params(&[0, 4]).is_err());
    }
}
