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


def test_modules_and_functions_read_at_once():
    """No module over 450 lines, no function body over 70 (formatted): split along a seam
    (docs/architecture.md) instead of growing one."""
    import ast
    import glob
    import os

    long_modules, long_functions = [], []
    for path in sorted(glob.glob(os.path.join(ROOT, "flowclip_cache", "**", "*.py"), recursive=True)):
        src = open(path).read()
        rel = os.path.relpath(path, ROOT)
        if src.count("\n") > 450:
            long_modules.append(f"{rel}: {src.count(chr(10))} lines")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                    body = body[1:] or body  # the docstring is not counted
                lines = node.end_lineno - body[0].lineno + 1
                if lines > 70:
                    long_functions.append(f"{rel}: {node.name} ({lines} lines)")
    assert not long_modules and not long_functions, long_modules + long_functions
