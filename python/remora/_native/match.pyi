"""Stubs for ``remora._native.match`` (``crates/py/src/matching.rs``)."""
import os
from typing import Any, Literal, Optional, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

_Path = Union[str, os.PathLike[str]]
_Descriptors = Union[npt.NDArray[np.uint8], npt.NDArray[np.float32]]

MAX_DIM: int

def kernels() -> list[str]: ...
@overload
def match(query: _Descriptors, train: _Descriptors, ratio: Optional[float] = 0.6,
          cross_check: bool = False, max_distance: Optional[float] = None,
          threads: Optional[int] = None, return_distances: Literal[False] = False,
          kernel: str = "auto") -> npt.NDArray[np.int64]: ...
@overload
def match(query: _Descriptors, train: _Descriptors, ratio: Optional[float] = 0.6,
          cross_check: bool = False, max_distance: Optional[float] = None,
          threads: Optional[int] = None, *, return_distances: Literal[True],
          kernel: str = "auto") -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]: ...
def knn2(query: _Descriptors, train: _Descriptors, threads: Optional[int] = None,
         kernel: str = "auto") -> Tuple[npt.NDArray[np.int64], npt.NDArray[Any]]: ...
def neighbour_filter(pairs: npt.NDArray[np.int64], query_xy: npt.NDArray[np.float64],
                     train_xy: npt.NDArray[np.float64], k: int = 9, min_common: int = 5,
                     passes: int = 2) -> npt.NDArray[np.int64]: ...
def read_keypoints(path: _Path, format: Optional[str] = None) -> dict[str, Any]: ...
def write_keypoints(path: _Path, xy: npt.NDArray[np.float64], descriptors: _Descriptors,
                    scale: Optional[npt.NDArray[np.float64]] = None,
                    angle: Optional[npt.NDArray[np.float64]] = None,
                    format: str = "micmac") -> None: ...
def read_result(path: _Path) -> npt.NDArray[np.float64]: ...
def write_result(path: _Path, xy1: npt.NDArray[np.float64], xy2: npt.NDArray[np.float64],
                 pairs: npt.NDArray[np.int64], binary: bool = False) -> None: ...
