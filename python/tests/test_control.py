"""The acquisition control service over real HTTP: ``remora daq serve`` as a process, every
endpoint's success and error paths, the token every call needs, the OpenAPI document validated,
a whole acquisition driven through ``remora.daq.Client`` and checked against its HDF5 file
(written beneath the service's data directory)."""
import json
import os
import pathlib
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from remora.daq import Client, ControlError

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXE = pathlib.Path(os.environ.get("REMORA_EXE", ROOT / "target" / "release" / "remora"))

CONFIG = """
[detector]
modules = 2
[source]
distinct = 4
[acquisition]
frames = {frames}
rate_hz = {rate}
bunch = 4
deadline_ms = 10000
[pipeline]
bins = 200
"""

# Every path the tests below call, checked against the served OpenAPI document.
CALLED = set()
# The token of each running server, by its base URL: ``call`` sends it unless asked not to.
TOKENS = {}


class Server:
    """``remora daq serve`` in ``tmp`` (its data directory: ``tmp/data``)."""

    def __init__(self, tmp, token=None, config=None):
        if not EXE.exists():
            pytest.skip(f"{EXE} is not built (make build)")
        (tmp / "data").mkdir(exist_ok=True)
        args = [str(EXE), "daq", "serve", "--listen", "127.0.0.1:0"]
        if config:
            p = tmp / "start.toml"
            p.write_text(config)
            args.append(str(p))
        env = dict(os.environ)
        env.pop("REMORA_DAQ_TOKEN", None)
        if token:
            args += ["--token", token]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=tmp, env=env)
        line = self.proc.stdout.readline()
        assert line.startswith("serving on "), (line, self.proc.stderr.read())
        # http://ADDR/?token=TOKEN, as Jupyter prints it.
        self.printed = line.split()[-1]
        parts = urllib.parse.urlsplit(self.printed)
        self.url = f"{parts.scheme}://{parts.netloc}"
        self.token = urllib.parse.parse_qs(parts.query)["token"][0]
        TOKENS[self.url] = self.token

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.close()


def call(url, method, path, body=None, headers=None, auth=True):
    """(status, parsed JSON or bytes) without raising on 4xx; with the server's token unless
    ``auth`` is false or ``headers`` has one."""
    CALLED.add(path.split("?")[0])
    data = body.encode() if isinstance(body, str) else body
    headers = dict(headers or {})
    if auth and "Authorization" not in headers and url in TOKENS:
        headers["Authorization"] = f"Bearer {TOKENS[url]}"
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw, code, ctype = r.read(), r.status, r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        raw, code, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    if ctype.startswith("application/json"):
        return code, json.loads(raw)
    return code, raw


