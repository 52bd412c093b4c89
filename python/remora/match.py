"""Exact descriptor matching (SIFT and the like) with Lowe's ratio test, cross-check and
MicMac's neighbour filter, and the keypoint and match files of MicMac, Lowe and NumPy (the Rust
crate ``remora-match`` through ``remora._native.match``).

Descriptors go in without copies when they are 2-D, C-contiguous and ``uint8`` (exact integer
arithmetic, identical on every kernel) or ``float32``; other inputs raise ``TypeError`` (type,
dtype; the message says how to convert) or ``ValueError`` (layout, shape, values), as in every
remora module. The search is exact
brute force on all cores, with the GIL released; ties go to the lower index everywhere.

Example (OpenCV's SIFT descriptors are whole numbers stored as float32)::

    import numpy as np
    from remora import match

    train = np.array([[0, 0], [10, 10], [200, 200]], np.uint8)
    query = np.array([[1, 1], [190, 199]], np.uint8)
    pairs = match.match(query, train, ratio=0.6)   # [[0, 0], [1, 2]]: [query, train] rows
    # OpenCV: pairs = match.match(d2.astype(np.uint8), d1.astype(np.uint8))
"""
from __future__ import annotations

import os
from typing import Any, Literal, Optional, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

from ._native import match as _m

__all__ = [
    "match", "knn2", "kernels", "neighbour_filter", "Keypoints", "read_keypoints",
    "write_keypoints", "read_result", "write_result", "MAX_DIM", "FORMATS",
]

_Path = Union[str, "os.PathLike[str]"]
_Descriptors = Union[npt.NDArray[np.uint8], npt.NDArray[np.float32]]

#: Largest descriptor dimension accepted.
MAX_DIM: int = _m.MAX_DIM
#: Keypoint file formats: MicMac Pastis ``.dat`` v0, MicMac Digeo ``.dat`` v1, Lowe ``.key``,
#: NumPy ``.npy`` (descriptors only).
FORMATS: Tuple[str, ...] = ("micmac", "micmac-v1", "key", "npy")

kernels = _m.kernels
knn2 = _m.knn2
read_result = _m.read_result


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


def match(query: _Descriptors, train: _Descriptors, ratio: Optional[float] = 0.6,
          cross_check: bool = False, max_distance: Optional[float] = None,
          threads: Optional[int] = None, return_distances: bool = False,
          kernel: str = "auto"
          ) -> Union[npt.NDArray[np.int64], Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]:
    """Matches ``query`` descriptors against ``train`` descriptors (exact brute force).

    Each query's nearest train point is kept when it passes Lowe's ratio test
    ``d1 < ratio * d2`` on plain Euclidean distances (strict, computed exactly; ``ratio=None``
    disables it; with it on, a train set of one point matches nothing), the optional
    cross-check (the query is also the train point's nearest query, ties to the lower query
    index) and ``d1 <= max_distance``.

    ``query`` (n, dim) and ``train`` (m, dim): C-contiguous ``uint8`` (exact integer path) or
    ``float32`` arrays of the same dtype and dimension (1 to ``MAX_DIM``), borrowed without
    copies (read-only and memory-mapped arrays are fine). ``threads``: None for all cores.
    ``kernel``: "auto", one of ``kernels()``, or "gpu" (the Vulkan device ``REMORA_GPU``
    allows; u8 descriptors only) — all give identical results.

    Returns an (k, 2) int64 array of ``[query_index, train_index]`` rows sorted by query index
    (OpenCV's ``queryIdx``/``trainIdx``), or with ``return_distances=True`` a tuple
    ``(pairs, distances)`` with the float32 plain (not squared) distances ``d1``.
    """
    if return_distances:
        return _m.match(query, train, ratio, cross_check, max_distance, threads,
                        return_distances=True, kernel=kernel)
    return _m.match(query, train, ratio, cross_check, max_distance, threads, False, kernel)



def neighbour_filter(pairs: npt.ArrayLike, query_xy: npt.ArrayLike, train_xy: npt.ArrayLike,
                     k: int = 9, min_common: int = 5, passes: int = 2) -> npt.NDArray[np.int64]:
    """MicMac's 2-D neighbourhood consistency filter on matches.

    Keeps a ``[query, train]`` row of ``pairs`` when at least ``min_common`` of the ``k``
    nearest other matches around its train point (in ``train_xy``) are also among the ``k``
    nearest around its query point (in ``query_xy``); applied ``passes`` times. MicMac's
    setting is the default. ``query_xy``, ``train_xy``: (points, 2) positions (x, y). Returns
    the kept rows in their order, (k, 2) int64.
    """
    return _m.neighbour_filter(
        np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2),
        np.ascontiguousarray(query_xy, dtype=np.float64),
        np.ascontiguousarray(train_xy, dtype=np.float64),
        k, min_common, passes,
    )


