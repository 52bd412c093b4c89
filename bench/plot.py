#!/usr/bin/env python3
"""Charts of the benchmark figures: docs/bench/data/<area>.json -> docs/bench/<area>.svg.

    python bench/plot.py [--data docs/bench/data] [--out docs/bench] [AREA ...]
    python bench/plot.py --from-bench FILE.json --out X.svg [--host TEXT]

The first form draws every data file (or only the AREAs named) to <out>/<area>.svg. The second
draws the JSON that `remora bench acquisition --json` or `remora bench part --json` printed (one
object, or one object per line), telling the two apart by their keys. Only matplotlib and the
standard library are used; the SVG is byte-for-byte the same from one run to the next with the
same matplotlib (fixed `svg.hashsalt`, no date in the metadata), so the committed charts can be
checked against their data (python/tests/test_bench_plots.py does).

Data file schema (one JSON object; every data file uses it, and --from-bench turns the bench's
JSON into it before drawing):

    {
      "title":   str,                  the chart's title (also the alt text in the .md)
      "source":  str,                  "docs/bench/<area>.md, section '<heading>'": the table copied
      "command": str | [str, ...],     the command(s) the .md gives for that table, verbatim
      "host":    str,                  the machine, as the .md describes it
      "date":    str,                  optional: when it ran, as the .md gives it
      "note":    str,                  optional: which rows are drawn, and anything else to know
      "series":  [                     every bar series, in drawing order (top to bottom in a group)
        {"name": str, "role": "remora" | "peer"}, ...
      ],
      "panels":  [                     one axis each, stacked; usually one
        {
          "title":  str,               optional
          "unit":   str,               the axis unit, e.g. "GB/s" or "ms"
          "better": "higher" | "lower",
          "scale":  "linear" | "log",  optional, default "linear"
          "groups": [                  one block of bars each, e.g. a message size or a workload
            {"label": str, "values": {series name: number, ...}}, ...
          ]
        }, ...
      ]
    }

Every number is copied from the table named by "source", never rounded or derived (the test
checks that each one is written in that section), and its bar is labelled as written ("0.10"
stays "0.10"); a cell the table leaves empty is left out of "values" (no bar). Values are numbers >= 0 (> 0 on a log
axis); a series must be declared in "series" and used somewhere; keys not listed above are
refused, so that a typo does not pass silently. Every remora series is drawn in one colour
(several remora series are told apart by hatching), each peer in a colour of its own.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

REMORA_COLOUR = "#1565c0"
PEER_COLOURS = ["#e69f00", "#009e73", "#cc79a7", "#d55e00", "#7f7f7f", "#b8b000", "#8c564b", "#56b4e9"]
REMORA_HATCHES = ["", "///", "\\\\\\", "xxx", "---", "+++", "|||", "//\\\\"]
HASH_SALT = "remora-bench-plot"

TOP_KEYS = {"title": True, "source": True, "command": True, "host": True, "date": False,
            "note": False, "series": True, "panels": True}
PANEL_KEYS = {"title": False, "unit": True, "better": True, "scale": False, "groups": True}

ROOT = Path(__file__).resolve().parent.parent


class DataError(Exception):
    """A malformed data file or bench JSON: the message names the file and the key."""


# ---------------------------------------------------------------------------------------------
# Validation


def _fail(where: str, key: str, why: str) -> None:
    raise DataError(f"{where}: {key}: {why}")


def _show(v: object) -> str:
    return json.dumps(v, default=str, ensure_ascii=False)


def _text(where: str, key: str, v: object) -> str:
    if not isinstance(v, str) or not v.strip():
        _fail(where, key, f"must be a non-empty string, not {_show(v)}")
    return v  # type: ignore[return-value]


def validate(data: object, where: str) -> dict:
    """Checks `data` against the schema above; raises DataError naming `where` and the key."""
    if not isinstance(data, dict):
        raise DataError(f"{where}: the top level must be a JSON object")
    for key, required in TOP_KEYS.items():
        if required and key not in data:
            _fail(where, key, "missing")
    for key in data:
        if key not in TOP_KEYS:
            _fail(where, key, f"unknown key (expected one of {', '.join(TOP_KEYS)})")
    for key in ("title", "source", "host", "date", "note"):
        if key in data:
            _text(where, key, data[key])
    cmd = data["command"]
    if isinstance(cmd, list):
        if not cmd:
            _fail(where, "command", "must not be an empty list")
        for i, c in enumerate(cmd):
            _text(where, f"command[{i}]", c)
    else:
        _text(where, "command", cmd)

    series = data["series"]
    if not isinstance(series, list) or not series:
        _fail(where, "series", "must be a non-empty list")
    names: list[str] = []
    for i, s in enumerate(series):
        key = f"series[{i}]"
        if not isinstance(s, dict):
            _fail(where, key, "must be an object with 'name' and 'role'")
        for k in ("name", "role"):
            if k not in s:
                _fail(where, f"{key}.{k}", "missing")
        for k in s:
            if k not in ("name", "role"):
                _fail(where, f"{key}.{k}", "unknown key (expected 'name' and 'role')")
        name = _text(where, f"{key}.name", s["name"])
        if name in names:
            _fail(where, f"{key}.name", f"{_show(name)} is declared twice")
        if s["role"] not in ("remora", "peer"):
            _fail(where, f"{key}.role", f"must be \"remora\" or \"peer\", not {_show(s['role'])}")
        names.append(name)

    panels = data["panels"]
    if not isinstance(panels, list) or not panels:
        _fail(where, "panels", "must be a non-empty list")
    used: set[str] = set()
    for p, panel in enumerate(panels):
        pkey = f"panels[{p}]"
        if not isinstance(panel, dict):
            _fail(where, pkey, "must be an object")
        for key, required in PANEL_KEYS.items():
            if required and key not in panel:
                _fail(where, f"{pkey}.{key}", "missing")
        for key in panel:
            if key not in PANEL_KEYS:
                _fail(where, f"{pkey}.{key}", f"unknown key (expected one of {', '.join(PANEL_KEYS)})")
        if "title" in panel:
            _text(where, f"{pkey}.title", panel["title"])
        _text(where, f"{pkey}.unit", panel["unit"])
        if panel["better"] not in ("higher", "lower"):
            _fail(where, f"{pkey}.better", f"must be \"higher\" or \"lower\", not {_show(panel['better'])}")
        scale = panel.get("scale", "linear")
        if scale not in ("linear", "log"):
            _fail(where, f"{pkey}.scale", f"must be \"linear\" or \"log\", not {_show(scale)}")
        groups = panel["groups"]
        if not isinstance(groups, list) or not groups:
            _fail(where, f"{pkey}.groups", "must be a non-empty list")
        labels: set[str] = set()
        for g, group in enumerate(groups):
            gkey = f"{pkey}.groups[{g}]"
            if not isinstance(group, dict):
                _fail(where, gkey, "must be an object with 'label' and 'values'")
            for k in ("label", "values"):
                if k not in group:
                    _fail(where, f"{gkey}.{k}", "missing")
            for k in group:
                if k not in ("label", "values"):
                    _fail(where, f"{gkey}.{k}", "unknown key (expected 'label' and 'values')")
            label = _text(where, f"{gkey}.label", group["label"])
            if label in labels:
                _fail(where, f"{gkey}.label", f"{_show(label)} appears twice in this panel")
            labels.add(label)
            values = group["values"]
            if not isinstance(values, dict) or not values:
                _fail(where, f"{gkey}.values", "must be a non-empty object of series name -> number")
            for name, v in values.items():
                vkey = f"{gkey}.values[{_show(name)}]"
                if name not in names:
                    _fail(where, vkey, "not a series declared in 'series'")
                if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
                    _fail(where, vkey, f"must be a number, not {_show(v)}")
                if not math.isfinite(v):
                    _fail(where, vkey, f"must be finite, not {v}")
                if v < 0:
                    _fail(where, vkey, f"{v} is negative")
                if scale == "log" and v == 0:
                    _fail(where, vkey, "0 cannot be drawn on a log axis")
                used.add(name)
    for i, name in enumerate(names):
        if name not in used:
            _fail(where, f"series[{i}].name", f"{_show(name)} has no value in any group")
    return data  # type: ignore[return-value]


def load(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read it: {e.strerror}") from None
    try:
        data = json.loads(text, parse_float=Decimal)  # keeps "0.10" as written, for the label
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON: {e}") from None
    return validate(data, str(path))


# ---------------------------------------------------------------------------------------------
# Drawing


def fmt(v: float | Decimal) -> str:
    """The value as its label: as written in the data file (the table's figure, "0.10" stays
    "0.10"), or, for a float from a bench's JSON, about 4 significant digits."""
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal):
        return str(v) if len(v.as_tuple().digits) <= 8 else fmt(float(v))
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    decimals = max(0, 3 - math.floor(math.log10(abs(v))))
    s = f"{v:.{decimals}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


