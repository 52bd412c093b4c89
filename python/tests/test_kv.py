"""remora kv with a real client (pymemcache): get/set/cas/incr/multiget/delete/touch."""
import time

import pytest

from kv_server import start_kv

pymemcache = pytest.importorskip("pymemcache")
from pymemcache.client.base import Client  # noqa: E402



@pytest.fixture(scope="module")
def server():
    proc, port = start_kv()
    yield port
    proc.kill()
    proc.wait(timeout=10)


@pytest.fixture
def client(server):
    c = Client(("127.0.0.1", server), connect_timeout=5, timeout=5)
    c.flush_all()
    yield c
    c.close()


def test_set_get_delete(client):
    assert client.set("k", b"value")
    assert client.get("k") == b"value"
    assert client.delete("k")
    assert client.get("k") is None
    assert client.delete("k", noreply=False) is False


def test_add_replace_append_prepend(client):
    assert client.add("a", b"1", noreply=False)
    assert not client.add("a", b"2", noreply=False)
    assert client.replace("a", b"3", noreply=False)
    assert not client.replace("missing", b"x", noreply=False)
    assert client.append("a", b"4", noreply=False)
    assert client.prepend("a", b"2", noreply=False)
    assert client.get("a") == b"234"


def test_cas(client):
    client.set("c", b"one")
    value, cas = client.gets("c")
    assert value == b"one"
    assert client.cas("c", b"two", cas)
    assert not client.cas("c", b"three", cas)
    assert client.get("c") == b"two"
    assert client.cas("missing", b"x", b"1") is None


def test_incr_decr(client):
    client.set("n", b"10")
    assert client.incr("n", 5) == 15
    assert client.decr("n", 20) == 0
    assert client.incr("missing", 1) is None
    client.set("big", b"18446744073709551615")
    assert client.incr("big", 1) == 0


def test_multiget(client):
    keys = [f"key{i}" for i in range(100)]
    client.set_many({k: k.encode() * 3 for k in keys})
    got = client.get_many(keys + ["absent"])
    assert got == {k: k.encode() * 3 for k in keys}


def test_touch_and_expiry(client):
    client.set("t", b"x", expire=100)
    assert client.touch("t", expire=-1, noreply=False)
    assert client.get("t") is None
    assert not client.touch("t", noreply=False)
    client.set("gone", b"x", expire=1)
    time.sleep(2.1)
    assert client.get("gone") is None


def test_flags_and_stats(client):
    client.set("f", b"x", flags=42)
    assert client.raw_command(b"get f", b"END").startswith(b"VALUE f 42 1")
    stats = client.stats()
    for name in (b"cmd_get", b"get_hits", b"get_misses", b"curr_items", b"evictions"):
        assert name in stats
    assert stats[b"curr_items"] >= 1
