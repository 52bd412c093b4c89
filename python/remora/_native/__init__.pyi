"""Type stubs for ``remora._native``, the extension module built from ``crates/py``.

Each area is a submodule object (``remora._native.fabric``, ...), re-exported by the pure-Python
modules of the same name (``remora.fabric``, ...); import those.
"""
from . import daq as daq
from . import fabric as fabric
from . import kv as kv
from . import lazy as lazy
from . import match as match
from . import resize as resize

__version__: str