def _setup():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({
        "svg.hashsalt": HASH_SALT,
        "svg.fonttype": "none",  # text stays text: searchable, and checked by the tests
        "font.family": "DejaVu Sans",  # shipped with matplotlib: the same metrics everywhere
        "font.size": 9,
        "text.parse_math": False,  # a '$' in a label is a dollar sign
        "axes.spines.top": False,
        "axes.spines.right": False,
        "hatch.linewidth": 0.8,
    })
    import matplotlib.pyplot as plt

    return plt


def render(data: dict, out: Path, data_name: str) -> None:
    """Draws one validated data object to `out` (SVG)."""
    plt = _setup()
    from matplotlib.patches import Patch

    series = data["series"]
    style: dict[str, dict] = {}
    n_remora = n_peer = 0
    for s in series:
        if s["role"] == "remora":
            style[s["name"]] = {"color": REMORA_COLOUR,
                                "hatch": REMORA_HATCHES[n_remora % len(REMORA_HATCHES)]}
            n_remora += 1
        else:
            style[s["name"]] = {"color": PEER_COLOURS[n_peer % len(PEER_COLOURS)], "hatch": ""}
            n_peer += 1
    order = [s["name"] for s in series]

    bar, gap = 0.8, 0.7  # bar pitch 1; a gap of 0.7 between groups
    pitch = 0.22  # inches per bar
    slots = []  # (title room, bars, axis room) per panel, in inches
    for panel in data["panels"]:
        nbars = sum(len(g["values"]) for g in panel["groups"])
        bars = pitch * (nbars + gap * (len(panel["groups"]) - 1) + 0.6)
        slots.append((0.32 if "title" in panel else 0.1, bars, 0.55))

    from matplotlib.textpath import TextPath

    widest = max(TextPath((0, 0), g["label"], size=9).get_extents().width
                 for panel in data["panels"] for g in panel["groups"]) / 72
    width = 10.0
    left = (widest + 0.25) / width
    right = 1 - 0.3 / width
    legend_rows = math.ceil(len(series) / 2)
    caption = _caption(data, data_name)
    top = 0.5 + 0.2 * legend_rows
    bottom = 0.15 + 0.135 * len(caption) + 0.1
    fig_h = top + sum(sum(s) for s in slots) + 0.15 * (len(slots) - 1) + bottom
    fig = plt.figure(figsize=(width, fig_h))

    y = fig_h - top  # the top of the next panel, in inches from the bottom
    for panel, (above, bars, below) in zip(data["panels"], slots):
        ax = fig.add_axes((left, (y - above - bars) / fig_h, right - left, bars / fig_h))
        _panel(ax, panel, order, style, bar, gap)
        y -= above + bars + below + 0.15

    fig.text(0.1 / width, 1 - 0.12 / fig_h, data["title"], ha="left", va="top", fontsize=12,
             fontweight="bold")
    handles = [Patch(facecolor=style[n]["color"], hatch=style[n]["hatch"], edgecolor="white",
                     label=n) for n in order]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.1 / width, 1 - 0.45 / fig_h),
               ncols=2, frameon=False, fontsize=8.5, handlelength=2.2, handleheight=1.1,
               columnspacing=2.0, borderaxespad=0.0, borderpad=0.0)
    fig.text(0.1 / width, 0.12 / fig_h, "\n".join(caption), ha="left", va="bottom", fontsize=7,
             color="0.3", linespacing=1.35)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)


