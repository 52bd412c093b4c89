"""A stand-in for ``remora daq serve``, for working on the live view page without building Rust.

Not a test (pytest collects ``test_*.py`` only): it serves crates/daq/src/control/page.html
from disk at ``/`` (read on every request, so an edit shows on reload) and fakes the control API
the page talks to, with the same fields as the real service:

    GET  /status                 the status object
    GET  /events                 server-sent events ``event: status``, every 0.5 s and on changes
    GET  /preview/image          PNG of a made-up assembled frame (scale=log|linear, max, bin)
    GET  /preview/profile        a made-up azimuthal profile
    POST /start, /stop, /pedestal  409 in the wrong state

With a token, every call but ``/`` needs it (``Authorization: Bearer T`` or ``?token=T``) and gets
401 without, as from the real service.

A run counts frames up at ``--rate`` frames/s until ``--frames``; a pedestal run takes
``{"frames": N}`` (64 by default). Run it and open the address it prints::

    python python/tests/mock_daq_server.py --listen 127.0.0.1:8750 [--token T]

It prints ``serving on http://HOST:PORT/[?token=T]`` once listening, like the real service, so the live
view test can drive it too (``REMORA_LIVE_VIEW_MOCK=1``). Standard library and numpy only.
"""
import argparse
import json
import math
import pathlib
import struct
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

PAGE = pathlib.Path(__file__).resolve().parents[2] / "crates" / "daq" / "src" / "control" / "page.html"

MODULE_W, MODULE_H, GAP = 1030, 514, 10  # assembled modules side by side with a gap between them
FRAME_BYTES = 2 * 1024 * 512 * 2  # bytes per module per frame on the wire, for GB/s
COUNTER_NAMES = ("frames_sent", "frames_complete", "frames_partial", "frames_lost", "frames_overrun",
                 "kept", "dark", "rejected", "overruns", "modules_lost", "writer_dropped")


