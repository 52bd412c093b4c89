"""Where the tests find the ``remora`` program: ``REMORA_BIN``, the release build under
``CARGO_TARGET_DIR`` or ``target/``, then ``PATH``; a test without one is skipped."""
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def remora_bin():
    cands = []
    if os.environ.get("REMORA_BIN"):
        cands.append(Path(os.environ["REMORA_BIN"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        cands.append(Path(os.environ["CARGO_TARGET_DIR"]) / "release" / "remora")
    cands.append(ROOT / "target" / "release" / "remora")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("remora")
    if found:
        return found
    pytest.skip("remora binary not built (cargo build --release -p remora-cli)")
