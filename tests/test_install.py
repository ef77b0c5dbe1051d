"""A normal (non-editable) install carries everything the package reads:
the wheel is built and unpacked outside the repository, and imported from there."""

import os
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist and, built from it, the wheel, as `python -m build` makes them (once for
    this file); the build's output, for the deprecation check."""
    pytest.importorskip("build", reason="pip install 'flowclip[test]' installs build and twine")
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), ROOT],
                       capture_output=True, text=True, cwd=str(out))  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out, r.stdout + r.stderr


@pytest.mark.slow
def test_wheel_carries_catalogue_pipelines_configs_and_weights(tmp_path, dist):
    # the build is quiet: no data folder taken for a package it would ignore
    assert "would be ignored" not in dist[1] and "absent from the `packages`" not in dist[1], dist[1][-2000:]
    wheel = next(dist[0].glob("flowclip-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import flowclip_cache, os\n"
        "assert os.path.dirname(flowclip_cache.__file__).startswith(%r), flowclip_cache.__file__\n"
        "from flowclip_cache.catalogue import load_catalogue\n"
        "from flowclip_cache.datasets import all_benchmarks\n"
        "from flowclip_cache.config import find_config, packaged_configs\n"
        "from flowclip_cache.extraction.encoders import register_package_configs\n"
        "cat = load_catalogue(); assert set(cat) == set(all_benchmarks()), sorted(cat)\n"
        "assert {'ablation', 'sensitivity', 'synthetic', 'pretrain_tiny_clip'} <= set(packaged_configs())\n"
        "find_config('synthetic')\n"
        "register_package_configs()\n"
        "here = os.path.dirname(flowclip_cache.__file__)\n"
        "w = os.path.join(here, 'extraction', 'weights')\n"
        "assert any(f.endswith('.safetensors') for f in os.listdir(w))\n"
        "assert os.path.isfile(os.path.join(here, 'scoring', 'explain_page.html'))\n"
        "from flowclip_cache.paper.numbers import published_numbers; assert published_numbers()\n"
        "print('ok', len(cat))\n"
    ) % str(site)
    env = dict(os.environ, PYTHONPATH=str(site))
    r = subprocess.run([sys.executable, "-c", probe], cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr[-3000:]
    # the study configs and the catalogue are the repository's top-level pipelines/ and
    # manifests/, carried by the wheel: the commands find them outside the repository
    where = "import flowclip_cache.config as c, flowclip_cache.catalogue as k\nprint(c.PACKAGED, k.CATALOGUE_DIR)\n"
    r = subprocess.run([sys.executable, "-c", where], cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert r.stdout.split() == [
        str(site / "flowclip_cache" / "_shipped" / "pipelines"),
        str(site / "flowclip_cache" / "_shipped" / "manifests"),
    ], r.stderr[-2000:]
    for args in (["run", "synthetic", "--dry-run", f"out={tmp_path / 'study'}"], ["manifest", "list"]):
        r = subprocess.run(
            [sys.executable, "-m", "flowclip_cache", *args], cwd=str(tmp_path), env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-2000:])
    assert "sugarcrepe" in r.stdout


def test_every_package_folder_is_in_the_wheel_list():
    """pyproject.toml lists the packages (the top-level folders are mapped in beside them):
    a new subpackage must be added there, or the wheel would lack it."""
    import tomllib

    listed = set(tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["setuptools"]["packages"])
    found = {
        os.path.relpath(d, ROOT).replace(os.sep, ".")
        for d, _, files in os.walk(os.path.join(ROOT, "flowclip_cache"))
        if "__init__.py" in files
    }
    assert found <= listed, sorted(found - listed)
    assert {"flowclip_cache._shipped.pipelines", "flowclip_cache._shipped.manifests"} <= listed


@pytest.mark.slow
def test_the_wheel_and_sdist_pass_twine_and_run_the_demo_from_a_venv(tmp_path, dist):
    """Ready to publish: `python -m build` makes the sdist and, from it, the
    wheel; `twine check` passes both; the wheel installs into a new virtual environment and
    `flowclip demo` runs there, from a folder with no checkout, on the weights, model configs
    and pipelines the wheel carries. (The venv sees this machine's site-packages for torch
    and the other dependencies: nothing can be downloaded here; flowclip itself is the
    wheel's copy, checked.)"""
    folder, said = dist
    assert "deprecated" not in said, said[-3000:]
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["flowclip-0.1.0-py3-none-any.whl", "flowclip-0.1.0.tar.gz"]
    r = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)], capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 0 and r.stdout.count("PASSED") == 2, r.stdout + r.stderr
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
                        str(files[0])], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    r = subprocess.run([str(py), "-c", "import flowclip_cache; print(flowclip_cache.__file__)"], cwd=str(away),
                       env=env, capture_output=True, text=True)  # fmt: skip
    assert r.stdout.startswith(str(venv)), (r.stdout, r.stderr[-2000:])
    r = subprocess.run([str(venv / "bin" / "flowclip"), "demo", "--out", "demo", "--scenes", "60", "--epochs", "1",
                        "--quiet"], cwd=str(away), env=env, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = (away / "demo" / "summary.md").read_text()
    assert "## Conclusions" in summary and "flowclip-tiny-clip-filip" in summary