class MockDaq:
    """The state machine and the fake run, advanced by a ticker thread."""

    def __init__(self, frames=400, rate_hz=40.0, modules=2):
        self.frames, self.rate_hz, self.modules = frames, rate_hz, modules
        self.cond = threading.Condition()
        self.state, self.message, self.run, self.kind = "configured", "configured", 0, None
        self.stopping = False
        self.expected, self.t0, self.elapsed, self.generation = 0, 0.0, 0.0, 1
        self.counters = dict.fromkeys(COUNTER_NAMES, 0)
        self.module_lost = [0] * modules
        self.pedestal = None
        self.summary = None
        self.preview_frame = None
        self.profile_frame = None
        self.rng = np.random.default_rng(7)
        threading.Thread(target=self._tick, daemon=True).start()

    # --- control -----------------------------------------------------------------------------
    def _busy(self, what):
        doing = "a pedestal run" if self.kind == "pedestal" else "an acquisition"
        return (f"{what}: {doing} is in progress (run {self.run}, state {self.state}); "
                "POST /stop first or wait for it")

    def start(self, kind, frames=None):
        with self.cond:
            what = "start" if kind == "acquisition" else "pedestal"
            if self.state in ("running", "pedestal"):
                return 409, {"error": self._busy(what)}
            self.run += 1
            self.kind, self.stopping = kind, False
            self.state = "running" if kind == "acquisition" else "pedestal"
            self.expected = frames or (self.frames if kind == "acquisition" else 64)
            self.t0, self.elapsed = time.monotonic(), 0.0
            self.counters = dict.fromkeys(COUNTER_NAMES, 0)
            self.module_lost = [0] * self.modules
            self.message = f"run {self.run} started"
            self._changed()
            return 200, {"run": self.run, "state": self.state}

    def stop(self):
        with self.cond:
            if self.state not in ("running", "pedestal"):
                return 409, {"error": f"stop: nothing is running (state {self.state})"}
            self.stopping = True
            self.message = f"run {self.run}: stopping"
            self._changed()
            return 200, {"run": self.run, "state": self.state}

    def _changed(self):
        self.generation += 1
        self.cond.notify_all()

    # --- the fake run ------------------------------------------------------------------------
    def _tick(self):
        while True:
            time.sleep(0.05)
            with self.cond:
                if self.state not in ("running", "pedestal"):
                    continue
                self.elapsed = time.monotonic() - self.t0
                target = min(self.expected, int(self.elapsed * self.rate_hz))
                c = self.counters
                while c["frames_sent"] < target:
                    c["frames_sent"] += 1
                    n = c["frames_sent"]
                    if self.state == "pedestal":
                        c["dark"] += 1
                        c["frames_complete"] += 1
                        continue
                    if n % 97 == 0:  # now and then a module goes missing
                        m = (n // 97) % self.modules
                        self.module_lost[m] += 1
                        c["modules_lost"] += 1
                        c["frames_partial"] += 1
                    else:
                        c["frames_complete"] += 1
                    if n % 2:
                        c["dark"] += 1
                    elif n % 10 == 0:
                        c["rejected"] += 1
                    else:
                        c["kept"] += 1
                    if n % 12 == 0:
                        self.preview_frame = n
                    if n % 8 == 0:
                        self.profile_frame = n
                if self.stopping or c["frames_sent"] >= self.expected:
                    self._finish()
                self.generation += 1

    def _finish(self):
        c, secs = self.counters, max(self.elapsed, 1e-9)
        if self.state == "pedestal":
            n = c["dark"]
            self.pedestal = {"source": f"dark run {self.run} ({n} frames)", "frames": n}
            self.message = f"pedestal run {self.run}: {n} dark frames averaged; the following runs use it"
        else:
            done = "stopped" if self.stopping else "finished"
            self.message = (f"run {self.run} {done}: {c['frames_sent']} frames sent, "
                            f"{c['frames_complete']} complete, {c['frames_partial']} with modules masked, "
                            f"{c['frames_lost']} lost, {c['overruns']} overruns, {c['kept']} kept")
            self.summary = dict(c, e2e_fps=c["frames_sent"] / secs,
                                e2e_gbps=c["frames_sent"] * FRAME_BYTES * self.modules / secs / 1e9,
                                seconds=secs, stopped=self.stopping, files=[])
        self.state, self.stopping = "configured", False
        self._changed()

    # --- what the page reads -----------------------------------------------------------------
    def status(self):
        with self.cond:
            running = self.state in ("running", "pedestal")
            done = self.counters["frames_complete"] + self.counters["frames_partial"]
            fps = self.rate_hz if running and self.elapsed > 0.2 else 0.0
            return {
                "state": self.state, "message": self.message, "run": self.run, "kind": self.kind,
                "stopping": self.stopping,
                "progress": done / self.expected if self.expected else 0.0,
                "elapsed_s": self.elapsed, "frames_expected": self.expected,
                "counters": dict(self.counters),
                "rates": {"fps": fps, "gbps": fps * FRAME_BYTES * self.modules / 1e9},
                "receivers": [{"index": 0, "frames_expected": self.expected, "frames_done": done,
                               "kept": self.counters["kept"], "overruns": self.counters["overruns"]}]
                if self.run else [],
                "modules": [{"index": i, "lost": n} for i, n in enumerate(self.module_lost)],
                "pedestal": self.pedestal,
                "preview": {"frame": self.preview_frame,
                            "width": self.modules * MODULE_W + (self.modules - 1) * GAP, "height": MODULE_H}
                if self.preview_frame is not None else None,
                "profile_frame": self.profile_frame,
                "summary": self.summary,
                "generation": self.generation,
            }

    def image(self, log=True, vmax=None, bin_=1):
        """The latest 'frame' as a PNG: rings around a beam centre, noise, a few hot spots."""
        frame = self.preview_frame
        w = self.modules * MODULE_W + (self.modules - 1) * GAP
        y, x = np.mgrid[0:MODULE_H:bin_, 0:w:bin_].astype(np.float32)
        r = np.hypot(x - w * 0.52, y - MODULE_H * 0.6)
        rng = np.random.default_rng(frame)
        kev = 0.2 + 5 * np.exp(-r / 150) + 4 * np.exp(-((r % 110 - 55) ** 2) / 18) * np.exp(-r / 500)
        kev = kev * rng.gamma(4.0, 0.25, kev.shape).astype(np.float32)
        for _ in range(40):
            sy, sx = rng.integers(0, kev.shape[0]), rng.integers(0, kev.shape[1])
            kev[max(0, sy - 1):sy + 2, max(0, sx - 1):sx + 2] += 80
        for m in range(1, self.modules):  # the gap between modules reads as no data
            g0 = (m * MODULE_W + (m - 1) * GAP) // bin_
            kev[:, g0:g0 + max(1, GAP // bin_)] = 0
        top = vmax if vmax else float(np.percentile(kev, 99.9))
        v = np.clip(kev / top, 0, 1)
        if log:
            v = np.log1p(v * 200) / math.log1p(200)
        stops = np.array([[0, 0, 4], [60, 15, 110], [180, 55, 120], [250, 140, 90], [252, 253, 191]],
                         np.float32)
        pos = v * (len(stops) - 1)
        i = np.minimum(pos.astype(int), len(stops) - 2)
        f = (pos - i)[..., None]
        rgb = (stops[i] * (1 - f) + stops[i + 1] * f).astype(np.uint8)
        return png(rgb)

    def profile(self):
        frame = self.profile_frame
        rng = np.random.default_rng(frame)
        x = np.linspace(0.1, 38, 200)
        y = 0.5 + 3 * np.exp(-x / 6)
        for c in (6.1, 8.7, 10.6, 12.3, 15.0, 19.8, 24.2, 29.0, 34.4):
            y += rng.uniform(5, 40) * np.exp(-((x - c) ** 2) / 0.08)
        y += rng.normal(0, 0.2, x.shape)
        return {"frame": frame, "title": f"frame {frame} (receiver 0)", "unit_x": "q_nm^-1",
                "x": x.round(5).tolist(), "y": y.round(4).tolist()}


def png(rgb):
    """An 8-bit RGB PNG from an (h, w, 3) uint8 array."""
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 3)) + chunk(b"IEND", b""))