def _caption(data: dict, data_name: str) -> list[str]:
    lines = []
    when = f", {data['date']}" if "date" in data else ""
    lines += textwrap.wrap(f"Host: {data['host']}{when}.", 150)
    cmd = data["command"]
    cmds = cmd if isinstance(cmd, list) else [cmd]
    for i, c in enumerate(cmds):
        lines.append(("Command: " if i == 0 else "    ") + c)
    lines += textwrap.wrap(f"Figures: {data['source']}; drawn by bench/plot.py from {data_name}.", 150)
    if "note" in data:
        lines += textwrap.wrap(data["note"], 150)
    return lines


def _decade(x: float, _pos: object = None) -> str:
    """A log axis' tick as a plain number: 0.001, 1, 10 000 (math text is off)."""
    if x <= 0:
        return ""
    k = round(math.log10(x))
    if abs(x - 10.0 ** k) > 1e-9 * x:
        return ""
    return f"{10 ** k:,}".replace(",", "\u2009") if k >= 0 else f"{10.0 ** k:.{-k}f}"


def _plain(x: float, _pos: object = None) -> str:
    """A linear axis' tick without an offset or exponent: 0.5, 20, 150 000."""
    if x == int(x):
        return f"{int(x):,}".replace(",", "\u2009")
    return f"{x:.6g}"


