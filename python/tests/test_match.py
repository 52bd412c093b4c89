"""remora.match on real SIFT descriptors against an exact numpy reference and FAISS.

The descriptors are OpenCV's SIFT on real photographs shipped by Debian's ``opencv-doc``
(graffiti, aerial and box pairs; graf1/graf3 with its ground-truth homography), not random
vectors. ``scripts/test-deps.sh`` installs opencv-doc, opencv-python-headless and faiss-cpu;
tests that need one of them skip, saying which, where it is missing.
"""
import os
import time
from fractions import Fraction

import numpy as np
import pytest

import remora.match
from remora import match as rm

try:
    import cv2
except ImportError:  # pragma: no cover - installed by scripts/test-deps.sh
    cv2 = None

DATA = "/usr/share/doc/opencv-doc/examples/data"
# (train = image 1, query = image 2), as MicMac and the CLI: FILE2's points among FILE1's.
PAIRS = [("graf1.png", "graf3.png"), ("aero1.jpg", "aero3.jpg"), ("box.png", "box_in_scene.png")]
PAIR_IDS = ["graf", "aero", "box"]

_features = {}


def sift(name):
    """(xy float64 (n, 2), descriptors uint8 (n, 128), keypoints) of a photograph, cached."""
    if cv2 is None:
        pytest.skip("opencv-python-headless is not installed (run scripts/test-deps.sh)")
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is missing: install Debian's opencv-doc (scripts/test-deps.sh)")
    if name not in _features:
        img = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
        assert img is not None, path
        kp, d = cv2.SIFT_create().detectAndCompute(img, None)
        assert d.dtype == np.float32 and d.shape == (len(kp), 128) and len(kp) > 300
        # OpenCV's SIFT values are whole numbers 0-255 stored as float32: the u8 path is exact.
        assert np.array_equal(d, np.round(d)) and d.min() >= 0 and d.max() <= 255
        xy = np.array([k.pt for k in kp], np.float64)
        _features[name] = (xy, d.astype(np.uint8), kp)
    return _features[name]


def pair(i):
    (txy, t, _), (qxy, q, _) = sift(PAIRS[i][0]), sift(PAIRS[i][1])
    return q, t, qxy, txy


# ---------------------------------------------------------------------------------------------
# The exact reference: numpy brute force on integers.

def knn2_reference(q, t, chunk=512):
    """Exact squared distances in int64: (I (n, 2), D (n, 2), -1 where missing; the nearest
    query of every train point, ties to the lower index everywhere).

    The dot products go through float64 BLAS, which is exact here: every product is an
    integer <= 255**2 and every partial sum <= 128 * 255**2 < 2**53, whatever the order.
    """
    n, m = len(q), len(t)
    qq = (q.astype(np.int64) ** 2).sum(1)
    tt = (t.astype(np.int64) ** 2).sum(1)
    t64 = t.astype(np.float64)
    big = np.iinfo(np.int64).max
    idx = np.full((n, 2), -1, np.int64)
    dist = np.full((n, 2), -1, np.int64)
    back_d = np.full(m, big, np.int64)
    back_i = np.full(m, -1, np.int64)
    for s in range(0, n, chunk):
        dot = q[s:s + chunk].astype(np.float64) @ t64.T
        d = qq[s:s + chunk, None] + tt[None, :] - 2 * dot.astype(np.int64)
        rows = np.arange(len(d))
        if m >= 1:
            i1 = d.argmin(1)  # argmin returns the first, i.e. lowest, index of the minimum
            idx[s:s + chunk, 0], dist[s:s + chunk, 0] = i1, d[rows, i1]
            j = d.argmin(0)
            v = d[j, np.arange(m)]
            better = v < back_d  # strict: an earlier (lower) query keeps a tie
            back_d[better], back_i[better] = v[better], s + j[better]
        if m >= 2:
            d[rows, i1] = big
            i2 = d.argmin(1)
            idx[s:s + chunk, 1], dist[s:s + chunk, 1] = i2, d[rows, i2]
    return idx, dist, back_i


