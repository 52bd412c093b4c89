"""Files every NeXus reader accepts (issue 32, item 5): the demo's file checked against NXmx by
nexusformat's validator (which ships the NeXus definitions, so nothing is fetched), the NXmx
attributes it only reports at info level checked against the same NXDL, the transformation
chains followed to their end, the master file of a two-receiver run read with h5py as one
receiver's file, and a bitshuffle/zstd source refused by name."""
import json
import logging
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from remora_binary import remora_bin  # noqa: E402

h5py = pytest.importorskip("h5py")
hdf5plugin = pytest.importorskip("hdf5plugin")

ROOT = Path(__file__).resolve().parents[2]




def demo_config(file, modules=1, frames=16, receivers=1, images=False, dark_every=None):
    """examples/demo.toml, made small: fewer modules and frames, a rate 2 cores keep up with."""
    text = (ROOT / "examples" / "demo.toml").read_text()
    subs = [
        (r"(?m)^modules = \d+", f"modules = {modules}"),
        (r"(?m)^frames = \d+", f"frames = {frames}"),
        (r"(?m)^rate_hz = \d+", "rate_hz = 200"),
        (r"(?m)^deadline_ms = \d+", "deadline_ms = 10000"),
        (r"(?m)^file = \"demo.h5\"", f"file = {json.dumps(str(file))}"),
        (r"(?m)^images = false", f"images = {'true' if images else 'false'}"),
    ]
    if dark_every is not None:
        subs.append((r"(?m)^dark_every = \d+", f"dark_every = {dark_every}"))
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text)
        assert n == 1, f"examples/demo.toml no longer has {pattern!r}"
    if receivers > 1:
        text = text.replace('[[receivers]]\nlisten = "127.0.0.1:0"\n',
                            '[[receivers]]\n' * receivers)
        text += '\n[emulator]\nfanout = "time"\n'
    return text


