"""bench/plot.py: the charts in docs/bench are drawn from docs/bench/data and cannot drift.

Each docs/bench/<area>.md shows docs/bench/<area>.svg, drawn by bench/plot.py from
docs/bench/data/<area>.json, whose figures are copied from a table of the .md. These tests draw
every chart again and check that it parses, names every group and series, and equals the
committed one; that the data files copy their .md; that malformed data is refused with a message
naming the file and the key; and that the JSON of `remora bench acquisition --json` and
`remora bench part --json` (written here from the keys the Rust code prints) can be drawn.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

import pytest

matplotlib = pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "plot.py"
DATA = ROOT / "docs" / "bench" / "data"
DOCS = ROOT / "docs" / "bench"
AREAS = ["daq", "fabric", "gpu", "kv", "lazy", "match", "part", "resize"]
SVG_TEXT = "{http://www.w3.org/2000/svg}text"


def plot(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)


def texts(svg: Path) -> list[str]:
    """The SVG's text elements, in document order (bench/plot.py keeps text as text)."""
    root = ET.parse(svg).getroot()
    return ["".join(t.itertext()).strip() for t in root.iter(SVG_TEXT)]


def data(area: str) -> dict:
    return json.loads((DATA / f"{area}.json").read_text(encoding="utf-8"), parse_float=Decimal)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("charts")
    r = plot("--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_every_area_has_data_a_chart_and_an_embed():
    assert sorted(p.stem for p in DATA.glob("*.json")) == AREAS
    assert sorted(p.stem for p in DOCS.glob("*.svg")) == AREAS
    for area in AREAS:
        md = (DOCS / f"{area}.md").read_text(encoding="utf-8")
        head = "\n".join(md.splitlines()[:8])
        assert f"![{data(area)['title']}]({area}.svg)" in head, area
        assert f"data/{area}.json" in head and "bench/plot.py" in head, area


@pytest.mark.parametrize("area", AREAS)
def test_chart_parses_and_names_every_group_and_series(drawn, area):
    svg = drawn / f"{area}.svg"
    found = set(texts(svg))  # ET.parse fails on malformed XML
    d = data(area)
    assert d["title"] in found
    for s in d["series"]:
        assert s["name"] in found, f"{area}: series {s['name']!r} not in the chart's text"
    for p in d["panels"]:
        assert f"{p['unit']} ({p['better']} is better)" in found, area
        for g in p["groups"]:
            assert g["label"] in found, f"{area}: group {g['label']!r} not in the chart's text"
            for v in g["values"].values():
                assert str(v) in found, f"{area}: value {v} of {g['label']!r} has no label"


def _creator(svg: Path) -> str | None:
    m = re.search(r"<dc:title>Matplotlib v([^,<]+)", svg.read_text(encoding="utf-8"))
    return m.group(1) if m else None


@pytest.mark.parametrize("area", AREAS)
def test_committed_chart_equals_what_the_script_draws_now(drawn, area):
    committed, now = DOCS / f"{area}.svg", drawn / f"{area}.svg"
    fix = f"regenerate with `.venv/bin/python bench/plot.py {area}` and commit docs/bench/{area}.svg"
    made_with = _creator(committed)
    if made_with == matplotlib.__version__:
        assert committed.read_bytes() == now.read_bytes(), f"{committed} is stale: {fix}"
    else:
        # Another matplotlib lays the same chart out a little differently; what it says (title,
        # labels, every value, caption) must still be the same.
        assert texts(committed) == texts(now), (
            f"{committed} (matplotlib {made_with}) says something else than its data: {fix}")


def test_the_script_is_byte_stable(tmp_path):
    for run in ("a", "b"):
        r = plot("--out", str(tmp_path / run), "kv", "part")
        assert r.returncode == 0, r.stderr
    for area in ("kv", "part"):
        assert (tmp_path / "a" / f"{area}.svg").read_bytes() == (tmp_path / "b" / f"{area}.svg").read_bytes()


def _section(md: str, heading: str) -> str:
    m = re.search(r"^(#+) " + re.escape(heading) + r"[ \t]*$", md, re.M)
    assert m, f"no heading {heading!r}"
    rest = md[m.end():]
    end = re.search(r"^#{1,%d} " % len(m.group(1)), rest, re.M)
    return rest[: end.start()] if end else rest


@pytest.mark.parametrize("area", AREAS)
def test_data_copies_its_table(area):
    """Every figure of the data file is written as such in the section it names, and every
    command appears in the .md: copied, not rounded or made up."""
    d = data(area)
    md = (DOCS / f"{area}.md").read_text(encoding="utf-8")
    m = re.fullmatch(rf"docs/bench/{area}\.md, section '(.+)'", d["source"])
    assert m, d["source"]
    section = _section(md, m.group(1))
    flat = " ".join(md.split())
    for c in d["command"] if isinstance(d["command"], list) else [d["command"]]:
        assert " ".join(c.split()) in flat, f"{area}: command {c!r} is not in {area}.md"
    for p in d["panels"]:
        for g in p["groups"]:
            for name, v in g["values"].items():
                assert re.search(r"(?<![\d.])" + re.escape(str(v)) + r"(?!\d)", section), (
                    f"{area}: {g['label']!r} / {name!r} = {v} is not in section {m.group(1)!r}")


def _malformed(tmp_path: Path, change) -> tuple[subprocess.CompletedProcess, Path]:
    d = json.loads((DATA / "kv.json").read_text(encoding="utf-8"))
    change(d)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "kv.json").write_text(json.dumps(d), encoding="utf-8")
    out = tmp_path / "out"
    return plot("--data", str(folder), "--out", str(out)), out


