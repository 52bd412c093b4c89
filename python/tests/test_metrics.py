"""``/metrics`` on every service (``remora kv serve``, ``fabric serve``, ``lazy serve`` with
``--metrics ADDR``; ``remora daq serve`` on its API port, behind its token), scraped over HTTP
after a little work and read with prometheus_client's parsers: the Prometheus text format by
default, OpenMetrics when the ``Accept`` header asks for it."""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from remora_binary import remora_bin

pytest.importorskip("prometheus_client")
from prometheus_client.openmetrics.parser import (  # noqa: E402
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url, token=None, openmetrics=False):
    """(Content-Type, text) of ``GET url``."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if openmetrics:
        headers["Accept"] = OPENMETRICS
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.headers["Content-Type"], r.read().decode()


def families(text, openmetrics=False):
    parse = openmetrics_families if openmetrics else text_string_to_metric_families
    return {f.name: f for f in parse(text)}


def value(fams, family, sample=None, **labels):
    """The value of ``family``'s sample named ``sample`` (default: the family's name, with
    ``_total`` for a counter) whose labels include ``labels``."""
    f = fams[family]
    name = sample or (family + "_total" if f.type == "counter" else family)
    for s in f.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no {name}{labels} in {f.samples}")


def wait_for(pred, timeout=10):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


class Proc:
    """A ``remora`` child, killed on close; ``listening`` reads its first stdout line."""

    def __init__(self, args, cwd=None):
        self.p = subprocess.Popen([remora_bin(), *args], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                  text=True, cwd=cwd)

    def first_line(self):
        return self.p.stdout.readline().strip()

    def close(self):
        self.p.kill()
        self.p.wait(timeout=10)


def test_kv_metrics_use_memcached_exporters_names():
    pymemcache = pytest.importorskip("pymemcache.client.base")
    port, mport = free_port(), free_port()
    args = ["kv", "serve", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-t", "2",
            "--metrics", f"127.0.0.1:{mport}"]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    srv = Proc(args)
    try:
        url = f"http://127.0.0.1:{mport}/metrics"

        def up():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(up)
        c = pymemcache.Client(("127.0.0.1", port), connect_timeout=5, timeout=5)
        c.set("k", b"abc")
        assert c.get("k") == b"abc"
        assert c.get("nope") is None
        ctype, text = scrape(url)
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        f = families(text)
        assert f["memcached_commands"].type == "counter"
        assert value(f, "memcached_commands", command="get", status="hit") == 1
        assert value(f, "memcached_commands", command="get", status="miss") == 1
        assert value(f, "memcached_commands", command="set", status="hit") == 1
        assert f["memcached_current_items"].type == "gauge"
        assert value(f, "memcached_current_items") == 1
        assert value(f, "memcached_items") == 1
        assert value(f, "memcached_up") == 1
        assert value(f, "memcached_current_connections") >= 1
        assert value(f, "memcached_read_bytes") > 0
        assert value(f, "memcached_limit_bytes") == 64 << 20
        version = f["memcached_version"].samples[0]
        assert version.value == 1 and version.labels["version"].startswith("1.6.18"), version
        # The same registry as OpenMetrics, which its stricter parser accepts whole.
        ctype, text = scrape(url, openmetrics=True)
        assert ctype.startswith("application/openmetrics-text"), ctype
        om = families(text, openmetrics=True)
        assert value(om, "memcached_commands", command="get", status="hit") == 1
        c.close()
    finally:
        srv.close()


def test_fabric_metrics_count_a_bench_against_the_server():
    mport = free_port()
    srv = Proc(["fabric", "serve", "--listen", "127.0.0.1:0", "--region-size", "1M",
                "--metrics", f"127.0.0.1:{mport}"])
    try:
        addr = srv.first_line().removeprefix("listening on ")
        url = f"http://127.0.0.1:{mport}/metrics"
        f = families(scrape(url)[1])
        assert value(f, "remora_fabric_connections_established") == 0
        bench = subprocess.run(
            [remora_bin(), "fabric", "bench", "write-bw", "--transport", "tcp", "--connect", addr,
             "--size", "4096", "--iters", "50", "--warmup", "0", "--json"],
            capture_output=True, text=True, timeout=120)
        assert bench.returncode == 0, bench.stderr
        f = families(scrape(url)[1])
        assert value(f, "remora_fabric_connections_accepted") >= 1
        assert value(f, "remora_fabric_connections_established") >= 1
        assert value(f, "remora_fabric_packets_received") >= 50
        assert f["remora_fabric_connections_live"].type == "gauge"
        om = families(scrape(url, openmetrics=True)[1], openmetrics=True)
        assert value(om, "remora_fabric_packets_received") >= 50
    finally:
        srv.close()


def test_lazy_metrics_count_the_pages_a_bench_faults_in():
    mport = free_port()
    srv = Proc(["lazy", "serve", "--listen", "127.0.0.1:0", "--synthetic", str(1 << 20),
                "--metrics", f"127.0.0.1:{mport}"])
    try:
        addr = srv.first_line().removeprefix("listening on ")
        url = f"http://127.0.0.1:{mport}/metrics"
        f = families(scrape(url)[1])
        assert value(f, "remora_lazy_source_reads") == 0
        assert value(f, "remora_lazy_source_bytes") == 1 << 20
        bench = subprocess.run(
            [remora_bin(), "lazy", "bench", "--transport", "tcp", "--connect", addr,
             "--faults", "16", "--trials", "1", "--json"],
            capture_output=True, text=True, timeout=120)
        assert bench.returncode == 0, bench.stderr
        f = families(scrape(url)[1])
        assert value(f, "remora_lazy_source_reads") >= 16
        assert value(f, "remora_lazy_source_read_bytes") >= 16 * 4096
        assert value(f, "remora_lazy_serve_info", transport="tcp", source="memory") == 1
        om = families(scrape(url, openmetrics=True)[1], openmetrics=True)
        assert om["remora_lazy_serve"].type == "info"
    finally:
        srv.close()


CONFIG = """
[detector]
modules = 1
[acquisition]
frames = 8
rate_hz = 50
deadline_ms = 10000
[transport]
kind = "shm"
[pipeline]
bins = 100
"""


def test_daq_metrics_need_the_token_and_follow_a_run(tmp_path):
    (tmp_path / "data").mkdir()
    srv = Proc(["daq", "serve", "--listen", "127.0.0.1:0", "--token", "s3cret"], cwd=tmp_path)
    try:
        base = srv.first_line().split()[-1].split("/?")[0]

        def call(method, path, body=b""):
            req = urllib.request.Request(base + path, data=body or None, method=method,
                                         headers={"Authorization": "Bearer s3cret"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())

        with pytest.raises(urllib.error.HTTPError) as e:
            scrape(base + "/metrics")
        assert e.value.code == 401
        f = families(scrape(base + "/metrics", token="s3cret")[1])
        assert value(f, "remora_daq_state", state="idle") == 1
        call("PUT", "/config", CONFIG.encode())
        assert call("POST", "/start")["run"] == 1
        assert call("GET", "/wait?timeout=60")["state"] == "configured"
        ctype, text = scrape(base + "/metrics", token="s3cret")
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        f = families(text)
        assert value(f, "remora_daq_state", state="configured") == 1
        assert value(f, "remora_daq_runs") == 1
        assert value(f, "remora_daq_run_frames_received") == 8
        assert value(f, "remora_daq_run_frames_sent") == 8
        assert sum(value(f, f"remora_daq_run_frames_{k}") for k in ("kept", "rejected", "dark")) == 8
        assert value(f, "remora_daq_run_frames_per_second") > 0
        assert value(f, "remora_daq_http_connections_accepted") >= 4
        engine = f["remora_daq_engine_info"].samples[0].labels
        assert engine["engine"] and engine["how"], engine
        om = families(scrape(base + "/metrics", token="s3cret", openmetrics=True)[1],
                      openmetrics=True)
        assert om["remora_daq_engine"].type == "info"
        assert value(om, "remora_daq_runs") == 1
        doc = json.loads(urllib.request.urlopen(base + "/openapi.json", timeout=30).read())
        assert "get" in doc["paths"]["/metrics"]
    finally:
        srv.close()
