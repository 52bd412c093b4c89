"""JPEG and PNG resizing with ImageMagick's geometry and defaults (the Rust crate
``remora-resize`` through ``remora._native.resize``), and a client for ``remora resize serve``.

What ``convert IN -resize GEOMETRY -quality Q OUT`` does, several times faster: the JPEG is
shrunk by 1/2, 1/4 or 1/8 while decoding (always leaving at least a 2x final resample), then
resampled (Lanczos3 when shrinking, Mitchell when enlarging, as ImageMagick) and encoded with
libjpeg-turbo. The output size is exactly ImageMagick 6's for every geometry form (``W``,
``xH``, ``WxH``, ``WxH^``, ``WxH!``, ``WxH>``, ``WxH<``, ``S%``, ``SX%xSY%``, ``A@``, ``W:H``).

Encoded images go in as ``bytes`` (borrowed, no copy), ``bytearray`` or ``memoryview`` and come
out as ``bytes``; decoded pixels go in as C-contiguous ``uint8`` numpy arrays (borrowed, no copy)
and come out as arrays. The GIL is released while working, so threads resize in parallel.
Wrong types or dtypes raise ``TypeError``; wrong layouts (not C-contiguous) or shapes, bad geometry, options, corrupt or
truncated images and images over the limits (64 MiB, 50 Mpx in, 50 Mpx out, 512 MiB of memory
a job as estimated from the headers and the geometry, 100 JPEG scans: decompression bombs, long
thin outputs and scan bombs are refused before anything is decoded) raise ``ValueError`` with
the engine's message.

Example::

    from remora import resize

    with open("photo.jpg", "rb") as f:
        jpeg = f.read()
    small = resize.resize(jpeg, "500x500", quality=85)     # bytes of a JPEG
    resize.info(small)        # {'width': 500, 'height': 375, 'format': 'jpeg', 'quality': 85, ...}
    resize.geometry("500x500^", 4032, 3024)                # (667, 500)

    import numpy as np
    rgb = np.zeros((3024, 4032, 3), np.uint8)
    resize.resize(rgb, "25%").shape                        # (756, 1008, 3)

    client = resize.Client("http://127.0.0.1:8080")        # `remora resize serve`
    thumbs = client.resize_many([jpeg] * 10, "200x200", quality=80)
"""
from __future__ import annotations

import concurrent.futures
import email.utils
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from types import TracebackType
from typing import Any, Dict, Iterable, List, Optional, Sized, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

from ._native import resize as _r
from ._progress import Progress, ProgressArg

__all__ = ["resize", "info", "geometry", "Client", "ResizeError", "FILTERS"]

#: Filter names (ImageMagick's ``-filter``; ``-`` and ``_`` are ignored, case too).
FILTERS: Tuple[str, ...] = ("point", "box", "triangle", "catrom", "mitchell", "gaussian", "lanczos",
           "lanczossharp")


_Encoded = Union[bytes, bytearray, memoryview]


@overload
def resize(data: _Encoded, geometry: str, quality: Optional[int] = None,
           filter: Optional[str] = None, sampling: Optional[str] = None, strip: bool = False,
           auto_orient: bool = False, format: Optional[str] = None, thumbnail: bool = False,
           progressive: bool = False, engine: Optional[str] = None) -> bytes: ...


@overload
def resize(data: npt.NDArray[np.uint8], geometry: str, quality: Optional[int] = None,
           filter: Optional[str] = None, sampling: Optional[str] = None, strip: bool = False,
           auto_orient: bool = False, format: Optional[str] = None, thumbnail: bool = False,
           progressive: bool = False, engine: Optional[str] = None) -> npt.NDArray[np.uint8]: ...


