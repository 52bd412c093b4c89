//! Throughput of the writer's bitshuffle + LZ4 chunks (HDF5 filter 32008) on the sparse data
//! of a JUNGFRAU 4M frame: the column indices (u16) and values (f32) of ~460,000 pixels, in
//! the writer's 65,536-element chunks. `bench/daq_writer.py` runs it beside the bitshuffle
//! library (hdf5plugin) on the same bytes.
//!
//! ```text
//! cargo run --release -p remora-daq --example bslz4_speed [-- --raw FILE_PREFIX]
//! ```
//! With `--raw P` it also writes the inputs to `P.col.u16` and `P.value.f32`.
use std::time::Instant;

use remora_daq::writer::bslz4::{decode, default_block, encode};

const NNZ: usize = 460_000;
const CHUNK: usize = 1 << 16;

/// Columns sorted within rows of 1024 pixels and values near multiples of 12.4 keV, from a
/// fixed xorshift stream: what the compress stage hands the writer.
fn frame() -> (Vec<u8>, Vec<u8>) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut col = Vec::with_capacity(NNZ * 2);
    let mut value = Vec::with_capacity(NNZ * 4);
    let mut c = 0u16;
    for _ in 0..NNZ {
        let r = next();
        c = if r % 9 == 0 {
            (r >> 8) as u16 % 16
        } else {
            (c + 1 + (r >> 20) as u16 % 4) % 1024
        };
        col.extend_from_slice(&c.to_le_bytes());
        let photons = 1 + (r >> 32) % 3;
        let v = 12.4 * photons as f32 + ((r >> 40) % 1000) as f32 * 0.002 - 1.0;
        value.extend_from_slice(&v.to_le_bytes());
    }
    (col, value)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (col, value) = frame();
    if let Some(i) = args.iter().position(|a| a == "--raw") {
        let p = args.get(i + 1).expect("--raw needs a file prefix");
        std::fs::write(format!("{p}.col.u16"), &col).expect("writing the columns");
        std::fs::write(format!("{p}.value.f32"), &value).expect("writing the values");
    }
    let mut report = serde_json::Map::new();
    for (name, data, elem) in [("col_u16", &col, 2usize), ("value_f32", &value, 4)] {
        let block = default_block(elem);
        let chunks: Vec<&[u8]> = data.chunks(CHUNK * elem).collect();
        let mut encoded = Vec::new();
        let (mut enc_s, mut dec_s) = (f64::MAX, f64::MAX);
        for _ in 0..7 {
            let t = Instant::now();
            encoded = chunks.iter().map(|c| encode(c, elem, block)).collect();
            enc_s = enc_s.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for (e, c) in encoded.iter().zip(&chunks) {
                let d = decode(e, elem, 1 << 32).expect("own chunk");
                assert_eq!(d.len(), c.len());
            }
            dec_s = dec_s.min(t.elapsed().as_secs_f64());
        }
        let packed: usize = encoded.iter().map(Vec::len).sum();
        let mb = data.len() as f64 / 1e6;
        report.insert(
            name.into(),
            serde_json::json!({
                "bytes": data.len(),
                "ratio": data.len() as f64 / packed as f64,
                "encode_mb_s": mb / enc_s,
                "decode_mb_s": mb / dec_s,
            }),
        );
    }
    println!("{}", serde_json::Value::Object(report));
}