def exact(x):
    """The exact rational value of the float32 nearest to x (what the crate compares with)."""
    return Fraction(float(np.float32(x)))


def passes_ratio(d1, d2, ratio):
    """d1 < ratio * d2 on plain distances, exactly: D1 * den**2 < num**2 * D2 on squared ones,
    with num / den the exact value of ratio as a float32 (as the crate does)."""
    r = exact(ratio)
    num, den = r.numerator, r.denominator
    ok = d1.astype(object) * den * den < num * num * d2.astype(object)
    return np.asarray(ok, bool) & (d2 >= 0)


def match_reference(q, t, ratio=0.6, cross_check=False, max_distance=None, ref=None):
    idx, dist, back = ref if ref is not None else knn2_reference(q, t)
    keep = idx[:, 0] >= 0
    if ratio is not None:
        keep &= passes_ratio(dist[:, 0], dist[:, 1], ratio)
    if max_distance is not None:
        keep &= np.asarray(dist[:, 0].astype(object) <= exact(max_distance) ** 2, bool)
    if cross_check:
        rows = np.nonzero(keep)[0]
        keep[rows] &= back[idx[rows, 0]] == rows
    rows = np.nonzero(keep)[0]
    pairs = np.stack([rows, idx[rows, 0]], 1).astype(np.int64)
    return pairs, dist[rows, 0]


_refs = {}


def reference(i):
    if i not in _refs:
        q, t, _, _ = pair(i)
        _refs[i] = knn2_reference(q, t)
    return _refs[i]


# ---------------------------------------------------------------------------------------------
# Exactness on real SIFT.

def test_import_forms():
    assert remora.match is rm
    assert callable(rm.match) and rm.match.__doc__
    assert "portable" in rm.kernels()
    assert rm.MAX_DIM == 1024


def test_reference_dot_products_are_exact():
    """The reference's float64 BLAS shortcut agrees with plain int64 arithmetic."""
    q, t, _, _ = pair(0)
    idx, dist, _ = reference(0)
    rng = np.random.default_rng(1)
    for i in rng.choice(len(q), 8, replace=False):
        d = ((q[i].astype(np.int64) - t.astype(np.int64)) ** 2).sum(1)
        assert dist[i, 0] == d.min() and idx[i, 0] == np.flatnonzero(d == d.min())[0]


@pytest.mark.parametrize("i", range(len(PAIRS)), ids=PAIR_IDS)
def test_knn2_equals_exact_reference(i):
    q, t, _, _ = pair(i)
    idx, dist, _ = reference(i)
    got_i, got_d = rm.knn2(q, t)
    assert got_i.dtype == np.int64 and got_d.dtype == np.int64 and got_i.shape == (len(q), 2)
    assert np.array_equal(got_i, idx)
    assert np.array_equal(got_d, dist)


@pytest.mark.parametrize("cross_check", [False, True], ids=["plain", "cross"])
@pytest.mark.parametrize("ratio", [0.6, 0.8])
@pytest.mark.parametrize("i", range(len(PAIRS)), ids=PAIR_IDS)
def test_match_equals_exact_reference(i, ratio, cross_check):
    q, t, _, _ = pair(i)
    want, d1 = match_reference(q, t, ratio, cross_check, ref=reference(i))
    got, dist = rm.match(q, t, ratio=ratio, cross_check=cross_check, return_distances=True)
    assert got.dtype == np.int64 and got.shape[1] == 2 and dist.dtype == np.float32
    assert np.array_equal(got, want)
    assert np.array_equal(dist, np.sqrt(d1.astype(np.float64)).astype(np.float32))
    assert np.all(np.diff(got[:, 0]) > 0)  # sorted by query, at most one match per query
    # Real overlapping photographs: a real test, not an empty one (aero1/aero3 is a hard pair:
    # one match at 0.6, about 50 at 0.8).
    assert len(got) > (20 if ratio == 0.8 else 0)
    # The ratio used is the float32 nearest to 0.6 / 0.8 (slightly different from 3/5 and
    # 4/5): the two rules may only differ on exact ties D1 * den**2 == num**2 * D2.
    dec = Fraction(ratio).limit_denominator(10)
    idx, dist2, _ = reference(i)
    d1_, d2_ = dist2[:, 0].astype(object), dist2[:, 1].astype(object)
    dec_ok = np.asarray(d1_ * dec.denominator ** 2 < dec.numerator ** 2 * d2_, bool)
    differ = dec_ok != passes_ratio(dist2[:, 0], dist2[:, 1], ratio)
    tie = np.asarray(d1_ * dec.denominator ** 2 == dec.numerator ** 2 * d2_, bool)
    assert np.all(tie[differ])


