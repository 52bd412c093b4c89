"""remora.lazy: lazy numpy views equal their source; prefetch, push and a dead server."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from remora import lazy


def pattern(n, unit=4096):
    rng = np.random.default_rng(7)
    a = rng.integers(1, 256, size=n, dtype=np.uint8)
    for start in range(3 * unit, n, 5 * unit):  # zero units
        a[start:start + unit] = 0
    return a


@pytest.mark.parametrize("mode", ["thread", "thread:2", "sigbus"])
@pytest.mark.parametrize("unit", [4096, 65536])
def test_memory_source_array_equals_source(mode, unit):
    src = pattern((1 << 20) + 333, unit)
    srv = lazy.PageServer.memory(src.tobytes())
    r = lazy.LazyRegion.connect(srv.address, unit=unit, mode=mode)
    a = r.array()
    assert a.dtype == np.uint8 and a.shape == src.shape
    idx = np.random.default_rng(1).integers(0, len(src), 500)
    assert np.array_equal(a[idx], src[idx])
    assert np.array_equal(a, src)
    s = r.stats()
    assert s["units_zero"] > 0 and s["units_copied"] > 0
    # A handler thread counts a unit after its install has woken the reader: wait for it.
    assert r.wait_complete(5.0)
    assert r.progress()[1] == 0
    srv.close()


@pytest.mark.parametrize("transport", ["udp", "shm"])
def test_fabric_transports(transport):
    src = pattern(1 << 20)
    srv = lazy.PageServer.memory(src.tobytes(), transport=transport)
    r = lazy.LazyRegion.connect(srv.address, transport=transport, mode="sigbus")
    assert np.array_equal(r.array(), src)
    assert r.stats()["units_zero"] > 0
    srv.close()


def test_file_source_with_prefetch():
    src = pattern(2 << 20)
    with tempfile.NamedTemporaryFile() as f:
        f.write(src.tobytes())
        f.flush()
        srv = lazy.PageServer.file(f.name)
        r = lazy.LazyRegion.connect(srv.address, prefetch="next:8")
        assert int(r.array()[::4096].astype(np.uint64).sum()) == int(src[::4096].astype(np.uint64).sum())
        assert r.stats()["units_prefetched"] > 0
        assert np.array_equal(r.array(), src)
        srv.close()


@pytest.mark.parametrize("transport", ["tcp", "udp", "shm"])
def test_file_is_served_live(transport):
    # A page written after the server started reaches a client that faults it afterwards.
    src = pattern(1 << 20)
    with tempfile.NamedTemporaryFile() as f:
        f.write(src.tobytes())
        f.flush()
        srv = lazy.PageServer.file(f.name, transport=transport)
        r = lazy.LazyRegion.connect(srv.address, transport=transport)
        assert bytes(r.read(0, 16)) == src[:16].tobytes()
        for at in (5 * 4096, 3 * 4096):  # a data page and an all-zero page
            os.pwrite(f.fileno(), b"\x77" * 4096, at)
            src[at:at + 4096] = 0x77
        assert np.array_equal(r.array(), src)
        srv.close()


def test_push_completes_without_access():
    src = pattern(4 << 20)
    srv = lazy.PageServer.memory(src.tobytes())
    r = lazy.LazyRegion.connect(srv.address, push=True)
    assert r.wait_complete(20.0)
    assert r.stats()["units_pushed"] > 0
    assert r.stats()["faults"] == 0
    assert np.array_equal(r.array(), src)
    srv.close()


def test_live_process_memory():
    child = subprocess.Popen(["sleep", "30"])
    try:
        srv = lazy.PageServer.process(child.pid, stop=True)
        r = lazy.LazyRegion.connect(srv.address)
        assert len(r) > 0
        a = r.array()
        # The first range's bytes equal /proc/PID/mem.
        with open(f"/proc/{child.pid}/maps") as m:
            first = next(l for l in m if l.split()[1].startswith("rw"))
        start, end = (int(x, 16) for x in first.split()[0].split("-"))
        with open(f"/proc/{child.pid}/mem", "rb") as mem:
            mem.seek(start)
            expect = np.frombuffer(mem.read(end - start), dtype=np.uint8)
        assert np.array_equal(a[: end - start], expect)
        srv.close()
    finally:
        child.kill()
        child.wait()


def test_dead_server_raises_timeout_not_hang():
    srv = lazy.PageServer.memory(pattern(1 << 20).tobytes())
    r = lazy.LazyRegion.connect(srv.address, deadline=0.3)
    assert len(r.read(0, 16)) == 16
    srv.close()
    with pytest.raises(TimeoutError):
        r.read(512 << 10, 16)
    assert "unavailable" in r.last_error()
    assert r.progress()[1] == 1


def test_bad_arguments():
    srv = lazy.PageServer.memory(b"x" * 10000)
    with pytest.raises(ValueError):
        lazy.LazyRegion.connect(srv.address, unit=3000)
    with pytest.raises(ValueError):
        lazy.LazyRegion.connect(srv.address, prefetch="sometimes")
    with pytest.raises(ValueError):
        lazy.LazyRegion.connect("not an address")
    with pytest.raises(ValueError):
        lazy.LazyRegion.connect(srv.address, transport="carrier-pigeon")
    r = lazy.LazyRegion.connect(srv.address)
    with pytest.raises(ValueError):
        r.read(9990, 100)
    srv.close()
