"""The package's types: ``mypy --strict`` accepts the typed example program and the package
itself, and rejects a misuse (so the stubs are read, not silently Any). mypy comes from the test
requirements (python/requirements-test.txt)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parent


@pytest.fixture(scope="module")
def mypy(tmp_path_factory):
    cache = tmp_path_factory.mktemp("mypy-cache")

    def run(*args):
        env = dict(os.environ, MYPYPATH=str(PYTHON_DIR))
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *args],
            cwd=PYTHON_DIR.parent, env=env, capture_output=True, text=True, timeout=300)

    return run


def test_typing_examples_pass_mypy_strict(mypy):
    r = mypy(str(HERE / "typing_examples.py"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_package_passes_mypy_strict(mypy):
    r = mypy("-p", "remora")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_rejects_misuse_of_the_native_api(mypy, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from remora import fabric, lazy\n"
        "pd = fabric.ProtectionDomain()\n"
        "l = fabric.Listener('127.0.0.1:0', pd, mtu='big')\n"
        "n: str = lazy.PageServer.memory(b'x').address.missing\n"
    )
    r = mypy(str(bad))
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Argument "mtu" to "Listener" has incompatible type "str"' in r.stdout
    assert '"str" has no attribute "missing"' in r.stdout