@pytest.mark.parametrize("i", range(len(PAIRS)), ids=PAIR_IDS)
def test_match_without_ratio_and_with_max_distance(i):
    q, t, _, _ = pair(i)
    ref = reference(i)
    want, _ = match_reference(q, t, None, ref=ref)
    assert np.array_equal(rm.match(q, t, ratio=None), want)
    assert len(want) == len(q)
    want, _ = match_reference(q, t, 0.8, max_distance=200.0, ref=ref)
    got = rm.match(q, t, ratio=0.8, max_distance=200.0)
    assert np.array_equal(got, want)
    assert 0 < len(got) < len(rm.match(q, t, ratio=0.8))
    want, _ = match_reference(q, t, None, cross_check=True, max_distance=250.5, ref=ref)
    assert np.array_equal(rm.match(q, t, ratio=None, cross_check=True, max_distance=250.5), want)


@pytest.mark.parametrize("i", range(len(PAIRS)), ids=PAIR_IDS)
def test_faiss_flat_l2_agrees_except_at_float_near_ties(i):
    faiss = pytest.importorskip("faiss", reason="faiss-cpu is not installed (scripts/test-deps.sh)")
    q, t, _, _ = pair(i)
    idx, dist, _ = reference(i)
    index = faiss.IndexFlatL2(q.shape[1])
    index.add(t.astype(np.float32))
    fd, fi = index.search(q.astype(np.float32), 2)
    qq = (q.astype(np.int64) ** 2).sum(1)
    tt = (t.astype(np.int64) ** 2).sum(1)
    for k in range(2):
        differ = np.flatnonzero(fi[:, k] != idx[:, k])
        # FAISS's float32 ||q||^2 + ||t||^2 - 2 q.t loses a few units on values near 5e5.
        exact_f = ((q[differ].astype(np.int64) - t[fi[differ, k]].astype(np.int64)) ** 2).sum(1)
        tol = 4e-6 * (qq[differ] + tt[fi[differ, k]]) + 1
        assert np.all(exact_f - dist[differ, k] <= tol), (k, exact_f - dist[differ, k])
        assert len(differ) <= max(3, len(q) // 100), len(differ)
        assert np.all(np.abs(fd[:, k] - dist[:, k]) <= 4e-6 * (qq + tt.max()) + 1)


@pytest.mark.parametrize("i", range(len(PAIRS)), ids=PAIR_IDS)
def test_float_path_equals_integer_path(i):
    q, t, _, _ = pair(i)
    qf, tf = q.astype(np.float32), t.astype(np.float32)
    for ratio, cc in [(0.6, False), (0.8, True), (None, False)]:
        assert np.array_equal(rm.match(qf, tf, ratio=ratio, cross_check=cc),
                              rm.match(q, t, ratio=ratio, cross_check=cc))
    fi, fd = rm.knn2(qf, tf)
    ui, ud = rm.knn2(q, t)
    assert fd.dtype == np.float32
    assert np.array_equal(fi, ui) and np.array_equal(fd, ud.astype(np.float32))


def test_every_kernel_and_thread_count_gives_identical_results():
    q, t, _, _ = pair(0)
    ks = rm.kernels()
    assert ks[-1] == "portable" and set(ks) <= {"avx512", "avx2", "portable"}
    base = rm.match(q, t, ratio=0.8, cross_check=True)
    base_nb = rm.knn2(q, t)
    for threads in [1, 3]:
        got = rm.match(q, t, ratio=0.8, cross_check=True, threads=threads)
        assert np.array_equal(got, base), threads
    for k in ks:  # the portable one takes about 0.4 s here
        got = rm.match(q, t, ratio=0.8, cross_check=True, kernel=k)
        assert np.array_equal(got, base), k
        nb = rm.knn2(q, t, kernel=k)
        assert np.array_equal(nb[0], base_nb[0]) and np.array_equal(nb[1], base_nb[1]), k
    # The float path (slower: checked on the smaller pair) has a portable and an AVX2 build.
    q, t, _, _ = pair(2)
    qf, tf = q.astype(np.float32), t.astype(np.float32)
    base = rm.match(q, t, ratio=0.8, cross_check=True)
    base_nb = rm.knn2(qf, tf, kernel="portable")
    for k in ks:
        for threads in [None, 1]:
            got = rm.match(qf, tf, ratio=0.8, cross_check=True, kernel=k, threads=threads)
            assert np.array_equal(got, base), (k, threads)
        nb = rm.knn2(qf, tf, kernel=k)
        assert np.array_equal(nb[0], base_nb[0]) and np.array_equal(nb[1], base_nb[1]), k
    for k in {"avx512", "avx2"} - set(ks):
        with pytest.raises(ValueError, match="not available"):
            rm.match(q, t, kernel=k)
    with pytest.raises(ValueError, match="unknown kernel"):
        rm.match(q, t, kernel="cuda")


def test_gpu_kernel_gives_the_cpu_results():
    """kernel="gpu" on the device REMORA_GPU allows (make test: lavapipe): the same matches and
    neighbours as the CPU kernels; float descriptors are refused with the reason."""
    if os.environ.get("REMORA_GPU", "off") == "off":
        pytest.skip("REMORA_GPU is not set: no GPU engine asked for")
    q, t, _, _ = pair(2)
    base = rm.match(q, t, ratio=0.8, cross_check=True, kernel="portable")
    got = rm.match(q, t, ratio=0.8, cross_check=True, kernel="gpu")
    assert np.array_equal(got, base)
    nb, want = rm.knn2(q, t, kernel="gpu"), rm.knn2(q, t, kernel="portable")
    assert np.array_equal(nb[0], want[0]) and np.array_equal(nb[1], want[1])
    with pytest.raises(ValueError, match="u8"):
        rm.match(q.astype(np.float32), t.astype(np.float32), kernel="gpu")


# ---------------------------------------------------------------------------------------------
# Ties, empty and tiny sets.

@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_ties_go_to_the_lower_index(dtype):
    train = np.array([[0, 0, 0, 0], [9, 9, 9, 9], [9, 9, 9, 9], [0, 0, 0, 0]], dtype)
    query = np.array([[9, 9, 9, 8], [1, 0, 0, 0], [9, 9, 9, 8]], dtype)
    idx, d2 = rm.knn2(query, train)
    assert idx.tolist() == [[1, 2], [0, 3], [1, 2]]
    assert d2.tolist() == [[1, 1], [1, 1], [1, 1]]
    # Equal distances fail the strict ratio test; without it the lower index wins.
    assert rm.match(query, train).shape == (0, 2)
    assert rm.match(query, train, ratio=None).tolist() == [[0, 1], [1, 0], [2, 1]]
    # Cross-check: queries 0 and 2 tie for train point 1; the lower query keeps it.
    assert rm.match(query, train, ratio=None, cross_check=True).tolist() == [[0, 1], [1, 0]]
    assert rm.match(query, train, ratio=1.0).shape == (0, 2)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_empty_and_one_point_sets(dtype):
    train = np.array([[0, 0], [10, 10], [200, 200]], dtype)
    query = np.array([[1, 1], [190, 199]], dtype)
    empty = np.zeros((0, 2), dtype)
    for q, t in [(empty, train), (query, empty), (empty, empty)]:
        m = rm.match(q, t, ratio=None)
        assert m.shape == (0, 2) and m.dtype == np.int64
        p, d = rm.match(q, t, return_distances=True)
        assert p.shape == (0, 2) and d.shape == (0,) and d.dtype == np.float32
    idx, d2 = rm.knn2(empty, train)
    assert idx.shape == (0, 2) and d2.shape == (0, 2)
    idx, d2 = rm.knn2(query, empty)
    assert (idx == -1).all()
    assert (d2 == -1).all() if dtype == np.uint8 else np.isinf(d2).all()
    one = train[:1]
    assert rm.match(query, one).shape == (0, 2)  # no second neighbour: rejected
    assert rm.match(query, one, ratio=None).tolist() == [[0, 0], [1, 0]]
    idx, d2 = rm.knn2(query, one)
    assert idx.tolist() == [[0, -1], [0, -1]]
    assert d2[0, 0] == 2
    assert (d2[:, 1] == -1).all() if dtype == np.uint8 else np.isinf(d2[:, 1]).all()
    p, d = rm.match(query, train, return_distances=True)
    assert p.tolist() == [[0, 0], [1, 2]]
    assert d.tolist() == [np.float32(np.sqrt(2)), np.float32(np.sqrt(101))]


# ---------------------------------------------------------------------------------------------
# Errors.

def test_argument_errors():
    a = np.zeros((4, 8), np.uint8)
    with pytest.raises(TypeError, match="np.ascontiguousarray"):
        rm.match(a.astype(np.float64), a.astype(np.float64))
    with pytest.raises(TypeError, match="dtype int32; descriptors must be uint8 .*or float32"):
        rm.match(a.astype(np.int32), a)
    with pytest.raises(TypeError, match="same dtype"):
        rm.match(a, a.astype(np.float32))
    with pytest.raises(TypeError, match="numpy array"):
        rm.match(a.tolist(), a)
    with pytest.raises(ValueError, match="2-D"):
        rm.match(a[0], a)
    with pytest.raises(ValueError, match="2-D"):
        rm.knn2(a, a[None])
    with pytest.raises(ValueError, match="dimension 8, train descriptors 4"):
        rm.match(a, a[:, :4].copy())
    with pytest.raises(ValueError, match="dimension 0"):
        rm.match(np.zeros((3, 0), np.uint8), np.zeros((3, 0), np.uint8))
    with pytest.raises(ValueError, match="dimension 1025"):
        rm.match(np.zeros((3, 1025), np.uint8), np.zeros((3, 1025), np.uint8))
    assert rm.match(np.zeros((3, 1024), np.uint8), np.zeros((3, 1024), np.uint8),
                    ratio=None).shape == (3, 2)
    for r in [0, -0.5, 1.01, float("nan"), float("inf")]:
        with pytest.raises(ValueError, match="ratio"):
            rm.match(a, a, ratio=r)
    for m in [-1.0, float("nan"), float("inf")]:
        with pytest.raises(ValueError, match="max distance"):
            rm.match(a, a, max_distance=m)
    with pytest.raises(ValueError, match="threads"):
        rm.match(a, a, threads=0)
    f = a.astype(np.float32)
    for bad in [np.nan, np.inf, -np.inf]:
        g = f.copy()
        g[2, 3] = bad
        with pytest.raises(ValueError, match="query descriptor 2 .*not finite"):
            rm.match(g, f)
        with pytest.raises(ValueError, match="train descriptor 2 .*not finite"):
            rm.knn2(f, g)


def test_no_copies_read_only_memory_mapped_and_strided(tmp_path):
    q, t, _, _ = pair(2)
    want = rm.match(q, t)
    qr, tr = q.copy(), t.copy()
    qr.setflags(write=False)
    tr.setflags(write=False)
    assert np.array_equal(rm.match(qr, tr), want)
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "t.npy", t)
    qm = np.load(tmp_path / "q.npy", mmap_mode="r")
    tm = np.load(tmp_path / "t.npy", mmap_mode="r")
    assert isinstance(qm, np.memmap) and not qm.flags.writeable
    assert np.array_equal(rm.match(qm, tm), want)
    assert np.array_equal(rm.knn2(qm, tm)[0], rm.knn2(q, t)[0])
    with pytest.raises(ValueError, match=r"not C-contiguous.*np\.ascontiguousarray\(query\)"):
        rm.match(q[::2], t)
    with pytest.raises(ValueError, match=r"np\.ascontiguousarray\(train\)"):
        rm.match(q, np.asfortranarray(t))
    assert np.array_equal(rm.match(np.ascontiguousarray(q[::2]), t),
                          rm.match(q[::2].copy(), t))


