"""remora.kv.migrate: a live cache moves to a target started with --migrate-from."""
import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

import pytest

from remora_binary import remora_bin  # noqa: E402

from remora import kv

ROOT = Path(__file__).resolve().parents[2]
N_ITEMS = 3000
SECRET = "0123456789abcdef0123456789abcdef"




def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def servers(tmp_path):
    """Starts `remora kv serve` processes (each logging to a file); kills them all at the end."""
    procs = []

    def start(port, *extra, wait_listen=True):
        args = [remora_bin(), "kv", "serve", "-p", str(port), "-U", "0", "-l", "127.0.0.1", *extra]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        log = open(tmp_path / f"kv-{port}.log", "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        proc.log = tmp_path / f"kv-{port}.log"
        procs.append(proc)
        if wait_listen:
            deadline = time.time() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline or proc.poll() is not None:
                        pytest.fail(f"remora kv serve did not start:\n{proc.log.read_text()}")
                    time.sleep(0.02)
        return proc

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def value(i):
    return (f"v{i}:".encode() * (1 + i % 97))[: 10 + (i * 37) % 2000]


def recv_until(sock, end):
    buf = b""
    while not buf.endswith(end):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError(f"closed after {buf[-200:]!r}")
        buf += chunk
    return buf


def fill(port, n):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        req = b"".join(
            b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value(i)), value(i)) for i in range(n)
        )
        s.sendall(req + b"version\r\n")
        assert recv_until(s, b"\r\n").startswith(b"VERSION")


def read_all(port, n, batch=100):
    got = {}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for lo in range(0, n, batch):
            keys = b" ".join(b"k%d" % i for i in range(lo, min(n, lo + batch)))
            s.sendall(b"get " + keys + b"\r\n")
            buf = recv_until(s, b"END\r\n")
            pos = 0
            while not buf.startswith(b"END\r\n", pos):
                eol = buf.index(b"\r\n", pos)
                head = buf[pos:eol].split()
                assert head[0] == b"VALUE", buf[pos : pos + 200]
                size = int(head[3])
                got[int(head[1][1:])] = buf[eol + 2 : eol + 2 + size]
                pos = eol + 2 + size + 2
    return got


def test_migrate_moves_every_item(servers):
    p_src, p_tgt = free_port(), free_port()
    src = servers(p_src, "-A")
    fill(p_src, N_ITEMS)
    secret = secrets.token_hex(16)
    tgt = servers(
        p_tgt, "--migrate-from", f"127.0.0.1:{p_src}", "--migrate-secret", secret, wait_listen=False
    )
    steps = []
    try:
        r = kv.migrate(f"127.0.0.1:{p_src}", f"127.0.0.1:{p_tgt}", secret, progress=steps.append)
    except Exception:
        print(src.log.read_text(), tgt.log.read_text(), sep="\n")
        raise
    assert set(r) == {"downtime_ms", "total_s", "bytes"}
    assert r["downtime_ms"] is None or r["downtime_ms"] >= 0.0
    assert r["total_s"] > 0.0 and r["bytes"] > 0
    assert steps, "the callback was never called"
    for st in steps:
        assert set(st) == {"state", "present", "units", "bytes", "downtime_ms", "elapsed"}
    last = steps[-1]
    assert last["state"] == "complete"
    assert last["units"] > 0 and last["present"] == last["units"]
    assert last["bytes"] == r["bytes"]

    got = read_all(p_tgt, N_ITEMS)
    missing = [i for i in range(N_ITEMS) if got.get(i) != value(i)]
    assert not missing, f"{len(missing)} items wrong or missing on the target, e.g. {missing[:5]}"

    assert src.wait(timeout=10) is not None  # the source stops by itself once the copy is done
    assert kv.migration_stats(f"127.0.0.1:{p_tgt}")["migrate_state"] == "complete"
    assert tgt.poll() is None


def test_unreachable_source_raises_connection_error():
    with pytest.raises(ConnectionError):
        kv.migrate(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", SECRET, progress=False)
    with pytest.raises(ConnectionError):
        kv.migration_stats(f"127.0.0.1:{free_port()}")


def test_source_without_admin_is_refused(servers):
    p_src = free_port()
    servers(p_src)
    with pytest.raises(RuntimeError, match="not enabled"):
        kv.migrate(f"127.0.0.1:{p_src}", f"127.0.0.1:{free_port()}", SECRET, progress=False)
    assert kv.migration_stats(f"127.0.0.1:{p_src}").get("migrate_state", "idle") == "idle"


def test_no_target_times_out_and_callback_errors_propagate(servers):
    p_src = free_port()
    servers(p_src, "-A")
    src, to = f"127.0.0.1:{p_src}", f"127.0.0.1:{free_port()}"
    with pytest.raises(TimeoutError, match="no target asked"):
        kv.migrate(src, to, SECRET, wait=0.3, progress=False)

    calls = []

    def boom(step):
        calls.append(step)
        raise ValueError("stop here")

    with pytest.raises(ValueError, match="stop here"):
        kv.migrate(src, to, SECRET, wait=0.3, progress=boom)
    assert len(calls) == 1 and calls[0]["state"] == "armed"
    with pytest.raises(TypeError):
        kv.migrate(src, to, SECRET, progress=3)
    # disarmed after each timeout: the source serves on
    assert kv.migration_stats(src)["migrate_state"] != "armed"


def test_a_short_secret_is_a_value_error():
    with pytest.raises(ValueError, match="at least 32"):
        kv.migrate(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", "short", progress=False)
