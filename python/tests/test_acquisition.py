"""The acquisition from Python: ``remora.daq.run`` and its NeXus/HDF5 file, read back with h5py
(+ hdf5plugin for the bitshuffle/LZ4 chunks) and silx, against the pipeline run directly."""
import json

import numpy as np
import pytest

import remora.daq as daq

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")

CONFIG = """
[detector]
modules = 2
[source]
distinct = 4
[acquisition]
frames = 16
bunch = 8
deadline_ms = 10000
[pipeline]
bins = 300
[output]
file = "{file}"
"""


@pytest.fixture(scope="module")
def acquired(tmp_path_factory):
    path = tmp_path_factory.mktemp("acq") / "run.h5"
    summary = daq.run(CONFIG.format(file=path))
    return summary, path


def test_run_returns_the_summary(acquired):
    s, path = acquired
    assert s["frames_sent"] == 16
    assert s["frames_complete"] == 16
    assert s["frames_lost"] == 0 and s["overruns"] == 0
    assert s["dark"] == 8 and s["kept"] + s["rejected"] == 8
    assert s["files"] == [str(path)]
    assert s["receiver_reports"][0]["writer_dropped"] == 0


def direct(modules=2, frames=16, distinct=4, bins=300):
    """The same pipeline run directly on the generator's frames, as a user would."""
    synth = daq.Synth(modules=modules, seed=1, dark_every=2, dark_phase=1)
    p = daq.Pipeline(synth.calibration(), synth.layout(), dark_every=2, dark_phase=1,
                     poni=synth.poni(), bins=bins)
    out = []
    for n in range(frames):
        raw, _, _ = synth.frame(n % distinct)
        out.append(p.process(n, raw))
    return out


def test_the_file_holds_what_the_pipeline_gives_directly(acquired):
    s, path = acquired
    want = direct()
    with h5py.File(path, "r") as f:
        assert f["/entry/definition"][()] in (b"NXmx", "NXmx")
        fr = f["/entry/frames"]
        n = fr["frame_number"][:]
        assert sorted(n.tolist()) == list(range(16))
        kept = fr["kept"][:]
        spots = fr["spots"][:]
        for i, frame in enumerate(n):
            w = want[frame]
            assert bool(kept[i]) == (w["outcome"] == "kept"), frame
            if w["outcome"] != "dark":
                assert spots[i] == w["stats"]["above"], frame
        assert int(spots.sum()) == s["receiver_reports"][0]["spots_total"]

        sp = f["/entry/sparse"]
        off = sp["entry_offset"][:]
        col, val = sp["col"][:], sp["value"][:]
        row_ptr = sp["row_ptr"][:]
        for k, frame in enumerate(sp["frame_number"][:]):
            w = want[frame]
            assert w["outcome"] == "kept"
            a, b = off[k], off[k + 1]
            np.testing.assert_array_equal(col[a:b], w["col"])
            np.testing.assert_array_equal(val[a:b], w["values"])
            np.testing.assert_array_equal(row_ptr[k], w["row_ptr"])

        az = f["/entry/azint"]
        radial = az["radial_axis"][:]
        assert radial.shape == (300,)
        for k, frame in enumerate(az["frame_number"][:]):
            np.testing.assert_array_equal(az["I"][k], want[frame]["intensity"])
        assert az.attrs["signal"] in ("I", b"I")


def test_silx_reads_the_profiles(acquired):
    silx_io = pytest.importorskip("silx.io")
    _, path = acquired
    with silx_io.open(str(path)) as f:
        assert f["/entry/azint/I"].shape[1] == 300
        assert np.isfinite(f["/entry/azint/I"][()]).all()


def test_a_bad_configuration_names_its_key():
    with pytest.raises(ValueError, match="acquisition.frames"):
        daq.run("[detector]\nmodules = 1\n[acquisition]\nframes = 0\n")
    with pytest.raises(ValueError, match="transport.kind"):
        daq.run("[detector]\nmodules = 1\n[acquisition]\nframes = 1\n[transport]\nkind = \"x\"\n")


def test_a_config_file_path_works_and_its_relative_paths_follow_it(tmp_path):
    cfg = tmp_path / "acq.toml"
    cfg.write_text(CONFIG.format(file="rel.h5").replace("frames = 16", "frames = 4"))
    s = daq.run(str(cfg))
    assert s["frames_complete"] == 4
    assert (tmp_path / "rel.h5").is_file()
    json.dumps(s)


def test_progress_reaches_every_frame_and_a_raising_callable_is_raised_after(tmp_path, capsys):
    steps = []
    s = daq.run(CONFIG.format(file=tmp_path / "p.h5"), progress=steps.append)
    assert steps, "no progress step"
    last = steps[-1]
    assert (last["done"], last["total"]) == (16, 16)
    assert last["frames_done"] == last["frames_expected"] == 16
    assert set(last) >= {"receiver", "overruns", "kept", "buffered"}
    assert last["kept"] == s["kept"]
    assert all(a["done"] <= b["done"] for a, b in zip(steps, steps[1:]))

    calls = []

    def boom(step):
        calls.append(step)
        raise KeyError("from the callable")

    with pytest.raises(KeyError, match="from the callable"):
        daq.run(CONFIG.format(file=tmp_path / "b.h5"), progress=boom)
    assert len(calls) == 1, "the calls stop at the first exception"
    # The acquisition itself ran to its end.
    assert (tmp_path / "b.h5").is_file()

    daq.run(CONFIG.format(file=tmp_path / "t.h5"), progress=True)
    assert "16/16" in capsys.readouterr().err  # the plain line or tqdm's bar
    with pytest.raises(TypeError, match="progress"):
        daq.run(CONFIG.format(file=tmp_path / "x.h5"), progress="yes")