# ---------------------------------------------------------------------------------------------
# Neighbour filter.

def homography():
    if cv2 is None:
        pytest.skip("opencv-python-headless is not installed (run scripts/test-deps.sh)")
    fs = cv2.FileStorage(os.path.join(DATA, "H1to3p.xml"), cv2.FILE_STORAGE_READ)
    h = fs.getNode("H13").mat()
    fs.release()
    assert h.shape == (3, 3)
    return h


def consistent(pairs, qxy, txy, h, px):
    """Whether each [query, train] pair agrees, within px pixels, with the homography h that
    maps image 1 (train) to image 3 (query)."""
    p = np.c_[txy[pairs[:, 1]], np.ones(len(pairs))] @ h.T
    return np.hypot(*(p[:, :2] / p[:, 2:] - qxy[pairs[:, 0]]).T) <= px


def test_neighbour_filter_keeps_matches_consistent_with_the_homography():
    q, t, qxy, txy = pair(0)
    h = homography()
    m = rm.match(q, t, ratio=0.8)
    # Plant wrong matches: random pairs that the homography contradicts.
    rng = np.random.default_rng(3)
    wrong = np.c_[rng.integers(0, len(q), 400), rng.integers(0, len(t), 400)]
    wrong = wrong[~consistent(wrong, qxy, txy, h, px=50.0)][:150]
    allm = np.r_[m, wrong]
    kept = rm.neighbour_filter(allm, qxy, txy)
    assert kept.dtype == np.int64 and kept.shape[1] == 2
    planted_kept = (kept[:, None, :] == wrong[None, :, :]).all(-1).any(1).sum()
    # H1to3p is good to a few pixels only on this copy of the images: correct SIFT matches
    # reproject within 8 px (half of them within 1.2 px), wrong ones far away.
    for px, want in [(5.0, 0.75), (10.0, 0.97)]:
        before, after = consistent(allm, qxy, txy, h, px), consistent(kept, qxy, txy, h, px)
        print(f"graf1/graf3, ratio 0.8, {len(m)} matches + {len(wrong)} planted: "
              f"{before.mean():.3f} within {px} px; filtered: {len(kept)} kept "
              f"({planted_kept} planted), {after.mean():.3f} within {px} px")
        assert after.mean() > before.mean() + 0.1 and after.mean() > want
    ok = consistent(m, qxy, txy, h, 10.0)
    assert consistent(kept, qxy, txy, h, 10.0).sum() >= 0.75 * ok.sum()  # most correct survive
    assert planted_kept <= len(wrong) // 20
    # The order of the input is kept, and options are MicMac's defaults.
    rows = iter(allm.tolist())
    assert all(p in rows for p in kept.tolist())  # a subsequence of the input
    assert np.array_equal(rm.neighbour_filter(allm, qxy, txy, k=9, min_common=5, passes=2), kept)
    assert len(rm.neighbour_filter(allm, qxy, txy, passes=0)) == len(allm)
    with pytest.raises(ValueError, match="coordinates"):
        rm.neighbour_filter([[0, len(t)]], qxy, txy)
    with pytest.raises(ValueError, match="indices"):
        rm.neighbour_filter([[-1, 0]], qxy, txy)


