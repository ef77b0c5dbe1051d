"""ruff's lint (rules in pyproject.toml) is clean on the package, the tests and the speed
scripts: run here so that CI's test command checks it too."""
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
    r = subprocess.run([*cmd, "check", "flowclip_cache", "tests", "benchmarks"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