def _panel(ax, panel: dict, order: list[str], style: dict, bar: float, gap: float) -> None:
    log = panel.get("scale", "linear") == "log"
    ys, ticks, labels = [], [], []
    y = 0.0
    for g in panel["groups"]:
        names = [n for n in order if n in g["values"]]
        first = y
        for n in names:
            ys.append((y, n, float(g["values"][n]), fmt(g["values"][n])))
            y += 1.0
        ticks.append((first + y - 1.0) / 2)
        labels.append(g["label"])
        y += gap
    values = [v for _, _, v, _ in ys]
    vmax = max(values)
    if log:
        lo = 10 ** math.floor(math.log10(min(values)))
        span = math.log10(max(vmax, lo * 10)) - math.log10(lo)
        hi = 10 ** (math.log10(max(vmax, lo * 10)) + 0.16 * span + 0.05)
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_major_formatter(FuncFormatter(_decade))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        from matplotlib.ticker import FuncFormatter

        lo, hi = 0.0, (vmax * 1.16 if vmax > 0 else 1.0)
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    for yy, n, v, text in ys:
        ax.barh(yy, v - lo if log else v, left=lo, height=bar, color=style[n]["color"],
                hatch=style[n]["hatch"], edgecolor="white", linewidth=0.6)
        ax.text(v, yy, " " + text, va="center", ha="left", fontsize=7.5, color="0.15")
    ax.set_xlim(lo, hi)
    last = y - gap - 1.0
    ax.set_ylim(last + 0.8, -0.8)
    ax.set_yticks(ticks, labels)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel(f"{panel['unit']} ({panel['better']} is better)")
    if "title" in panel:
        ax.set_title(panel["title"], loc="left", fontsize=9.5, fontweight="bold")


# ---------------------------------------------------------------------------------------------
# remora bench acquisition --json / remora bench part --json


def _objects(path: Path) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read it: {e.strerror}") from None
    try:
        objs = [json.loads(text)]
    except json.JSONDecodeError:
        objs = []
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    objs.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: line {i}: not valid JSON: {e}") from None
    if not objs or not all(isinstance(o, dict) for o in objs):
        raise DataError(f"{path}: expected one JSON object, or one per line")
    return objs