# ---------------------------------------------------------------------------------------------
# Files.

@pytest.fixture
def keypoints():
    xy, d, kp = sift("box.png")
    scale = np.array([k.size for k in kp], np.float64)
    angle = np.deg2rad(np.array([k.angle for k in kp], np.float32)).astype(np.float64)
    return xy, d, scale, angle


@pytest.mark.parametrize("fmt", ["micmac", "micmac-v1", "key", "npy"])
def test_keypoint_files_round_trip(tmp_path, keypoints, fmt):
    xy, d, scale, angle = keypoints
    ext = {"micmac": ".dat", "micmac-v1": ".dat", "key": ".key", "npy": ".npy"}[fmt]
    path = tmp_path / f"kp{ext}"
    rm.write_keypoints(path, xy, d, scale=scale, angle=angle, format=fmt)
    for k in [rm.read_keypoints(path), rm.read_keypoints(str(path), format=fmt)]:
        assert k.format == fmt and len(k) == len(d) and k.dim == 128
        assert k.xy.dtype == np.float64 and k.xy.shape == (len(d), 2)
        if fmt == "micmac":  # f32 fields, u8 descriptors
            assert k.descriptors.dtype == np.uint8 and np.array_equal(k.descriptors, d)
            f32 = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731
            assert np.array_equal(k.xy, f32(xy)) and np.array_equal(k.scale, f32(scale))
            assert np.array_equal(k.angle, f32(angle))
        elif fmt == "micmac-v1":  # f64 fields, real-valued descriptors
            assert k.descriptors.dtype == np.float32
            assert np.array_equal(k.descriptors, d.astype(np.float32))
            assert np.array_equal(k.xy, xy) and np.array_equal(k.scale, scale)
            assert np.array_equal(k.angle, angle)
        elif fmt == "key":  # text: 2 decimals (3 for angles), y first
            assert np.array_equal(k.descriptors, d)
            assert np.abs(k.xy - xy).max() <= 0.005 + 1e-9
            assert np.abs(k.scale - scale).max() <= 0.005 + 1e-9
            assert np.abs(k.angle - angle).max() <= 0.0005 + 1e-9
        else:  # descriptors only, readable by numpy
            assert np.array_equal(k.descriptors, d) and not k.xy.any()
            assert np.array_equal(np.load(path), d)


