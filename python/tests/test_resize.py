"""remora.resize on real photographs, against ImageMagick's sizes and Pillow's Lanczos.

The photographs are Debian's ``opencv-doc`` samples (``scripts/test-deps.sh`` installs it; the
tests that need them skip, saying so, where they are missing); nothing random is generated.
ImageMagick's sizes come from Debian's ``/usr/bin/convert`` (a ``convert`` earlier on PATH may be
something else), the quality reference from Pillow. The HTTP client is tested against a small
in-process stand-in of the service's POST API, and against ``remora resize serve`` where the
release binary has it, whose OpenAPI document is validated with ``openapi-spec-validator``.
"""
import concurrent.futures
import http.server
import io
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from remora import resize as rr

try:
    from PIL import Image
except ImportError:  # pragma: no cover - in python/requirements-test.txt
    Image = None

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/usr/share/doc/opencv-doc/examples/data")
CONVERT = "/usr/bin/convert"
IDENTIFY = "/usr/bin/identify"
# Colour photographs of several sizes, qualities and chroma samplings (aloeL 1282x1110 Q80 4:2:0,
# baboon 512x512 Q92 4:2:2, starry_night 4:4:4, leuvenA Q100, ...); right14 is a gray JPEG.
PHOTOS = ["aloeL.jpg", "ela_original.jpg", "building.jpg", "pca_test1.jpg", "starry_night.jpg",
          "leuvenA.jpg", "baboon.jpg", "fruits.jpg", "butterfly.jpg"]
GRAY = "right14.jpg"
GEOMETRIES = ["500x500", "500x500^", "500x500!", "500x500>", "1000x1000>", "1000x1000<",
              "300", "x200", "37%", "30%x60%", "120%", "100000@", "640x480^", "16:9", "1x1",
              "333.5x250.25"]


def photo(name):
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is missing: install Debian's opencv-doc (scripts/test-deps.sh)")
    return path


def need_pillow():
    if Image is None:
        pytest.skip("Pillow is not installed (pip install -r python/requirements-test.txt)")


def decode(data, mode="RGB"):
    """Pixels of an encoded image, by Pillow."""
    need_pillow()
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert(mode) if mode else im)


def luma(rgb):
    rgb = rgb.astype(np.float64)
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def _blur(x, sigma=1.5, radius=5):
    """Separable Gaussian, 'valid' region only."""
    t = np.arange(-radius, radius + 1)
    k = np.exp(-t * t / (2 * sigma * sigma))
    k /= k.sum()
    n = 2 * radius
    rows = sum(k[i] * x[:, i:x.shape[1] - n + i] for i in range(n + 1))
    return sum(k[i] * rows[i:rows.shape[0] - n + i, :] for i in range(n + 1))


