"""The demo acquisition on a busy machine: two busy loops pinned to two cores for the whole run,
and still every one of the 300 frames complete, through ``remora demo`` (the control service,
in one process) and ``remora daq run examples/demo.toml`` (receiver and emulator as processes).

What makes it hold is the receiver's frame buffer (``[receiver] buffer``, by default a quarter
of the available memory, here enough for the whole run): the 4M chain runs below the demo's
50 frames/s when it shares the cores, so frames wait in the ring instead of being overwritten.
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from remora_binary import remora_bin

ROOT = pathlib.Path(__file__).resolve().parents[2]


class BusyLoops:
    """One spinning process pinned to each of (up to) two of this process's CPUs."""

    def __init__(self):
        cpus = sorted(os.sched_getaffinity(0))[:2]
        self.procs = []
        for cpu in cpus:
            p = subprocess.Popen(
                [sys.executable, "-c", "while True: pass"],
                preexec_fn=lambda c=cpu: os.sched_setaffinity(0, {c}),
            )
            self.procs.append(p)

    def alive(self):
        return all(p.poll() is None for p in self.procs)

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


@pytest.fixture
def busy():
    loops = BusyLoops()
    yield loops
    loops.stop()


def test_daq_run_of_the_demo_loses_no_frame_beside_two_busy_loops(tmp_path, busy):
    exe = remora_bin()
    shutil.copy(ROOT / "examples" / "demo.toml", tmp_path / "demo.toml")
    out = subprocess.run([exe, "daq", "run", "demo.toml", "--json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert busy.alive(), "the busy loops ran for the whole acquisition"
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    brief = {k: s[k] for k in ("frames_sent", "frames_complete", "frames_partial",
                               "frames_lost", "frames_overrun", "buffer_frames",
                               "buffer_high_water_frames")}
    assert s["frames_sent"] == 300, brief
    assert s["frames_complete"] == 300, brief
    assert s["frames_overrun"] == 0 and s["overruns"] == 0, brief
    assert s["overrun_policy"] == "mask"
    # The buffer was needed: more frames waited than the thesis' double buffer holds.
    assert s["buffer_high_water_frames"] > 8, brief


def test_make_demo_loses_no_frame_beside_two_busy_loops(tmp_path, busy):
    exe = remora_bin()
    out = subprocess.run([exe, "demo", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=600)
    assert busy.alive()
    assert out.returncode == 0, out.stderr
    m = re.search(r"(\d+) frames sent, (\d+) complete", out.stdout)
    assert m, out.stdout
    assert (m.group(1), m.group(2)) == ("300", "300"), out.stdout
    assert "frame buffer" in out.stdout, out.stdout