def test_float_descriptors_and_formats(tmp_path):
    xy = np.array([[1.5, 2.25], [3.0, 4.0]])
    d = np.array([[0.25, 1.5, -2.0], [3.0, 0.0, 1e-3]], np.float32)
    rm.write_keypoints(tmp_path / "a.dat", xy, d)  # float32: Digeo v1 by default
    k = rm.read_keypoints(tmp_path / "a.dat")
    assert k.format == "micmac-v1" and np.array_equal(k.descriptors, d)
    rm.write_keypoints(tmp_path / "a.npy", xy, d)
    assert np.array_equal(rm.read_keypoints(tmp_path / "a.npy").descriptors, d)
    np.save(tmp_path / "b.npy", d.astype(np.float64))  # written by numpy, float64
    assert rm.read_keypoints(tmp_path / "b.npy").descriptors.dtype == np.float32
    for fmt in ["micmac", "key"]:
        with pytest.raises(ValueError, match="cannot write"):
            rm.write_keypoints(tmp_path / "c", xy, d, format=fmt)
    with pytest.raises(ValueError, match="unknown keypoint format"):
        rm.write_keypoints(tmp_path / "c", xy, d, format="sift")
    with pytest.raises(ValueError, match="positions"):
        rm.write_keypoints(tmp_path / "c.dat", xy[:1], d)
    with pytest.raises(ValueError, match="scale"):
        rm.write_keypoints(tmp_path / "c.dat", xy, d, scale=[1.0])


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_result_files_round_trip(tmp_path, binary):
    q, t, qxy, txy = pair(2)
    m = rm.match(q, t)
    path = tmp_path / "box.result"
    rm.write_result(path, txy, qxy, m, binary=binary)
    r = rm.read_result(path)
    want = np.c_[txy[m[:, 1]], qxy[m[:, 0]]]  # x1 y1 (train, image 1) x2 y2 (query)
    assert r.shape == (len(m), 4) and r.dtype == np.float64
    if binary:
        assert np.array_equal(r, want)
        assert path.read_bytes()[0] == 0xBA
    else:
        assert np.allclose(r, want, rtol=1e-5, atol=0)  # %g: 6 significant digits
        assert path.read_text().count("\n") == len(m)
    rm.write_result(path, txy, qxy, m[:0], binary=binary)
    assert rm.read_result(path).shape == (0, 4)
    with pytest.raises(ValueError, match="coordinates"):
        rm.write_result(path, txy[:1], qxy, m)


