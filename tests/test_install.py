"""A normal (non-editable) install carries everything the package reads (issue 11, part 7):
the wheel is built and unpacked outside the repository, and imported from there."""

import os
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_wheel_carries_catalogue_pipelines_configs_and_weights(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), ROOT],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0 and "No module named" in r.stderr and "setuptools" in r.stderr:
        pytest.skip("setuptools is not installed here, so no wheel can be built without the network")
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("flowclip-*.whl"))
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
