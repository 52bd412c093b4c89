"""The package as pip sees it: one abi3 extension (a wheel for every CPython >= 3.9) and the
metadata an index page shows."""
import importlib.metadata
import os
import tomllib
from pathlib import Path

import remora

ROOT = Path(__file__).resolve().parents[2]


def test_the_extension_is_built_for_the_stable_abi():
    name = os.path.basename(remora._native.__file__)
    assert name == "_native.abi3.so", name
    cargo = (ROOT / "crates/py/Cargo.toml").read_text()
    assert '"abi3-py39"' in cargo
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert py["requires-python"] == ">=3.9"


def test_the_metadata_is_complete():
    md = importlib.metadata.metadata("remora")
    assert md["Name"] == "remora"
    assert md["Requires-Python"] == ">=3.9"
    assert md["License"] == "Apache-2.0"
    assert md["Summary"] and "rdma" in md["Summary"].lower()
    assert md["Description-Content-Type"].startswith("text/markdown")
    assert "make demo" in md.get_payload()  # the README is the long description
    assert any(c.startswith("Typing :: Typed") for c in md.get_all("Classifier"))
    assert any(r.startswith("numpy") for r in md.get_all("Requires-Dist"))