def ssim(a, b):
    """Mean SSIM (Wang et al. 2004: 11x11 Gaussian window, sigma 1.5) of two 8-bit planes."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    ma, mb = _blur(a), _blur(b)
    saa, sbb, sab = _blur(a * a) - ma * ma, _blur(b * b) - mb * mb, _blur(a * b) - ma * mb
    m = ((2 * ma * mb + c1) * (2 * sab + c2)) / ((ma * ma + mb * mb + c1) * (saa + sbb + c2))
    return float(m.mean())


# ---------------------------------------------------------------------------------------------
# Geometry and output sizes.

def test_geometry_examples():
    assert rr.geometry("500x500", 4032, 3024) == (500, 375)
    assert rr.geometry("500x500^", 4032, 3024) == (667, 500)
    assert rr.geometry("500x500!", 4032, 3024) == (500, 500)
    assert rr.geometry("500x500>", 400, 300) == (400, 300)
    assert rr.geometry("50%", 101, 51) == (51, 26)
    for bad in ["500y", "", "x", "abc", "500x500#"]:
        with pytest.raises(ValueError):
            rr.geometry(bad, 100, 100)
    with pytest.raises(ValueError):
        rr.geometry("50%", 0, 10)


@pytest.mark.parametrize("name", ["aloeL.jpg", "butterfly.jpg", "baboon.jpg"])
def test_sizes_equal_geometry_and_imagemagick(name):
    path = photo(name)
    data = path.read_bytes()
    i = rr.info(data)
    for g in GEOMETRIES:
        want = rr.geometry(g, i["width"], i["height"])
        out = rr.resize(data, g)
        o = rr.info(out)
        assert (o["width"], o["height"]) == want, g
        if os.access(CONVERT, os.X_OK):
            im = subprocess.run([CONVERT, str(path), "-resize", g, "-format", "%w %h", "info:"],
                                check=True, capture_output=True, text=True).stdout.split()
            assert tuple(map(int, im)) == want, f"{name} {g}: ImageMagick {im}"


# ---------------------------------------------------------------------------------------------
# Quality against Pillow.

def test_quality_vs_pillow_lanczos():
    """Luma SSIM of remora's fit-in-500x500 Q85 output to Pillow's LANCZOS resize of the full
    decode, saved at Q85: both are good resizes of the same photo, so they must agree closely.
    The numbers are printed (pytest -s)."""
    need_pillow()
    rows = []
    for name in PHOTOS:
        path = photo(name)
        data = path.read_bytes()
        for g in ["500x500", "250x250"]:
            ours = rr.resize(data, g, quality=85)
            with Image.open(path) as im:
                full = im.convert("RGB")
            size = rr.geometry(g, *full.size)
            buf = io.BytesIO()
            full.resize(size, Image.LANCZOS).save(buf, "JPEG", quality=85)
            a, b = decode(ours), decode(buf.getvalue())
            assert a.shape == b.shape
            s = ssim(luma(a), luma(b))
            rows.append((name, g, s, len(ours), buf.tell()))
    print("\nremora vs Pillow LANCZOS, both Q85: luma SSIM, bytes (remora, Pillow)")
    for name, g, s, n1, n2 in rows:
        print(f"  {name:18} {g:8} {s:.4f}  {n1:7} {n2:7}")
    worst = min(rows, key=lambda r: r[2])
    assert worst[2] >= 0.95, worst


# ---------------------------------------------------------------------------------------------
# The numpy path.

def test_array_path_equals_png_output():
    """Pixels in, pixels out: the same resample as the encoded path (remora's own decode: equal;
    Pillow's decode of the JPEG: within 1)."""
    need_pillow()
    data = photo("aloeL.jpg").read_bytes()
    # "100%" keeps the size: remora's full decode, losslessly as PNG.
    full = decode(rr.resize(data, "100%", format="png"))
    assert full.shape == (1110, 1282, 3)
    with Image.open(photo("aloeL.jpg")) as im:
        pil = np.asarray(im.convert("RGB"))
    assert np.abs(pil.astype(int) - full).max() <= 1
    # Shrinks under 4x: no DCT-domain shrink on the encoded path, so the same input pixels.
    for g in ["500x500", "640x480!", "50%", "2000x2000"]:
        want = decode(rr.resize(data, g, format="png"))
        got = rr.resize(full, g)
        assert got.dtype == np.uint8 and got.shape == want.shape, g
        assert np.abs(got.astype(int) - want).max() <= 1, g
        assert np.array_equal(got, want), g
        got = rr.resize(pil, g)
        assert np.abs(got.astype(int) - want).max() <= 1, g


def test_gpu_engine_resamples_like_the_cpu():
    """engine="gpu" on whatever Vulkan device REMORA_GPU allows (make test: lavapipe): within one
    grey level of the CPU resample, on encoded and pixel inputs; unknown engines are refused."""
    need_pillow()
    data = photo("aloeL.jpg").read_bytes()
    with pytest.raises(ValueError, match="engine"):
        rr.resize(data, "100x100", engine="cuda")
    if os.environ.get("REMORA_GPU", "off") == "off":
        pytest.skip("REMORA_GPU is not set: no GPU engine asked for")
    full = decode(rr.resize(data, "100%", format="png"))
    for g in ["500x500", "2000x2000"]:
        cpu = rr.resize(full, g)
        gpu = rr.resize(full, g, engine="gpu")
        assert gpu.shape == cpu.shape and np.abs(gpu.astype(int) - cpu).max() <= 1, g
        want = decode(rr.resize(data, g, format="png"))
        got = decode(rr.resize(data, g, format="png", engine="gpu"))
        assert np.abs(got.astype(int) - want).max() <= 1, g


def test_array_layouts_and_no_copy_inputs():
    need_pillow()
    rgb = decode(photo("butterfly.jpg").read_bytes())          # (356, 493, 3)
    assert not rgb.flags.writeable                              # read-only input is fine
    out = rr.resize(rgb, "200x200")
    assert out.shape == (144, 200, 3) and out.flags.c_contiguous and out.flags.writeable
    gray = np.ascontiguousarray(luma(rgb).round().astype(np.uint8))
    g2 = rr.resize(gray, "200x200")
    assert g2.shape == (144, 200) and g2.dtype == np.uint8
    assert rr.resize(gray[:, :, None], "200x200").shape == (144, 200, 1)
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
    out4 = rr.resize(rgba, "200x200")
    assert out4.shape == (144, 200, 4) and (out4[..., 3] == 255).all()
    assert np.abs(out4[..., :3].astype(int) - out).max() <= 1
    # An unchanged size is a copy of the input.
    same = rr.resize(rgb, "493x356")
    assert np.array_equal(same, rgb) and not np.shares_memory(same, rgb)
    # Thumbnail and filters apply to arrays too.
    assert rr.resize(rgb, "50x50", thumbnail=True, strip=True).shape == (36, 50, 3)
    nearest = rr.resize(rgb, "50%", filter="point")
    assert set(np.unique(nearest)).issubset(set(np.unique(rgb)))


def test_gray_stays_gray():
    need_pillow()
    data = photo(GRAY).read_bytes()
    i = rr.info(data)
    assert (i["channels"], i["sampling"]) == (1, None)
    out = rr.resize(data, "320x320", quality=80)
    o = rr.info(out)
    assert (o["format"], o["channels"], o["sampling"], o["quality"]) == ("jpeg", 1, None, 80)
    with Image.open(io.BytesIO(out)) as im:
        assert im.mode == "L" and im.size == (320, 240)
    png = rr.resize(data, "320x320", format="png")
    with Image.open(io.BytesIO(png)) as im:
        assert im.mode == "L" and im.format == "PNG"


# ---------------------------------------------------------------------------------------------
# Encoded options and info().

def test_info_fields_match_imagemagick():
    for name, sampling in [("aloeL.jpg", "4:2:0"), ("baboon.jpg", "4:2:2"),
                           ("starry_night.jpg", "4:4:4")]:
        path = photo(name)
        i = rr.info(path.read_bytes())
        assert i["format"] == "jpeg" and i["channels"] == 3 and i["orientation"] == 1
        assert i["sampling"] == sampling
        if os.access(IDENTIFY, os.X_OK):
            w, h, q = subprocess.run([IDENTIFY, "-format", "%w %h %Q", str(path)], check=True,
                                     capture_output=True, text=True).stdout.split()
            assert (i["width"], i["height"], i["quality"]) == (int(w), int(h), int(q)), name
    # A PNG: no quality, no sampling.
    png = rr.resize(photo("butterfly.jpg").read_bytes(), "100x100", format="png")
    assert rr.info(png) == {"width": 100, "height": 72, "format": "png", "channels": 3,
                            "quality": None, "orientation": 1, "sampling": None}
    # bytearray and memoryview are accepted as well as bytes.
    data = photo("home.jpg").read_bytes()
    assert rr.info(bytearray(data)) == rr.info(memoryview(data)) == rr.info(data)
    # Any buffer of bytes (through memoryview in the abi3 module), not a buffer of wider items.
    import array
    assert rr.info(array.array("B", data)) == rr.info(data)
    with pytest.raises(TypeError, match="encoded image"):
        rr.info(array.array("i", [1, 2, 3]))
    with pytest.raises(TypeError, match="encoded image"):
        rr.info(42)


def test_options_quality_sampling_progressive_format():
    data = photo("aloeL.jpg").read_bytes()
    # ImageMagick's defaults: the input's estimated quality (80) and sampling (4:2:0).
    o = rr.info(rr.resize(data, "400x400"))
    assert (o["quality"], o["sampling"]) == (80, "4:2:0")
    o = rr.info(rr.resize(data, "400x400", quality=95))
    assert (o["quality"], o["sampling"]) == (95, "4:2:0")
    o = rr.info(rr.resize(data, "400x400", quality=70, sampling="4:4:4"))
    assert (o["quality"], o["sampling"]) == (70, "4:4:4")
    prog = rr.resize(data, "400x400", progressive=True)
    assert b"\xff\xc2" in prog  # SOF2
    assert rr.info(rr.resize(data, "400x400", format="png"))["format"] == "png"
    # PNG in: PNG out unless asked.
    png = photo("butterfly.jpg")
    p = rr.resize(png.read_bytes(), "100x100", format="png")
    assert rr.info(rr.resize(p, "50x50"))["format"] == "png"
    assert rr.info(rr.resize(p, "50x50", format="jpeg", quality=90))["quality"] == 90


def rotated_photo():
    """butterfly.jpg (493x356) re-saved by Pillow with EXIF orientation 6 (rotate 90 degrees
    clockwise to display)."""
    need_pillow()
    with Image.open(photo("butterfly.jpg")) as im:
        exif = Image.Exif()
        exif[0x0112] = 6
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def test_exif_orientation_and_strip():
    rotated = rotated_photo()
    assert rr.info(rotated)["orientation"] == 6
    kept = rr.resize(rotated, "200x200")
    assert (rr.info(kept)["width"], rr.info(kept)["orientation"]) == (200, 6)
    upright = rr.resize(rotated, "200x200", auto_orient=True)
    o = rr.info(upright)
    assert (o["width"], o["height"], o["orientation"]) == (*rr.geometry("200x200", 356, 493), 1)
    stripped = rr.resize(rotated, "200x200", strip=True)
    assert rr.info(stripped)["orientation"] == 1 and b"Exif" not in stripped[:200]


# ---------------------------------------------------------------------------------------------
# Errors.

def test_errors():
    data = photo("aloeL.jpg").read_bytes()
    with pytest.raises(ValueError, match="truncated|decode"):
        rr.resize(data[:200], "100x100")                        # headers cut short
    with pytest.raises(ValueError):
        rr.resize(data[:len(data) // 2], "100x100")             # entropy-coded data cut short
    with pytest.raises(ValueError, match="not a JPEG or PNG"):
        rr.resize(b"GIF89a" + bytes(100), "100x100")
    with pytest.raises(ValueError, match="geometry"):
        rr.resize(data, "500y")
    with pytest.raises(ValueError, match="filter"):
        rr.resize(data, "100x100", filter="bogus")
    with pytest.raises(ValueError, match="sampling"):
        rr.resize(data, "100x100", sampling="3:1:1")
    with pytest.raises(ValueError, match="format"):
        rr.resize(data, "100x100", format="gif")
    for q in (0, 101, -5):
        with pytest.raises(ValueError, match="quality"):
            rr.resize(data, "100x100", quality=q)
    with pytest.raises(ValueError, match="output pixels"):
        rr.resize(data, "100000x100000!")                      # over the output limit
    with pytest.raises(ValueError):
        rr.info(data[:50])
    with pytest.raises(TypeError):
        rr.resize("photo.jpg", "100x100")
    with pytest.raises(TypeError):
        rr.resize(12, "100x100")
    with pytest.raises(TypeError):
        rr.info(np.zeros((4, 4), np.uint8))


def test_array_errors():
    a = np.zeros((40, 30, 3), np.uint8)
    with pytest.raises(TypeError, match="uint8"):
        rr.resize(a.astype(np.float32), "10x10")
    with pytest.raises(TypeError, match="uint8"):
        rr.resize(a.astype(np.uint16), "10x10")
    for shape in [(40, 30, 5), (40,), (2, 40, 30, 3), (40, 30, 0)]:
        with pytest.raises(ValueError, match="shape"):
            rr.resize(np.zeros(shape, np.uint8), "10x10")
    with pytest.raises(ValueError, match="C-contiguous"):
        rr.resize(a[:, ::2], "10x10")
    with pytest.raises(ValueError, match="C-contiguous"):
        rr.resize(np.asfortranarray(a[..., 0]), "10x10")
    with pytest.raises(ValueError, match="empty"):
        rr.resize(np.zeros((0, 30, 3), np.uint8), "10x10")
    for kw in [{"quality": 80}, {"format": "png"}, {"sampling": "4:4:4"}, {"progressive": True},
               {"auto_orient": True}]:
        with pytest.raises(ValueError, match=next(iter(kw))):
            rr.resize(a, "10x10", **kw)
    with pytest.raises(ValueError, match="geometry"):
        rr.resize(a, "10y10")


def test_threads_give_the_same_bytes():
    """The GIL is released while working: threads run side by side and agree with a serial run."""
    data = [photo(n).read_bytes() for n in PHOTOS[:4]]
    serial = [rr.resize(d, "300x300", quality=85) for d in data]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda d: rr.resize(d, "300x300", quality=85), data * 2)) == \
            serial * 2


# ---------------------------------------------------------------------------------------------
# The HTTP client.

class _Stub(http.server.BaseHTTPRequestHandler):
    """The service's POST API in miniature: /resize with the engine behind it, a 503 with
    Retry-After for the first `busy` requests."""

    busy = 0
    seen = []
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.lock:
            _Stub.seen.append(q)
            busy = _Stub.busy > 0
            _Stub.busy -= busy
        if busy:
            return self._send(503, b'{"error": "queue full"}', {"Retry-After": "0"})
        if url.path != "/resize":
            return self._send(404, b"not found")
        try:
            out = rr.resize(body, q["geometry"], quality=int(q["quality"]) if "quality" in q
                            else None, format=q.get("format"), filter=q.get("filter"),
                            strip=q.get("strip") == "1",
                            auto_orient=q.get("auto_orient", "1") == "1")
        except ValueError as e:
            return self._send(400, str(e).encode())
        self._send(200, out, {"Content-Type": "image/jpeg"})

    def _send(self, status, body, headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def stub():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Stub.busy, _Stub.seen = 0, []
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_client_against_stub(stub):
    data = photo("aloeL.jpg").read_bytes()
    c = rr.Client(stub + "/")
    out = c.resize(data, "200x200", quality=80, strip=True)
    assert out == rr.resize(data, "200x200", quality=80, strip=True)
    assert _Stub.seen[-1] == {"geometry": "200x200", "quality": "80", "strip": "1"}
    c.resize(data, "200x200", auto_orient=False, filter="mitchell", format="png")
    assert _Stub.seen[-1] == {"geometry": "200x200", "auto_orient": "0", "filter": "mitchell",
                              "format": "png"}
    # 503 + Retry-After: retried, up to `retries` times.
    _Stub.busy = 3
    assert c.resize(data, "100x100") == rr.resize(data, "100x100")
    _Stub.busy = 4
    with pytest.raises(rr.ResizeError) as e:
        c.resize(data, "100x100")
    assert (e.value.status, e.value.message) == (503, "queue full")
    _Stub.busy = 0
    # 4xx with the server's message.
    with pytest.raises(rr.ResizeError) as e:
        c.resize(data[:100], "100x100")
    assert e.value.status == 400 and "truncated" in e.value.message
    with pytest.raises(rr.ResizeError) as e:
        c.resize(data, "100y")
    assert e.value.status == 400 and "geometry" in e.value.message
    # Many in flight, order kept.
    names = PHOTOS[:6]
    images = [photo(n).read_bytes() for n in names]
    steps = []
    outs = c.resize_many(images, "120x120", quality=75, in_flight=4, progress=steps.append)
    assert outs == [rr.resize(d, "120x120", quality=75) for d in images]
    assert [s["done"] for s in steps] == list(range(1, 7))
    assert {s["total"] for s in steps} == {6}
    assert steps[-1]["bytes_in"] == sum(map(len, images))
    assert steps[-1]["bytes_out"] == sum(map(len, outs))
    # An iterable without a length: no total.
    steps.clear()
    c.resize_many(iter(images[:2]), "50x50", progress=steps.append)
    assert [(s["done"], s["total"]) for s in steps] == [(1, None), (2, None)]


def remora_bin():
    cands = [os.environ.get("REMORA_BIN")]
    if os.environ.get("CARGO_TARGET_DIR"):
        cands.append(str(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "remora"))
    cands.append(str(ROOT / "target" / "release" / "remora"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return shutil.which("remora")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def service():
    exe = remora_bin()
    if exe is None:
        pytest.skip("no release remora binary (make build)")
    probe = subprocess.run([exe, "resize", "serve", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"{exe} has no `resize serve` yet: {probe.stderr.strip()[:200]}")
    port = free_port()
    p = subprocess.Popen([exe, "resize", "serve", "--listen", f"127.0.0.1:{port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if p.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"remora resize serve did not start: {p.stderr.read()[:500]}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(10)


def test_client_against_remora_resize_serve(service):
    c = rr.Client(service)
    data = photo("aloeL.jpg").read_bytes()
    out = c.resize(data, "500x500", quality=85, strip=True)
    o = rr.info(out)
    assert (o["format"], o["width"], o["height"], o["quality"]) == ("jpeg", 500, 433, 85)
    # POST /resize is the engine as it is, auto-orienting by default.
    assert out == rr.resize(data, "500x500", quality=85, strip=True, auto_orient=True)
    rotated = rotated_photo()
    o = rr.info(c.resize(rotated, "200x200"))
    assert (o["width"], o["height"], o["orientation"]) == (144, 200, 1)
    o = rr.info(c.resize(rotated, "200x200", auto_orient=False))
    assert (o["width"], o["height"], o["orientation"]) == (200, 144, 6)
    png = c.resize(data, "100x100", format="png", filter="mitchell", sampling="4:4:4",
                   thumbnail=True, progressive=True)
    assert rr.info(png)["format"] == "png"
    with pytest.raises(rr.ResizeError) as e:
        c.resize(data[:len(data) // 3], "500x500")
    assert 400 <= e.value.status < 500 and e.value.message
    with pytest.raises(rr.ResizeError) as e:
        c.resize(data, "500y")
    assert e.value.status == 400
    images = [photo(n).read_bytes() for n in PHOTOS]
    outs = c.resize_many(images, "200x200", quality=80, in_flight=8)
    sizes = [(i["width"], i["height"]) for i in map(rr.info, outs)]
    assert sizes == [rr.geometry("200x200", i["width"], i["height"])
                     for i in map(rr.info, images)]


def test_openapi_document_of_remora_resize_serve_validates(service):
    """GET /openapi.json is a valid OpenAPI 3 document listing every route the service has."""
    validator = pytest.importorskip("openapi_spec_validator")
    with urllib.request.urlopen(service + "/openapi.json", timeout=10) as r:
        assert r.status == 200
        doc = json.load(r)
    assert doc["openapi"].startswith("3.")
    validator.validate(doc)
    routes = {("get", "/health"), ("get", "/metrics"), ("get", "/openapi.json"),
              ("post", "/resize"),
              ("get", "/{signature}/{processing_options}/plain/{source_url}"),
              ("get", "/{signature}/{processing_options}/{encoded_source_url}")}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert documented == routes
