"""Lazy memory: numpy arrays whose pages fault in from a page server (userfaultfd).

``PageServer.file(path)``, ``PageServer.memory(data)`` or ``PageServer.process(pid)`` serve bytes
over TCP (or ``transport="udp"``/``"shm"``: one-sided READs through remora-fabric);
``LazyRegion.connect(server.address, unit=4096, mode="thread", prefetch="none", push=False,
transport="tcp")`` maps them lazily and ``region.array()`` is a zero-copy uint8 view. ``region.read()``
raises ``TimeoutError`` when the server is gone, where a raw access would raise SIGBUS.

A file (or memfd path) is served live on every transport: bytes written to it after the server
started are served. A process is read live over TCP and shm (where the client reads it itself), but over udp it
is a copy taken at start.
"""
from ._native import lazy as _m

PageServer = _m.PageServer
LazyRegion = _m.LazyRegion

__all__ = ["PageServer", "LazyRegion"]