def test_malformed_files_raise_value_errors_naming_the_file(tmp_path, keypoints):
    xy, d, scale, angle = keypoints
    for fmt in ["micmac", "micmac-v1", "key"]:
        full = tmp_path / f"full.{fmt}"
        rm.write_keypoints(full, xy[:5], d[:5], format=fmt)
        b = full.read_bytes()
        short = tmp_path / f"short.{fmt}"
        short.write_bytes(b[:-7] if fmt != "key" else b[: len(b) // 2])
        with pytest.raises(ValueError, match="short"):
            rm.read_keypoints(short, format=fmt)
    trunc = tmp_path / "t.result"
    rm.write_result(trunc, xy, xy, [[0, 1], [1, 0]], binary=True)
    trunc.write_bytes(trunc.read_bytes()[:-1])
    with pytest.raises(ValueError, match="truncated"):
        rm.read_result(trunc)
    bad = tmp_path / "bad.result"
    bad.write_text("1 2 3\n")
    with pytest.raises(ValueError, match="bad.result.*not 4"):
        rm.read_result(bad)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x01\x02\x03")
    with pytest.raises(ValueError, match="unrecognised"):
        rm.read_keypoints(junk)
    with pytest.raises(FileNotFoundError) as e:
        rm.read_keypoints(tmp_path / "missing.dat")
    assert e.value.filename == str(tmp_path / "missing.dat")
    with pytest.raises(FileNotFoundError):
        rm.read_result(tmp_path / "missing.result")
    with pytest.raises(IsADirectoryError):
        rm.read_keypoints(tmp_path)
    with pytest.raises(ValueError, match="unknown keypoint format"):
        rm.read_keypoints(junk, format="h5")


def npy_header(shape):
    h = f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape}, }}"
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode()


def test_huge_counts_raise_quickly_without_allocating(tmp_path):
    huge = (2**32 - 1).to_bytes(4, "little")
    files = {
        "v0.dat": (huge + (128).to_bytes(4, "little") + bytes(100), "micmac"),
        "v1.dat": (bytes([0xBA, 0, 0, 0, 0]) + (989008845).to_bytes(4, "little")
                   + (1).to_bytes(4, "little") + huge + (128).to_bytes(4, "little")
                   + bytes(100), "micmac-v1"),
        "h.key": (b"4294967295 128\n1 2 3 4\n", "key"),
        "h.npy": (npy_header("(4294967295, 128)") + bytes(100), "npy"),
    }
    for name, (data, fmt) in files.items():
        (tmp_path / name).write_bytes(data)
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match=name):
            rm.read_keypoints(tmp_path / name, format=fmt)
        assert time.perf_counter() - t0 < 0.5, name
    res = tmp_path / "h.result"
    res.write_bytes(bytes([0xBA, 0, 0, 0, 0]) + (1452550588).to_bytes(4, "little")
                    + (1).to_bytes(4, "little") + huge + bytes(64))
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="truncated"):
        rm.read_result(res)
    assert time.perf_counter() - t0 < 0.5