class Keypoints:
    """Keypoints of one image, as read from a file.

    ``xy`` (n, 2) float64 positions (x = column, y = row, pixels); ``scale``, ``angle`` (n,)
    float64 (radians; 0 where the format has none); ``descriptors`` (n, dim) ``uint8`` or
    ``float32``; ``format`` the file's format (one of ``FORMATS``).
    """

    __slots__ = ("xy", "scale", "angle", "descriptors", "format")

    xy: npt.NDArray[np.float64]
    scale: npt.NDArray[np.float64]
    angle: npt.NDArray[np.float64]
    descriptors: _Descriptors
    format: Optional[str]

    def __init__(self, xy: npt.NDArray[np.float64], scale: npt.NDArray[np.float64],
                 angle: npt.NDArray[np.float64], descriptors: _Descriptors,
                 format: Optional[str] = None) -> None:
        self.xy = xy
        self.scale = scale
        self.angle = angle
        self.descriptors = descriptors
        self.format = format

    def __len__(self) -> int:
        return len(self.xy)

    @property
    def dim(self) -> int:
        """Values per descriptor."""
        return int(self.descriptors.shape[1])

    def __repr__(self) -> str:
        return (f"Keypoints({len(self)} points, dim {self.dim}, "
                f"{self.descriptors.dtype}, format {self.format!r})")


def read_keypoints(path: _Path, format: Optional[str] = None) -> Keypoints:
    """Reads a keypoint file into a :class:`Keypoints`.

    ``format``: one of ``FORMATS``, or None to recognise it from the content and extension.
    A malformed file raises ``ValueError`` naming the file (never allocates what a bad header
    claims); a missing one ``FileNotFoundError``.
    """
    d = _m.read_keypoints(os.fspath(path), format)
    return Keypoints(d["xy"], d["scale"], d["angle"], d["descriptors"], d["format"])


def write_keypoints(path: _Path, xy: npt.ArrayLike, descriptors: _Descriptors,
                    scale: Optional[npt.ArrayLike] = None, angle: Optional[npt.ArrayLike] = None,
                    format: Optional[str] = None) -> None:
    """Writes a keypoint file.

    ``xy`` (n, 2) positions (x, y); ``descriptors`` (n, dim) ``uint8`` or ``float32``;
    ``scale``, ``angle`` (n,) or None for zeros. ``format``: one of ``FORMATS``; None picks
    it from the extension (``.key``, ``.npy``) and otherwise MicMac: "micmac" (v0, uint8) for
    uint8 descriptors, "micmac-v1" (Digeo, float) for float32 ones. "micmac" and "key" take
    uint8 descriptors only; "npy" keeps only the descriptors.
    """
    path = os.fspath(path)
    if format is None:
        ext = os.path.splitext(path)[1].lower()
        if ext in (".key", ".npy"):
            format = ext[1:]
        else:
            dt = getattr(descriptors, "dtype", None)
            format = "micmac-v1" if dt == np.float32 else "micmac"

    def column(v: Optional[npt.ArrayLike]) -> Optional[npt.NDArray[np.float64]]:
        return None if v is None else np.ascontiguousarray(v, dtype=np.float64).reshape(-1)

    _m.write_keypoints(path, np.ascontiguousarray(xy, dtype=np.float64).reshape(-1, 2),
                       descriptors, column(scale), column(angle), format)


def write_result(path: _Path, xy1: npt.ArrayLike, xy2: npt.ArrayLike, pairs: npt.ArrayLike,
                 binary: bool = False) -> None:
    """Writes a MicMac ``.result`` match file, image 1 first as MicMac does.

    ``xy1``: the train (image 1) positions, ``xy2``: the query (image 2) positions, ``pairs``:
    (n, 2) ``[query_index, train_index]`` rows as :func:`match` returns them; each becomes a
    line ``x1 y1 x2 y2`` = ``xy1[train] xy2[query]``. Text v0 (6 significant digits, MicMac's
    default) or, with ``binary=True``, binary v1 (``-newFormat``, exact f64).
    """
    _m.write_result(
        os.fspath(path),
        np.ascontiguousarray(xy1, dtype=np.float64).reshape(-1, 2),
        np.ascontiguousarray(xy2, dtype=np.float64).reshape(-1, 2),
        np.ascontiguousarray(pairs, dtype=np.int64).reshape(-1, 2),
        binary,
    )
