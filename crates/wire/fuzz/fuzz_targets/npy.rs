//! `.npy` files: arbitrary bytes through `header_len`, `Header::parse` and `parse`; a header that
//! parses re-encodes (NumPy's layout) to a header that parses to the same dtype, order and shape,
//! and whatever data parses re-encodes with it byte for byte after the header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use remora_wire::npy::{self, Header};

fuzz_target!(|data: &[u8]| {
    let _ = npy::header_len(data);
    if let Ok(h) = Header::parse(data) {
        let out = npy::encode_header(h.descr, h.fortran_order, &h.shape);
        assert_eq!(out.len() % npy::ALIGN, 0);
        let again = Header::parse(&out).expect("a re-encoded header must parse");
        assert_eq!(
            (
                again.descr,
                again.fortran_order,
                &again.shape,
                again.data_offset
            ),
            (h.descr, h.fortran_order, &h.shape, out.len())
        );
        if let Ok(body) = h.data(data) {
            assert_eq!(Some(body.len()), h.data_len());
            if !h.fortran_order {
                let file =
                    npy::encode(h.descr, &h.shape, body).expect("the data length was checked");
                assert_eq!(npy::parse(&file), Ok((again, body)));
            }
        }
    }
});
