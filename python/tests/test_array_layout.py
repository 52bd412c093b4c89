"""One exception per kind of misuse, in every module that takes numpy arrays: an array that is
not C-contiguous (a strided slice, a transposed view, Fortran order) is a ``ValueError`` (numpy's
convention for a wrong layout), an array of the wrong dtype a ``TypeError``. Each entry point
is checked; none converts silently."""
import numpy as np
import pytest

from remora import daq, fabric
from remora import match as rm
from remora import resize as rr
from remora._native import match as native_match


@pytest.fixture(scope="module")
def det():
    synth = daq.Synth(modules=1, seed=2)
    raw, _, _ = synth.frame(0)
    cal = synth.calibration()
    layout = synth.layout()
    return {
        "synth": synth, "raw": raw, "cal": cal, "layout": layout,
        "conv": daq.Converter(cal),
        "energy": np.zeros(raw.shape, np.float32),
        "mask": np.zeros(raw.shape, np.uint8),
        "image": np.zeros(layout.shape, np.float32),
        "integrator": daq.Integrator(synth.poni(), layout.shape, bins=50),
        "pipeline": daq.Pipeline(cal, layout),
    }


def strided(a):
    """The same values, not C-contiguous (every other column of an array twice as wide)."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    out = wide[..., ::2]
    assert not out.flags.c_contiguous and np.array_equal(out, a)
    return out


def fortran(a):
    return np.asfortranarray(a)


DESC = np.arange(4 * 8, dtype=np.uint8).reshape(4, 8)

# (name, the array argument's good value, call(x) with everything else fixed)
ENTRY_POINTS = [
    ("fabric.ProtectionDomain.register", lambda d: np.zeros((8, 8), np.uint8),
     lambda d, x: fabric.ProtectionDomain().register(x)),
    ("daq.Calibration(gain)", lambda d: d["cal"].gain,
     lambda d, x: daq.Calibration(x, d["cal"].pedestal)),
    ("daq.Calibration(pedestal)", lambda d: d["cal"].pedestal,
     lambda d, x: daq.Calibration(d["cal"].gain, x)),
    ("daq.Converter(mask)", lambda d: d["mask"], lambda d, x: daq.Converter(d["cal"], mask=x)),
    ("daq.Converter.convert", lambda d: d["raw"], lambda d, x: d["conv"].convert(x)),
    ("daq.Converter.convert_into(raw)", lambda d: d["raw"],
     lambda d, x: d["conv"].convert_into(x, np.zeros(d["raw"].shape, np.float32))),
    ("daq.Converter.convert_into(out)", lambda d: d["energy"],
     lambda d, x: d["conv"].convert_into(d["raw"], x)),
    ("daq.Converter.photons", lambda d: d["raw"], lambda d, x: d["conv"].photons(x, 12.4)),
    ("daq.Converter.track_pedestal", lambda d: d["raw"],
     lambda d, x: daq.Converter(d["cal"]).track_pedestal(x)),
    ("daq.count_above", lambda d: d["energy"], lambda d, x: daq.count_above(x, 1.0)),
    ("daq.compress", lambda d: d["energy"], lambda d, x: daq.compress(x, 1.0)),
    ("daq.decompress(row_ptr)", lambda d: np.zeros((2, 3), np.uint32),
     lambda d, x: daq.decompress(x, np.zeros((1, 0), np.uint16), np.zeros((1, 0), np.float32),
                                 (2, 4))),
    ("daq.Layout.image_mask", lambda d: d["mask"], lambda d, x: d["layout"].image_mask(x)),
    ("daq.Layout.assemble", lambda d: d["energy"], lambda d, x: d["layout"].assemble(x)),
    ("daq.Integrator(mask)", lambda d: np.zeros(d["layout"].shape, np.uint8),
     lambda d, x: daq.Integrator(d["synth"].poni(), d["layout"].shape, bins=10, mask=x)),
    ("daq.Integrator.integrate", lambda d: d["image"],
     lambda d, x: d["integrator"].integrate(x)),
    ("daq.Pipeline.process", lambda d: d["raw"], lambda d, x: d["pipeline"].process(1, x)),
    ("match.match(query)", lambda d: DESC, lambda d, x: rm.match(x, DESC)),
    ("match.match(train)", lambda d: DESC, lambda d, x: rm.match(DESC, x)),
    ("match.knn2", lambda d: DESC, lambda d, x: rm.knn2(x, DESC)),
    ("match.write_keypoints(descriptors)", lambda d: DESC,
     lambda d, x: rm.write_keypoints("/nonexistent/k.dat", np.zeros((4, 2)), x)),
    ("_native.match.neighbour_filter(pairs)", lambda d: np.zeros((4, 2), np.int64),
     lambda d, x: native_match.neighbour_filter(x, np.zeros((4, 2)), np.zeros((4, 2)))),
    ("_native.match.write_result(xy1)", lambda d: np.zeros((4, 2)),
     lambda d, x: native_match.write_result("/nonexistent/r", x, np.zeros((4, 2)),
                                            np.zeros((0, 2), np.int64))),
    ("resize.resize", lambda d: np.zeros((40, 30, 3), np.uint8),
     lambda d, x: rr.resize(x, "10x10")),
]

WRONG_DTYPE = {np.dtype(np.uint8): np.int16, np.dtype(np.uint16): np.int32,
               np.dtype(np.float32): np.float64, np.dtype(np.float64): np.float32,
               np.dtype(np.uint32): np.int64, np.dtype(np.int64): np.uint32}


@pytest.mark.parametrize("name,good,call", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
@pytest.mark.parametrize("layout", [strided, fortran], ids=["strided", "fortran"])
def test_non_contiguous_array_is_a_value_error(det, name, good, call, layout):
    a = layout(good(det))
    if a.flags.c_contiguous:
        pytest.skip("this array in Fortran order is C-contiguous too")
    with pytest.raises(ValueError, match="contiguous"):
        call(det, a)


@pytest.mark.parametrize("name,good,call",
                         [e for e in ENTRY_POINTS if not e[0].startswith("fabric.")],
                         ids=[e[0] for e in ENTRY_POINTS if not e[0].startswith("fabric.")])
def test_wrong_dtype_is_a_type_error(det, name, good, call):
    a = good(det)
    with pytest.raises(TypeError):
        call(det, a.astype(WRONG_DTYPE[a.dtype]))


def test_not_an_array_is_a_type_error():
    with pytest.raises(TypeError, match="numpy array"):
        fabric.ProtectionDomain().register(b"bytes")
    with pytest.raises(TypeError, match="numpy array"):
        rm.match(DESC.tolist(), DESC)
    with pytest.raises(TypeError):
        daq.count_above([1.0, 2.0], 1.0)