def bench_kind(obj: dict) -> str | None:
    if "latency" in obj and "sizes" in obj and "pio_over_pia" in obj:
        return "part"
    if "e2e_fps" in obj and "tries" in obj and "transport" in obj:
        return "acquisition"
    return None


def _num(where: str, key: str, v: object, optional: bool = False) -> float | None:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        _fail(where, key, f"must be a number, not {_show(v)}")
    return v  # type: ignore[return-value]


def _human(n: int) -> str:
    """Sizes as `remora bench part` names them: 4K, 1M."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10}K"
    return str(n)


PART_SERIES = [("pia", "remora"), ("pi4", "remora"), ("pio", "remora"),
               ("touch_not_present", "peer"), ("pin_not_present", "peer")]


def from_part(obj: dict, where: str, host: str) -> dict:
    sizes = obj["sizes"]
    if not isinstance(sizes, list) or not sizes:
        _fail(where, "sizes", "must be a non-empty list of byte counts")
    for i, s in enumerate(sizes):
        if isinstance(s, bool) or not isinstance(s, int) or s <= 0:
            _fail(where, f"sizes[{i}]", f"must be a positive integer, not {_show(s)}")
    rows = obj["latency"]
    if not isinstance(rows, list):
        _fail(where, "latency", "must be a list of {variant, cells}")
    medians: dict[str, list[float]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "variant" not in row or "cells" not in row:
            _fail(where, f"latency[{i}]", "must be an object with 'variant' and 'cells'")
        cells = row["cells"]
        if not isinstance(cells, list) or len(cells) != len(sizes):
            _fail(where, f"latency[{i}].cells", f"must be a list of {len(sizes)} cells, one per size")
        med = []
        for j, c in enumerate(cells):
            if not isinstance(c, dict) or "median_us" not in c:
                _fail(where, f"latency[{i}].cells[{j}].median_us", "missing")
            med.append(_num(where, f"latency[{i}].cells[{j}].median_us", c["median_us"]))
        medians[str(row["variant"])] = med
    series = [{"name": n, "role": r} for n, r in PART_SERIES if n in medians]
    if not series:
        _fail(where, "latency", "has none of the variants " + ", ".join(n for n, _ in PART_SERIES))
    groups = [{"label": _human(s), "values": {x["name"]: medians[x["name"]][j] for x in series}}
              for j, s in enumerate(sizes)]
    note = (f"Median of up to {obj.get('iters', '?')} transfers per cell; window "
            f"{obj.get('window_packets', '?')} packets; {obj.get('transport', 'udp rc')}.")
    return {
        "title": "remora bench part: one WRITE into a destination whose every page was evicted",
        "source": "remora bench part --json",
        "command": "remora bench part --json",
        "host": host,
        "note": note,
        "series": series,
        "panels": [{"unit": "µs per WRITE (median)", "better": "lower", "scale": "log",
                    "groups": groups}],
    }


ACQ_SERIES = [
    ("end to end, loss-free", "remora", "e2e_fps"),
    ("flow-controlled (backpressure)", "remora", "sustained_fps"),
    ("under the control service, page open", "remora", "service.e2e_fps"),
    ("pipeline alone, same frames", "peer", "pipeline_fps"),
]


def from_acquisition(objs: list[dict], where: str, host: str) -> dict:
    groups = []
    used: list[str] = []
    details = []
    for i, o in enumerate(objs):
        w = f"{where}" if len(objs) == 1 else f"{where}: line {i + 1}"
        for k in ("transport", "modules", "e2e_fps"):
            if k not in o:
                _fail(w, k, "missing")
        label = f"{o['transport']}, {o['modules']} module{'' if o['modules'] == 1 else 's'}"
        if o.get("process") is False:
            label += ", transfer only"
        if o.get("progress") not in (None, "thread"):
            label += f", progress {o['progress']}"
        taken = {g["label"] for g in groups}
        if label in taken:
            n = 2
            while f"{label} ({n})" in taken:
                n += 1
            label = f"{label} ({n})"
        values = {}
        for name, _, key in ACQ_SERIES:
            if key.startswith("service."):
                svc = o.get("service")
                if svc is None:
                    continue
                if not isinstance(svc, dict) or "e2e_fps" not in svc:
                    _fail(w, key, "missing")
                v = _num(w, key, svc["e2e_fps"])
            else:
                v = _num(w, key, o.get(key), optional=key != "e2e_fps")
            if v is None:
                continue
            if v < 0:
                _fail(w, key, f"{v} is negative")
            values[name] = v
            if name not in used:
                used.append(name)
        groups.append({"label": label, "values": values})
        lost = o.get("frames_lost", "?")
        details.append(f"{label}: {o.get('frames_complete', '?')} of {o.get('frames_sent', '?')} "
                       f"frames complete, {lost} lost, at {fmt(o.get('rate_hz') or 0.0)} Hz offered")
    series = [{"name": n, "role": r} for n, r, _ in ACQ_SERIES if n in used]
    return {
        "title": "remora bench acquisition: frames per second kept",
        "source": "remora bench acquisition --json",
        "command": "remora bench acquisition --json",
        "host": host,
        "note": "; ".join(details) + ".",
        "series": series,
        "panels": [{"unit": "frames/s", "better": "higher", "groups": groups}],
    }


def from_bench(path: Path, host: str) -> dict:
    objs = _objects(path)
    kinds = {bench_kind(o) for o in objs}
    if None in kinds:
        raise DataError(
            f"{path}: not the JSON of `remora bench acquisition --json` (keys 'transport', "
            f"'e2e_fps', 'tries') or `remora bench part --json` (keys 'latency', 'sizes', "
            f"'pio_over_pia')")
    if len(kinds) > 1:
        raise DataError(f"{path}: mixes acquisition and part results; plot one kind per file")
    if kinds == {"part"}:
        if len(objs) > 1:
            raise DataError(f"{path}: holds {len(objs)} `bench part` results; plot one at a time")
        data = from_part(objs[0], str(path), host)
    else:
        data = from_acquisition(objs, str(path), host)
    return validate(data, str(path))


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "docs/bench/data",
                    help="folder of <area>.json data files (default docs/bench/data)")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for <area>.svg (default docs/bench); with --from-bench, the .svg file")
    ap.add_argument("--from-bench", type=Path, metavar="FILE.json",
                    help="draw the JSON of `remora bench acquisition --json` or `remora bench part --json`")
    ap.add_argument("--host", default="not recorded in the bench JSON",
                    help="with --from-bench: the machine, for the caption")
    ap.add_argument("areas", nargs="*", metavar="AREA", help="data files to draw (default: all)")
    a = ap.parse_args(argv)
    try:
        if a.from_bench is not None:
            if a.areas:
                ap.error("--from-bench takes no AREA")
            if a.out is None or a.out.suffix != ".svg":
                ap.error("--from-bench needs --out X.svg")
            data = from_bench(a.from_bench, a.host)
            render(data, a.out, str(a.from_bench))
            print(a.out)
            return 0
        out = a.out if a.out is not None else ROOT / "docs/bench"
        if a.areas:
            paths = [a.data / f"{area}.json" for area in a.areas]
        else:
            paths = sorted(a.data.glob("*.json"))
            if not paths:
                raise DataError(f"{a.data}: no .json data files")
        loaded = [(p, load(p)) for p in paths]  # all checked before any chart is written
        for p, data in loaded:
            try:
                name = str(p.resolve().relative_to(ROOT))
            except ValueError:
                name = p.name
            render(data, out / f"{p.stem}.svg", name)
            print(out / f"{p.stem}.svg")
        return 0
    except DataError as e:
        print(f"bench/plot.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