def resize(data: Union[_Encoded, npt.NDArray[np.uint8]], geometry: str,
           quality: Optional[int] = None, filter: Optional[str] = None,
           sampling: Optional[str] = None, strip: bool = False, auto_orient: bool = False,
           format: Optional[str] = None, thumbnail: bool = False, progressive: bool = False,
           engine: Optional[str] = None) -> Union[bytes, npt.NDArray[np.uint8]]:
    """Resizes an image to an ImageMagick ``geometry``, with ImageMagick's output size.

    ``data``: an encoded JPEG or PNG (``bytes``, ``bytearray``, ``memoryview``) → ``bytes`` of
    the encoded result: JPEG, or PNG for PNG input or with ``format="png"`` (``"jpeg"`` turns a
    PNG into a JPEG, alpha dropped). Or a C-contiguous ``uint8`` numpy array, ``(H, W)`` gray or
    ``(H, W, C)`` with C = 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA) → a ``uint8`` array of
    the resized pixels in the same layout; nothing is encoded, so ``quality``, ``format``,
    ``sampling``, ``progressive`` and ``auto_orient`` raise ``ValueError`` there.

    ``quality``: JPEG quality 1–100; None keeps the input's (ImageMagick's estimate from its
    quantisation tables), else 92. ``filter``: one of ``FILTERS``; None for Lanczos when
    shrinking, Mitchell when enlarging (LanczosSharp with ``thumbnail``). ``sampling``: JPEG
    chroma subsampling ``"4:4:4"``, ``"4:2:2"``, ``"4:2:0"``, ``"4:4:0"``, ``"4:1:1"`` or
    ImageMagick's ``"2x2"``; None keeps the input's, else 4:4:4 at quality ≥ 90 and 4:2:0
    below. ``strip``: drop EXIF, XMP, IPTC, comments and ICC (kept by default).
    ``auto_orient``: apply the EXIF orientation to the pixels (and reset the tag).
    ``thumbnail``: ImageMagick's ``-thumbnail`` (keeps only the ICC profile, LanczosSharp).
    ``progressive``: progressive JPEG. Gray images stay gray.
    ``engine``: where the resample runs: ``"cpu"`` (None, the default), ``"gpu"`` (the Vulkan
    device ``REMORA_GPU`` allows: unset takes a real GPU only, ``any`` also Mesa's software
    one; ``ValueError`` when there is none) or ``"auto"`` (a real GPU when present). Decoding
    and encoding stay on the CPU; results are within one grey level of the CPU's.
    """
    if isinstance(data, np.ndarray):
        return _r.resize(data, geometry, quality, filter, sampling, strip, auto_orient, format,
                         thumbnail, progressive, engine)
    return _r.resize(data, geometry, quality, filter, sampling, strip, auto_orient, format,
                     thumbnail, progressive, engine)


def info(data: _Encoded) -> Dict[str, Any]:
    """The headers of an encoded JPEG or PNG, without decoding its pixels.

    Returns a dict: ``width``, ``height`` (as stored, before any EXIF orientation), ``format``
    (``"jpeg"`` or ``"png"``), ``channels`` (once decoded), ``quality`` (JPEG: the quality
    ImageMagick reports and reuses, ``identify -format %Q``: its estimate from the quantisation
    tables, else 92; None for PNG), ``orientation`` (EXIF 1–8, 1 when none) and ``sampling``
    (JPEG chroma subsampling such as ``"4:2:0"``; None for gray JPEG and PNG).
    """
    return _r.info(data)


def geometry(geometry: str, width: int, height: int) -> Tuple[int, int]:
    """The ``(width, height)`` ImageMagick's ``-resize geometry`` gives a ``width``×``height``
    image (``ValueError`` for a geometry it cannot read)."""
    return _r.geometry(geometry, width, height)


class ResizeError(Exception):
    """The resize service refused or failed a request: ``status`` is the HTTP status,
    ``message`` the server's explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def _retry_after(value: Optional[str], default: float) -> float:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None:
        return default
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    return max(0.0, when.timestamp() - time.time())


def _message(body: bytes, reason: Optional[str]) -> str:
    """The server's explanation: a JSON ``error``/``message`` field, else the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        for key in ("error", "message", "detail"):
            value = doc.get(key)
            if isinstance(value, str):
                return value
    return text or reason or ""


