"""JUNGFRAU processing core: conversion, pedestal tracking, veto, sparse compression and
azimuthal integration (the Rust engines in ``remora._native.daq``), plus a straightforward numpy
reference for the conversion.

Arrays go in without copies when they are C-contiguous and of the exact dtype (``uint16`` raw
frames, ``float32`` images, ``uint8`` masks); a wrong type or dtype raises ``TypeError``, a wrong
layout (not C-contiguous) or shape ``ValueError``, as in every remora module.
Raw frames are ``(modules * 512, 1024)`` in module order; converted frames are float32 keV with
NaN for masked, error and invalid-gain pixels and +inf for saturated ones.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple, Union, cast

import numpy as np
import numpy.typing as npt

from ._native import daq as _m
from ._progress import Progress, ProgressArg
from .control import Client, ControlError  # noqa: F401  (re-exported: remora.daq.Client)

Calibration = _m.Calibration
Converter = _m.Converter
Layout = _m.Layout
Integrator = _m.Integrator
Synth = _m.Synth
Pipeline = _m.Pipeline
engines = _m.engines
count_above = _m.count_above
compress = _m.compress
decompress = _m.decompress

__all__ = [
    "Calibration", "Converter", "Layout", "Integrator", "Synth", "Pipeline",
    "engines", "count_above", "compress", "decompress", "reference_convert",
    "run", "Client", "ControlError", "MODULE_SHAPE", "ASSEMBLED_MODULE_SHAPE", "SATURATION", "ERROR_WORDS", "raw_shape", "decode",
]

#: Raw module frame (rows, columns).
MODULE_SHAPE: Tuple[int, int] = (512, 1024)
#: A module assembled with its double-width chip-border pixels split.
ASSEMBLED_MODULE_SHAPE: Tuple[int, int] = (514, 1030)
#: Raw word of a saturated pixel.
SATURATION: int = 0xC000
#: Raw words flagged as errors.
ERROR_WORDS: Tuple[int, int] = (0xFFFF, 0x4000)


def raw_shape(modules: int) -> Tuple[int, int]:
    """Shape of a raw detector frame of ``modules`` modules."""
    if not 1 <= modules <= 64:
        raise ValueError(f"a detector has 1 to 64 modules, not {modules}")
    return (modules * MODULE_SHAPE[0], MODULE_SHAPE[1])


def decode(raw: npt.ArrayLike) -> Tuple[npt.NDArray[np.int8], npt.NDArray[np.uint16]]:
    """Splits raw words into (gain stage 0/1/2, -1 for invalid bits; 14-bit ADC value)."""
    words = np.asarray(raw, dtype=np.uint16)
    stage: npt.NDArray[np.int8] = np.array([0, 1, -1, 2], np.int8)[words >> 14]
    adc = cast("npt.NDArray[np.uint16]", words & 0x3FFF)
    return stage, adc


def reference_convert(raw: npt.NDArray[np.uint16], pedestal: npt.NDArray[np.float32],
                      gain: npt.NDArray[np.float64],
                      mask: Optional[npt.ArrayLike] = None) -> npt.NDArray[np.float32]:
    """Converts raw frames with plain numpy: ``(ADC - pedestal[g]) / gain[g]`` in float32.

    ``raw``: uint16 ``(modules * 512, 1024)``; ``pedestal``: float32 ``(modules, 3, 512, 1024)``;
    ``gain``: float64 PSI maps ``(modules, 6, 512, 1024)`` (G0, G1, G2 used, cast to float32);
    ``mask``: optional, non-zero = masked. Special words as in the Rust engines.
    """
    modules = pedestal.shape[0]
    r = np.asarray(raw).reshape(modules, 512, 1024)
    bits = (r >> 14).astype(np.intp)
    adc = (r & 0x3FFF).astype(np.float32)
    stage = np.array([0, 1, 0, 2])[bits]
    ped = np.take_along_axis(pedestal, stage[:, None], axis=1)[:, 0]
    g = np.take_along_axis(gain[:, :3].astype(np.float32), stage[:, None], axis=1)[:, 0]
    e: npt.NDArray[np.float32] = (adc - ped) / g
    e[bits == 2] = np.nan
    e[(r == 0xFFFF) | (r == 0x4000)] = np.nan
    e[r == 0xC000] = np.inf
    if mask is not None:
        e[np.asarray(mask).reshape(e.shape) != 0] = np.nan
    return e.reshape(np.shape(raw))


def run(config: Union[str, os.PathLike[str]], progress: ProgressArg = False) -> Dict[str, Any]:
    """Runs an acquisition and returns its summary (a dict).

    ``config`` is the path of a TOML file (relative paths inside it are taken from its folder)
    or the TOML text itself; see ``examples/*.toml`` and ``docs/daq.md``. The receivers and the
    emulator run as threads of this process over the configured transport on this host.
    Results are in the output file; read it with h5py (``import hdf5plugin`` first for the
    bitshuffle/LZ4 chunks)::

        s = remora.daq.run("examples/demo.toml", progress=True)
        print(s["frames_complete"], s["kept"], s["files"])

    ``progress``: ``True`` shows a bar of the frames done on stderr (tqdm's when installed),
    a callable gets a dict about 5 times a second per receiver and once as each ends: ``done``
    and ``total`` (frames done and expected, all receivers), and that receiver's ``receiver``,
    ``frames_expected``, ``frames_done``, ``overruns``, ``kept`` and ``buffered`` (frames in its
    frame buffer). An exception the callable raises stops the calls and is raised once the
    acquisition has ended; it does not stop the acquisition.
    """
    if isinstance(config, os.PathLike) or (isinstance(config, str) and "\n" not in config
                                            and config.strip().endswith(".toml")):
        path = os.fspath(config)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        base = os.path.dirname(os.path.abspath(path))
    elif isinstance(config, str):
        text, base = config, None
    else:
        raise TypeError("config: a path to a TOML file or TOML text")
    report = Progress(progress, "frames")
    receivers: Dict[int, Tuple[int, int]] = {}

    def on_report(r: Dict[str, Any]) -> None:
        receivers[r["receiver"]] = (r["frames_done"], r["frames_expected"])
        done = sum(d for d, _ in receivers.values())
        total = sum(t for _, t in receivers.values())
        lost = f"{r['overruns']} overruns" if r["overruns"] else ""
        report.step(done, total, lost, **r)

    try:
        out = _m.run_acquisition(text, base, on_report if report.active else None)
    finally:
        report.close()
    if report.failed is not None:
        raise report.failed
    summary: Dict[str, Any] = json.loads(out)
    return summary
