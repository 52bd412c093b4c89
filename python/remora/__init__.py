"""remora: one-sided RDMA-style transfers, remote page faults and detector data processing.

The native parts live in ``remora._native``; each area is a submodule (``remora.fabric``, ...).
"""
from . import _native

__version__ = _native.__version__
