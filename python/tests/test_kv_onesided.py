"""remora.kv.Client against ``remora kv serve --one-sided``: GETs by one-sided READs over udp and
shm, checked against what the text protocol stored and against pymemcache's view."""
import os

import pytest

from kv_server import free_port, start_kv
from remora import kv


def start(*extra):
    proc, port = start_kv(*extra)
    return proc, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def server():
    proc, addr = start("--one-sided", f"127.0.0.1:{free_port()}")
    yield addr
    proc.kill()
    proc.wait(timeout=10)


@pytest.mark.parametrize("transport", ["udp", "shm"])
def test_gets_go_by_reads_and_see_what_was_stored(server, transport):
    c = kv.Client(server, transport=transport)
    assert c.stats()["one_sided"], "the server's stats name a grant"
    values = {f"key:{i}": os.urandom(1 + (i * 37) % 900) for i in range(200)}
    for k, v in values.items():
        assert c.set(k, v, flags=len(v))
    for k, v in values.items():
        assert c.get(k) == v
        assert c.get(k.encode()) == v
    item = c.get_item("key:7")
    assert item["value"] == values["key:7"] and item["flags"] == len(values["key:7"])
    assert item["cas"] > 0 and item["exptime"] == 0
    keys = list(values) + ["absent:1", "absent:2"]
    assert c.get_many(keys) == values
    assert c.get("absent:3") is None
    assert c.delete("key:0") and not c.delete("key:0")
    assert c.get("key:0") is None
    s = c.stats()
    assert s["reads"] >= 2 * 200 + len(keys) and s["fallbacks"] == 0, s


def test_a_value_past_what_reads_fetch_falls_back_to_mg(server):
    c = kv.Client(server, transport="shm")
    big = os.urandom(900 << 10)
    assert c.set("big", big)
    assert c.get("big") == big
    assert c.stats()["fallbacks"] >= 1, "a value larger than a slab chunk is chunked: mg"


def test_text_only_and_a_server_without_grants_read_by_mg(server):
    c = kv.Client(server, one_sided=False)
    assert c.set("plain", b"text") and c.get("plain") == b"text"
    assert c.stats() == {"one_sided": False, "reads": 0, "fallbacks": 1, "reconnects": 0}
    proc, addr = start()
    try:
        c = kv.Client(addr)
        assert not c.stats()["one_sided"]
        assert c.set("k", b"v") and c.get_many(["k", "x"]) == {"k": b"v"}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_bad_arguments_are_refused_clearly(server):
    with pytest.raises(ValueError, match="transport"):
        kv.Client(server, transport="rdma")
    c = kv.Client(server)
    with pytest.raises(ValueError, match="text-protocol key"):
        c.get("has space")
    with pytest.raises(ValueError, match="text-protocol key"):
        c.set("", b"x")
    with pytest.raises(ConnectionError):
        kv.Client(f"127.0.0.1:{free_port()}")
