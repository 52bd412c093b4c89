"""remora: one-sided RDMA-style transfers, remote page faults and detector data processing.

The native parts live in ``remora._native``; each area is a submodule (``remora.fabric``,
``remora.lazy``, ``remora.daq``, ``remora.match``, ``remora.resize``, ``remora.kv``), imported on
first use: ``import remora; remora.daq.Client`` works, as does ``from remora import daq``.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from . import _native

if TYPE_CHECKING:
    from . import control, daq, fabric, kv, lazy, match, resize

__version__: str = _native.__version__

_SUBMODULES = ("control", "daq", "fabric", "kv", "lazy", "match", "resize")


def __getattr__(name: str) -> ModuleType:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_SUBMODULES))
