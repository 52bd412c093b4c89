"""Starting a ``remora kv serve`` for a test: on a free loopback port, as root with ``-u root``."""
import os
import socket
import subprocess
import time

import pytest

from remora_binary import remora_bin


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_kv(*extra):
    """A running ``remora kv serve -t 2`` with ``extra`` arguments and its port; the test fails
    with the server's stderr if it does not listen within 10 s."""
    port = free_port()
    args = [remora_bin(), "kv", "serve", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2",
            *extra]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("remora kv serve did not start: " + proc.stderr.read().decode())
            time.sleep(0.02)