def wait_state(url, states, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = call(url, "GET", "/status")[1]
        if st["state"] in states:
            return st
        time.sleep(0.1)
    raise AssertionError(f"state never became {states}: {st}")


def test_control_paths_and_their_refusals(server):
    u = server.url
    code, st = call(u, "GET", "/status")
    assert code == 200 and st["state"] == "idle" and st["run"] == 0
    assert call(u, "GET", "/config")[0] == 404
    for path in ("/start", "/stop", "/pedestal"):
        code, e = call(u, "POST", path, b"")
        assert code == 409 and e["error"], (path, e)
    assert call(u, "GET", "/preview/image")[0] == 404
    assert call(u, "GET", "/preview/profile")[0] == 404
    code, e = call(u, "GET", "/no/such/path")
    assert code == 404 and "openapi" in e["error"]

    code, st = call(u, "PUT", "/config", CONFIG.format(frames=4000, rate=50))
    assert code == 200 and st["state"] == "configured", st
    code, cfg = call(u, "GET", "/config")
    assert code == 200 and cfg["acquisition"]["frames"] == 4000
    # The same schema as JSON.
    code, st = call(u, "PUT", "/config", json.dumps(cfg), {"Content-Type": "application/json"})
    assert code == 200, st

    code, a = call(u, "POST", "/start", b"")
    assert code == 202 and a == {"run": 1, "state": "running"}
    code, e = call(u, "POST", "/start", b"")
    assert code == 409 and "run 1" in e["error"]
    code, e = call(u, "PUT", "/config", CONFIG.format(frames=10, rate=0))
    assert code == 409 and e["error"].startswith("config")
    assert call(u, "POST", "/pedestal", b"")[0] == 409
    # Frames flow, and previews appear.
    st = wait_state(u, ("running",))
    end = time.monotonic() + 60
    while st["preview"] is None or st["profile_frame"] is None:
        assert time.monotonic() < end, st
        time.sleep(0.2)
        st = call(u, "GET", "/status")[1]
    code, png = call(u, "GET", "/preview/image?scale=log&max=auto&bin=2")
    assert code == 200 and png[:8] == b"\x89PNG\r\n\x1a\n"
    code, png = call(u, "GET", "/preview/image?scale=linear&max=40")
    assert code == 200 and png[:4] == b"\x89PNG"
    code, prof = call(u, "GET", "/preview/profile")
    assert code == 200 and len(prof["x"]) == len(prof["y"]) == 200 and prof["unit_x"] == "q_nm^-1"
    for bad in ("scale=sqrt", "max=-1", "max=lots", "bin=99", "colour=red"):
        code, e = call(u, "GET", f"/preview/image?{bad}")
        assert code == 400 and e["error"], bad

    code, a = call(u, "POST", "/stop", b"")
    assert code == 202 and a["run"] == 1
    code, st = call(u, "GET", "/wait?timeout=60")
    assert code == 200 and st["state"] == "configured", st
    s = st["summary"]
    assert s["stopped"] and s["frames_sent"] < 4000
    assert s["frames_lost"] == 0 and s["frames_complete"] + s["frames_partial"] == s["frames_sent"]
    assert call(u, "POST", "/stop", b"")[0] == 409
    assert call(u, "GET", "/wait?timeout=-1")[0] == 400


def test_bad_requests_get_a_reason_and_the_service_keeps_serving(server):
    u = server.url
    cases = [
        ("not toml at all [", "application/toml", None),
        ("[detector]\nmodules = 0\n[acquisition]\nframes = 1\n", "application/toml", "detector.modules"),
        ("[detector]\nmodules = 2\nspeed = 3\n[acquisition]\nframes = 1\n", "application/toml", "speed"),
        ('{"detector": {"modules": 2}, "acquisition": {"frames": 1', "application/json", None),
        ('{"detector": {"modules": 2}, "acquisition": {"frames": "many"}}', "application/json",
         "acquisition.frames"),
        ('{"detector": {"modules": 2, "colour": 1}, "acquisition": {"frames": 1}}', "application/json",
         "colour"),
        ('[1, 2]', "application/json", None),
    ]
    for body, ctype, names in cases:
        code, e = call(u, "PUT", "/config", body, {"Content-Type": ctype})
        assert code == 400, (body, e)
        assert e["error"] and (names is None or names in e["error"]), (body, e)
    code, e = call(u, "PUT", "/config", b"\xff\xfe\x00", {"Content-Type": "application/toml"})
    assert code == 400 and "UTF-8" in e["error"]
    code, e = call(u, "PUT", "/config", b"#" * (2 << 20))
    assert code == 413 and "bytes" in e["error"]
    call(u, "PUT", "/config", CONFIG.format(frames=8, rate=0))
    for body in (b'{"frames": "x"}', b'{"frames": 0}', b'{"frames": 1, "extra": 2}', b"{"):
        code, e = call(u, "POST", "/pedestal", body, {"Content-Type": "application/json"})
        assert code == 400 and e["error"], (body, e)
    code, st = call(u, "GET", "/status")
    assert code == 200 and st["state"] == "configured"
    assert server.proc.poll() is None


def test_a_token_guards_every_call_but_the_page(tmp_path):
    s = Server(tmp_path, token="s3cret", config=CONFIG.format(frames=8, rate=0))
    try:
        u = s.url
        assert s.printed == u + "/?token=s3cret"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            code, e = call(u, "POST", "/start", b"", headers, auth=False)
            assert code == 401 and "token" in e["error"]
            assert call(u, "PUT", "/config", CONFIG.format(frames=8, rate=0), headers, auth=False)[0] == 401
            for path in ("/status", "/wait?timeout=0", "/config", "/preview/profile", "/events",
                         "/metrics"):
                assert call(u, "GET", path, None, headers, auth=False)[0] == 401, (path, headers)
        assert call(u, "GET", "/status?token=wrong", auth=False)[0] == 401
        assert call(u, "GET", "/status?token=s3cret", auth=False)[1]["state"] == "configured"
        assert call(u, "GET", "/", auth=False)[0] == 200
        assert call(u, "GET", "/openapi.json", auth=False)[0] == 200
        with pytest.raises(ControlError) as e:
            Client(u).status()
        assert e.value.status == 401
        # The printed address is enough: the client takes the token from it.
        c = Client(s.printed)
        assert c.start()["run"] == 1
        assert c.wait(120)["counters"]["frames_complete"] == 8
    finally:
        s.close()


def test_a_random_token_is_printed_when_none_is_given(server):
    assert len(server.token) == 32 and all(ch in "0123456789abcdef" for ch in server.token)
    assert server.printed == f"{server.url}/?token={server.token}"
    assert call(server.url, "GET", "/status", auth=False)[0] == 401
    assert Client(server.printed).status()["state"] == "idle"


def test_client_paths_stay_beneath_the_data_directory(server, tmp_path):
    outside = tmp_path / "outside.h5"
    for path in (str(outside), "../outside.h5", "/etc/remora-test.h5"):
        code, e = call(server.url, "PUT", "/config",
                       CONFIG.format(frames=8, rate=0) + f'[output]\nfile = "{path}"\n')
        assert code == 400 and "output.file" in e["error"] and "outside the data directory" in e["error"], e
    code, e = call(server.url, "PUT", "/config",
                   CONFIG.format(frames=8, rate=0).replace("[source]", '[source]\nkind = "raw"\npath = "/dev/zero"'))
    assert code == 400 and "source.path" in e["error"], e
    code, e = call(server.url, "PUT", "/config",
                   CONFIG.format(frames=8, rate=0).replace("modules = 2", "modules = 32")
                   .replace("distinct = 4", "distinct = 4096"))
    assert code == 400 and "memory budget" in e["error"], e
    assert not outside.exists()
    assert call(server.url, "GET", "/status")[1]["state"] == "idle"


def test_openapi_document_validates_and_holds_every_path_called(server):
    validator = pytest.importorskip("openapi_spec_validator")
    code, doc = call(server.url, "GET", "/openapi.json")
    assert code == 200 and doc["openapi"].startswith("3.")
    validator.validate(doc)
    called = CALLED | {"/", "/events", "/openapi.json", "/wait", "/config", "/metrics"}
    called.discard("/no/such/path")
    missing = called - set(doc["paths"])
    assert not missing, missing
    assert "Status" in doc["components"]["schemas"]


def test_a_whole_acquisition_through_the_client_matches_its_file(server, tmp_path):
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("hdf5plugin")
    out = tmp_path / "data" / "run.h5"
    c = Client(server.printed)
    with pytest.raises(ControlError) as e:
        c.start()
    assert e.value.status == 409
    # Relative to the service's data directory.
    c.configure(CONFIG.format(frames=48, rate=0).replace("bunch = 4", "bunch = 24")
                + '[output]\nfile = "run.h5"\n')
    assert c.status()["state"] == "configured"

    # A dark run first: its pedestal is reported and used by the acquisition.
    c.pedestal(frames=16)
    st = c.wait(120)
    assert st["state"] == "configured", st["message"]
    assert st["pedestal"]["frames"] == 16

    seen = []

    def listen():
        for ev in Client(server.printed, timeout=120).events():
            seen.append(ev)
            if ev["run"] == 2 and ev["state"] == "configured":
                return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    time.sleep(0.3)
    assert c.start()["run"] == 2
    st = c.wait(120)
    t.join(30)
    assert st["state"] == "configured", st["message"]
    assert any(ev["state"] == "running" for ev in seen), [e["state"] for e in seen]
    gens = [ev["generation"] for ev in seen]
    assert gens == sorted(gens)

    counters = st["counters"]
    assert counters["frames_sent"] == 48
    assert counters["frames_complete"] == 48 and counters["frames_lost"] == 0
    with h5py.File(out, "r") as f:
        fr = f["/entry/frames"]
        kind = fr["kind"][:]
        assert len(fr["frame_number"][:]) == counters["frames_complete"] + counters["frames_partial"]
        assert int(np.sum(kind == 0)) == counters["dark"]
        assert int(np.sum(kind == 1)) == counters["rejected"]
        assert int(np.sum(fr["kept"][:])) == counters["kept"]
        lost = fr["lost_modules"][:]
        assert sum(bin(int(v)).count("1") for v in lost) == counters["modules_lost"]
        assert f["/entry/azint/I"].shape[0] == counters["kept"]
    assert st["summary"]["files"] == ["run.h5"]
