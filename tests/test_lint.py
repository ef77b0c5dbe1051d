"""ruff's lint (rules in pyproject.toml) is clean on the package, the tests and the speed
scripts, and mypy (settings in pyproject.toml) on the package: run here so that the
README's test command checks both too (.ci/run also runs them first, to fail fast)."""

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        try:
            import ruff as _  # noqa: F401
        except ImportError:
            pytest.skip("ruff is not installed (it comes with pip install -e '.[test]')")
        cmd = [sys.executable, "-m", "ruff"]
    else:
        cmd = [ruff]
    r = subprocess.run(
        [*cmd, "check", "flowclip_cache", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
    r = subprocess.run(
        [*cmd, "format", "--check", "flowclip_cache", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, "run `ruff format`:\n" + r.stdout[-3000:] + r.stderr[-1000:]


def test_mypy_is_clean():
    pytest.importorskip("mypy", reason="mypy is not installed (it comes with pip install -e '.[test]')")
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
