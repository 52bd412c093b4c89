"""Stubs for ``remora._native.resize`` (``crates/py/src/resize.rs``)."""
from typing import Any, Optional, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

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
def info(data: _Encoded) -> dict[str, Any]: ...
def geometry(geometry: str, width: int, height: int) -> Tuple[int, int]: ...
