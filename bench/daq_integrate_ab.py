"""Same-process A/B of remora's azimuthal integration built from different commits, next to
pyFAI's integrate1d_ng (CSR, Cython), interleaved round by round on the image, mask and geometry
of bench/daq_peers.py (8 modules, 1000 q bins, solid angle). Timings only; not a test.

Each variant is an unpacked wheel (a folder holding the `remora` package), e.g.
    git worktree add /tmp/wt-old <commit>
    (cd /tmp/wt-old && .venv/bin/maturin build --release --auditwheel skip -o /tmp/whl-old)
    mkdir /tmp/pkg-old && unzip -q /tmp/whl-old/*.whl -d /tmp/pkg-old
Usage: OMP_NUM_THREADS=T python bench/daq_integrate_ab.py --threads T old=/tmp/pkg-old new=/tmp/pkg-new
Prints one JSON object: per variant and splitting the best time per frame over the rounds, its
ratio to pyFAI's best in the same process, whether two calls gave the same bits, and the largest
relative difference from pyFAI on bins with data.
"""
import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("variants", nargs="+", help="label=folder holding the remora package")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--rounds", type=int, default=8)
ap.add_argument("--frames", type=int, default=10)
ap.add_argument("--bins", type=int, default=1000)
args = ap.parse_args()
# pyFAI's OpenMP pool size is fixed at import.
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import pyFAI  # noqa: E402

# Each build is imported under its own package name (the package imports itself relatively).
root = tempfile.mkdtemp()
sys.path.insert(0, root)
mods = {}
for spec in args.variants:
    label, folder = spec.split("=", 1)
    shutil.copytree(os.path.join(folder, "remora"), os.path.join(root, f"remora_{label}"))
    mods[label] = importlib.import_module(f"remora_{label}.daq")
daq = mods[list(mods)[-1]]


def per_frame(fn, frames):
    t = time.perf_counter()
    for _ in range(frames):
        fn()
    return (time.perf_counter() - t) / frames


synth = daq.Synth(modules=8, seed=1, dark_every=0)
conv = daq.Converter(synth.calibration(), threads=args.threads)
layout = synth.layout()
img = layout.assemble(conv.convert(synth.frame(0)[0])[0])
img[~np.isfinite(img)] = np.nan
mask = layout.image_mask()
with tempfile.NamedTemporaryFile("w", suffix=".poni", delete=False) as f:
    f.write(synth.poni())
    poni = f.name
ai = pyFAI.load(poni)
res = {"threads": args.threads, "omp_threads": int(os.environ["OMP_NUM_THREADS"]),
       "rounds": args.rounds, "frames": args.frames, "pyfai": pyFAI.version}
for split in ("no", "bbox"):
    kw = dict(unit="q_nm^-1", method=(split, "csr", "cython"), mask=mask, correctSolidAngle=True)
    ref = ai.integrate1d_ng(img, args.bins, **kw)
    ok = ref.count > 0
    fns = {"pyfai": lambda: ai.integrate1d_ng(img, args.bins, **kw)}
    for label, m in mods.items():
        it = m.Integrator(poni, img.shape, bins=args.bins, split=split, mask=mask,
                          threads=args.threads)
        a, b = it.integrate(img)["intensity"], it.integrate(img)["intensity"]
        res[f"{label}_{split}_repeatable"] = bool(np.array_equal(a, b))
        res[f"{label}_{split}_max_rel_diff"] = float(
            np.max(np.abs(a[ok] - ref.intensity[ok]) / np.abs(ref.intensity[ok])))
        fns[label] = lambda it=it: it.integrate(img)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(args.rounds):
        for k, fn in fns.items():
            frames = min(args.frames, 5) if k == "pyfai" else args.frames
            best[k] = min(best[k], per_frame(fn, frames))
    for k, s in best.items():
        res[f"{k}_{split}_ms"] = round(s * 1e3, 3)
        if k != "pyfai":
            res[f"{k}_{split}_x_pyfai"] = round(best["pyfai"] / s, 2)
os.unlink(poni)
shutil.rmtree(root)
json.dump(res, sys.stdout)
print()
