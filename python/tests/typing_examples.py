"""The public API used with types, checked by ``mypy --strict`` (python/tests/test_typing.py).

Not a test of behaviour: nothing here runs under pytest (the file's name does not start with
``test_``), and ``main()`` is never called. It only has to type-check, so that the stubs
(``remora/_native/*.pyi``) and the annotations of ``remora/*.py`` stay usable: a renamed
argument, a lost default or a wrong return type makes mypy fail.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import numpy.typing as npt

import remora
from remora import daq, fabric, kv, lazy, match, resize
from remora.daq import Client, ControlError


def transfer(n: int) -> Tuple[int, Optional[int]]:
    pd = fabric.ProtectionDomain()
    dst = np.zeros(n, np.uint8)
    region: fabric.Region = pd.register(dst, access="lwr")
    with fabric.Listener("127.0.0.1:0", pd) as listener:
        cpd = fabric.ProtectionDomain()
        src: fabric.Region = cpd.allocate(n)
        qp: fabric.QueuePair
        peer: bytes
        qp, peer = fabric.connect(listener.address, cpd, transport="udp")
        with qp:
            addr, length, rkey = fabric.decode_region(peer)
            qp.post_write(1, src, 0, min(n, length), addr, rkey, imm=7)
            c: Optional[fabric.Completion] = qp.wait(5.0)
            stats: dict[str, int] = qp.stats()
            return stats["tx_packets"] + region.length, None if c is None else c.imm


def lazy_copy(data: bytes) -> bytes:
    with lazy.PageServer.memory(data) as server:
        with lazy.LazyRegion.connect(server.address, unit=4096, deadline=2.0) as region:
            view: npt.NDArray[np.uint8] = region.array()
            present, poisoned, units = region.progress()
            assert region.wait_complete(1.0) or present + poisoned <= units
            return region.read(0, len(view))


def process(frames: int) -> float:
    synth = daq.Synth(modules=1, seed=3)
    conv = daq.Converter(synth.calibration(), engine="auto")
    total = 0.0
    for n in range(frames):
        raw, photons, dark = synth.frame(n)
        energy, st = conv.convert(raw, threshold=10.0)
        total += float(np.nansum(energy)) + st["above"]
        row_ptr, col, values = daq.compress(energy, 5.0)
        back: npt.NDArray[np.float32] = daq.decompress(row_ptr, col, values, (energy.shape[0], energy.shape[1]))
        total += float(back[0, 0]) + int(photons.sum()) + int(dark)
    shape: Tuple[int, int] = daq.raw_shape(2)
    return total + shape[0]


def control(url: str, config: Path) -> str:
    try:
        with Client(url, timeout=5.0) as c:
            c.configure(config)
            c.start()
            status = c.wait(timeout=60.0)
            png: bytes = c.image_png(scale="linear", bin=2)
            return f"{status['state']} {len(png)}"
    except ControlError as e:
        return f"refused {e.status}: {e.reason}"


def matching(q: npt.NDArray[np.uint8], t: npt.NDArray[np.uint8], out: Path) -> int:
    pairs: npt.NDArray[np.int64] = match.match(q, t, ratio=0.8)
    pairs2, dist = match.match(q, t, return_distances=True)
    kept = match.neighbour_filter(pairs, np.zeros((len(q), 2)), np.zeros((len(t), 2)))
    match.write_keypoints(out, np.zeros((len(q), 2)), q)
    kp: match.Keypoints = match.read_keypoints(out)
    return len(kept) + len(pairs2) + int(dist.size) + kp.dim


def thumbnails(jpeg: bytes, url: str) -> int:
    small: bytes = resize.resize(jpeg, "100x100", quality=80)
    pixels: npt.NDArray[np.uint8] = resize.resize(np.zeros((40, 30, 3), np.uint8), "10x10")
    w, h = resize.geometry("50%", 640, 480)
    with resize.Client(url) as client:
        many: list[bytes] = client.resize_many([jpeg, small], "64x64", in_flight=2)
    return len(many) + pixels.size + w + h


def migrate(secret: str) -> Optional[float]:
    def show(step: kv.MigrationStep) -> None:
        print(step["state"], step["present"], step["units"])

    r = kv.migrate("127.0.0.1:11211", "127.0.0.1:11212", secret, wait=10.0, progress=show)
    stats: dict[str, str] = kv.migration_stats("127.0.0.1:11212")
    assert stats["migrate_state"] == "complete"
    return r["downtime_ms"]


def main() -> None:
    print(remora.__version__, remora.daq.SATURATION)
    print(transfer(4096), lazy_copy(b"x" * 8192)[:1], process(1))


if __name__ == "__main__":
    main()
