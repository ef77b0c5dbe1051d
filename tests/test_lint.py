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


def test_no_page_docstring_or_comment_speaks_of_sessions_or_issue_numbers():
    """The docs are a reference and the code says why, not when: the history lives in git.
    No "session N" or "issue N" in the package, the docs, the README, the pipelines, the
    catalogue, the benchmarks or the tests."""
    import glob
    import os
    import re

    said = re.compile(r"\b[Ss]essions? \d|\b[Ii]ssues? \d|\([Ii]ssue\b|\b[Tt]his session\b|\b[Ss]essions? \d+-\d")
    where = ["README.md", "CONTRIBUTING.md", "docs/*.md", "pipelines/*.yaml", "manifests/*.yaml",
             "flowclip_cache/**/*.py", "benchmarks/*.py", "tests/*.py"]  # fmt: skip
    hits = []
    for pattern in where:
        for path in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            if path.endswith("test_lint.py"):
                continue
            for i, line in enumerate(open(path, encoding="utf-8"), 1):
                if said.search(line):
                    hits.append(f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()[:100]}")
    assert not hits, f"{len(hits)} lines:\n" + "\n".join(hits[:40])
