"""The writer's bitshuffle + LZ4 codec (HDF5 filter 32008) beside the bitshuffle library.

Runs `examples/bslz4_speed` (remora's codec on the sparse data of one JUNGFRAU 4M frame, in the
writer's 65,536-element chunks), then compresses and decompresses the same bytes, chunk by chunk
with the same block size, with the `bitshuffle` package (the C library the HDF5 plugin wraps,
with its SSE2/AVX2 paths and the C LZ4), and prints one JSON object with both throughputs and
their ratios. That the library reads remora's chunks is tested elsewhere: python/tests/test_nexus.py
opens remora's files with h5py and hdf5plugin.

    .venv/bin/pip install bitshuffle   # once: the peer
    cargo build --release -p remora-daq --example bslz4_speed
    .venv/bin/python bench/daq_writer.py [--bin target/release/examples/bslz4_speed]
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import bitshuffle
except ImportError:
    sys.exit("bench/daq_writer.py needs the bitshuffle package: .venv/bin/pip install bitshuffle")

CHUNK = 1 << 16


def default_block(elem):
    return max((8192 // elem) // 8 * 8, 128)


def peer(data, elem, dtype):
    arr = np.frombuffer(data, dtype=dtype)
    chunks = [arr[i:i + CHUNK] for i in range(0, len(arr), CHUNK)]
    block = default_block(elem)
    enc_s = dec_s = float("inf")
    packed = []
    for _ in range(7):
        t = time.perf_counter()
        packed = [bitshuffle.compress_lz4(c, block) for c in chunks]
        enc_s = min(enc_s, time.perf_counter() - t)
        t = time.perf_counter()
        for p, c in zip(packed, chunks):
            d = bitshuffle.decompress_lz4(p, c.shape, c.dtype, block)
            assert d.nbytes == c.nbytes
        dec_s = min(dec_s, time.perf_counter() - t)
    mb = len(data) / 1e6
    return {
        "ratio": len(data) / sum(p.nbytes for p in packed),
        "encode_mb_s": mb / enc_s,
        "decode_mb_s": mb / dec_s,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/examples/bslz4_speed")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        prefix = str(Path(d) / "frame")
        out = subprocess.run([a.bin, "--raw", prefix], check=True, capture_output=True, text=True)
        ours = json.loads(out.stdout)
        report = {"bitshuffle": bitshuffle.__version__, "chunk_elements": CHUNK}
        for name, path, elem, dtype in [
            ("col_u16", prefix + ".col.u16", 2, np.uint16),
            ("value_f32", prefix + ".value.f32", 4, np.float32),
        ]:
            data = Path(path).read_bytes()
            theirs = peer(data, elem, dtype)
            r = ours[name]
            report[name] = {
                "remora": r,
                "bitshuffle": theirs,
                "encode_vs_bitshuffle": r["encode_mb_s"] / theirs["encode_mb_s"],
                "decode_vs_bitshuffle": r["decode_mb_s"] / theirs["decode_mb_s"],
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