def _set(path: list, value):
    def change(d):
        *where, last = path
        for k in where:
            d = d[k]
        if value is _DELETE:
            del d[last]
        else:
            d[last] = value
    return change


_DELETE = object()


@pytest.mark.parametrize("path, value, key, why", [
    (["host"], _DELETE, "host", "missing"),
    (["panels", 0, "unit"], _DELETE, "panels[0].unit", "missing"),
    (["panels", 0, "groups", 1, "label"], _DELETE, "panels[0].groups[1].label", "missing"),
    (["panels", 0, "groups", 0, "values", "memcached"], -215028,
     'panels[0].groups[0].values["memcached"]', "negative"),
    (["panels", 1, "groups", 1, "values", "remora-epoll-arena"], "3803648",
     'panels[1].groups[1].values["remora-epoll-arena"]', "must be a number"),
    (["panels", 0, "groups", 0, "values", "memcached"], None,
     'panels[0].groups[0].values["memcached"]', "must be a number"),
    (["panels", 0, "better"], "faster", "panels[0].better", "higher"),
    (["series", 0, "role"], "us", "series[0].role", "remora"),
    (["panels", 0, "groups", 0, "values", "redis"], 1, 'panels[0].groups[0].values["redis"]',
     "not a series"),
    (["units"], "ops/s", "units", "unknown key"),
])
def test_malformed_data_is_refused_naming_file_and_key(tmp_path, path, value, key, why):
    r, out = _malformed(tmp_path, _set(path, value))
    assert r.returncode != 0
    assert "kv.json" in r.stderr and key in r.stderr and why in r.stderr, r.stderr
    assert not out.exists() or not list(out.glob("*.svg"))


def test_zero_is_refused_on_a_log_axis(tmp_path):
    def change(d):
        d["panels"][0]["scale"] = "log"
        d["panels"][0]["groups"][0]["values"]["memcached"] = 0
    r, _ = _malformed(tmp_path, change)
    assert r.returncode != 0 and 'panels[0].groups[0].values["memcached"]' in r.stderr, r.stderr


def test_invalid_json_is_refused_naming_the_file(tmp_path):
    (tmp_path / "kv.json").write_text("{\"title\": ", encoding="utf-8")
    r = plot("--data", str(tmp_path), "--out", str(tmp_path / "out"))
    assert r.returncode != 0 and "kv.json" in r.stderr and "not valid JSON" in r.stderr


# JSON as `remora bench part --json` prints it (crates/cli/src/fabric/part_bench/mod.rs,
# Report::json and Report::headline; measure.rs, Cell::json), cut to two sizes.
def _cell(size: int, median: float) -> dict:
    return {"bytes": size, "median_us": median, "min_us": median * 0.9, "n": 5,
            "p99_us": median * 1.2, "per_transfer": {"faults": 1.0, "retransmits": 0.0}}


