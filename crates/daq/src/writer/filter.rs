//! Registers the bitshuffle/LZ4 codec ([`super::bslz4`]) with the HDF5 library as filter 32008,
//! so that datasets are created, written and read back through the library like any other
//! filtered dataset, and the file says what any reader needs (filter id and parameters).
use std::ffi::{c_uint, c_void};
use std::sync::OnceLock;

use hdf5_sys::h5::{H5allocate_memory, H5free_memory};
use hdf5_sys::h5z::{H5Z_class2_t, H5Zregister, H5Z_FLAG_REVERSE};

use super::bslz4;

/// The filter's id in the HDF5 registry.
pub const BSLZ4: i32 = 32008;

/// `cd_values` for elements of `elem` bytes: bitshuffle 0.4, element size, default block, LZ4.
pub fn params(elem: usize) -> [c_uint; 5] {
    [0, 4, elem as c_uint, 0, 2]
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
    if cd_values.is_null() || buf.is_null() || buf_size.is_null() || cd_nelmts < 3 {
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
    let elem = cd[2] as usize;
    if elem == 0 || elem > 64 {
        return 0;
    }
    let result = if flags & H5Z_FLAG_REVERSE != 0 {
        // A chunk never claims more than 4 GiB here; a larger claim is a corrupt file.
        match bslz4::decode(input, elem, 1 << 32) {
            Ok(v) => v,
            Err(_) => return 0,
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