def daq_run(tmp_path, name, text):
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(text)
    r = subprocess.run([remora_bin(), "daq", "run", "--json", str(cfg)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("nexus")
    path = d / "demo.h5"
    s = daq_run(d, "demo", demo_config(path, modules=2))
    assert s["frames_complete"] > 0 and s["files"] == [str(path)]
    return path


def nxmx_errors(path):
    """Validates `path` against NXmx with nexusformat: (errors, the error messages)."""
    from nexusformat.nexus.validate import logger, validate_application

    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.ERROR:
                messages.append(record.getMessage())

    keep = Keep()
    logger.addHandler(keep)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        result = validate_application(str(path), application="NXmx")
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)
    assert result is not None, f"the validator could not read {path}: {messages}"
    _warnings, errors = result
    return errors, messages


def test_the_validator_ships_nxmx_and_fetches_nothing():
    import nexusformat

    nxdl = Path(nexusformat.__file__).parent / "definitions" / "applications" / "NXmx.nxdl.xml"
    assert nxdl.is_file(), nxdl


def test_the_demo_file_passes_the_nxmx_validator(demo_file):
    errors, messages = nxmx_errors(demo_file)
    assert errors == 0, "\n".join(messages)


def nxdl_required_attributes(nxdl_group, h5group, path=""):
    """Every attribute the NXDL requires (no optional="true") of every field of `h5group` that
    the file has, walking groups by NX_class: (field path, attribute, present)."""
    def local(tag):
        return tag.rsplit("}", 1)[-1]

    for child in nxdl_group:
        kind = local(child.tag)
        if kind == "group":
            for name, g in h5group.items():
                if not isinstance(g, h5py.Group):
                    continue
                cls = g.attrs.get("NX_class")
                cls = cls.decode() if isinstance(cls, bytes) else cls
                if cls == child.get("type") and child.get("name") in (None, name):
                    yield from nxdl_required_attributes(child, g, f"{path}/{name}")
        elif kind == "field" and child.get("name") in h5group:
            for a in child:
                if local(a.tag) == "attribute" and a.get("optional") != "true":
                    name = child.get("name")
                    yield (f"{path}/{name}", a.get("name"),
                           a.get("name") in h5group[name].attrs)


def test_the_demo_file_has_every_attribute_nxmx_requires(demo_file):
    # The validator reports a missing attribute at info level only, not as an error.
    import nexusformat

    nxdl = Path(nexusformat.__file__).parent / "definitions" / "applications" / "NXmx.nxdl.xml"
    entry_def = next(e for e in ET.parse(nxdl).getroot().iter()
                     if e.tag.endswith("group") and e.get("type") == "NXentry")
    with h5py.File(demo_file, "r") as f:
        found = list(nxdl_required_attributes(entry_def, f["entry"], "/entry"))
    missing = [(p, a) for p, a, ok in found if not ok]
    assert missing == []
    checked = {(p, a) for p, a, _ in found}
    module = "/entry/instrument/detector/detector_module"
    for d in ("fast_pixel_direction", "slow_pixel_direction"):
        assert {(f"{module}/{d}", "offset"), (f"{module}/{d}", "depends_on")} <= checked


def test_the_demo_files_transformation_chains_end(demo_file):
    with h5py.File(demo_file, "r") as f:
        def text(v):
            return v.decode() if isinstance(v, bytes) else str(v)

        def follow(at):
            for _ in range(8):
                if at == ".":
                    return
                assert at in f, f"depends_on names {at}, which is not in the file"
                at = text(f[at].attrs["depends_on"])
            raise AssertionError("the depends_on chain does not end")

        assert text(f["/entry/sample/depends_on"][()]) == "."
        follow(text(f["/entry/instrument/detector/depends_on"][()]))
        module = "/entry/instrument/detector/detector_module"
        for d in ("fast_pixel_direction", "slow_pixel_direction"):
            follow(f"{module}/{d}")
        assert f["/entry/end_time_estimated"][()] >= f["/entry/start_time"][()]


@pytest.fixture(scope="module")
def fanout(tmp_path_factory):
    """The same 16 frames through one receiver and through two (time fan-out); no dark frames,
    since each receiver tracks the pedestal on the dark frames it gets."""
    d = tmp_path_factory.mktemp("fanout")
    one = daq_run(d, "one", demo_config(d / "one.h5", images=True, dark_every=0))
    two = daq_run(d, "two", demo_config(d / "two.h5", receivers=2, images=True, dark_every=0))
    return d, one, two


# (table, its frame numbers) the master joins in frame order.
JOINED = (("/entry/frames/frame_number", "/entry/frames/frame_number"),
          ("/entry/frames/kind", "/entry/frames/frame_number"),
          ("/entry/frames/spots", "/entry/frames/frame_number"),
          ("/entry/azint/I", "/entry/azint/frame_number"),
          ("/entry/data/data", "/entry/data/frame_number"))


def rows_by_frame(f, table, numbers):
    return dict(zip(f[numbers][()].tolist(), f[table][()]))


def test_a_two_receiver_master_reads_as_one_receivers_file(fanout, monkeypatch):
    d, one, two = fanout
    assert one.get("master") is None
    assert two["master"] == str(d / "two.h5")
    assert two["files"] == [str(d / "two_r0.h5"), str(d / "two_r1.h5")]
    # Read from another folder: the master names its parts relative to itself.
    monkeypatch.chdir("/")
    with h5py.File(d / "one.h5", "r") as a, h5py.File(two["master"], "r") as m, \
            h5py.File(d / "two_r0.h5", "r") as r0, h5py.File(d / "two_r1.h5", "r") as r1:
        # Time slicing: receiver 1 had the odd frames.
        assert all(n % 2 == 1 for n in r1["/entry/frames/frame_number"][()])
        for table, numbers in JOINED:
            assert m[table].is_virtual, table
            got = m[table][()]
            # Every row of both receivers, in frame order: one dataset for the run.
            parts = {**rows_by_frame(r0, table, numbers), **rows_by_frame(r1, table, numbers)}
            frames = m[numbers][()].tolist()
            assert frames == sorted(parts), table
            assert got.shape[0] == len(parts) > 0, table
            for row, n in zip(got, frames):
                assert np.array_equal(row, parts[n], equal_nan=True), (table, n)
            # The same as the one-receiver run's, frame for frame.
            want = rows_by_frame(a, table, numbers)
            common = [n for n in frames if n in want]
            assert len(common) >= 8, (table, frames, sorted(want))
            if len(frames) == len(want) == 16:
                assert np.array_equal(got, a[table][()], equal_nan=True), table
            for n in common:
                assert np.array_equal(got[frames.index(n)], want[n], equal_nan=True), (table, n)


def test_the_master_passes_the_nxmx_validator(fanout):
    errors, messages = nxmx_errors(fanout[2]["master"])
    assert errors == 0, "\n".join(messages)


def test_a_bitshuffle_zstd_source_is_refused_by_name(tmp_path):
    path = tmp_path / "zstd.h5"
    words = (np.arange(512 * 1024) % 4000).astype(np.uint16).reshape(1, 512, 1024)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=words, chunks=(1, 512, 1024),
                         **hdf5plugin.Bitshuffle(cname="zstd"))
    with h5py.File(path, "r") as f:  # other readers decode it
        assert np.array_equal(f["data"][()], words)
    text = demo_config(tmp_path / "out.h5", frames=4)
    text = re.sub(r'(?m)^kind = "synthetic".*$',
                  f'kind = "hdf5"\npath = {json.dumps(str(path))}\ndataset = "/data"', text)
    cfg = tmp_path / "zstd.toml"
    cfg.write_text(text)
    r = subprocess.run([remora_bin(), "daq", "run", str(cfg)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "bitshuffle compression type 3 (zstd) is not supported; only 2 (lz4)" in r.stderr, \
        r.stderr


def test_an_hdf5_source_in_bitshuffle_lz4_chunks_feeds_the_same_frames_as_raw(tmp_path):
    """Chunks written by the bitshuffle library itself (hdf5plugin), as Jungfraujoch and
    Dectris write them, decode through remora's filter in `daq run`'s processes."""
    rng = np.random.default_rng(7)
    # Two 1-module frames of G0 words around a pedestal of 1000 ADU, with a few bright pixels.
    words = (1000 + rng.integers(0, 40, size=(2, 512, 1024))).astype(np.uint16)
    words[:, 100:104, 200:204] = 9000
    (tmp_path / "frames.raw").write_bytes(words.astype("<u2").tobytes())
    with h5py.File(tmp_path / "frames.h5", "w") as f:
        f.create_dataset("data", data=words, chunks=(1, 512, 1024),
                         **hdf5plugin.Bitshuffle(cname="lz4"))
    spots = {}
    for kind, extra in (("raw", ""), ("hdf5", '\ndataset = "/data"')):
        text = demo_config(tmp_path / f"{kind}.h5", frames=4, dark_every=0)
        src = tmp_path / f"frames.{'raw' if kind == 'raw' else 'h5'}"
        text = re.sub(r'(?m)^kind = "synthetic".*$',
                      f'kind = "{kind}"\npath = {json.dumps(str(src))}{extra}', text)
        s = daq_run(tmp_path, kind, text)
        assert s["frames_complete"] == 4, s
        with h5py.File(tmp_path / f"{kind}.h5", "r") as f:
            spots[kind] = f["/entry/frames/spots"][()].tolist()
    assert spots["hdf5"] == spots["raw"]
    assert max(spots["raw"]) > 0
