"""A client for the acquisition control service (``remora daq serve``), standard library only.

Exposed as ``remora.daq.Client``::

    from remora.daq import Client
    c = Client("http://127.0.0.1:8750/?token=...")   # the address `remora daq serve` printed
    c.configure(open("examples/demo.toml").read())   # TOML text, a dict, or a path
    c.start()
    status = c.wait(timeout=120)
    print(status["state"], status["counters"]["kept"], status["summary"]["files"])

Every call carries the service's token: the one in the address (``?token=...``, as the service
prints it), ``token=``, or the environment variable ``REMORA_DAQ_TOKEN``.

Every refused request raises :class:`ControlError` with the HTTP status and the service's reason
(409 for a request that does not fit the state, 400 for a bad configuration naming the key, 401
without the token).
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from types import TracebackType
from typing import Any, Dict, Iterator, Literal, Optional, Union, overload

__all__ = ["Client", "ControlError"]


class ControlError(Exception):
    """The service refused a request: ``status`` is the HTTP status, ``reason`` its message."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


class Client:
    """The REST API of ``remora daq serve`` at ``url`` (the printed address, with its
    ``?token=``, will do); ``token`` overrides the address' token.

    Each request opens its own connection. ``close()`` (or the end of a ``with`` block) ends
    the client's use: later requests raise ``ValueError``, as a closed file's do::

        with Client(url) as c:
            c.start()
            c.wait()
    """

    def __init__(self, url: str = "http://127.0.0.1:8750", token: Optional[str] = None,
                 timeout: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        from_url = urllib.parse.parse_qs(parts.query).get("token", [None])[0]
        self.url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")).rstrip("/")
        self.token = token or from_url or os.environ.get("REMORA_DAQ_TOKEN") or None
        self.timeout = timeout
        self.closed = False

    def close(self) -> None:
        """Ends the client's use: later requests raise ``ValueError``. Idempotent."""
        self.closed = True

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the client is closed")

    def _headers(self) -> Dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @overload
    def _request(self, method: str, path: str, body: Union[str, bytes, None] = ...,
                 content_type: Optional[str] = ..., timeout: Optional[float] = ...,
                 raw: Literal[False] = ...) -> Dict[str, Any]: ...

    @overload
    def _request(self, method: str, path: str, body: Union[str, bytes, None] = ...,
                 content_type: Optional[str] = ..., timeout: Optional[float] = ..., *,
                 raw: Literal[True]) -> bytes: ...

    def _request(self, method: str, path: str, body: Union[str, bytes, None] = None,
                 content_type: Optional[str] = None, timeout: Optional[float] = None,
                 raw: bool = False) -> Any:
        self._check_open()
        headers = self._headers()
        if content_type:
            headers["Content-Type"] = content_type
        data = body.encode("utf-8") if isinstance(body, str) else body
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                payload: bytes = r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                reason = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                reason = text or e.reason
            raise ControlError(e.code, reason) from None
        return payload if raw else json.loads(payload)

    def status(self) -> Dict[str, Any]:
        """State, counters, rates, per receiver and per module (a dict)."""
        return self._request("GET", "/status")

    def config(self) -> Dict[str, Any]:
        """The loaded configuration as a dict."""
        return self._request("GET", "/config")

    def configure(self, config: Union[str, Dict[str, Any], os.PathLike[str]]) -> Dict[str, Any]:
        """Loads a configuration: TOML text, a dict (sent as JSON), or the path of a TOML file.

        File paths inside it are relative to the service's directories (``--data-dir`` for the
        output, ``--input-dir`` for the rest), not to this client's working directory.
        """
        if isinstance(config, dict):
            return self._request("PUT", "/config", json.dumps(config), "application/json")
        if isinstance(config, os.PathLike) or (
            isinstance(config, str) and "\n" not in config and config.strip().endswith(".toml")
        ):
            with open(os.fspath(config), encoding="utf-8") as f:
                config = f.read()
        return self._request("PUT", "/config", config, "application/toml")

    def start(self) -> Dict[str, Any]:
        """Starts an acquisition; returns ``{"run": N, "state": "running"}``."""
        return self._request("POST", "/start", b"")

    def stop(self) -> Dict[str, Any]:
        """Stops the current run after the stack in flight."""
        return self._request("POST", "/stop", b"")

    def pedestal(self, frames: Optional[int] = None) -> Dict[str, Any]:
        """Starts a dark run whose pedestal the following acquisitions use."""
        body = json.dumps({} if frames is None else {"frames": frames})
        return self._request("POST", "/pedestal", body, "application/json")

    def wait(self, timeout: float = 600.0) -> Dict[str, Any]:
        """Waits until no run is going on, then returns the status; raises TimeoutError if a run
        still goes on after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            step = max(0.0, min(left, 60.0))
            st = self._request("GET", f"/wait?timeout={step:.3f}", timeout=step + self.timeout)
            if st["state"] not in ("running", "pedestal"):
                return st
            if time.monotonic() >= end:
                raise TimeoutError(f"run {st['run']} still {st['state']} after {timeout} s")

    def profile(self) -> Dict[str, Any]:
        """The latest 1D profile: ``{"frame", "unit_x", "x", "y"}``."""
        return self._request("GET", "/preview/profile")

    def image_png(self, scale: str = "log", max: Optional[float] = None, bin: int = 1) -> bytes:
        """The latest converted frame as PNG bytes."""
        q = f"/preview/image?scale={scale}&bin={bin}"
        if max is not None:
            q += f"&max={max}"
        return self._request("GET", q, raw=True)

    def openapi(self) -> Dict[str, Any]:
        """The service's OpenAPI 3 document."""
        return self._request("GET", "/openapi.json")

    def events(self) -> Iterator[Dict[str, Any]]:
        """Yields status dicts from the server-sent event stream as they come (endless)."""
        self._check_open()
        req = urllib.request.Request(self.url + "/events", headers=self._headers())
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            data: list[str] = []
            for raw in r:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    yield json.loads("\n".join(data))
                    data = []
