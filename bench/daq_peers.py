"""Peers of remora's JUNGFRAU core on the same synthetic frames: the numpy conversion, pyFAI's
integrate1d_ng (CSR, Cython) and numpy memcpy, each next to remora called from Python.

Usage: OMP_NUM_THREADS=T python bench/daq_peers.py --modules 8 --frames 20 --threads T
Prints one JSON object. Timings only; not a test.
"""
import argparse
import json
import os
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--modules", type=int, default=8)
ap.add_argument("--frames", type=int, default=20)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--bins", type=int, default=1000)
args = ap.parse_args()
# pyFAI's OpenMP pool size is fixed at import.
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import pyFAI  # noqa: E402

from remora import daq  # noqa: E402


def per_frame(fn, frames):
    """Seconds per call: best of three rounds after a warm-up (the machine is shared)."""
    fn(0)  # warm-up (allocations, page faults, pyFAI's CSR build)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for i in range(frames):
            fn(i)
        best = min(best, (time.perf_counter() - t) / frames)
    return best


synth = daq.Synth(modules=args.modules, seed=1, dark_every=0)
raws = [synth.frame(n)[0] for n in range(4)]
cal = synth.calibration()
ped, gain = cal.pedestal, cal.gain
nbytes = raws[0].nbytes
conv = daq.Converter(cal, threads=args.threads)
out = np.empty(raws[0].shape, np.float32)
res = {"modules": args.modules, "threads": args.threads, "frame_bytes": nbytes,
       "omp_threads": int(os.environ["OMP_NUM_THREADS"]), "pyfai": pyFAI.version,
       "numpy": np.__version__}



class TunedNumpy:
    """A fair numpy peer: float32 tables prepared once (as remora's engines do), every pixel
    computed as G0 in one vector expression, then the few G1/G2 and special pixels fixed up."""

    def __init__(self, ped, gain):
        m = ped.shape[0]
        self.p = [np.ascontiguousarray(ped[:, s]).reshape(m * 512, 1024) for s in range(3)]
        self.g = [np.ascontiguousarray(gain[:, s], dtype=np.float32).reshape(m * 512, 1024)
                  for s in range(3)]

    def __call__(self, raw, out):
        np.subtract(raw, self.p[0], out=out, dtype=np.float32)
        np.divide(out, self.g[0], out=out)
        hi = np.nonzero(raw >= 0x4000)
        w = raw[hi]
        bits = w >> 14
        adc = (w & 0x3FFF).astype(np.float32)
        e = np.where(bits == 1, (adc - self.p[1][hi]) / self.g[1][hi], (adc - self.p[2][hi]) / self.g[2][hi])
        e[(bits == 2) | (w == 0xFFFF) | (w == 0x4000)] = np.nan
        e[w == 0xC000] = np.inf
        out[hi] = e
        return out


tuned = TunedNumpy(ped, gain)
check = np.empty_like(out)
tuned(raws[0], check)
ref = daq.reference_convert(raws[0], ped, gain)
assert np.array_equal(np.isnan(check), np.isnan(ref)) and np.array_equal(check[~np.isnan(ref)], ref[~np.isnan(ref)])
nf_np = min(args.frames, 5)
res["numpy_convert_s"] = per_frame(lambda i: daq.reference_convert(raws[i % 4], ped, gain), nf_np)
res["numpy_tuned_convert_s"] = per_frame(lambda i: tuned(raws[i % 4], out), min(args.frames, 10))
res["remora_py_convert_s"] = per_frame(lambda i: conv.convert_into(raws[i % 4], out), args.frames)

layout = synth.layout()
energy = conv.convert(raws[0])[0]
img = layout.assemble(energy)
img[~np.isfinite(img)] = np.nan
mask = layout.image_mask()
with tempfile.NamedTemporaryFile("w", suffix=".poni", delete=False) as f:
    f.write(synth.poni())
    poni = f.name
ai = pyFAI.load(poni)
for split in ("no", "bbox"):
    kw = dict(unit="q_nm^-1", method=(split, "csr", "cython"), mask=mask, correctSolidAngle=True)
    nf = min(args.frames, 10)
    res[f"pyfai_{split}_s"] = per_frame(lambda i: ai.integrate1d_ng(img, args.bins, **kw), nf)
    it = daq.Integrator(poni, img.shape, bins=args.bins, split=split, mask=mask, threads=args.threads)
    res[f"remora_py_{split}_s"] = per_frame(lambda i: it.integrate(img), args.frames)
    ref = ai.integrate1d_ng(img, args.bins, **kw)
    mine = it.integrate(img)
    ok = ref.count > 0
    res[f"max_rel_diff_{split}"] = float(np.max(np.abs(mine["intensity"][ok] - ref.intensity[ok])
                                              / np.abs(ref.intensity[ok])))
os.unlink(poni)

src = [np.full(2 * nbytes, k, np.uint8) for k in range(4)]
dst = [np.empty(2 * nbytes, np.uint8) for _ in range(4)]
res["numpy_memcpy_s"] = per_frame(lambda i: np.copyto(dst[i % 4], src[i % 4]), args.frames)
json.dump(res, sys.stdout)
print()