class Handler(BaseHTTPRequestHandler):
    daq: MockDaq = None
    token = None
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet; the page polls
        pass

    def send(self, code, body, ctype="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if not self.token:
            return True
        q = parse_qs(urlsplit(self.path).query)
        return (self.headers.get("Authorization") == f"Bearer {self.token}"
                or q.get("token", [None])[-1] == self.token)

    def refuse(self):
        return self.send(401, {"error": "this call needs the service's token: Authorization: Bearer TOKEN, or ?token=TOKEN"})

    def do_GET(self):
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        daq = self.daq
        if url.path == "/":
            return self.send(200, PAGE.read_bytes(), "text/html; charset=utf-8")
        if not self.authorized():
            return self.refuse()
        if url.path == "/status":
            return self.send(200, daq.status())
        if url.path == "/events":
            return self.events()
        if url.path == "/preview/image":
            if daq.preview_frame is None:
                return self.send(404, {"error": "no preview yet"})
            try:
                vmax = None if q.get("max", "auto") == "auto" else float(q["max"])
                bin_ = max(1, min(16, int(q.get("bin", 1))))
            except ValueError:
                return self.send(400, {"error": "max: auto or a number of keV; bin: 1 to 16"})
            if q.get("scale", "log") not in ("log", "linear"):
                return self.send(400, {"error": "scale: log or linear"})
            return self.send(200, daq.image(q.get("scale", "log") == "log", vmax, bin_), "image/png")
        if url.path == "/preview/profile":
            if daq.profile_frame is None:
                return self.send(404, {"error": "no profile yet"})
            return self.send(200, daq.profile())
        self.send(404, {"error": f"no route {url.path}"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self.authorized():
            return self.refuse()
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            return self.send(400, {"error": f"body: {e}"})
        path = urlsplit(self.path).path
        if path == "/start":
            return self.send(*self.daq.start("acquisition"))
        if path == "/pedestal":
            return self.send(*self.daq.start("pedestal", body.get("frames")))
        if path == "/stop":
            return self.send(*self.daq.stop())
        self.send(404, {"error": f"no route {path}"})

    def events(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        daq, last_state = self.daq, None
        try:
            while True:
                st = daq.status()
                self.wfile.write(f"event: status\ndata: {json.dumps(st)}\n\n".encode())
                self.wfile.flush()
                last_state = st["state"], st["message"]
                with daq.cond:  # the next tick, or sooner on a state change
                    end = time.monotonic() + 0.5
                    while (daq.state, daq.message) == last_state and time.monotonic() < end:
                        daq.cond.wait(end - time.monotonic())
        except (BrokenPipeError, ConnectionResetError):
            pass


def serve(listen="127.0.0.1:0", token=None, frames=400, rate_hz=40.0, modules=2):
    """Starts the mock in a thread; returns the server (``server.server_address``, ``shutdown()``)."""
    host, port = listen.rsplit(":", 1)
    handler = type("BoundHandler", (Handler,), {"daq": MockDaq(frames, rate_hz, modules), "token": token})
    server = ThreadingHTTPServer((host, int(port)), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:8750")
    ap.add_argument("--token", default=None)
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--rate", type=float, default=40.0, help="frames/s")
    ap.add_argument("--modules", type=int, default=2)
    ap.add_argument("config", nargs="?", help="ignored (the real service's configuration)")
    a = ap.parse_args(argv)
    server = serve(a.listen, a.token, a.frames, a.rate, a.modules)
    host, port = server.server_address[:2]
    print(f"serving on http://{host}:{port}/" + (f"?token={a.token}" if a.token else ""), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