PART = {
    "bytes": 65536, "transfer_only_us": 90.1, "pio_us": 800.5, "pi4_us": 330.2, "pia_us": 160.7,
    "touch_not_present_us": 66.3, "pin_not_present_us": 74.6, "pia_nto_us": 156.0,
    "pia_to100_us": 123.5, "pio_over_pia": 4.98, "pia_over_touch_not_present": 2.42,
    "pia_over_pin_not_present": 2.15, "pia_to100_over_touch_not_present": 1.86,
    "pia_nto_over_to100": 1.26, "pia_nto_over_to100_by_size": [{"bytes": 4096, "ratio": 0.9}],
    "sizes": [4096, 65536],
    "latency": [{"variant": v, "cells": [_cell(4096, a), _cell(65536, b)]} for v, a, b in [
        ("transfer_only", 29.8, 90.1), ("touch_not_present", 30.3, 66.3),
        ("pin_not_present", 35.7, 74.6), ("pia", 65.6, 160.7), ("pi4", 102.5, 330.2),
        ("pio", 93.2, 800.5)]],
    "timeout_sweep": [], "frequency_sweep": [], "one_fault_4k": None, "head_of_line": [],
    "pin_skipped": False, "window_packets": 1024, "iters": 30, "min_iters": 5,
    "cell_seconds": 2.0, "transport": "udp rc, 127.0.0.1, MTU 4096, 4 KiB pages (THP off)",
}

# JSON as `remora bench acquisition --json` prints it (crates/cli/src/daq/bench_acq.rs).
ACQ = {
    "transport": "shm", "progress": "thread", "modules": 8, "mtu": 4096, "bunch": 8, "lanes": 1,
    "process": True, "frames_sent": 300, "frames_complete": 300, "frames_partial": 0,
    "frames_lost": 0, "overruns": 0, "kept": 150, "seconds": 3.4, "transfer_gbps": 2.1,
    "e2e_fps": 83.8, "e2e_gbps": 0.7, "pipeline_fps": 125.5, "pipeline_gbps": 1.05,
    "engine": "cpu-simd (2 threads, avx2)", "engine_choice": None, "rate_hz": 87.5,
    "zero_loss": True, "cpu_cores": 1.79, "buffer_frames": 32, "sustained_fps": 102.9,
    "sustained_complete": 300, "search_seconds": 34.1,
    "tries": [{"runner": "plain", "rate_hz": 87.5, "lost": 0, "e2e_fps": 83.8, "cpu_cores": 1.79}],
}


def test_from_bench_part(tmp_path):
    src, out = tmp_path / "part.json", tmp_path / "part.svg"
    src.write_text(json.dumps(PART), encoding="utf-8")
    r = plot("--from-bench", str(src), "--out", str(out))
    assert r.returncode == 0, r.stderr
    found = set(texts(out))
    for name in ("pia", "pi4", "pio", "touch_not_present", "pin_not_present", "4K", "64K", "800.5"):
        assert name in found, name


def test_from_bench_acquisition_one_object_per_line(tmp_path):
    udp = dict(ACQ, transport="udp", e2e_fps=64.1, pipeline_fps=119.7, sustained_fps=65.8)
    svc = dict(ACQ, service={"e2e_fps": 79.6, "rate_hz": 80.0, "zero_loss": True,
                             "cpu_cores": 1.8, "ratio": 0.95, "ratios": [0.95], "page": None})
    src, out = tmp_path / "acq.jsonl", tmp_path / "acq.svg"
    src.write_text("\n".join(json.dumps(o) for o in (ACQ, udp, svc)) + "\n", encoding="utf-8")
    r = plot("--from-bench", str(src), "--out", str(out), "--host", "test host")
    assert r.returncode == 0, r.stderr
    found = set(texts(out))
    for name in ("shm, 8 modules", "udp, 8 modules", "shm, 8 modules (2)", "end to end, loss-free",
                 "flow-controlled (backpressure)", "pipeline alone, same frames",
                 "under the control service, page open", "83.8", "119.7", "79.6"):
        assert name in found, name


def test_from_bench_refuses_other_json_naming_file_and_key(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"bw_avg_gbps": 38.0}), encoding="utf-8")
    r = plot("--from-bench", str(other), "--out", str(tmp_path / "x.svg"))
    assert r.returncode != 0 and "other.json" in r.stderr and "e2e_fps" in r.stderr, r.stderr

    broken = copy.deepcopy(PART)
    del broken["latency"][3]["cells"][1]["median_us"]
    src = tmp_path / "part.json"
    src.write_text(json.dumps(broken), encoding="utf-8")
    r = plot("--from-bench", str(src), "--out", str(tmp_path / "y.svg"))
    assert r.returncode != 0 and "part.json" in r.stderr
    assert "latency[3].cells[1].median_us" in r.stderr, r.stderr

    neg = dict(ACQ, e2e_fps=-1.0)
    src = tmp_path / "acq.json"
    src.write_text(json.dumps(neg), encoding="utf-8")
    r = plot("--from-bench", str(src), "--out", str(tmp_path / "z.svg"))
    assert r.returncode != 0 and "acq.json" in r.stderr and "e2e_fps" in r.stderr, r.stderr