class Client:
    """A client for the POST API of ``remora resize serve``.

    ``url``: the service's base URL (``http://host:port``). Each request is
    ``POST {url}/resize?geometry=...&quality=...&format=...&filter=...&strip=1`` with the image
    as the body (parameters left at their defaults are not sent). The options mean what they
    mean for :func:`resize`, except ``auto_orient``: None leaves the service's default (on, as
    imgproxy), True or False asks for it. A 4xx/5xx answer raises
    :class:`ResizeError`; a 503 (the service's queue is full) is retried up to ``retries``
    times after the ``Retry-After`` it gives (at most ``max_wait`` seconds each; 1 s when it
    gives none). Connection failures raise ``urllib.error.URLError`` (an ``OSError``).
    Only the standard library is used; one client can be shared by threads. Each request opens
    its own connection; ``close()`` (or the end of a ``with`` block) ends the client's use:
    later requests raise ``ValueError``, as a closed file's do.
    """

    def __init__(self, url: str, timeout: float = 60.0, retries: int = 3,
                 max_wait: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.max_wait = max_wait
        self.closed = False

    def close(self) -> None:
        """Ends the client's use: later requests raise ``ValueError``. Idempotent."""
        self.closed = True

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    @staticmethod
    def _params(geometry: str, quality: Optional[int], format: Optional[str],
                filter: Optional[str], strip: bool, sampling: Optional[str],
                auto_orient: Optional[bool], thumbnail: bool, progressive: bool) -> str:
        p: Dict[str, Union[str, int]] = {"geometry": geometry}
        if quality is not None:
            p["quality"] = int(quality)
        if format is not None:
            p["format"] = format
        if filter is not None:
            p["filter"] = filter
        if sampling is not None:
            p["sampling"] = sampling
        for name, on in (("strip", strip), ("thumbnail", thumbnail),
                         ("progressive", progressive)):
            if on:
                p[name] = 1
        if auto_orient is not None:
            p["auto_orient"] = int(bool(auto_orient))
        return urllib.parse.urlencode(p)

    def resize(self, data: _Encoded, geometry: str, quality: Optional[int] = None,
               format: Optional[str] = None, filter: Optional[str] = None, strip: bool = False,
               sampling: Optional[str] = None, auto_orient: Optional[bool] = None,
               thumbnail: bool = False, progressive: bool = False) -> bytes:
        """Resizes one encoded image on the service; returns the result's ``bytes``."""
        if self.closed:
            raise ValueError("the client is closed")
        body = data if isinstance(data, bytes) else bytes(data)
        url = f"{self.url}/resize?" + self._params(geometry, quality, format, filter, strip,
                                                   sampling, auto_orient, thumbnail,
                                                   progressive)
        ctype = ("image/png" if body.startswith(b"\x89PNG") else
                 "image/jpeg" if body.startswith(b"\xff\xd8") else "application/octet-stream")
        attempt = 0
        while True:
            req = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": ctype})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    out: bytes = r.read()
                    return out
            except urllib.error.HTTPError as e:
                with e:
                    status, headers, payload = e.code, e.headers, e.read()
                if status == 503 and attempt < self.retries:
                    attempt += 1
                    wait = _retry_after(headers.get("Retry-After"), 1.0)
                    time.sleep(min(wait, self.max_wait))
                    continue
                raise ResizeError(status, _message(payload, e.reason)) from None

    def resize_many(self, images: Iterable[_Encoded], geometry: str,
                    quality: Optional[int] = None, format: Optional[str] = None,
                    filter: Optional[str] = None, strip: bool = False,
                    sampling: Optional[str] = None, auto_orient: Optional[bool] = None,
                    thumbnail: bool = False, progressive: bool = False,
                    in_flight: int = 8, progress: ProgressArg = False) -> List[bytes]:
        """Resizes many encoded images with up to ``in_flight`` requests at once (threads);
        returns the results in the order of ``images``. The first failure raises (after the
        requests already sent have finished).

        ``progress``: ``True`` shows a bar of the images done on stderr (tqdm's when
        installed); a callable gets ``{"done", "total", "bytes_in", "bytes_out"}`` as each image
        comes back (``total`` is None for an iterable without a length). An exception it raises
        stops the calls and is raised once every request has finished."""
        if in_flight < 1:
            raise ValueError(f"in_flight {in_flight} must be at least 1")
        total = len(images) if isinstance(images, Sized) else None
        report = Progress(progress, "images", total)
        lock = threading.Lock()
        tally = {"done": 0, "bytes_in": 0, "bytes_out": 0}

        def one(data: _Encoded) -> bytes:
            out = self.resize(data, geometry, quality, format, filter, strip, sampling,
                              auto_orient, thumbnail, progressive)
            if report.active:
                with lock:
                    tally["done"] += 1
                    tally["bytes_in"] += len(memoryview(data).cast("B"))
                    tally["bytes_out"] += len(out)
                    report.step(tally["done"], total, bytes_in=tally["bytes_in"],
                                bytes_out=tally["bytes_out"])
            return out

        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=in_flight) as pool:
                results = list(pool.map(one, images))
        finally:
            report.close()
        if report.failed is not None:
            raise report.failed
        return results
