"""remora.daq against numpy and pyFAI."""
import os
import numpy as np
import pytest

from remora import daq

pyFAI = pytest.importorskip("pyFAI")


# Engines every stage is checked on; `make test` sets REMORA_GPU=any, so the GPU engine runs
# there on whatever Vulkan device exists (lavapipe without a GPU).
ENGINES = ("cpu-simd", "cpu-scalar") + (
    ("gpu-wgpu",) if os.environ.get("REMORA_GPU", "off") != "off" else ())


def same_bits(a, b):
    """Equal bit for bit, NaN where NaN."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    na, nb = np.isnan(a), np.isnan(b)
    assert np.array_equal(na, nb)
    return np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32))


@pytest.fixture(scope="module")
def synth():
    return daq.Synth(modules=1, seed=7, special_rate=1e-3)


@pytest.fixture(scope="module")
def frame(synth):
    raw, photons, dark = synth.frame(0)
    assert not dark
    raw = raw.copy()
    raw[0, :6] = [0xC000, 0xFFFF, 0x4000, 0x8000, 0xBFFF, 0x0000]
    return raw, photons


def test_conversion_equals_numpy_bit_for_bit(synth, frame):
    raw, _ = frame
    cal = synth.calibration()
    mask = np.zeros(raw.shape, np.uint8)
    mask[10, 10:20] = 1
    mask[0, 0] = 1  # a masked saturated pixel is NaN, not inf
    ref = daq.reference_convert(raw, cal.pedestal, cal.gain, mask)
    for engine in ENGINES:
        conv = daq.Converter(cal, mask=mask, engine=engine, threads=2)
        assert conv.engine == engine
        e, stats = conv.convert(raw, threshold=50.0)
        assert e.dtype == np.float32 and e.shape == raw.shape
        assert same_bits(e, ref)
        assert stats["above"] == int(np.sum(ref > 50.0))
        assert stats["errors"] >= 2 and stats["invalid_gain"] >= 2
        assert np.isnan(e[0, 0])
        # Every special word present.
        assert np.isnan(e[0, 1:5]).all() and np.isfinite(e[0, 5])
        counts = conv.photons(raw, 12.4)
        with np.errstate(invalid="ignore"):
            r = np.rint(ref / np.float32(12.4))
        expect = np.where(np.isnan(ref), np.iinfo(np.int32).min,
                          np.where(np.isinf(ref), np.iinfo(np.int32).max, np.nan_to_num(r))).astype(np.int32)
        assert np.array_equal(counts, expect)
        out = np.empty(raw.shape, np.float32)
        conv.convert_into(raw, out)
        assert same_bits(out, ref)
    unmasked = daq.Converter(cal).convert(raw)[0]
    assert unmasked[0, 0] == np.inf


def test_photon_counts_match_truth_in_g0(synth, frame):
    raw, photons = frame
    counts = daq.Converter(synth.calibration()).photons(raw, synth.photon_energy_kev)
    g0 = (raw >> 14) == 0
    g0[0, :6] = False  # words forced by the fixture
    assert g0.sum() > 500_000
    assert np.array_equal(counts[g0], photons[g0].astype(np.int32))


def test_pedestal_tracking_converges():
    s = daq.Synth(modules=1, seed=3, dark_every=1, dark_phase=0)
    cal = s.calibration()
    wrong = daq.Calibration(cal.gain, (cal.pedestal + np.float32(25.0)).astype(np.float32))
    conv = daq.Converter(wrong, window=16, seeded=False)
    for n in range(24):
        raw, _, dark = s.frame(n)
        assert dark
        conv.track_pedestal(raw)
    err = np.abs(conv.pedestal[:, 0] - cal.pedestal[:, 0])
    assert err.mean() < 0.8 and err.max() < 5.0
    assert np.array_equal(conv.pedestal[:, 1], wrong.pedestal[:, 1])


def test_veto_count_and_csr_roundtrip(synth, frame):
    raw, _ = frame
    e, stats = daq.Converter(synth.calibration()).convert(raw, threshold=100.0)
    assert daq.count_above(e, 100.0) == stats["above"] == int(np.sum(e > 100.0))
    for engine in ENGINES:
        row_ptr, col, values = daq.compress(e, 6.0, engine=engine)
        rows, cols = np.nonzero(e > 6.0)
        assert np.array_equal(col, cols.astype(np.uint16))
        assert np.array_equal(values, e[rows, cols])
        assert np.array_equal(np.diff(row_ptr), np.bincount(rows, minlength=e.shape[0]))
        back = daq.decompress(row_ptr, col, values, e.shape, fill=-1.0)
        keep = e > 6.0
        assert same_bits(back[keep], e[keep]) and (back[~keep] == -1.0).all()
    with pytest.raises(ValueError):
        daq.decompress(row_ptr, col, values, (3, 3))


def write_poni(path, shape, dist, poni1, poni2, rot1, rot2, rot3, wavelength=1e-10):
    path.write_text(
        "poni_version: 2.1\nDetector: Detector\n"
        f'Detector_config: {{"pixel1": 7.5e-05, "pixel2": 7.5e-05, "max_shape": [{shape[0]}, {shape[1]}], "orientation": 3}}\n'
        f"Distance: {dist!r}\nPoni1: {poni1!r}\nPoni2: {poni2!r}\n"
        f"Rot1: {rot1!r}\nRot2: {rot2!r}\nRot3: {rot3!r}\nWavelength: {wavelength!r}\n"
    )
    return str(path)


@pytest.fixture(scope="module")
def image():
    s = daq.Synth(modules=1, seed=11, ring_photons=20.0, background=1.0, spots=10,
                  spot_photons=100.0, special_rate=1e-4)
    raw, _, _ = s.frame(0)
    e, _ = daq.Converter(s.calibration()).convert(raw)
    layout = s.layout()
    img = layout.assemble(e)
    img[~np.isfinite(img)] = np.nan  # pyFAI takes NaN as invalid, not inf
    mask = layout.image_mask()
    mask[100:110, 300:340] = 1
    return img, mask


GEOMETRIES = {
    "flat": dict(dist=0.1, poni1=0.02, poni2=0.04, rot1=0.0, rot2=0.0, rot3=0.0),
    "tilted": dict(dist=0.08, poni1=0.015, poni2=0.03, rot1=0.12, rot2=-0.07, rot3=0.3),
}


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("split", ["no", "bbox"])
@pytest.mark.parametrize("unit,solid,pol", [
    ("q_nm^-1", True, None), ("2th_deg", False, 0.95), ("r_mm", True, -0.5),
])
def test_integration_equals_pyfai(tmp_path, image, geometry, split, unit, solid, pol):
    img, mask = image
    poni = write_poni(tmp_path / "g.poni", img.shape, **GEOMETRIES[geometry])
    ai = pyFAI.load(poni)
    bins = 400
    ref = ai.integrate1d_ng(img, bins, unit=unit, method=(split, "csr", "cython"), mask=mask,
                            correctSolidAngle=solid, polarization_factor=pol)
    for engine in ENGINES:
        it = daq.Integrator(poni, img.shape, bins=bins, unit=unit, split=split, solid_angle=solid,
                            polarization=pol, mask=mask, engine=engine, threads=2)
        res = it.integrate(img)
        assert res["engine"] == engine and res["unit"] == unit
        np.testing.assert_allclose(res["radial"], ref.radial, rtol=1e-6)
        np.testing.assert_allclose(res["count"], ref.count, rtol=1e-5, atol=1e-4)
        data = ref.count > 0
        assert data.sum() > bins // 2
        np.testing.assert_allclose(res["intensity"][data], ref.intensity[data], rtol=1e-4, atol=0)
        assert (res["intensity"][~data] == 0).all()


@pytest.mark.parametrize("split", ["no", "bbox"])
@pytest.mark.parametrize("unit,rng", [("q_nm^-1", (5.0, 20.0)), ("2th_deg", (5.0, 20.0)), ("r_mm", (3.0, 30.0))])
def test_radial_range_equals_pyfai(tmp_path, image, split, unit, rng):
    img, mask = image
    poni = write_poni(tmp_path / "g.poni", img.shape, **GEOMETRIES["tilted"])
    ref = pyFAI.load(poni).integrate1d_ng(img, 200, unit=unit, method=(split, "csr", "cython"),
                                          mask=mask, radial_range=rng, correctSolidAngle=True)
    res = daq.Integrator(poni, img.shape, bins=200, unit=unit, split=split, mask=mask,
                         radial_range=rng).integrate(img)
    np.testing.assert_allclose(res["radial"], ref.radial, rtol=1e-6)
    np.testing.assert_allclose(res["radial"][[0, -1]], [rng[0] + (rng[1] - rng[0]) / 400,
                                                        rng[1] - (rng[1] - rng[0]) / 400], rtol=1e-5)
    np.testing.assert_allclose(res["count"], ref.count, rtol=1e-5, atol=1e-4)
    data = ref.count > 0
    np.testing.assert_allclose(res["intensity"][data], ref.intensity[data], rtol=1e-4, atol=0)


def test_pipeline_chains_the_stages(tmp_path):
    s = daq.Synth(modules=1, seed=5, dark_every=3, dark_phase=2)
    poni = tmp_path / "s.poni"
    poni.write_text(s.poni())
    p = daq.Pipeline(s.calibration(), s.layout(), veto_pixel_kev=100.0, veto_min_pixels=20,
                     dark_every=3, dark_phase=2, poni=str(poni), bins=300, threads=2)
    outcomes = []
    for n in range(3):
        raw, _, _ = s.frame(n)
        r = p.process(n, raw)
        outcomes.append(r["outcome"])
        if r["outcome"] == "kept":
            assert r["stats"]["above"] >= 20
            assert len(r["intensity"]) == 300 and np.nanmax(r["intensity"]) > 0
            e = daq.decompress(r["row_ptr"], r["col"], r["values"], raw.shape)
            assert (e > 0).sum() == len(r["values"])
    assert outcomes == ["kept", "kept", "dark"]
    quiet = daq.Synth(modules=1, seed=5, spots=0)
    p2 = daq.Pipeline(quiet.calibration(), quiet.layout(), veto_pixel_kev=100.0, veto_min_pixels=20)
    assert p2.process(0, quiet.frame(0)[0])["outcome"] == "rejected"


def test_malformed_input_gives_clear_errors(tmp_path, synth, frame):
    raw, _ = frame
    cal = synth.calibration()
    conv = daq.Converter(cal)
    with pytest.raises(TypeError):
        conv.convert(raw.astype(np.float64))
    with pytest.raises(ValueError, match="raw frame"):
        conv.convert(raw[:100])
    with pytest.raises(ValueError, match="contiguous"):
        conv.convert(np.asfortranarray(raw))
    with pytest.raises(ValueError, match="contiguous"):
        conv.convert(raw[:, ::2])
    with pytest.raises(ValueError, match="photon energy"):
        conv.photons(raw, 0.0)
    with pytest.raises(ValueError, match="pixel mask"):
        daq.Converter(cal, mask=np.zeros(10, np.uint8))
    with pytest.raises(ValueError, match="engine"):
        daq.Converter(cal, engine="cuda")
    g, p = tmp_path / "gain.bin", tmp_path / "ped.bin"
    cal.save(str(g), str(p))
    back = daq.Calibration.load(str(g), str(p), 1)
    assert np.array_equal(back.gain, cal.gain)
    g.write_bytes(g.read_bytes()[:-5])
    with pytest.raises(ValueError, match="gain file has"):
        daq.Calibration.load(str(g), str(p), 1)
    with pytest.raises(OSError):
        daq.Calibration.load(str(tmp_path / "nope"), str(p), 1)
    with pytest.raises(ValueError, match="gain maps"):
        daq.Calibration(np.zeros(10), cal.pedestal)
    bad = tmp_path / "bad.poni"
    bad.write_text("Distance: 0.1\nPoni1: x\n")
    with pytest.raises(ValueError, match="PONI"):
        daq.Integrator(str(bad), (10, 10))
    ok = write_poni(tmp_path / "ok.poni", (10, 10), 0.1, 0.0, 0.0, 0.0, 0.0, 0.0)
    it = daq.Integrator(ok, (10, 10), bins=5)
    with pytest.raises(ValueError, match="image"):
        it.integrate(np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="unit"):
        daq.Integrator(ok, (10, 10), unit="chi")
    with pytest.raises(ValueError):
        daq.Layout.from_json('{"rows": 1}')


def test_detector_model_helpers(synth, frame):
    raw, _ = frame
    assert daq.raw_shape(8) == (4096, 1024) and raw.shape == daq.raw_shape(1)
    with pytest.raises(ValueError):
        daq.raw_shape(0)
    stage, adc = daq.decode(np.array([0x0005, 0x4007, 0x8001, 0xC009], np.uint16))
    assert stage.tolist() == [0, 1, -1, 2] and adc.tolist() == [5, 7, 1, 9]
    assert synth.layout().shape == daq.ASSEMBLED_MODULE_SHAPE


def test_engines_listed():
    names = dict(daq.engines())
    assert names["cpu-simd"] and names["cpu-scalar"] and "gpu-wgpu" in names
    # make test allows any Vulkan device (lavapipe): the GPU engine must then be there.
    if os.environ.get("REMORA_GPU", "off") != "off":
        assert names["gpu-wgpu"]


# Issue 10, finding 5: gain maps no conversion can divide by are refused, naming the file and
# the first bad gain; finding 6: a directory is named as one.
def _gain_file(tmp_path, gains):
    g, p = tmp_path / "gain.bin", tmp_path / "ped.bin"
    gains.astype("<f8").tofile(g)
    daq.Calibration.synthetic(1).save(str(tmp_path / "synthetic-gain.bin"), str(p))
    return g, p


def test_issue10_calibration_load_refuses_all_nan_gains(tmp_path):
    g, p = _gain_file(tmp_path, np.full(6 * 512 * 1024, np.nan))
    with pytest.raises(ValueError, match=r"gain\.bin: gain NaN at module 0, row 0, column 0, stage G0"):
        daq.Calibration.load(str(g), str(p), 1)


def test_issue10_calibration_load_refuses_all_zero_gains(tmp_path):
    g, p = _gain_file(tmp_path, np.zeros(6 * 512 * 1024))
    with pytest.raises(ValueError, match="3145728 of 3145728 gains are bad") as e:
        daq.Calibration.load(str(g), str(p), 1)
    assert str(e.value).startswith(f"{g}: gain 0 at module 0, row 0, column 0, stage G0")


def test_issue10_calibration_load_names_the_first_bad_gain(tmp_path):
    cal = daq.Calibration.synthetic(2, seed=3)
    gain = cal.gain.copy()
    gain.reshape(2, 6, 512, 1024)[1, 2, 300, 1000] = -np.inf  # module 1, G2
    gain.reshape(2, 6, 512, 1024)[1, 5, 0, 0] = 0.0  # counted, not named
    g, p = tmp_path / "gain.bin", tmp_path / "ped.bin"
    cal.save(str(g), str(p))
    gain.astype("<f8").tofile(g)
    with pytest.raises(ValueError, match="gain -inf at module 1, row 300, column 1000, stage G2.*2 of"):
        daq.Calibration.load(str(g), str(p), 2)
    with pytest.raises(ValueError, match="^gain maps: gain -inf at module 1, row 300, column 1000"):
        daq.Calibration(gain, cal.pedestal)
    cal.gain.astype("<f8").tofile(g)  # good maps still load
    assert np.array_equal(daq.Calibration.load(str(g), str(p), 2).gain, cal.gain)


def test_issue10_calibration_load_on_a_directory_says_so(tmp_path):
    _, p = _gain_file(tmp_path, np.ones(6 * 512 * 1024))
    with pytest.raises(IsADirectoryError, match="is a directory, expected a gain file of 25165824 bytes"):
        daq.Calibration.load(str(tmp_path), str(p), 1)
    g = tmp_path / "gain.bin"
    with pytest.raises(IsADirectoryError, match="is a directory, expected a pedestal file"):
        daq.Calibration.load(str(g), str(tmp_path), 1)
